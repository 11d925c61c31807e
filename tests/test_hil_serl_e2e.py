"""End-to-end (e2e): the HIL-SERL workflow on the SimulatedArm.

A SimulatedArm process, an actor running the deploy loop in learn mode, a learner over ZeroMQ on
127.0.0.1, and a scripted "human" that takes over when the policy stalls and presses the success key when
it sees the cube lifted. Checked: interventions are flagged, stored in both buffers and sampled about half
of every batch; weights flow (the actor's policy version rises); success is labelled from the key.
That the policy's own success rate rises is tests/test_hil_policy_learns.py (benchmarks/hil_learn.py at real time).
"""

from __future__ import annotations

import threading

import pytest
from needs import need_mujoco_rendering
from waiting import wait_until

pytest.importorskip("mujoco")
pytest.importorskip("msgpack")

from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.sim_arm import PickIntervener, SimulatedArmConfig
from robot_rl.human_loop.deploy import DeployConfig, Deployer
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.hil_learner import HILLearner
from robot_rl.human_loop.observation import policy_spec
from robot_rl.policies.sac import SACConfig
from robot_rl.transport.config import ZmqTransportConfig
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

pytestmark = [pytest.mark.slow, pytest.mark.sim, pytest.mark.timeout(120)]


def test_hil_serl_workflow_on_the_simulated_arm(tmp_path):
    cfg = DeployConfig(
        robot=SimulatedArmConfig(cameras={}, seed=5),
        safety=SafetyConfig(control_hz=20.0, watchdog_timeout_s=0.5),
        algo=SACConfig(demo_ratio=0.5, learning_starts=48, batch_size=32, actor_hidden=(64, 64),
                       critic_hidden=(64, 64), utd_ratio=1.0, gamma=0.95),
        transport=ZmqTransportConfig(address="tcp://127.0.0.1:*", heartbeat_s=0.2),
        mode="learn", episodes=6, max_episode_steps=45, send_every=4, reward_source="keys", status=False)
    learner = HILLearner(cfg, tmp_path / "run", publish_every=5)
    arm = cfg.robot.make()
    try:
        with learner.serving():
            safety = SafetyLayer(arm, cfg.safety)
            safety.connect()  # MuJoCo is installed: an arm that does not start is a failure, not a skip
            endpoint = ZmqActorEndpoint(learner.address, 0, arm.features, ZmqSettings.from_config(cfg.transport))
            human = PickIntervener(arm, patience=6, takeover_steps=45)
            device = ScriptedDevice(human)
            device.connect()
            deployer = Deployer(cfg, safety, device, cfg.algo.build(arm.features, "cpu", 0).make_policy(),
                                endpoint=endpoint)
            report = deployer.run()
            wait_until(lambda: endpoint.unacked() == 0, 10.0, "the learner to acknowledge every chunk",
                       poll_s=0.05, seen=endpoint.unacked)
            endpoint.close()
            safety.close()
    finally:
        if arm.is_connected:
            arm.disconnect()

    episodes = report.episodes
    assert len(episodes) == 6
    intervened = sum(e.intervened_steps for e in episodes)
    assert human.takeovers >= 1 and intervened > 0
    assert all(e.intervention_lengths for e in episodes if e.intervened_steps)
    # Every step reached the learner; every intervened one also went to the intervention (demo) buffer.
    stats = learner.stats
    assert stats.transitions == report.steps
    assert stats.intervened_received == intervened
    # ... and is sampled: the demo buffer holds only interventions and gives half of every batch.
    assert stats.updates > 0 and stats.rows_sampled == stats.updates * 32
    assert stats.intervened_sampled >= stats.rows_sampled // 2
    # Weights flowed: the actor acted with newer versions as the learner updated.
    assert report.weights_accepted >= 2 and report.policy_version > 1
    assert episodes[-1].policy_version > episodes[0].policy_version
    # Success came from the human's key, at the moment the cube was seen lifted.
    assert any(e.success for e in episodes)
    assert all(e.end in ("success", "time_limit") for e in episodes)
    assert report.safety_counts.get("latched", 0) == 0 and report.dropped_chunks == 0
    assert (tmp_path / "run" / "checkpoints" / "latest").is_file()


def test_deploy_verb_evaluates_the_learned_run(tmp_path):
    cfg = DeployConfig(robot=SimulatedArmConfig(cameras={}),
                       algo=SACConfig(demo_ratio=0.5, actor_hidden=(64, 64), critic_hidden=(64, 64)),
                       transport=ZmqTransportConfig(address="tcp://127.0.0.1:*"))
    learner = HILLearner(cfg, tmp_path / "run")
    learner.checkpoint()
    learner.close()
    from robot_rl.cli import main

    log = tmp_path / "episodes.jsonl"
    code = main(["deploy", "--mode", "eval", "--run-dir", str(tmp_path / "run"), "--teleop", "pick_intervener",
                 "--episodes", "1", "--max-episode-steps", "20", "--no-status", "--episode-log", str(log),
                 "--estop-guard", "robot.cameras={}", "safety.control_hz=25"])
    assert code == 0
    import json

    (episode,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert episode["intervened_steps"] > 0 and episode["policy_version"] == 1


def test_deploy_labels_success_with_a_classifier_local_or_served(tmp_path):
    """HIL-SERL's reward on hardware: a calibrated classifier on the cameras, loaded or served."""
    import torch

    from robot_rl.rewards.classifier import SuccessClassifier
    from robot_rl.rewards.service import RewardServer

    need_mujoco_rendering()  # the classifier reads the simulated arm's camera
    torch.manual_seed(0)
    always = SuccessClassifier({"image.front": (32, 32, 3)}, features=8, channels=4, threshold=0.0).eval()
    never = SuccessClassifier({"image.front": (32, 32, 3)}, features=8, channels=4, threshold=1.0).eval()
    server = RewardServer(never, "tcp://127.0.0.1:*")
    stop = threading.Event()
    serving = threading.Thread(target=server.serve, args=(stop,), kwargs={"poll_s": 0.01}, daemon=True)
    serving.start()
    ends, seen = {}, {}
    try:
        for name, source in (("local", str(always.save(tmp_path / "clf"))), ("served", server.address)):
            cfg = DeployConfig(robot=SimulatedArmConfig(cameras={"front": (32, 32)}, request_timeout_s=5.0),
                               safety=SafetyConfig(control_hz=20.0, watchdog_timeout_s=1.0),  # loaded machine
                               episodes=1, max_episode_steps=4,
                               reward_source="classifier", classifier=source, classifier_max_wait_s=1.0,
                               status=False, policy_keys=("state",) if name == "served" else ())
            arm = cfg.robot.make()
            safety = SafetyLayer(arm, cfg.safety)
            safety.connect()
            try:
                spec = policy_spec(cfg, arm.features)
                policy = SACConfig(actor_hidden=(16,), critic_hidden=(16,)).build(spec, "cpu", 0).make_policy()
                deployer = Deployer(cfg, safety, ScriptedDevice(), policy)
                deployer.collected = []
                report = deployer.run()
                seen[name] = {k for row in deployer.collected for k in (*row["obs"], *row["next_obs"])}
            finally:
                safety.close()
                if arm.is_connected:
                    arm.disconnect()
            ends[name] = [(e.end, e.success) for e in report.episodes]
    finally:
        stop.set()
        serving.join(timeout=5)
        server.close()
    assert ends["local"] == [("success", True)]  # threshold 0: the first frame already counts as success
    # The served classifier read the camera on every step while the policy (and its transitions) saw the state.
    assert seen["served"] == {"state"}
    assert ends["served"] == [("time_limit", False)]  # threshold 1: never, from the server's own threshold
    assert server.stats.requests >= 4
    with pytest.raises(ValueError, match="classifier="):
        DeployConfig(reward_source="classifier")


def test_deploy_runs_joint_delta_on_the_simulated_arm_and_refuses_absolute_joints():
    """joint_delta moves each joint from where it is measured; absolute joint targets are refused with the fix."""
    import numpy as np
    import torch

    cfg = DeployConfig(robot=SimulatedArmConfig(cameras={}, control_mode="joint_delta", max_step_joint_rad=0.05),
                       safety=SafetyConfig(control_hz=20.0, watchdog_timeout_s=1.0, max_joint_speed=2.0),
                       episodes=1, max_episode_steps=6, reward_source="keys", status=False)

    class PanRight:
        def act(self, obs, deterministic=False):
            a = torch.zeros(obs["state"].shape[0], 7)
            a[:, 0], a[:, 6] = 1.0, 1.0  # joint 0 at full step, gripper open
            return a, {}

    arm = cfg.robot.make()
    safety = SafetyLayer(arm, cfg.safety)
    safety.connect()
    try:
        before = arm.observe()["state"][:6].copy()
        deployer = Deployer(cfg, safety, ScriptedDevice(), PanRight())  # type: ignore[arg-type]
        deployer.collected = []
        report = deployer.run()
        after = arm.observe()["state"][:6]
    finally:
        safety.close()
        if arm.is_connected:
            arm.disconnect()
    assert [e.end for e in report.episodes] == ["time_limit"] and len(deployer.collected) == 6
    moved = after - before
    assert 0.15 < moved[0] <= 6 * 0.05 + 0.02, moved  # six steps of 0.05 rad; the simulated servo lags a step or two
    assert np.abs(moved[1:]).max() < 0.02, moved
    with pytest.raises(ValueError, match="ee_delta or joint_delta, not 'joint'"):
        DeployConfig(robot=SimulatedArmConfig(control_mode="joint"))
