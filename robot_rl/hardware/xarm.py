"""UFACTORY xArm (xArm 5/6/7, Lite 6, 850) through its maintained SDK, ``xarm-python-sdk``.

The driver streams targets in servo mode (``set_mode(1)``): ``set_servo_cartesian`` in ``ee_delta`` mode,
``set_servo_angle_j`` in ``joint`` mode, always with ``is_radian=True``; it converts the SDK's millimetres
to metres and the gripper's 0..850 pulses to an opening in 0..1. :meth:`XArmRobot.hold` stops the arm
(``set_state(4)``); the next command after a hold re-enters servo mode. Tests run it against
:class:`robot_rl.testing.fake_xarm.FakeXArmAPI`. Needs ``pip install 'robot-rl[xarm]'`` on hardware.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robot_rl.hardware.robot import ROBOTS, NotConnectedError, Robot, RobotConfig, RobotError, RobotState

GRIPPER_OPEN_PULSES = 850.0
NOT_READY_CODES = (9, -2)


def _xarm6_low() -> list[float]:
    return [math.radians(d) for d in (-360, -118, -225, -360, -97, -360)]


def _xarm6_high() -> list[float]:
    return [math.radians(d) for d in (360, 120, 11, 360, 180, 360)]


@ROBOTS.register("xarm")
@dataclass
class XArmRobotConfig(RobotConfig):
    """An xArm on the network."""

    ip: str = "192.168.1.185"
    """Controller address (the label on the control box)."""
    joint_low: list[float] = field(default_factory=_xarm6_low)
    """Lower joint limits (xArm6 defaults), radians."""
    joint_high: list[float] = field(default_factory=_xarm6_high)
    """Upper joint limits (xArm6 defaults), radians."""
    gripper: bool = True
    """Whether an xArm gripper is mounted (otherwise the gripper action is ignored and reads 1.0)."""
    gripper_deadband: float = 0.02
    """Send a gripper command only when the target changes by more than this (0..1): the gripper bus
    is slow and a command per control step would queue up."""

    def make(self) -> XArmRobot:
        """An unconnected :class:`XArmRobot`."""
        return XArmRobot(self)


def _default_sdk(ip: str) -> Any:
    try:
        from xarm.wrapper import XArmAPI
    except ImportError as e:
        raise ImportError("the xArm driver needs the xArm SDK: pip install 'robot-rl[xarm]' "
                          "(xarm-python-sdk)") from e
    return XArmAPI(ip, is_radian=True)


class XArmRobot(Robot):
    """The Robot contract over ``xarm.wrapper.XArmAPI``; ``sdk`` builds the API object from the ip."""

    config: XArmRobotConfig

    def __init__(self, config: XArmRobotConfig, sdk: Callable[[str], Any] | None = None) -> None:
        self.config = config
        self._sdk = sdk or _default_sdk
        self._arm: Any = None
        self._lock = threading.Lock()
        self._grip_sent: float | None = None
        self._stopped = False

    @property
    def arm(self) -> Any:
        """The SDK object (raises when not connected)."""
        if self._arm is None:
            raise NotConnectedError("xArm is not connected; call connect() or use `with robot:`")
        return self._arm

    @property
    def is_connected(self) -> bool:
        """Whether the SDK reports a live connection."""
        return self._arm is not None and bool(self._arm.connected)

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            err = getattr(self._arm, "error_code", 0)
            raise RobotError(f"xArm {what} returned code {code} (controller error {err}); clear the cause, "
                             f"then reconnect (clean_error is called on connect)")

    def connect(self) -> None:
        """Connect, clear errors, enable motion, enter servo mode; the arm does not move."""
        if self.is_connected:
            return
        arm = self._sdk(self.config.ip)
        if not arm.connected:
            raise RobotError(f"could not connect to the xArm at {self.config.ip}")
        self._arm = arm
        with self._lock:
            self._check(arm.clean_error(), "clean_error")
            self._check(arm.clean_warn(), "clean_warn")
            self._check(arm.motion_enable(True), "motion_enable")
            self._enter_servo()
            if self.config.gripper:
                self._check(arm.set_gripper_mode(0), "set_gripper_mode")
                self._check(arm.set_gripper_enable(True), "set_gripper_enable")
        self._grip_sent = None

    def _enter_servo(self) -> None:
        self._check(self._arm.set_mode(1), "set_mode(1)")
        self._check(self._arm.set_state(0), "set_state(0)")
        self._stopped = False

    def disconnect(self) -> None:
        """Stop the arm and close the connection."""
        if self._arm is None:
            return
        try:
            if self._arm.connected:
                self.hold()
                self._arm.disconnect()
        finally:
            self._arm = None

    def measure(self) -> RobotState:
        """Joints, pose (metres, radians) and gripper opening, read from the controller."""
        arm = self.arm
        with self._lock:
            code, pose = arm.get_position(is_radian=True)
            self._check(code, "get_position")
            code, angles = arm.get_servo_angle(is_radian=True)
            self._check(code, "get_servo_angle")
            grip = 1.0
            if self.config.gripper:
                code, pulses = arm.get_gripper_position()
                self._check(code, "get_gripper_position")
                grip = float(np.clip((pulses or 0.0) / GRIPPER_OPEN_PULSES, 0.0, 1.0))
            t = time.monotonic()
            if arm.error_code:
                raise RobotError(f"xArm controller error {arm.error_code}; see the xArm manual, fix, reconnect")
        pose = np.asarray(pose[:6], dtype=np.float64)
        pose[:3] /= 1000.0
        joints = np.asarray(angles[: self.config.num_joints], dtype=np.float64)
        return RobotState(joints=joints, ee_pose=pose, gripper=grip, timestamp=t)

    def forward_kinematics(self, joints: np.ndarray) -> np.ndarray | None:
        """Pose of ``joints`` computed by the controller (metres, radians)."""
        arm = self.arm
        with self._lock:
            code, pose = arm.get_forward_kinematics(list(map(float, joints)), input_is_radian=True,
                                                    return_is_radian=True)
        if code != 0:
            return None
        out = np.asarray(pose[:6], dtype=np.float64)
        out[:3] /= 1000.0
        return out

    def _command(self, target: np.ndarray, gripper: float) -> None:
        arm = self.arm
        with self._lock:
            if self._stopped:
                self._enter_servo()  # resume after a hold: only the safety layer decides to send again
            if self.config.control_mode == "ee_delta":
                mvpose = [target[0] * 1000.0, target[1] * 1000.0, target[2] * 1000.0, *map(float, target[3:6])]
                code = arm.set_servo_cartesian(mvpose, is_radian=True)
            else:
                angles = [*map(float, target), *[0.0] * (7 - len(target))]
                code = arm.set_servo_angle_j(angles, is_radian=True)
            self._check(code, "servo command")
            if self.config.gripper and (self._grip_sent is None
                                        or abs(gripper - self._grip_sent) > self.config.gripper_deadband):
                self._check(arm.set_gripper_position(gripper * GRIPPER_OPEN_PULSES), "set_gripper_position")
                self._grip_sent = gripper

    def emergency_stop_command(self) -> XArmEmergencyStop:
        """The guard process's stop: its own SDK connection to the controller at ``config.ip``."""
        return XArmEmergencyStop(self.config.ip)

    def hold(self) -> None:
        """Stop the arm now (``set_state(4)``); callable from the watchdog thread without the driver lock."""
        if self._arm is None:
            return
        # No lock: the SDK serialises its socket writes, and a hold must not wait behind a stuck read.
        self._stopped = True
        self._arm.set_state(4)


class XArmEmergencyStop:
    """Picklable stop command for :class:`~robot_rl.hardware.estop.EStopGuard`.

    Opens its own connection and calls ``emergency_stop()`` (the xArm controller accepts several clients).
    """

    def __init__(self, ip: str) -> None:
        self.ip = ip

    def __call__(self) -> None:
        """Stop the arm."""
        arm = _default_sdk(self.ip)
        try:
            arm.emergency_stop()
        finally:
            arm.disconnect()
