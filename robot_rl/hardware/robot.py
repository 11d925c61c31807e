"""The Robot contract: what every real (or simulated) arm implements.

A robot declares its features before connecting (:attr:`Robot.features`, a :class:`~robot_rl.core.specs.EnvSpec`
without a batch dimension), is used as a context manager (``with robot: ...`` connects and always
disconnects), reports its measured state, and :meth:`Robot.send_action` returns the action actually
applied. Never drive a robot directly: wrap it in :class:`~robot_rl.hardware.safety.SafetyLayer`.

Actions (float32, every entry in ``[-1, 1]``), by control mode:

- ``ee_delta``: ``[dx, dy, dz, droll, dpitch, dyaw, gripper]``. The first six are a pose change per
  control step, scaled by ``max_step_m`` / ``max_step_rad`` of the robot config; ``gripper`` is the
  target opening (-1 closed, +1 open).
- ``joint``: ``[q_1 … q_n, gripper]``: absolute joint targets normalised to the joint limits
  (-1 = lower limit, +1 = upper limit), then the gripper as above.
- ``joint_delta``: ``[dq_1 … dq_n, gripper]``: a joint change per control step from the *measured* joints,
  scaled by ``max_step_joint_rad`` (0 = stay), then the gripper as above.

The observation dict holds ``state`` = ``[q_1 … q_n, x, y, z, roll, pitch, yaw, gripper]`` (radians,
metres, gripper opening 0..1) and one ``image.<camera>`` per camera.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.core.registry import Registry
from robot_rl.core.specs import ArraySpec, EnvSpec

ControlMode = Literal["ee_delta", "joint", "joint_delta"]
CONTROL_MODES: tuple[str, ...] = ("ee_delta", "joint", "joint_delta")
JOINT_MODES: tuple[str, ...] = ("joint", "joint_delta")
"""Modes whose physical target is a joint vector (``ee_delta``'s is a pose)."""


class RobotError(RuntimeError):
    """The robot (or its SDK) reported a fault; the message says which and how to clear it."""


class NotConnectedError(RobotError):
    """A call that needs a connection was made before :meth:`Robot.connect` or after disconnecting."""


@dataclass
class RobotState:
    """One measurement of the arm.

    ``joints`` in radians ``[n]``; ``ee_pose`` = ``[x, y, z, roll, pitch, yaw]`` in metres and radians;
    ``gripper`` opening in ``[0, 1]``; ``timestamp`` from :func:`time.monotonic` when it was read.
    """

    joints: np.ndarray
    ee_pose: np.ndarray
    gripper: float
    timestamp: float

    def as_vector(self) -> np.ndarray:
        """The ``state`` observation: joints, pose, gripper (float32)."""
        return np.concatenate([self.joints, self.ee_pose, [self.gripper]]).astype(np.float32)


@dataclass
class RobotConfig:
    """Settings every arm shares (drivers subclass this)."""

    control_mode: str = "ee_delta"
    """``ee_delta`` (end-effector pose change per step), ``joint`` (absolute joint targets) or ``joint_delta``
    (joint change per step from the measured joints)."""
    max_step_m: float = 0.01
    """ee_delta: translation per step at action 1.0, metres."""
    max_step_rad: float = 0.05
    """ee_delta: rotation per step at action 1.0, radians."""
    max_step_joint_rad: float = 0.05
    """joint_delta: change of each joint per step at action 1.0, radians (0.05 at 20 Hz is 1 rad/s, the safety
    layer's default joint speed limit)."""
    joint_low: list[float] = field(default_factory=lambda: [-math.pi] * 6)
    """Lower joint limits, radians (its length is the number of joints)."""
    joint_high: list[float] = field(default_factory=lambda: [math.pi] * 6)
    """Upper joint limits, radians."""
    cameras: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Camera name → (height, width) of its images in the observation."""

    registry: ClassVar[Registry[type[RobotConfig]]]

    def make(self) -> Robot:
        """Build the (unconnected) robot; drivers import their SDK lazily in ``connect``."""
        raise NotImplementedError(f"{type(self).__name__} has no driver")

    def __post_init__(self) -> None:
        if self.control_mode not in CONTROL_MODES:
            raise ValueError(f"control_mode {self.control_mode!r}; valid: {', '.join(CONTROL_MODES)}")
        if len(self.joint_low) != len(self.joint_high) or not self.joint_low:
            raise ValueError("joint_low and joint_high must be non-empty and of equal length")
        inverted = [i for i, (lo, hi) in enumerate(zip(self.joint_low, self.joint_high)) if not lo < hi]
        if inverted:
            i = inverted[0]
            raise ValueError(f"joint {i}: joint_low {self.joint_low[i]:g} is not below joint_high "
                             f"{self.joint_high[i]:g}; every joint_low must be below its joint_high (swapped?)")
        if not (self.max_step_m > 0 and self.max_step_rad > 0 and self.max_step_joint_rad > 0):
            raise ValueError("max_step_m, max_step_rad and max_step_joint_rad must be positive")

    @property
    def num_joints(self) -> int:
        """Number of arm joints (the gripper excluded)."""
        return len(self.joint_low)

    def exclusive_resources(self) -> list[str]:
        """What this robot holds alone: its serial port, controller or simulator address, its cameras.

        E.g. ``port /dev/ttyACM0``, ``camera 0``: two robots of one fleet may not share any (robot_rl.human_loop.fleet).
        """
        held = [f"{name} {getattr(self, name)}" for name in ("port", "ip", "address")
                if getattr(self, name, None) not in (None, "")]
        cameras = (self.options if isinstance(self, PassesLeRobotOptions) else {}).get("cameras") or {}
        for cam in cameras.values() if isinstance(cameras, dict) else ():
            source = cam.get("index_or_path", cam.get("serial_number_or_name")) if isinstance(cam, dict) else None
            if source is not None:
                held.append(f"camera {source}")
        return held

    @property
    def action_dim(self) -> int:
        """Length of the action vector in this control mode."""
        return 7 if self.control_mode == "ee_delta" else self.num_joints + 1


@runtime_checkable
class EmergencyStoppable(Protocol):
    """A robot whose stop can be commanded from another process (the e-stop guard, robot_rl/hardware/estop.py)."""

    def emergency_stop_command(self) -> Any:
        """A picklable callable that stops the robot over its own connection (call after ``connect``)."""
        ...


@runtime_checkable
class TaskRobot(Protocol):
    """A robot that knows its task (simulators; cells with a success sensor): episodes can reset it."""

    def reset_task(self, seed: int | None = None) -> None:
        """Start a new episode (the simulator places the object and the arm anew)."""
        ...

    def task_status(self) -> Any:
        """An object with ``success`` (bool) and ``reward`` (float) for the current state."""
        ...


@runtime_checkable
class SceneResetsConfig(Protocol):
    """A simulated cell's config that says how its scene is put back between episodes (``teleport``, ``physical``)."""

    resets: str


@runtime_checkable
class HumanResettable(Protocol):
    """A simulated cell that stands in for a person putting the scene back by hand (``resets=physical`` practice).

    On a real cell the person resets it and presses a key; a simulator teleports the arm and the object and counts
    it, so a benchmark can count the person's resets.
    """

    def human_reset(self, seed: int | None = None) -> None:
        """A person puts the arm and the object back (counted)."""
        ...


@runtime_checkable
class ArmModelRobot(Protocol):
    """A robot whose kinematics are one of robot_rl's arm models (robot_rl/hardware/kinematics: LeRobot arms).

    The safety layer sizes its default workspace box from that arm's preset (``SafetyConfig.workspace_preset``).
    """

    @property
    def arm_model_name(self) -> str | None:
        """The arm model's registry name (``so100``, ``so101``, ``koch``), or None when none is in use."""
        ...


@runtime_checkable
class PassesLeRobotOptions(Protocol):
    """A robot config that hands lerobot its own options (``cameras`` among them) and names lerobot's robot type."""

    robot_type: str
    options: dict[str, Any]


def lerobot_robot_type(cfg: object, default: str) -> str:
    """The lerobot robot type a config drives (dataset metadata), else ``default``."""
    return cfg.robot_type if isinstance(cfg, PassesLeRobotOptions) else default


@runtime_checkable
class PoseAware(Protocol):
    """A robot that may have no end-effector pose (no arm model, no kinematics function).

    A robot without this capability always measures a real ``ee_pose``: see :func:`measures_pose`.
    """

    @property
    def has_pose(self) -> bool:
        """Whether the measured state carries a real end-effector pose."""
        ...


def measures_pose(robot: object) -> bool:
    """Whether ``robot``'s measured ``ee_pose`` is real (true unless it is :class:`PoseAware` and says not)."""
    return robot.has_pose if isinstance(robot, PoseAware) else True


@runtime_checkable
class NamedJoints(Protocol):
    """A robot config that names its joints, in the order of ``RobotState.joints``."""

    @property
    def joint_names(self) -> Sequence[str]:
        """One name per joint."""
        ...


def joint_labels(cfg: RobotConfig) -> list[str]:
    """The joints' names where the config gives them, else ``joint 0``, ``joint 1``, ..."""
    if isinstance(cfg, NamedJoints) and cfg.joint_names:
        return list(cfg.joint_names)
    return [f"joint {i}" for i in range(cfg.num_joints)]


def arm_model_of(robot: object) -> str | None:
    """The arm model's registry name of an :class:`ArmModelRobot`, else None."""
    return robot.arm_model_name if isinstance(robot, ArmModelRobot) else None


ROBOTS: Registry[type[RobotConfig]] = Registry("robot", "robot_rl.robots")
RobotConfig.registry = ROBOTS


def robot_features(cfg: RobotConfig) -> EnvSpec:
    """The observation/action spec a robot with ``cfg`` declares before connecting."""
    obs = {"state": ArraySpec((cfg.num_joints + 7,), "float32")}
    for name, (h, w) in cfg.cameras.items():
        obs[f"image.{name}"] = ArraySpec((h, w, 3), "uint8", 0, 255)
    return EnvSpec(observation=obs, action=ArraySpec((cfg.action_dim,), "float32", -1.0, 1.0),
                   extras={"control_mode": cfg.control_mode})


def action_to_target(cfg: RobotConfig, action: np.ndarray, measured: RobotState) -> tuple[np.ndarray, float]:
    """Map a normalised action to a physical target: ``(pose [6] or joints [n], gripper opening 0..1)``.

    The target is not limited here (a joint_delta step may point past a joint limit): the safety layer does that.
    """
    grip = float((action[-1] + 1.0) / 2.0)
    if cfg.control_mode == "ee_delta":
        delta = np.concatenate([action[:3] * cfg.max_step_m, action[3:6] * cfg.max_step_rad])
        return measured.ee_pose + delta, grip
    if cfg.control_mode == "joint_delta":
        return measured.joints + action[:-1] * cfg.max_step_joint_rad, grip
    lo, hi = np.asarray(cfg.joint_low), np.asarray(cfg.joint_high)
    return lo + (action[:-1] + 1.0) / 2.0 * (hi - lo), grip


def joints_to_action(cfg: RobotConfig, joints: np.ndarray) -> np.ndarray:
    """Inverse of the joint-mode normalisation (used to express 'stay where you are')."""
    lo, hi = np.asarray(cfg.joint_low), np.asarray(cfg.joint_high)
    return (2.0 * (joints - lo) / (hi - lo) - 1.0).astype(np.float32)


def joint_target_to_action(cfg: RobotConfig, joints: np.ndarray, measured: RobotState) -> np.ndarray:
    """The arm part ``[n]`` of the action that commands the joint target ``joints`` (joint or joint_delta mode)."""
    if cfg.control_mode == "joint_delta":
        return ((joints - measured.joints) / cfg.max_step_joint_rad).astype(np.float32)
    return joints_to_action(cfg, joints)


def hold_action(cfg: RobotConfig, measured: RobotState) -> np.ndarray:
    """The action that keeps the arm where it is measured (and the gripper as it is)."""
    grip = 2.0 * measured.gripper - 1.0
    if cfg.control_mode == "ee_delta":
        return np.array([0, 0, 0, 0, 0, 0, grip], dtype=np.float32)
    if cfg.control_mode == "joint_delta":
        return np.append(np.zeros(cfg.num_joints), grip).astype(np.float32)
    return np.append(joints_to_action(cfg, measured.joints), grip).astype(np.float32)


class Robot(abc.ABC):
    """An arm with a gripper. Subclasses implement the ``_``-prefixed hardware calls.

    Thread safety: :meth:`hold` may be called from the watchdog or e-stop thread while the control loop
    calls :meth:`send_action`; drivers serialise SDK calls with their own lock.
    """

    config: RobotConfig

    @property
    def features(self) -> EnvSpec:
        """Declared observation and action spec (valid before :meth:`connect`)."""
        return robot_features(self.config)

    @property
    def control_mode(self) -> str:
        """``ee_delta``, ``joint`` or ``joint_delta``."""
        return self.config.control_mode

    @property
    @abc.abstractmethod
    def is_connected(self) -> bool:
        """Whether :meth:`connect` succeeded and :meth:`disconnect` has not been called."""

    @abc.abstractmethod
    def connect(self) -> None:
        """Open the connection, clear recoverable faults and enable motion (the arm does not move)."""

    @abc.abstractmethod
    def disconnect(self) -> None:
        """Hold, then close the connection. Safe to call twice."""

    @abc.abstractmethod
    def measure(self) -> RobotState:
        """Read the arm's measured state now."""

    @abc.abstractmethod
    def _command(self, target: np.ndarray, gripper: float) -> None:
        """Send a physical target (pose [6] in ee_delta, joints [n] in joint and joint_delta) and gripper opening."""

    @abc.abstractmethod
    def hold(self) -> None:
        """Stop moving now, staying where the arm is (callable from any thread)."""

    def forward_kinematics(self, joints: np.ndarray) -> np.ndarray | None:
        """End-effector pose ``[6]`` for ``joints``, or ``None`` when the robot cannot compute it."""
        return None

    cameras: dict[str, Any] = {}  # noqa: RUF012 - replaced per instance by attach_cameras

    def attach_cameras(self, cameras: dict[str, Any]) -> None:
        """Use these connected cameras (name → :class:`~robot_rl.hardware.camera.OpenCVCamera`) in observe().

        Their names and sizes must match ``config.cameras``.
        """
        declared = {n: tuple(hw) for n, hw in self.config.cameras.items()}
        given = {n: (c.config.height, c.config.width) for n, c in cameras.items()}
        if declared != given:
            raise ConfigError(f"cameras {given} do not match the declared config.cameras {declared}")
        self.cameras = dict(cameras)

    def stale_sensors(self) -> list[str]:
        """Names of sensors (cameras) that stopped delivering; the safety layer holds while non-empty."""
        return [f"camera {n}" for n, cam in self.cameras.items() if cam.stale]

    def camera_images(self) -> dict[str, np.ndarray]:
        """Newest image of each camera, keyed ``image.<name>`` (raises CameraStaleError when stale)."""
        return {f"image.{n}": cam.read().image for n, cam in self.cameras.items()}

    def observe(self) -> dict[str, np.ndarray]:
        """Observation dict matching :attr:`features` (no batch dimension)."""
        if not self.is_connected:
            raise NotConnectedError(f"{type(self).__name__}.observe() before connect()")
        return {"state": self.measure().as_vector(), **self.camera_images()}

    def send_action(self, action: np.ndarray, measured: RobotState | None = None) -> np.ndarray:
        """Apply a normalised action and return it as applied (clipped to ``[-1, 1]``).

        Unsafe on its own: NaN passes ``np.clip``. :class:`~robot_rl.hardware.safety.SafetyLayer` checks
        the action first; this method rejects non-finite input as a last line of defence. ``measured``
        saves a second read when the caller has just measured the arm.
        """
        if not self.is_connected:
            raise NotConnectedError(f"{type(self).__name__}.send_action() before connect()")
        action = np.asarray(action, dtype=np.float32).reshape(-1)
        if action.shape != (self.config.action_dim,):
            raise ValueError(f"action shape {action.shape}, expected ({self.config.action_dim},)")
        if not np.isfinite(action).all():
            raise ValueError("non-finite action reached the robot; route actions through SafetyLayer")
        applied = np.clip(action, -1.0, 1.0)
        target, grip = action_to_target(self.config, applied, measured if measured is not None else self.measure())
        self._command(target, grip)
        return applied

    def __enter__(self) -> Robot:
        self.connect()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.disconnect()
