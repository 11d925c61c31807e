"""A leader arm (an absolute device) intervening in joint_delta: no jump at engage or release, stale → hold."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

from robot_rl.human_loop.devices.base import TeleopDevice
from robot_rl.human_loop.devices.leader_arm import LeaderArmReading
from robot_rl.human_loop.intervention import InterventionConfig, InterventionController

STEP = 0.05  # rad per step at action 1 (robot.max_step_joint_rad)
FOLLOWER = np.array([0.1, -0.4, 0.8, 0.0, 0.3, 0.0])


class ScriptedLeader(TeleopDevice):
    """A leader arm whose joints follow ``script(step)`` (None: it stopped answering)."""

    name = "scripted_leader"
    relative = False

    def __init__(self, script: Callable[[int], tuple[np.ndarray, bool] | None]) -> None:
        self.script, self.steps, self._last = script, 0, None

    def connect(self) -> None:
        pass

    def disconnect(self) -> None:
        pass

    @property
    def is_connected(self) -> bool:
        return True

    def read(self) -> LeaderArmReading | None:
        out = self.script(self.steps)
        self.steps += 1
        if out is not None:
            joints, engage = out
            self._last = LeaderArmReading(timestamp=time.monotonic(), gripper=0.5, engage=engage, joints=joints)
        return self._last  # a silent leader keeps its last (ageing) reading, as the real device does

    def buttons(self) -> dict[str, str]:
        return {"leader joints": "follower joint goal"}


def offset(deg: float, joint: int = 0) -> np.ndarray:
    q = FOLLOWER.copy()
    q[joint] += np.radians(deg)
    return q


def test_an_absolute_device_needs_a_delta_mode_and_in_ee_delta_forward_kinematics():
    with pytest.raises(ValueError, match="joint_delta or ee_delta"):
        InterventionController(ScriptedLeader(lambda i: None), control_mode="joint")
    ctl = InterventionController(ScriptedLeader(lambda i: (offset(2.0), True)), control_mode="ee_delta")
    with pytest.raises(ValueError, match="forward kinematics"):  # no fk given: refused before any motion
        ctl.step(np.zeros(7), measured_joints=FOLLOWER)


def test_the_leader_takes_over_only_within_tolerance_and_never_jumps():
    script = {0: (offset(30.0), True), 1: (offset(-25.0, joint=2), True), 2: (offset(4.0), True),
              3: (offset(20.0), True), 4: (offset(20.0), False)}
    ctl = InterventionController(ScriptedLeader(script.get), InterventionConfig(engage_tolerance_deg=10.0),
                                 control_mode="joint_delta", joint_step_rad=STEP)
    policy = np.array([0.2, 0, 0, 0, 0, 0, 1.0])
    far = ctl.step(policy, measured_joints=FOLLOWER)
    assert far.source == "policy" and not far.intervened and np.allclose(far.action, policy)
    assert ctl.waiting_gap_deg == pytest.approx(30.0) and "30° off" in ctl.hint
    assert ctl.step(policy, measured_joints=FOLLOWER).source == "policy"  # another joint far: still refused
    near = ctl.step(policy, measured_joints=FOLLOWER)
    assert near.source == "human" and near.intervened and ctl.waiting_gap_deg is None
    # 4° = 0.070 rad away: one full step (0.05 rad = 2.9°) towards it, the other joints stay; gripper from the leader.
    np.testing.assert_allclose(near.action, [1.0, 0, 0, 0, 0, 0, 0.5], atol=1e-6)
    assert np.degrees(np.abs(near.action[:6]) * STEP).max() <= 10.0  # never more than the tolerance
    # Engaged, the follower lagging further behind does not release it; the step stays capped.
    lag = ctl.step(policy, measured_joints=FOLLOWER)
    assert lag.source == "human" and np.abs(lag.action[:6]).max() == 1.0
    released = ctl.step(policy, measured_joints=FOLLOWER)
    assert released.source == "policy" and np.allclose(released.action, policy)  # a delta: no jump on release
    assert ctl.counts["interventions"] == 1 and ctl.episode.intervened_steps == 2


def test_a_stale_leader_releases_and_holds():
    script: dict[int, tuple[np.ndarray, bool]] = {0: (offset(2.0), True), 1: (offset(3.0), True)}
    ctl = InterventionController(ScriptedLeader(script.get), InterventionConfig(stale_after_s=0.05),
                                 control_mode="joint_delta", joint_step_rad=STEP)
    policy = np.array([0.5, 0.5, 0, 0, 0, 0, -1.0])
    assert ctl.step(policy, measured_joints=FOLLOWER).source == "human"
    assert ctl.step(policy, measured_joints=FOLLOWER).source == "human"
    time.sleep(0.08)  # no new reading for longer than stale_after_s
    held = ctl.step(policy, measured_joints=FOLLOWER)
    assert held.source == "hold" and not held.intervened
    np.testing.assert_allclose(held.action, [0, 0, 0, 0, 0, 0, 0.5])  # zero joint deltas: stay; gripper kept
    assert ctl.counts["teleop_lost"] == 1


@pytest.mark.integration
def test_deploy_with_a_leader_arm_on_the_simulated_arm_in_joint_delta():
    """The follower reaches the leader's joints from where it was, step by step, after the leader matched it."""
    pytest.importorskip("mujoco")
    pytest.importorskip("msgpack")
    from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
    from robot_rl.hardware.sim_arm import SimulatedArmConfig
    from robot_rl.human_loop.deploy import DeployConfig, Deployer

    cfg = DeployConfig(robot=SimulatedArmConfig(cameras={}, control_mode="joint_delta", max_step_joint_rad=STEP),
                       safety=SafetyConfig(control_hz=20.0, watchdog_timeout_s=1.0, max_joint_speed=2.0),
                       episodes=1, max_episode_steps=25, reward_source="keys", status=False)
    arm = cfg.robot.make()
    safety = SafetyLayer(arm, cfg.safety)
    safety.connect()
    start = arm.observe()["state"][:6].copy()
    goal = start.copy()
    goal[0] += np.radians(8.0)  # within the default 10° tolerance: engages at once
    far = start.copy()
    far[1] += np.radians(40.0)

    class Still:
        def act(self, obs, deterministic=False):
            import torch

            a = torch.zeros(obs["state"].shape[0], 7)
            a[:, 6] = 1.0
            return a, {}

    device = ScriptedLeader(lambda i: (far, True) if i < 5 else (goal, True))
    deployer = Deployer(cfg, safety, device, Still())  # type: ignore[arg-type]
    deployer.collected = []
    try:
        deployer.run()
        end = arm.observe()["state"][:6]
    finally:
        safety.close()
        if arm.is_connected:
            arm.disconnect()
    sources = [bool(r["intervened"]) for r in deployer.collected]
    assert sources[:5] == [False] * 5 and all(sources[5:]), sources  # refused while 40° away, then the leader's
    moves = np.abs(np.diff(np.stack([r["obs"]["state"][:6] for r in deployer.collected]), axis=0))
    assert moves.max() <= STEP + 0.01, moves.max()  # no step larger than one joint step
    assert np.degrees(np.abs(end - goal)).max() < 1.5, np.degrees(end - goal)


@pytest.mark.integration
def test_record_with_a_leader_arm_in_joint_delta_stores_joint_steps(tmp_path):
    """Demos for a joint_delta policy: the leader's pose (blended in) as steps from the measured joints."""
    pytest.importorskip("mujoco")
    pytest.importorskip("msgpack")
    from robot_rl.data.store import EpisodeStore
    from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
    from robot_rl.hardware.sim_arm import SimulatedArmConfig
    from robot_rl.human_loop.record import DemoRecorder, RecordConfig
    from robot_rl.human_loop.record_sinks import open_sink

    arm = SimulatedArmConfig(cameras={}, control_mode="joint_delta", max_step_joint_rad=STEP).make()
    with SafetyLayer(arm, SafetyConfig(control_hz=20.0, watchdog_timeout_s=1.0, max_joint_speed=2.0)) as layer:
        start = arm.observe()["state"][:6].copy()
        goal = start.copy()
        goal[0] += np.radians(15.0)
        device = ScriptedLeader(lambda i: (goal, True))
        device.drives_episodes = True
        sink = open_sink(tmp_path / "demos", "episodes", arm.features, 20.0, "", {})
        cfg = RecordConfig(hz=20.0, episodes=1, max_episode_steps=30, blend_s=0.5)
        summary = DemoRecorder(layer, device, sink, cfg).run()
        sink.close()
        end = arm.observe()["state"][:6]
    assert summary.saved == 1
    (ep,) = list(EpisodeStore(tmp_path / "demos"))
    assert ep.intervened.all() and np.abs(ep.action[:, :6]).max() <= 1.0
    assert (ep.action[:, 0] >= -0.05).all() and ep.action[:, 0].max() > 0.5  # steps towards the leader, not targets
    assert np.abs(ep.action[:, 1:6]).max() < 0.2
    assert np.degrees(abs(end[0] - goal[0])) < 1.5, np.degrees(end - goal)


def test_leader_ee_step_takes_the_short_way_round_and_clips():
    from robot_rl.human_loop.intervention import leader_ee_step

    def fk(q):
        return np.array([q[0], q[1], q[2], q[3], 0.0, 0.0])

    step = leader_ee_step(fk, np.array([0.105, 0.0, 0.0, 3.1]), np.array([0.1, 0.5, 0.0, -3.1]), 0.01, 0.5)
    np.testing.assert_allclose(step, [0.5, -1.0, 0.0, (6.2 - 2 * np.pi) / 0.5, 0.0, 0.0], atol=1e-9)
    with pytest.raises(ValueError, match="forward kinematics"):
        leader_ee_step(lambda q: None, np.zeros(4), np.zeros(4), 0.01, 0.05)


@pytest.mark.integration
def test_a_leader_arm_drives_the_simulated_so101_in_ee_delta_through_forward_kinematics(tmp_path):
    """HIL-SERL on LeRobot arms: the leader's pose (its FK) as end-effector steps, in record and in deploy."""
    pytest.importorskip("mujoco")
    pytest.importorskip("mink")
    from robot_rl.data.store import EpisodeStore
    from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
    from robot_rl.hardware.sim_so101 import SimSo101Config
    from robot_rl.human_loop.deploy import DeployConfig, Deployer
    from robot_rl.human_loop.record import DemoRecorder, RecordConfig
    from robot_rl.human_loop.record_sinks import open_sink

    robot_cfg = SimSo101Config(cameras={}, control_mode="ee_delta")
    safety_cfg = SafetyConfig(control_hz=20.0, watchdog_timeout_s=1.0)
    arm = robot_cfg.make()
    with SafetyLayer(arm, safety_cfg) as layer:
        start = arm.measure().joints.copy()
        goal = start.copy()
        goal[0] += np.radians(8.0)  # pan the leader: the tool swings sideways
        device = ScriptedLeader(lambda i: (goal, True))
        device.drives_episodes = True
        sink = open_sink(tmp_path / "demos", "episodes", arm.features, 20.0, "", {})
        summary = DemoRecorder(layer, device, sink, RecordConfig(hz=20.0, episodes=1, max_episode_steps=40,
                                                                 blend_s=0.3)).run()
        sink.close()
        reached = arm.forward_kinematics(arm.measure().joints)
        want = arm.forward_kinematics(goal)
    assert summary.saved == 1
    (ep,) = list(EpisodeStore(tmp_path / "demos"))
    assert np.abs(ep.action[:, :6]).max() <= 1.0 and np.abs(ep.action[:, 1]).max() > 0.5  # sideways steps
    assert np.linalg.norm(reached[:3] - want[:3]) < 0.01, (reached, want)

    cfg = DeployConfig(robot=robot_cfg, safety=safety_cfg, episodes=1, max_episode_steps=30, reward_source="keys",
                       status=False)
    arm = robot_cfg.make()
    with SafetyLayer(arm, safety_cfg) as layer:
        q0 = arm.measure().joints.copy()
        target = q0.copy()
        target[0] -= np.radians(6.0)

        class Still:
            def act(self, obs, deterministic=False):
                import torch

                a = torch.zeros(obs["state"].shape[0], 7)
                a[:, 6] = 1.0
                return a, {}

        deployer = Deployer(cfg, layer, ScriptedLeader(lambda i: (target, True)), Still())  # type: ignore[arg-type]
        deployer.collected = []
        deployer.run()
        reached = arm.forward_kinematics(arm.measure().joints)
        want = arm.forward_kinematics(target)
    assert all(r["intervened"] for r in deployer.collected)
    assert np.linalg.norm(reached[:3] - want[:3]) < 0.01, (reached, want)
