"""A deploy run directory with an untrained policy's checkpoint, for tests that run `robot-rl deploy --mode eval`."""

from __future__ import annotations

from pathlib import Path


def untrained_sim_arm_run(run: Path) -> Path:
    """Write a HIL learner's step-0 checkpoint for the camera-less simulated arm into ``run``; returns ``run``."""
    from robot_rl.hardware.sim_arm import SimulatedArmConfig
    from robot_rl.human_loop.deploy import DeployConfig
    from robot_rl.human_loop.hil_learner import HILLearner
    from robot_rl.transport.config import ZmqTransportConfig

    learner = HILLearner(DeployConfig(robot=SimulatedArmConfig(cameras={}),
                                      transport=ZmqTransportConfig(address="tcp://127.0.0.1:*")), run)
    learner.checkpoint()
    learner.close()
    return run
