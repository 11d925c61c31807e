"""Deploy runs without a person: scripted demonstrations, and the policy acting alone.

Both are the deploy loop in ``eval`` mode (no status line) on a real :class:`SafetyLayer`: demonstrations come from a
teleop device that is always in control (e.g. ``ScriptedDevice(PickIntervener(arm, patience=0))``), and
the policy alone runs with a device that never intervenes, which is how HIL-SERL's progress is judged
(the success rate of the policy with nobody at the teleop device).
"""

from __future__ import annotations

from dataclasses import replace

from robot_rl.core.algorithm import Policy
from robot_rl.core.transition import TransitionBatch
from robot_rl.hardware.safety import SafetyLayer
from robot_rl.hardware.teleop import TeleopDevice
from robot_rl.human_loop.deploy import DeployConfig, Deployer, DeployReport
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.transition_rows import rows_to_batch


def record_device_demos(safety: SafetyLayer, cfg: DeployConfig, device: TeleopDevice, episodes: int, seed: int
                        ) -> tuple[TransitionBatch, DeployReport]:
    """``episodes`` episodes driven by ``device`` (connected), as one batch for a learner's demo buffer."""
    robot = safety.robot
    deployer = Deployer(replace(cfg, mode="eval", episodes=episodes, seed=seed, status=False), safety, device,
                        cfg.algo.build_policy(robot.features, "cpu", 0))
    deployer.collected = []
    report = deployer.run()
    return rows_to_batch(deployer.collected), report


def run_policy_alone(safety: SafetyLayer, cfg: DeployConfig, policy: Policy, version: int, episodes: int,
                     seed: int, deterministic: bool = True) -> DeployReport:
    """``policy`` alone (nobody at the teleop device) on ``episodes`` episodes seeded by ``seed``."""
    device = ScriptedDevice()
    device.connect()
    eval_cfg = replace(cfg, mode="eval", episodes=episodes, seed=seed, deterministic=deterministic,
                       status=False)
    return Deployer(eval_cfg, safety, device, policy, policy_version=version).run()
