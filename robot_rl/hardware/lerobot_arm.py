"""LeRobot's SO-100/SO-101 and Koch followers on robot_rl's kinematic models: units, calibration, FK and IK steps.

:mod:`robot_rl.hardware.lerobot_robot` uses this for ``ee_delta`` and for the measured end-effector pose.

**Units.** lerobot 0.4.4's SO and Koch followers report each arm joint as ``<motor>.pos`` in the unit their
config's ``use_degrees`` picks (SO followers default to True, the Koch follower to False):

- degrees (``MotorNormMode.DEGREES``): ``(ticks - mid) * 360 / (resolution - 1)``, ``mid`` the middle of the
  calibrated range ``(range_min + range_max) / 2``;
- -100..100 (``MotorNormMode.RANGE_M100_100``): ``(ticks - range_min) / (range_max - range_min) * 200 - 100``,
  clamped to the range and negated for a motor whose calibration ``drive_mode`` is 1 on a bus that applies it
  (Feetech: yes, Dynamixel: no).

Both are 0 at the middle of the calibrated range, which is the zero of the kinematic models (docs/kinematics.md),
so one value of the second kind is ``sign * (range_max - range_min) / 200 * 360 / (resolution - 1)`` degrees
(:func:`degrees_per_unit`). Every motor of these arms (STS3215, XL330, XL430) has 4096 ticks per turn; the
resolution is read from lerobot's bus all the same.

**Poses** are ``[x, y, z, roll, pitch, yaw]`` in metres and radians, ``R = Rz(yaw) @ Ry(pitch) @ Rx(roll)``
(the convention of the simulated arm), in the arm model's base frame (x forward, z up).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from robot_rl.core.config import ConfigError
from robot_rl.hardware.kinematics.config import ARM_MODELS, arm_model
from robot_rl.hardware.robot import RobotError

INSTALL_HINT = ("LeRobot robots and leader arms need lerobot 0.4.x and the arm's motor SDK (feetech-servo-sdk for "
                "SO-100/SO-101, dynamixel-sdk for Koch): bash scripts/install-lerobot.sh VENV installs them with the "
                "arm kinematics (docs/datasets.md#installing-lerobot)")

LEROBOT_ARMS: dict[str, str] = {"so100_follower": "so100", "so101_follower": "so101", "koch_follower": "koch"}
"""lerobot robot type → the arm model (robot_rl.hardware.kinematics) it is built like."""


class CalibrationError(RobotError):
    """lerobot's calibration of the arm is missing or unusable; the message names the command that fixes it."""


def lerobot_module(name: str) -> Any:
    """Import ``lerobot.<name>`` or raise ImportError saying which extra brings it."""
    import importlib

    try:
        return importlib.import_module(f"lerobot.{name}")
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from e


def infer_arm(robot_type: str, arm: str | None) -> str | None:
    """The arm model for ``robot_type``: ``arm`` itself, or for ``"auto"`` the model lerobot's type is built like."""
    if arm is None or arm.lower() in ("none", "null", ""):
        return None
    if arm == "auto":
        return LEROBOT_ARMS.get(robot_type)
    if arm not in ARM_MODELS:
        raise ConfigError(f"unknown arm model {arm!r}; known: {', '.join(sorted(ARM_MODELS.names()))}, or null")
    return arm


@dataclass
class JointMap:
    """Conversion between lerobot's ``<motor>.pos`` dicts and joint vectors (radians) + gripper opening."""

    joint_names: list[str]
    gripper_name: str | None
    degrees: bool = True
    gripper_range: tuple[float, float] = (0.0, 100.0)
    unit_deg: np.ndarray | None = None
    """Degrees per bus unit of each joint when the bus reports lerobot's -100..100 range (``degrees`` False);
    None passes those units through unchanged."""

    def check(self, features: dict[str, Any], what: str) -> None:
        """Raise ValueError unless every mapped motor is a float feature of ``features``."""
        names = [*self.joint_names, *([self.gripper_name] if self.gripper_name else [])]
        missing = [n for n in names if f"{n}.pos" not in features]
        if missing:
            have = sorted(k for k in features if k.endswith(".pos"))
            raise ConfigError(f"{what} has no motor(s) {missing}; its motors: {have} (set joint_names/gripper_name)")

    def joints(self, values: dict[str, Any]) -> np.ndarray:
        """Joint vector (radians, unless lerobot's -100..100 passes through) from a lerobot dict."""
        q = np.array([float(values[f"{n}.pos"]) for n in self.joint_names], dtype=np.float64)
        if self.degrees:
            return np.radians(q)
        return q if self.unit_deg is None else np.radians(q * self.unit_deg)

    def gripper(self, values: dict[str, Any]) -> float:
        """Gripper opening 0..1 (1.0 when there is no gripper)."""
        if not self.gripper_name:
            return 1.0
        lo, hi = self.gripper_range
        return float(np.clip((float(values[f"{self.gripper_name}.pos"]) - lo) / (hi - lo), 0.0, 1.0))

    def to_lerobot(self, joints: np.ndarray, gripper: float) -> dict[str, float]:
        """A lerobot action dict for ``joints`` (in the units :meth:`joints` returns) and an opening 0..1."""
        if self.degrees:
            q = np.degrees(joints)
        else:
            q = np.asarray(joints) if self.unit_deg is None else np.degrees(joints) / self.unit_deg
        out = {f"{n}.pos": float(v) for n, v in zip(self.joint_names, q)}
        if self.gripper_name:
            lo, hi = self.gripper_range
            out[f"{self.gripper_name}.pos"] = float(lo + float(np.clip(gripper, 0.0, 1.0)) * (hi - lo))
        return out


def calibrate_command(robot_type: str, port: str, robot_id: str, calibration_dir: str | None) -> str:
    """The ``lerobot-calibrate`` command that (re)calibrates this arm."""
    cmd = f"lerobot-calibrate --robot.type={robot_type} --robot.port={port} --robot.id={robot_id}"
    return cmd + (f" --robot.calibration_dir={calibration_dir}" if calibration_dir else "")


def check_calibration(robot: Any, motors: list[str], fix: str) -> None:
    """Raise :class:`CalibrationError` unless lerobot loaded a usable calibration for every motor in ``motors``.

    Called before lerobot's ``connect``: without a calibration file lerobot would start its interactive
    calibration (prompts on the terminal, torque off), which a control loop must never fall into.
    """
    path = Path(robot.calibration_fpath)
    if not path.is_file():
        raise CalibrationError(f"no lerobot calibration for {robot}: {path} does not exist. Calibrate the arm "
                               f"first: {fix}. Nothing was sent to the arm")
    missing = [m for m in motors if m not in robot.calibration]
    if missing:
        raise CalibrationError(f"{path} has no calibration for motor(s) {missing}; re-run {fix}. Nothing was sent "
                               "to the arm")
    for m in motors:
        cal = robot.calibration[m]
        if not cal.range_min < cal.range_max:
            raise CalibrationError(f"{path}: motor {m!r} has range_min {cal.range_min} >= range_max {cal.range_max} "
                                   f"(an inverted or empty range); re-run {fix}. Nothing was sent to the arm")


def motor_bus(robot: Any) -> Any | None:
    """The motor bus of the lerobot robot ``robot``, or None.

    Not part of lerobot's abstract ``Robot``: its SO and Koch followers (every robot built on a ``MotorsBus``)
    keep it as ``bus``, and it is the only place that says which unit each motor reports.
    """
    bus = getattr(robot, "bus", None)
    if bus is None:  # no bus, nothing to check: a robot without one (the simulated SO-101) needs no lerobot
        return None
    return bus if isinstance(bus, lerobot_module("motors.motors_bus").MotorsBusBase) else None


def check_units(robot: Any, joints: list[str], degrees: bool, robot_type: str) -> None:
    """Refuse a lerobot robot whose arm joints report another unit than ``degrees`` says (needs its motor bus)."""
    bus = motor_bus(robot)
    if bus is None:
        return
    norm = lerobot_module("motors").MotorNormMode
    want = norm.DEGREES if degrees else norm.RANGE_M100_100
    wrong = [m for m in joints if m in bus.motors and bus.motors[m].norm_mode is not want]
    if wrong:
        raise ConfigError(f"lerobot's {robot_type} reports {wrong} in {bus.motors[wrong[0]].norm_mode.value}, but "
                          f"robot.degrees={str(degrees).lower()} expects {want.value}: set robot.degrees="
                          f"{str(not degrees).lower()} (it sets lerobot's use_degrees)")


def degrees_per_unit(robot: Any, joints: list[str]) -> np.ndarray:
    """Per joint, degrees per unit of lerobot's -100..100 range, from its calibration (see the module docstring)."""
    bus = motor_bus(robot)
    if bus is None:
        raise ConfigError(f"{robot} has no lerobot motor bus to read its calibration from, so its -100..100 joint "
                          "values cannot be turned into angles: use degrees (robot.degrees=true)")
    out = []
    for m in joints:
        cal = robot.calibration[m]
        ticks = bus.model_resolution_table[bus.motors[m].model] - 1
        sign = -1.0 if (bus.apply_drive_mode and cal.drive_mode) else 1.0
        out.append(sign * (cal.range_max - cal.range_min) / 200.0 * 360.0 / ticks)
    return np.asarray(out, dtype=np.float64)


def rpy_to_matrix(rpy: npt.ArrayLike) -> np.ndarray:
    """Rotation matrix ``[3, 3]`` of ``[roll, pitch, yaw]`` (``Rz(yaw) @ Ry(pitch) @ Rx(roll)``)."""
    r, p, y = (float(v) for v in np.asarray(rpy, dtype=np.float64).reshape(3))
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def matrix_to_rpy(m: np.ndarray) -> np.ndarray:
    """Inverse of :func:`rpy_to_matrix` (pitch in [-π/2, π/2])."""
    pitch = math.asin(-float(np.clip(m[2, 0], -1.0, 1.0)))
    return np.array([math.atan2(m[2, 1], m[2, 2]), pitch, math.atan2(m[1, 0], m[0, 0])])


def rotation_vector(m: np.ndarray) -> np.ndarray:
    """Axis times angle (radians) of the rotation matrix ``m`` (angles below π)."""
    angle = math.acos(float(np.clip((np.trace(m) - 1.0) / 2.0, -1.0, 1.0)))
    axis = np.array([m[2, 1] - m[1, 2], m[0, 2] - m[2, 0], m[1, 0] - m[0, 1]])
    if angle < 1e-9:
        return axis / 2.0  # sin(angle) ~ angle: the skew part is already axis * angle
    return axis * (angle / (2.0 * math.sin(angle)))


def wrap_angle(a: np.ndarray) -> np.ndarray:
    """Angles wrapped into [-π, π)."""
    return (np.asarray(a) + np.pi) % (2.0 * np.pi) - np.pi


class ArmSteps:
    """FK poses and ``ee_delta`` IK steps of one LeRobot arm, in radians (wraps :class:`ArmKinematics`).

    The IK's own workspace box is opened to the model's whole reach: the safety layer cuts targets to the box on
    the *measured* pose (an arm outside it may move back in, never further out), whereas the IK clips a target
    into its box outright, which would pull an arm standing outside (folded at rest) back in one step.
    ``max_joint_step_rad`` bounds each joint's move per step: near a singular pose a small Cartesian step can ask
    for a large joint swing, which is scaled down (direction kept) instead of sent.
    """

    def __init__(self, arm: str, max_joint_step_rad: float) -> None:
        from robot_rl.hardware.kinematics import ArmKinematics

        reach = arm_model(arm).max_abs_target_m
        self.kin = ArmKinematics(arm_model(arm, workspace_low=[-reach] * 3, workspace_high=[reach] * 3))
        self.max_joint_step_rad = float(max_joint_step_rad)
        self.scaled_steps = 0

    @property
    def joint_names(self) -> tuple[str, ...]:
        """The arm joints, in the order of every joint vector."""
        return self.kin.joint_names

    def pose(self, q: np.ndarray) -> np.ndarray:
        """``[x, y, z, roll, pitch, yaw]`` of the tool frame at joints ``q`` (radians)."""
        position, rotation = self.kin.fk(q, degrees=False)
        return np.concatenate([position, matrix_to_rpy(rotation)])

    def step(self, q: np.ndarray, pose_now: np.ndarray, target: np.ndarray) -> np.ndarray:
        """Joint goal (radians) that moves the tool from ``pose_now`` (FK at ``q``) to the pose ``target``.

        An exactly zero step returns ``q`` itself: "stay" must not become a tiny IK move. The rotation is
        pursued with the model's (small) orientation weight; position comes first on these five-joint arms. With
        no rotation asked, the IK keeps the tool's present orientation (an exact zero, not rpy round-off).
        """
        q = np.asarray(q, dtype=np.float64)
        dpos = target[:3] - pose_now[:3]
        drpy = wrap_angle(target[3:6] - pose_now[3:6])
        if not dpos.any() and not drpy.any():
            return q.copy()
        rotvec = np.zeros(3)
        if drpy.any():
            _, rot_now = self.kin.fk(q, degrees=False)
            rotvec = rotation_vector(rpy_to_matrix(target[3:6]) @ rot_now.T)
        goal = self.kin.ik_delta(q, dpos, rotvec, degrees=False).q
        swing = float(np.abs(goal - q).max())
        if swing > self.max_joint_step_rad:
            self.scaled_steps += 1
            goal = q + (goal - q) * (self.max_joint_step_rad / swing)
        return goal
