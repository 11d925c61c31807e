"""LeRobot robots (SO-100/SO-101, Koch, OMX, …) behind the Robot contract, through lerobot's own classes.

:class:`LeRobotRobot` wraps an instance of ``lerobot.robots.Robot`` (made from ``robot_type`` with
lerobot's ``make_robot_from_config``, or passed in). lerobot's features are flat dicts: one
``<motor>.pos`` float per motor and one ``(H, W, 3)`` image per camera; this module maps them to ours:

- joints: the ``joint_names`` motors, in degrees on the bus when ``degrees`` (lerobot's ``use_degrees``),
  radians here; otherwise lerobot's normalised units pass through unchanged (then set ``joint_low/high``
  in those units);
- gripper: the ``gripper_name`` motor, ``gripper_range`` on the bus (lerobot: 0..100), opening 0..1 here;
- ``state`` = ``[q_1 … q_n, gripper]``, or ``[q_1 … q_n, x, y, z, roll, pitch, yaw, gripper]`` (the usual
  layout) when a ``kinematics`` function is given (lerobot's arms report no end-effector pose);
- ``image.<cam>``: lerobot's camera images, named as in ``config.cameras``.

Control is joint position only (lerobot's followers take joint goals; an end-effector mode would need an
IK model): action ``[q_1 … q_n, gripper]`` normalised to the joint limits. :meth:`LeRobotRobot.send_action`
returns what lerobot says it applied (its own ``max_relative_target`` clipping included), converted back.
:meth:`LeRobotRobot.hold` sends the measured position as the goal (position control then holds).

Without kinematics the safety layer cannot check the Cartesian workspace box: it enforces the joint
limits, speed and change limits only (said at connect). lerobot is imported only in :meth:`connect`
or :meth:`make_lerobot_robot` (lerobot installed as docs/datasets.md says; SO arms also need ``lerobot[feetech]``,
Koch ``lerobot[dynamixel]``). Tests drive it against :mod:`robot_rl.testing.fake_lerobot`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.hardware.robot import ROBOTS, NotConnectedError, Robot, RobotConfig, RobotError, RobotState

log = logging.getLogger(__name__)

INSTALL_HINT = ("LeRobot robots and leader arms need lerobot 0.4.x: pip install 'lerobot[feetech]' (SO-100/SO-101) or "
                "'lerobot[dynamixel]' (Koch), with the torch it accepts; docs/datasets.md#installing-lerobot gives the "
                "tested lines")
SO_JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"]


def lerobot_module(name: str) -> Any:
    """Import ``lerobot.<name>`` or raise ImportError saying which extra brings it."""
    import importlib

    try:
        return importlib.import_module(f"lerobot.{name}")
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from e


def _subclasses(cls: type) -> list[type]:
    out: list[type] = []
    subs: list[type] = cls.__subclasses__()
    for sub in subs:
        out += [sub, *_subclasses(sub)]
    return out


def make_lerobot_device(kind: str, device_type: str, fields: dict[str, Any]) -> Any:
    """Build lerobot's robot (``kind="robot"``) or teleoperator (``"teleoperator"``) of ``device_type``.

    ``fields`` are the lerobot config's fields (``port``, ``id``, ``calibration_dir`` …). Types registered by
    plugins (any imported ``Robot``/``Teleoperator`` subclass whose ``config_class`` has that name) work too.
    """
    pkg = lerobot_module("robots" if kind == "robot" else "teleoperators")
    base_cfg = pkg.RobotConfig if kind == "robot" else pkg.TeleoperatorConfig
    base_dev = pkg.Robot if kind == "robot" else pkg.Teleoperator
    for sub in ("so_follower", "koch_follower", "omx_follower") if kind == "robot" else \
            ("so_leader", "koch_leader", "omx_leader"):
        try:  # importing registers the config types
            lerobot_module(f"{'robots' if kind == 'robot' else 'teleoperators'}.{sub}")
        except ImportError:
            pass
    try:
        cfg_cls = base_cfg.get_choice_class(device_type)
    except KeyError:
        known = ", ".join(sorted(base_cfg.get_known_choices()))
        raise ValueError(f"unknown lerobot {kind} type {device_type!r}; known: {known}") from None
    fields = dict(fields)
    if fields.get("calibration_dir") is not None:
        fields["calibration_dir"] = Path(fields["calibration_dir"])
    if isinstance(fields.get("cameras"), dict):  # from YAML: {"front": {"type": "opencv", "index_or_path": 0, …}}
        cams = lerobot_module("cameras")
        fields["cameras"] = {name: cams.CameraConfig.get_choice_class(c.get("type", "opencv"))(
            **{k: v for k, v in c.items() if k != "type"}) if isinstance(c, dict) else c
            for name, c in fields["cameras"].items()}
    try:
        cfg = cfg_cls(**fields)
    except TypeError as e:
        raise ValueError(f"lerobot {device_type} config: {e}") from e
    utils = lerobot_module(f"{'robots' if kind == 'robot' else 'teleoperators'}.utils")
    make = utils.make_robot_from_config if kind == "robot" else utils.make_teleoperator_from_config
    try:
        return make(cfg)  # lerobot's own factory first: it picks the class that names the calibration files
    except ModuleNotFoundError as e:
        raise ImportError(f"lerobot {device_type} needs the module {e.name!r}: {INSTALL_HINT}") from e
    except (ValueError, ImportError) as e:
        for cls in _subclasses(base_dev):  # a plugin's class (or our fake) that lerobot's factory cannot locate
            if getattr(cls, "config_class", None) is cfg_cls and not getattr(cls, "__abstractmethods__", None):
                return cls(cfg)
        raise ValueError(f"lerobot could not build a {device_type} {kind}: {e}") from e


@dataclass
class JointMap:
    """Conversion between lerobot's ``<motor>.pos`` dicts and joint vectors (radians) + gripper opening."""

    joint_names: list[str]
    gripper_name: str | None
    degrees: bool = True
    gripper_range: tuple[float, float] = (0.0, 100.0)

    def check(self, features: dict[str, Any], what: str) -> None:
        """Raise ValueError unless every mapped motor is a float feature of ``features``."""
        names = [*self.joint_names, *([self.gripper_name] if self.gripper_name else [])]
        missing = [n for n in names if f"{n}.pos" not in features]
        if missing:
            have = sorted(k for k in features if k.endswith(".pos"))
            raise ValueError(f"{what} has no motor(s) {missing}; its motors: {have} (set joint_names/gripper_name)")

    def joints(self, values: dict[str, Any]) -> np.ndarray:
        """Joint vector (radians when ``degrees``) from a lerobot dict."""
        q = np.array([float(values[f"{n}.pos"]) for n in self.joint_names], dtype=np.float64)
        return np.radians(q) if self.degrees else q

    def gripper(self, values: dict[str, Any]) -> float:
        """Gripper opening 0..1 (1.0 when there is no gripper)."""
        if not self.gripper_name:
            return 1.0
        lo, hi = self.gripper_range
        return float(np.clip((float(values[f"{self.gripper_name}.pos"]) - lo) / (hi - lo), 0.0, 1.0))

    def to_lerobot(self, joints: np.ndarray, gripper: float) -> dict[str, float]:
        """A lerobot action dict for ``joints`` (radians) and an opening 0..1."""
        q = np.degrees(joints) if self.degrees else np.asarray(joints)
        out = {f"{n}.pos": float(v) for n, v in zip(self.joint_names, q)}
        if self.gripper_name:
            lo, hi = self.gripper_range
            out[f"{self.gripper_name}.pos"] = float(lo + float(np.clip(gripper, 0.0, 1.0)) * (hi - lo))
        return out


@ROBOTS.register("lerobot")
@dataclass
class LeRobotRobotConfig(RobotConfig):
    """A robot driven by lerobot's own class (SO-100/SO-101 follower by default)."""

    control_mode: str = "joint"
    """Only ``joint``: lerobot's followers take joint position goals."""
    robot_type: str = "so101_follower"
    """lerobot's robot type (``so100_follower``, ``so101_follower``, ``koch_follower``, ``omx_follower`` …)."""
    port: str = "/dev/ttyACM0"
    """Serial port of the motor bus (`lerobot-find-port` tells which)."""
    id: str = "follower"
    """lerobot's robot id: names its calibration file."""
    calibration_dir: str | None = None
    """Where lerobot keeps calibration files (default: its cache directory)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Further fields of lerobot's robot config, e.g. ``max_relative_target: 10``,
    ``disable_torque_on_disconnect: false``, ``use_degrees: true``, or ``cameras: {front: {type: opencv,
    index_or_path: 0, width: 640, height: 480, fps: 30}}`` (name them in ``cameras`` too, with their size)."""
    joint_names: list[str] = field(default_factory=lambda: list(SO_JOINTS))
    """Motors that are arm joints, in order (SO-100/101 and Koch use these names)."""
    gripper_name: str | None = "gripper"
    """The gripper motor (None: no gripper)."""
    degrees: bool = True
    """The bus reports joints in degrees (lerobot ``use_degrees``); they are converted to radians."""
    gripper_range: tuple[float, float] = (0.0, 100.0)
    """Gripper motor values for closed and open (lerobot's RANGE_0_100)."""
    joint_low: list[float] = field(default_factory=lambda: [-math.radians(110)] * 5)
    """Lower joint limits, radians (set them inside your calibrated range)."""
    joint_high: list[float] = field(default_factory=lambda: [math.radians(110)] * 5)
    """Upper joint limits, radians."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.control_mode != "joint":
            raise ValueError("LeRobot robots support control_mode=joint only (no end-effector IK here)")
        if len(self.joint_names) != self.num_joints:
            raise ValueError(f"{len(self.joint_names)} joint_names but {self.num_joints} joint limits")
        if self.gripper_range[0] == self.gripper_range[1]:
            raise ValueError("gripper_range needs two different values")

    @property
    def joint_map(self) -> JointMap:
        """The motor ↔ vector conversion."""
        lo, hi = self.gripper_range
        return JointMap(list(self.joint_names), self.gripper_name, self.degrees, (float(lo), float(hi)))

    def lerobot_fields(self) -> dict[str, Any]:
        """The lerobot config fields (port, id, calibration_dir, options)."""
        return {"port": self.port, "id": self.id, "calibration_dir": self.calibration_dir, **self.options}

    def make(self) -> LeRobotRobot:
        """An unconnected :class:`LeRobotRobot` (lerobot's robot object is built at connect)."""
        return LeRobotRobot(self)


class LeRobotRobot(Robot):
    """The Robot contract over a ``lerobot.robots.Robot``.

    ``robot``: an already built lerobot robot (tests pass a fake); default: built from the config at
    connect. ``kinematics``: joints (radians) → end-effector pose ``[6]`` (metres, radians), e.g. from
    lerobot's ``RobotKinematics`` with the arm's URDF; with it ``state`` carries the pose and the safety
    layer checks the Cartesian box.
    """

    config: LeRobotRobotConfig

    def __init__(self, config: LeRobotRobotConfig, robot: Any = None,
                 kinematics: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        self.config = config
        self.map = config.joint_map
        self.kinematics = kinematics
        self._robot = robot
        self._lock = threading.RLock()
        self._last_obs: dict[str, Any] | None = None
        self._applied: np.ndarray | None = None
        if robot is not None:
            self._check_features(robot)

    @property
    def lerobot(self) -> Any:
        """The lerobot robot object (built on first use)."""
        if self._robot is None:
            self._robot = make_lerobot_device("robot", self.config.robot_type, self.config.lerobot_fields())
            self._check_features(self._robot)
        return self._robot

    def _check_features(self, robot: Any) -> None:
        self.map.check(robot.action_features, f"lerobot robot {self.config.robot_type}")
        obs_ft = robot.observation_features
        for name, (h, w) in self.config.cameras.items():
            shape = obs_ft.get(name)
            if shape is not None and tuple(shape) != (h, w, 3):
                raise ValueError(f"camera {name}: lerobot delivers {tuple(shape)}, config.cameras says {(h, w, 3)}")

    @property
    def features(self) -> EnvSpec:
        """``state`` = joints (+ pose with kinematics) + gripper; cameras; the joint-mode action."""
        n = self.config.num_joints + 1 + (6 if self.kinematics is not None else 0)
        obs = {"state": ArraySpec((n,), "float32")}
        for name, (h, w) in self.config.cameras.items():
            obs[f"image.{name}"] = ArraySpec((h, w, 3), "uint8", 0, 255)
        return EnvSpec(observation=obs, action=ArraySpec((self.config.action_dim,), "float32", -1.0, 1.0),
                       extras={"control_mode": "joint", "lerobot_type": self.config.robot_type})

    @property
    def is_connected(self) -> bool:
        """Whether lerobot's robot reports a connection."""
        return self._robot is not None and bool(self._robot.is_connected)

    def connect(self) -> None:
        """Connect lerobot's robot (calibrating it if lerobot asks to); the arm does not move."""
        if self.is_connected:
            return
        robot = self.lerobot
        try:
            with self._lock:
                robot.connect()
        except (ImportError, ValueError):
            raise
        except Exception as e:  # serial errors, lerobot's DeviceNotConnectedError, timeouts …
            raise RobotError(f"could not connect to the lerobot {self.config.robot_type} on {self.config.port}: "
                             f"{type(e).__name__}: {e}. Check the cable/power and the port "
                             "(`lerobot-find-port`)") from e
        if self.kinematics is None:
            log.warning("%s: no kinematics given, the safety layer checks joint limits and speeds but not the "
                        "Cartesian workspace box", self.config.robot_type)

    def disconnect(self) -> None:
        """Hold, then disconnect lerobot's robot (which may disable torque: see ``options``)."""
        if not self.is_connected:
            return
        try:
            self.hold()
        finally:
            with self._lock:
                self._robot.disconnect()

    def _observation(self) -> dict[str, Any]:
        if not self.is_connected:
            raise NotConnectedError(f"lerobot {self.config.robot_type} is not connected")
        with self._lock:
            try:
                obs = self._robot.get_observation()
            except Exception as e:
                raise RobotError(f"lerobot {self.config.robot_type}: reading the robot failed: {e}") from e
            self._last_obs = obs
        return dict(obs)

    def _state(self, obs: dict[str, Any]) -> RobotState:
        q = self.map.joints(obs)
        pose = np.asarray(self.kinematics(q), dtype=np.float64) if self.kinematics is not None \
            else np.full(6, np.nan)  # unknown: NaN never lies inside (or outside) the box
        return RobotState(joints=q, ee_pose=pose, gripper=self.map.gripper(obs), timestamp=time.monotonic())

    def measure(self) -> RobotState:
        """Joints (radians), pose (NaN without kinematics) and gripper opening, read through lerobot."""
        return self._state(self._observation())

    def observe(self) -> dict[str, np.ndarray]:
        """``state`` and the cameras lerobot delivers (or attached :class:`OpenCVCamera` s)."""
        obs = self._observation()
        s = self._state(obs)
        parts = [s.joints, s.ee_pose] if self.kinematics is not None else [s.joints]
        out = {"state": np.concatenate([*parts, [s.gripper]]).astype(np.float32)}
        for name in self.config.cameras:
            if name in obs:
                out[f"image.{name}"] = np.ascontiguousarray(obs[name], dtype=np.uint8)
            elif name in self.cameras:
                out[f"image.{name}"] = self.cameras[name].read().image
            else:
                raise RobotError(f"camera {name} is in config.cameras but neither lerobot's robot nor "
                                 "attach_cameras() provides it")
        return out

    def forward_kinematics(self, joints: np.ndarray) -> np.ndarray | None:
        """The given kinematics, or None."""
        return None if self.kinematics is None else np.asarray(self.kinematics(joints), dtype=np.float64)

    def _command(self, target: np.ndarray, gripper: float) -> None:
        goal = self.map.to_lerobot(target, gripper)
        with self._lock:
            try:
                sent = self._robot.send_action(goal)
            except Exception as e:
                raise RobotError(f"lerobot {self.config.robot_type}: send_action failed: {e}") from e
        sent = {**goal, **(sent or {})}
        self._applied = np.append(_normalise(self.config, self.map.joints(sent)),
                                  2.0 * self.map.gripper(sent) - 1.0).astype(np.float32)

    def send_action(self, action: np.ndarray, measured: RobotState | None = None) -> np.ndarray:
        """Apply a joint-mode action; returns what lerobot applied (after its own clipping), normalised."""
        self._applied = None
        clipped = super().send_action(action, measured)
        return self._applied if self._applied is not None else clipped

    def hold(self) -> None:
        """Send the measured position as the goal (the last one read if the bus does not answer)."""
        if not self.is_connected:
            return
        with self._lock:
            try:
                now = self._robot.get_observation()
            except Exception:
                now = self._last_obs
            if now is None:
                return
            goal = {k: v for k, v in now.items() if k in self._robot.action_features}
            self._robot.send_action(goal)


def _normalise(cfg: RobotConfig, joints: np.ndarray) -> np.ndarray:
    lo, hi = np.asarray(cfg.joint_low), np.asarray(cfg.joint_high)
    return np.clip(2.0 * (joints - lo) / (hi - lo) - 1.0, -1.0, 1.0)
