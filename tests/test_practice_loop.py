"""Practice end to end on the simulated arm: two policies, two learners, one stream of experience, a person's resets."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mujoco")
pytest.importorskip("msgpack")

from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.sim_arm import SimulatedArmConfig
from robot_rl.hardware.sim_pick import PickIntervener
from robot_rl.human_loop.deploy import DeployConfig, Deployer
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.hil_learner import HILLearner
from robot_rl.human_loop.practice.config import PracticeConfig
from robot_rl.human_loop.practice.loop import PracticeRunner, SimulatedPerson, StartStatus, reset_config, task_config
from robot_rl.policies.sac import SACConfig
from robot_rl.transport.config import ZmqTransportConfig
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

pytestmark = [pytest.mark.sim, pytest.mark.slow, pytest.mark.timeout(180)]


def _config(robot: str) -> DeployConfig:
    scale = 4.0  # simulated seconds per wall-clock second: 10 Hz of robot time
    arm: Any
    if robot == "sim_so101":
        pytest.importorskip("mink")  # the LeRobot driver's IK
        from robot_rl.hardware.sim_so101 import SimSo101Config

        arm = SimSo101Config(cameras={}, object_in_state=True, resets="physical", time_scale=scale,
                             request_timeout_s=5.0, seed=2)
    else:
        arm = SimulatedArmConfig(cameras={}, resets="physical", time_scale=scale, request_timeout_s=5.0, seed=2)
    return DeployConfig(
        robot=arm,
        safety=SafetyConfig(control_hz=10 * scale, watchdog_timeout_s=0.5, max_linear_speed=0.25 * scale),
        algo=SACConfig(demo_ratio=0.5, learning_starts=16, batch_size=16, actor_hidden=(32, 32),
                       critic_hidden=(32, 32)),
        transport=ZmqTransportConfig(address="tcp://127.0.0.1:*", heartbeat_s=0.2), mode="practice",
        max_episode_steps=12, status=False,
        practice=PracticeConfig(reset_address="tcp://127.0.0.1:*", reset_max_steps=8, stuck_after_attempts=2,
                                max_requests_per_hour=3600.0))


@contextmanager
def _learning(learner: HILLearner) -> Iterator[threading.Event]:
    """The learner steps in a thread; on exit it is *killed*: its endpoint closed, no checkpoint on the way out."""
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            learner.step(recv_timeout_s=0.01, max_updates=2)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(10)
        learner.endpoint.close()


@pytest.mark.parametrize("robot", ["sim_arm", "sim_so101"])
def test_practice_runs_both_policies_feeds_both_learners_and_both_survive_a_kill(tmp_path: Path, robot: str) -> None:
    cfg = _config(robot)
    runs = {"task": tmp_path / "task", "reset": tmp_path / "reset"}
    learners = {"task": HILLearner(task_config(cfg), runs["task"], publish_every=5),
                "reset": HILLearner(reset_config(cfg), runs["reset"], publish_every=5)}
    arm = cfg.robot.make()
    with _learning(learners["task"]), _learning(learners["reset"]), SafetyLayer(arm, cfg.safety) as safety:
        # The person takes over only when asked (a takeover request: the scene at its start, the task failing).
        device = ScriptedDevice(PickIntervener(arm, takeover_steps=5, press_success=False, only_when_asked=True))
        device.connect()
        loops = {}
        for name, loop_cfg in (("task", task_config(cfg)), ("reset", reset_config(cfg))):
            endpoint = ZmqActorEndpoint(learners[name].address, 0, arm.features,
                                        ZmqSettings.from_config(loop_cfg.transport))
            policy = loop_cfg.algo.build(arm.features, "cpu", 0).make_policy()
            loops[name] = Deployer(loop_cfg, safety, device, policy, endpoint=endpoint,
                                   task_reader=StartStatus(arm) if name == "reset" else None)
        person = SimulatedPerson(arm)
        runner = PracticeRunner(cfg, loops["task"], loops["reset"], person)
        for name in ("task", "reset"):  # a checkpoint each before the kill; rows after it must survive too
            learners[name].checkpoint()
        report = runner.run(attempts=6)
        sim = arm.sim_stats()
        for d in loops.values():
            d.endpoint.close()
    steps = loops["task"].steps + loops["reset"].steps
    c = report.counts
    assert c.task_attempts + c.reset_attempts == 6 and c.task_attempts >= 3
    assert [a["policy"] for a in report.attempts][:2] == ["task", "reset"]
    # nothing placed the scene but the person: every teleport the simulator made is a counted human reset
    assert sim["human_resets"] == c.human_resets == person.resets
    assert sim["episode_resets"] == 6  # each attempt's reset_task, which placed nothing
    assert c.takeovers >= c.takeover_requests  # every takeover request was answered on the next task attempt
    # one stream of experience: each learner got every step, its own policy's and the other's (relabelled)
    assert report.mirrored_rows == {"task": loops["task"].steps, "reset": loops["reset"].steps}
    for name in ("task", "reset"):
        assert learners[name].learner.transitions == steps, name
    for name in ("task", "reset"):  # killed: both resume with every acknowledged row and their checkpoint
        loop_cfg = task_config(cfg) if name == "task" else reset_config(cfg)
        resumed = HILLearner(loop_cfg, runs[name], resume=True)
        try:
            assert resumed.learner.transitions == steps, name
            assert resumed.driver.restored_from is not None
        finally:
            resumed.close()
