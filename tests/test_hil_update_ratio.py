"""`max_unlearned_chunks`: a HIL learner slower than the robot still runs ``utd_ratio`` updates per robot step.

The learner's updates are slowed down (as on a machine too busy for it) and the actor runs a budget of episodes on
the simulated arm over ZeroMQ. Without the bound the learner learns from what it has time for; with it the robot
waits between episodes and every transition's updates have run by the time the last chunk is acknowledged: what a
budget of robot steps learns no longer depends on the CPU (tests/test_docs_hil_workflow.py relies on it).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("mujoco")
pytest.importorskip("msgpack")

from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.sim_arm import SimulatedArmConfig
from robot_rl.human_loop.deploy import DeployConfig, Deployer
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.hil_learner import HILLearner
from robot_rl.policies.sac import SACConfig
from robot_rl.transport.config import ZmqTransportConfig
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

pytestmark = [pytest.mark.slow, pytest.mark.sim, pytest.mark.timeout(120)]  # two runs: ~20 s on a quiet machine

UTD, STARTS, SEND, EPISODES, STEPS = 2.0, 16, 4, 3, 20
UPDATE_S = 0.06
"""Each update's extra time: 17 updates/s at most, where the robot's 50 steps/s owe 100."""


def _run(run: Path, max_unlearned_chunks: int) -> tuple[int, int, float]:
    """Robot steps sent, updates the learner had run once every chunk was acknowledged, and the robot's pauses (s)."""
    cfg = DeployConfig(
        # A watchdog that a loaded machine's stalls do not trip (an episode it cut short would still count).
        robot=SimulatedArmConfig(cameras={}, seed=5), safety=SafetyConfig(control_hz=50.0, watchdog_timeout_s=2.0),
        algo=SACConfig(demo_ratio=0.0, learning_starts=STARTS, batch_size=16, actor_hidden=(16,),
                       critic_hidden=(16,), utd_ratio=UTD),
        transport=ZmqTransportConfig(address="tcp://127.0.0.1:*", heartbeat_s=0.2), mode="learn",
        episodes=EPISODES, max_episode_steps=STEPS, send_every=SEND, status=False,
        max_unlearned_chunks=max_unlearned_chunks)
    learner = HILLearner(cfg, run, publish_every=5)
    update = learner.algo.update

    def slow_update(batch):  # a learner on a CPU too busy to keep up with the robot
        time.sleep(UPDATE_S)
        return update(batch)

    learner.algo.update = slow_update  # type: ignore[method-assign]
    arm = cfg.robot.make()
    try:
        with learner.serving():
            safety = SafetyLayer(arm, cfg.safety)
            safety.connect()
            endpoint = ZmqActorEndpoint(learner.address, 0, arm.features, ZmqSettings.from_config(cfg.transport))
            device = ScriptedDevice()  # nobody takes over
            device.connect()
            deployer = Deployer(cfg, safety, device, cfg.algo.build(arm.features, "cpu", 0).make_policy(),
                                endpoint=endpoint)
            report = deployer.run()  # waits until the learner acknowledged every chunk
            assert report.unacked_chunks == 0 and report.dropped_chunks == 0
            updates = learner.learner.updates
            endpoint.close()
            safety.close()
    finally:
        if arm.is_connected:
            arm.disconnect()
    assert len(report.episodes) == EPISODES
    return report.steps, updates, deployer.kept.paused_s


def test_a_slow_learner_holds_the_robot_and_keeps_the_update_ratio(tmp_path: Path) -> None:
    steps, updates, _ = _run(tmp_path / "bounded", max_unlearned_chunks=2)
    # Owed: UTD per row from the chunk that fills the replay to STARTS rows; the last chunk's may still be running.
    owed = UTD * (steps - STARTS)
    assert owed - UTD * SEND <= updates <= owed + UTD * SEND, (updates, owed)

    # The default: the robot never waits for the learner's updates (on a quiet machine this learner is left far
    # behind, about 30 of 88 updates; on a loaded one the robot may be slow enough for it to keep up).
    _, _, paused_s = _run(tmp_path / "unbounded", max_unlearned_chunks=0)
    assert paused_s == 0.0
