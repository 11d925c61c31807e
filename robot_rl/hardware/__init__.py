"""Real robots: the Robot contract, the safety layer, e-stop, cameras, rate loop and drivers.

Names are imported lazily so that the e-stop guard process (which imports :mod:`robot_rl.hardware.estop`)
starts without loading torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Robot": "robot", "RobotConfig": "robot", "RobotState": "robot", "RobotError": "robot", "ROBOTS": "robot",
    "SafetyLayer": "safety", "SafetyConfig": "safety",
    "Watchdog": "watchdog", "EStop": "estop", "EStopGuard": "estop", "EStopGuardConfig": "estop",
    "RateLoop": "rate", "RateStats": "rate",
    "WeightGate": "weight_check", "WeightCheckConfig": "weight_check", "check_policy_update": "weight_check",
    "OpenCVCamera": "camera", "CameraConfig": "camera", "CameraStaleError": "camera",
    "XArmRobot": "xarm", "XArmRobotConfig": "xarm",
    "SimulatedArm": "sim_arm", "SimulatedArmConfig": "sim_arm", "PickIntervener": "sim_arm",
    "LeRobotRobot": "lerobot_robot", "LeRobotRobotConfig": "lerobot_robot",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'robot_rl.hardware' has no attribute {name!r}")
    return getattr(importlib.import_module(f"robot_rl.hardware.{_EXPORTS[name]}"), name)
