"""A fake of the ``xarm-python-sdk`` calls that :class:`~robot_rl.hardware.xarm.XArmRobot` uses.

Not an echo: the fake integrates commanded motion over (injectable) time. Joint targets are approached at
``max_joint_speed`` rad/s, Cartesian servo targets at ``max_tcp_speed`` mm/s, joints stay inside the
xArm6 limits, the gripper moves at ``gripper_speed`` pulses/s. Motion happens only in servo mode
(``mode 1``) and the ready state (``state 0``), as on the controller; otherwise calls return the SDK's codes
(``-1`` not connected, ``1`` unclear error, ``9`` state not ready). ``emergency_stop`` stops at once and leaves
``state 4``.

Kinematics are a fixed invertible linear map from joints to pose (not the xArm's): enough to keep
joint and Cartesian motion consistent with each other. Units follow the SDK: millimetres, and radians
because the driver always passes ``is_radian=True``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# xArm6 joint limits (degrees) from the user manual; the 7th slot is unused on a 6-axis arm.
XARM6_LIMITS_DEG = [(-360, 360), (-118, 120), (-225, 11), (-360, 360), (-97, 180), (-360, 360)]
HOME_JOINTS = np.array([0.0, -0.3, -0.8, 0.0, 1.1, 0.0])
HOME_POSE = np.array([400.0, 0.0, 300.0, math.pi, 0.0, 0.0])  # mm, rad
# d pose / d joints: xyz in mm per rad, rpy in rad per rad (well conditioned, with some coupling).
JACOBIAN = np.array([
    [0.0, 250.0, 150.0, 0.0, 20.0, 0.0],
    [300.0, 0.0, 0.0, 20.0, 0.0, 0.0],
    [0.0, -150.0, 250.0, 0.0, -20.0, 0.0],
    [0.0, 0.0, 0.0, 1.0, 0.0, 0.2],
    [0.0, 0.0, 0.0, 0.0, 1.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
])

NOT_CONNECTED, HAS_ERROR, STATE_NOT_READY = -1, 1, 9


class FakeXArmAPI:
    """Stands in for ``xarm.wrapper.XArmAPI`` (same call signatures for the calls used)."""

    axis = 6

    def __init__(self, port: str | None = None, is_radian: bool = False, do_not_open: bool = False,
                 clock: Callable[[], float] = time.monotonic, max_joint_speed: float = math.pi,
                 max_tcp_speed: float = 1000.0, gripper_speed: float = 3000.0, **kwargs: Any) -> None:
        self.port = port
        self._clock = clock
        self.max_joint_speed = max_joint_speed
        self.max_tcp_speed = max_tcp_speed
        self.gripper_speed = gripper_speed
        self._lock = threading.Lock()
        self.connected = False
        self.mode = 0
        self.state = 4
        self.error_code = 0
        self.warn_code = 0
        self.motion_enabled = False
        self.gripper_enabled = False
        self._q = HOME_JOINTS.copy()
        self._q_target: np.ndarray | None = None
        self._pose_target: np.ndarray | None = None
        self._grip = 850.0
        self._grip_target = 850.0
        self._t = clock()
        self.calls: list[str] = []
        self.emergency_stops = 0
        self._lo = np.radians([lo for lo, _ in XARM6_LIMITS_DEG])
        self._hi = np.radians([hi for _, hi in XARM6_LIMITS_DEG])
        if not do_not_open:
            self.connect()

    # ------------------------------------------------------------ kinematics and integration

    @staticmethod
    def fk(q: np.ndarray) -> np.ndarray:
        """Pose ``[x, y, z (mm), roll, pitch, yaw (rad)]`` of joints ``q`` (the fake's linear map)."""
        return HOME_POSE + JACOBIAN @ (np.asarray(q[:6]) - HOME_JOINTS)

    @staticmethod
    def ik(pose: np.ndarray) -> np.ndarray:
        """Joints for ``pose`` (inverse of :meth:`fk`)."""
        return HOME_JOINTS + np.linalg.solve(JACOBIAN, np.asarray(pose[:6]) - HOME_POSE)

    def _advance(self) -> None:
        now = self._clock()
        dt, self._t = max(0.0, now - self._t), now
        moving = self.connected and self.mode == 1 and self.state in (0, 1) and self.error_code == 0
        if moving and self._pose_target is not None:
            pose = self.fk(self._q)
            d = self._pose_target - pose
            n = float(np.linalg.norm(d[:3]))
            if n > self.max_tcp_speed * dt:
                d[:3] *= self.max_tcp_speed * dt / n
            d[3:] = np.clip(d[3:], -self.max_joint_speed * dt, self.max_joint_speed * dt)
            self._q = self.ik(pose + d)
        elif moving and self._q_target is not None:
            step = self.max_joint_speed * dt
            self._q = self._q + np.clip(self._q_target - self._q, -step, step)
        self._q = np.clip(self._q, self._lo, self._hi)
        g = self.gripper_speed * dt
        self._grip += float(np.clip(self._grip_target - self._grip, -g, g))

    def _call(self, name: str) -> None:
        self.calls.append(name)
        self._advance()

    def _ready_code(self) -> int:
        if not self.connected:
            return NOT_CONNECTED
        if self.error_code:
            return HAS_ERROR
        if self.state not in (0, 1) or not self.motion_enabled:
            return STATE_NOT_READY
        return 0

    # ------------------------------------------------------------ connection and state

    def connect(self, port: str | None = None, baudrate: int | None = None, timeout: float | None = None,
                axis: int | None = None, **kwargs: Any) -> None:
        """Open the (fake) connection."""
        with self._lock:
            self.connected = True
            self._t = self._clock()

    def disconnect(self) -> None:
        """Close the (fake) connection."""
        with self._lock:
            self._call("disconnect")
            self.connected = False

    def clean_error(self) -> int:
        """Clear the error code (motion must be enabled and the state set again)."""
        with self._lock:
            self._call("clean_error")
            self.error_code = 0
            return 0 if self.connected else NOT_CONNECTED

    def clean_warn(self) -> int:
        """Clear the warning code."""
        with self._lock:
            self._call("clean_warn")
            self.warn_code = 0
            return 0 if self.connected else NOT_CONNECTED

    def motion_enable(self, enable: bool = True, servo_id: int | None = None) -> int:
        """Enable (or disable) the servos."""
        with self._lock:
            self._call("motion_enable")
            self.motion_enabled = bool(enable)
            return 0 if self.connected else NOT_CONNECTED

    def set_mode(self, mode: int = 0, detection_param: int = 0) -> int:
        """0 = position mode, 1 = servo mode (streamed targets)."""
        with self._lock:
            self._call("set_mode")
            self.mode = int(mode)
            self._q_target = self._pose_target = None
            return 0 if self.connected else NOT_CONNECTED

    def set_state(self, state: int = 0) -> int:
        """0 = ready/start, 3 = pause, 4 = stop (drops the targets)."""
        with self._lock:
            self._call("set_state")
            if not self.connected:
                return NOT_CONNECTED
            self.state = int(state)
            if state == 4:
                self._q_target = self._pose_target = None
            return 0

    def get_state(self) -> tuple[int, int]:
        """``(code, state)``."""
        with self._lock:
            self._call("get_state")
            return (0 if self.connected else NOT_CONNECTED), self.state

    def get_err_warn_code(self, show: bool = False, lang: str = "en") -> tuple[int, list[int]]:
        """``(code, [error_code, warn_code])``."""
        with self._lock:
            self._call("get_err_warn_code")
            return (0 if self.connected else NOT_CONNECTED), [self.error_code, self.warn_code]

    def emergency_stop(self) -> int:
        """Stop now; ``state`` becomes 4 until set to 0 again."""
        with self._lock:
            self._call("emergency_stop")
            self.emergency_stops += 1
            self.state = 4
            self._q_target = self._pose_target = None
            return 0

    def inject_error(self, code: int) -> None:
        """Test hook: the controller reports ``code`` (e.g. 22 self-collision) and stops."""
        with self._lock:
            self._advance()
            self.error_code = code
            self.state = 4
            self._q_target = self._pose_target = None

    # ------------------------------------------------------------ reading

    def get_position(self, is_radian: bool | None = None) -> tuple[int, list[float]]:
        """``(code, [x, y, z (mm), roll, pitch, yaw (rad)])``."""
        with self._lock:
            self._call("get_position")
            return (0 if self.connected else NOT_CONNECTED), [float(v) for v in self.fk(self._q)]

    def get_servo_angle(self, servo_id: int | None = None, is_radian: bool | None = None,
                        is_real: bool = False) -> tuple[int, list[float]]:
        """``(code, [7 joint angles (rad)])``; the 7th is 0 on a 6-axis arm, as in the SDK."""
        with self._lock:
            self._call("get_servo_angle")
            return (0 if self.connected else NOT_CONNECTED), [*map(float, self._q), 0.0]

    def get_forward_kinematics(self, angles: list[float], input_is_radian: bool | None = None,
                               return_is_radian: bool | None = None) -> tuple[int, list[float]]:
        """``(code, pose)`` of ``angles`` (the controller computes it on the real arm)."""
        with self._lock:
            self._call("get_forward_kinematics")
            return 0, [float(v) for v in self.fk(np.asarray(angles[:6], dtype=np.float64))]

    def get_gripper_position(self, **kwargs: Any) -> tuple[int, float]:
        """``(code, opening in pulses, -10..850)``."""
        with self._lock:
            self._call("get_gripper_position")
            return (0 if self.connected else NOT_CONNECTED), float(self._grip)

    # ------------------------------------------------------------ commanding

    def set_servo_angle_j(self, angles: list[float], speed: float | None = None, mvacc: float | None = None,
                          mvtime: float | None = None, is_radian: bool | None = None, **kwargs: Any) -> int:
        """Stream a joint target (servo mode)."""
        with self._lock:
            self._call("set_servo_angle_j")
            code = self._ready_code()
            if code == 0 and self.mode == 1:
                q = np.asarray(angles[:6], dtype=np.float64)
                if (q < self._lo).any() or (q > self._hi).any():
                    return -7  # JOINT_LIMIT, as the SDK reports
                self._q_target, self._pose_target = q, None
                self.state = 1
            return code

    def set_servo_cartesian(self, mvpose: list[float], speed: float | None = None, mvacc: float | None = None,
                            mvtime: float = 0, is_radian: bool | None = None, is_tool_coord: bool = False,
                            **kwargs: Any) -> int:
        """Stream a Cartesian target (servo mode, base frame)."""
        with self._lock:
            self._call("set_servo_cartesian")
            code = self._ready_code()
            if code == 0 and self.mode == 1:
                self._pose_target, self._q_target = np.asarray(mvpose[:6], dtype=np.float64), None
                self.state = 1
            return code

    def set_gripper_enable(self, enable: bool, **kwargs: Any) -> int:
        """Enable the gripper."""
        with self._lock:
            self._call("set_gripper_enable")
            self.gripper_enabled = bool(enable)
            return 0 if self.connected else NOT_CONNECTED

    def set_gripper_mode(self, mode: int, **kwargs: Any) -> int:
        """Gripper mode 0 = position."""
        with self._lock:
            self._call("set_gripper_mode")
            return 0 if self.connected else NOT_CONNECTED

    def set_gripper_position(self, pos: float, wait: bool = False, speed: float | None = None,
                             auto_enable: bool = False, timeout: float | None = None, **kwargs: Any) -> int:
        """Gripper target in pulses (clipped to -10..850)."""
        with self._lock:
            self._call("set_gripper_position")
            if not self.connected:
                return NOT_CONNECTED
            if not self.gripper_enabled:
                return STATE_NOT_READY
            self._grip_target = float(np.clip(pos, -10.0, 850.0))
            return 0
