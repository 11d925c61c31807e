"""Finding an arm's limits by moving it: joint ranges and the reachable end-effector box, as a config file.

`robot-rl robot find-limits` (:mod:`robot_rl.cli.robot`) feeds every measured state to a
:class:`LimitsRecorder`; :meth:`LimitsRecorder.result` shrinks the ranges by a margin (what was reached at the
edge of a human's motion is not a place to command on purpose) and :meth:`FoundLimits.to_yaml` writes the
``robot`` and ``safety`` sections that `robot-rl record --config` and `robot-rl deploy --config` read.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import yaml

from robot_rl.core.config import ConfigError
from robot_rl.hardware.robot import RobotState


@runtime_checkable
class Compliant(Protocol):
    """An arm whose motors can be switched off so that a person moves it by hand (LeRobot's followers)."""

    def set_compliant(self, on: bool) -> None:
        """``True``: torque off (the arm is moved by hand and may fall under gravity); ``False``: holding again."""
        ...


@dataclass
class FoundLimits:
    """Joint ranges (radians) and the end-effector box (metres), margins applied."""

    joint_low: list[float]
    joint_high: list[float]
    workspace_low: list[float] | None
    workspace_high: list[float] | None
    samples: int
    seconds: float
    warnings: list[str] = field(default_factory=list)

    def to_yaml(self, robot_type: str = "") -> str:
        """The ``robot`` / ``safety`` sections as YAML, with a header saying how they were found."""
        robot: dict[str, object] = {"type": robot_type} if robot_type else {}  # deploy's --config needs the type
        robot.update(joint_low=[round(v, 4) for v in self.joint_low], joint_high=[round(v, 4) for v in self.joint_high])
        body: dict[str, dict[str, object]] = {"robot": robot}
        if self.workspace_low is not None and self.workspace_high is not None:
            body["safety"] = {"workspace_low": [round(v, 4) for v in self.workspace_low],
                              "workspace_high": [round(v, 4) for v in self.workspace_high]}
        head = [f"# robot-rl robot find-limits{' --robot ' + robot_type if robot_type else ''}: "
                f"{time.strftime('%Y-%m-%d %H:%M')}, {self.samples} samples over {self.seconds:.0f} s",
                "# joints in radians, the workspace box in metres (robot base frame); margins applied",
                *(f"# warning: {w}" for w in self.warnings)]
        return "\n".join(head) + "\n" + yaml.safe_dump(body, sort_keys=False)


class LimitsRecorder:
    """Running minima and maxima of the measured joints and end-effector position."""

    def __init__(self) -> None:
        self.joint_low: np.ndarray | None = None
        self.joint_high: np.ndarray | None = None
        self.ee_low: np.ndarray | None = None
        self.ee_high: np.ndarray | None = None
        self.samples = 0
        self._t0: float | None = None
        self._t1 = 0.0

    def add(self, state: RobotState, has_pose: bool = True) -> None:
        """One measured state (non-finite readings are skipped: a glitching sensor must not widen a limit)."""
        joints = np.asarray(state.joints, np.float64)
        if not np.isfinite(joints).all():
            return
        self.joint_low = joints.copy() if self.joint_low is None else np.minimum(self.joint_low, joints)
        self.joint_high = joints.copy() if self.joint_high is None else np.maximum(self.joint_high, joints)
        pos = np.asarray(state.ee_pose[:3], np.float64)
        if has_pose and np.isfinite(pos).all():
            self.ee_low = pos.copy() if self.ee_low is None else np.minimum(self.ee_low, pos)
            self.ee_high = pos.copy() if self.ee_high is None else np.maximum(self.ee_high, pos)
        now = time.monotonic()
        self._t0 = now if self._t0 is None else self._t0
        self._t1 = now
        self.samples += 1

    def result(self, margin_deg: float = 2.0, margin_m: float = 0.01, min_range_deg: float = 5.0,
               names: list[str] | None = None) -> FoundLimits:
        """The limits with each range shrunk by its margin at both ends; warnings for joints that barely moved."""
        if self.joint_low is None or self.joint_high is None:
            raise ConfigError("no measurement was recorded: is the robot connected and answering?")
        margin = math.radians(margin_deg)
        span = self.joint_high - self.joint_low
        names = names or [f"joint {i}" for i in range(len(span))]
        warnings = [f"{names[i]} moved only {math.degrees(s):.1f} deg: move every joint through its whole range"
                    for i, s in enumerate(span) if math.degrees(s) < min_range_deg]
        shrink = np.minimum(margin, span / 4)  # a joint that barely moved keeps half of what it showed
        low, high = self.joint_low + shrink, self.joint_high - shrink
        box_low = box_high = None
        if self.ee_low is not None and self.ee_high is not None:
            box_shrink = np.minimum(margin_m, (self.ee_high - self.ee_low) / 4)
            box_low, box_high = (self.ee_low + box_shrink).tolist(), (self.ee_high - box_shrink).tolist()
        seconds = self._t1 - self._t0 if self._t0 is not None else 0.0
        return FoundLimits(low.tolist(), high.tolist(), box_low, box_high, self.samples, seconds, warnings)
