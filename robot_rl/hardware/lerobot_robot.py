"""LeRobot robots (SO-100/SO-101, Koch, OMX, …) behind the Robot contract, through lerobot's own classes.

:class:`LeRobotRobot` wraps an instance of ``lerobot.robots.Robot`` (made from ``robot_type`` with
lerobot's ``make_robot_from_config``, or passed in). lerobot's features are flat dicts: one
``<motor>.pos`` float per motor and one ``(H, W, 3)`` image per camera; this module maps them to ours:

- joints: the ``joint_names`` motors, radians here. On the bus: degrees when ``degrees`` (lerobot's
  ``use_degrees``, which this sets for the SO and Koch followers); otherwise lerobot's -100..100 range, converted
  through lerobot's calibration when an ``arm`` model is in use (robot_rl/hardware/lerobot_arm.py has the
  formulas) and passed through unchanged without one (then set ``joint_low/high`` in those units);
- gripper: the ``gripper_name`` motor, ``gripper_range`` on the bus (lerobot: 0..100), opening 0..1 here;
- ``state`` = ``[q_1 … q_n, x, y, z, roll, pitch, yaw, gripper]``, the pose by forward kinematics of the arm
  model (``arm``: ``so100``, ``so101``, ``koch``, inferred from ``robot_type``) or of a given ``kinematics``
  function; ``[q_1 … q_n, gripper]`` without either;
- ``image.<cam>``: lerobot's camera images, named as in ``config.cameras``.

Control modes (lerobot's followers take joint position goals):

- ``joint``: ``[q_1 … q_n, gripper]`` normalised to the joint limits;
- ``joint_delta``: ``[dq_1 … dq_n, gripper]``, each joint moved by ``action * max_step_joint_rad`` from the
  measured joints;
- ``ee_delta``: ``[dx, dy, dz, droll, dpitch, dyaw, gripper]``, a tool step (``max_step_m``, ``max_step_rad``)
  turned into joint goals by the arm model's IK (mink), within the joint limits. Needs ``arm``.

:meth:`LeRobotRobot.send_action` returns what lerobot says it applied (its own ``max_relative_target`` clipping
included), converted back into the mode's action. :meth:`LeRobotRobot.hold` sends the measured position as the
goal (position control then holds). With an arm model the safety layer checks its Cartesian box on the
measured pose, and sizes that box from the arm's preset unless ``safety.workspace_*`` say otherwise.

Before lerobot's ``connect`` (nothing is sent to the arm until then), an arm model's robot must have a usable
lerobot calibration file: a missing one or an inverted range is refused with the ``lerobot-calibrate`` command
that fixes it. lerobot is imported only in :meth:`LeRobotRobot.connect` or :func:`make_lerobot_device`
(``bash scripts/install-lerobot.sh VENV``). Tests drive it against :mod:`robot_rl.testing.fake_lerobot` and against
lerobot's own SO-101/Koch classes on :mod:`robot_rl.testing.fake_motor_bus`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.hardware.kinematics.config import arm_model
from robot_rl.hardware.lerobot_arm import (
    INSTALL_HINT,
    LEROBOT_ARMS,
    ArmSteps,
    JointMap,
    calibrate_command,
    check_calibration,
    check_units,
    degrees_per_unit,
    infer_arm,
    lerobot_module,
    wrap_angle,
)
from robot_rl.hardware.robot import (
    JOINT_MODES,
    ROBOTS,
    NotConnectedError,
    Robot,
    RobotConfig,
    RobotError,
    RobotState,
)

log = logging.getLogger(__name__)

__all__ = ["INSTALL_HINT", "JointMap", "LeRobotRobot", "LeRobotRobotConfig", "lerobot_module", "make_lerobot_device"]
SO_JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"]


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
        raise ConfigError(f"unknown lerobot {kind} type {device_type!r}; known: {known}") from None
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
        raise ConfigError(f"lerobot {device_type} config: {e}") from e
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
        raise ConfigError(f"lerobot could not build a {device_type} {kind}: {e}") from e


@ROBOTS.register("lerobot")
@dataclass
class LeRobotRobotConfig(RobotConfig):
    """A robot driven by lerobot's own class (SO-100/SO-101 follower by default)."""

    control_mode: str = "joint"
    """``joint`` (absolute joint goals), ``joint_delta`` (a change per step from the measured joints,
    ``max_step_joint_rad``) or ``ee_delta`` (a tool step through the arm model's IK; needs ``arm``)."""
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
    ``disable_torque_on_disconnect: false``, or ``cameras: {front: {type: opencv, index_or_path: 0, width: 640,
    height: 480, fps: 30}}`` (name them in ``cameras`` too, with their size). ``use_degrees`` is ``degrees``."""
    arm: str | None = "auto"
    """Kinematic model of the arm: ``so100``, ``so101`` or ``koch`` (robot_rl.hardware.kinematics). It gives the
    measured tool pose in ``state``, the safety layer's Cartesian box (and its default size) and ``ee_delta``.
    ``auto``: the model lerobot's ``robot_type`` is built like (so100/so101/koch_follower; none for other types);
    null: none (the joint modes only, no Cartesian box)."""
    joint_names: list[str] = field(default_factory=lambda: list(SO_JOINTS))
    """Motors that are arm joints, in order (SO-100/101 and Koch use these names)."""
    gripper_name: str | None = "gripper"
    """The gripper motor (None: no gripper)."""
    degrees: bool = True
    """lerobot reports the joints in degrees (sets its ``use_degrees`` for the SO and Koch followers; they become
    radians here). False: its -100..100 range, turned into radians through its calibration when ``arm`` is set,
    passed through unchanged otherwise."""
    gripper_range: tuple[float, float] = (0.0, 100.0)
    """Gripper motor values for closed and open (lerobot's RANGE_0_100)."""
    joint_low: list[float] = field(default_factory=lambda: [-math.radians(110)] * 5)
    """Lower joint limits, radians (set them inside your calibrated range)."""
    joint_high: list[float] = field(default_factory=lambda: [math.radians(110)] * 5)
    """Upper joint limits, radians."""
    max_ik_joint_step_rad: float = 0.1
    """ee_delta: the most any joint may move for one step. Near a singular pose a small tool step can ask for a
    large joint swing; it is scaled down to this (direction kept) instead of sent."""

    def __post_init__(self) -> None:
        for i, (lo, hi) in enumerate(zip(self.joint_low, self.joint_high)):
            if not lo < hi and i < len(self.joint_names):
                raise ValueError(f"joint {self.joint_names[i]!r}: joint_low {lo:g} is not below joint_high {hi:g}; "
                                 "swap them, or set them inside the calibrated range")
        super().__post_init__()
        if len(self.joint_names) != self.num_joints:
            raise ValueError(f"{len(self.joint_names)} joint_names but {self.num_joints} joint limits")
        if self.gripper_range[0] == self.gripper_range[1]:
            raise ValueError("gripper_range needs two different values")
        if not self.max_ik_joint_step_rad > 0:
            raise ValueError("max_ik_joint_step_rad must be positive")
        use_degrees = self.options.get("use_degrees")
        if use_degrees is not None and self.robot_type in LEROBOT_ARMS and bool(use_degrees) != self.degrees:
            raise ValueError(f"options.use_degrees={use_degrees} contradicts degrees={self.degrees}: set "
                             "robot.degrees only (it sets lerobot's use_degrees)")
        self._check_arm(self.arm_name)

    def _check_arm(self, arm: str | None) -> None:
        if arm is None:
            if self.control_mode == "ee_delta":
                raise ConfigError(f"control_mode=ee_delta needs an arm model for its IK, and {self.robot_type} has "
                                  "none: set arm=so100, so101 or koch (or use joint / joint_delta)")
            return
        model = arm_model(arm)
        if tuple(self.joint_names) != tuple(model.joint_names):
            lacks = [n for n in self.joint_names if n not in model.joint_names]
            what = f"names {lacks}, which it lacks" if lacks else "orders them differently"
            raise ConfigError(f"arm {arm}'s kinematic model has the joints {list(model.joint_names)}; joint_names "
                              f"{self.joint_names} {what}. Use lerobot's motor names in that order, or arm=null")
        # The longest step: all three axes at 1.0 (√3 times the per-axis step); a turn made of three rpy
        # increments is at most their sum.
        if self.control_mode == "ee_delta" and (self.max_step_m * math.sqrt(3.0) > model.max_delta_m
                                                or self.max_step_rad * 3.0 > model.max_delta_rad):
            raise ConfigError(f"ee_delta steps up to max_step_m*√3 = {self.max_step_m * math.sqrt(3.0):g} m and "
                              f"turns up to max_step_rad*3 = {self.max_step_rad * 3.0:g} rad, beyond the IK's "
                              f"{model.max_delta_m:g} m / {model.max_delta_rad:g} rad: lower them")

    @property
    def arm_name(self) -> str | None:
        """The arm model in use (``arm``, with ``auto`` resolved from ``robot_type``), or None."""
        return infer_arm(self.robot_type, self.arm)

    @property
    def joint_map(self) -> JointMap:
        """The motor ↔ vector conversion (before lerobot's calibration is known)."""
        lo, hi = self.gripper_range
        return JointMap(list(self.joint_names), self.gripper_name, self.degrees, (float(lo), float(hi)))

    def lerobot_fields(self) -> dict[str, Any]:
        """The lerobot config fields (port, id, calibration_dir, options; use_degrees for the SO/Koch types)."""
        units = {"use_degrees": self.degrees} if self.robot_type in LEROBOT_ARMS else {}
        return {"port": self.port, "id": self.id, "calibration_dir": self.calibration_dir, **units, **self.options}

    def make(self) -> LeRobotRobot:
        """An unconnected :class:`LeRobotRobot` (lerobot's robot object is built at connect)."""
        return LeRobotRobot(self)


class LeRobotRobot(Robot):
    """The Robot contract over a ``lerobot.robots.Robot``.

    ``robot``: an already built lerobot robot (tests pass a fake, or lerobot's own class on a fake bus); default:
    built from the config at connect. ``kinematics``: joints (radians) → end-effector pose ``[6]`` (metres,
    radians), used for the pose instead of the arm model's FK (not with ``ee_delta``, whose IK is the model's).
    """

    config: LeRobotRobotConfig

    def __init__(self, config: LeRobotRobotConfig, robot: Any = None,
                 kinematics: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        if kinematics is not None and config.control_mode == "ee_delta":
            raise ValueError("ee_delta's IK runs on the arm model: its FK must give the pose (leave kinematics out)")
        self.config = config
        self.map = config.joint_map
        name = config.arm_name
        try:
            self.arm = ArmSteps(name, config.max_ik_joint_step_rad) if name else None
        except ImportError as e:
            raise ImportError(f"{e}; or set robot.arm=null to drive the {config.robot_type} without its arm model "
                              "(joint modes only, no Cartesian box)") from e
        self.kinematics = kinematics
        self._robot = robot
        self._lock = threading.RLock()
        self._last_obs: dict[str, Any] | None = None
        self._read: tuple[RobotState, dict[str, Any]] | None = None
        self._measured: RobotState | None = None
        self._applied: np.ndarray | None = None
        if robot is not None:
            self._check_features(robot)

    @property
    def arm_model_name(self) -> str | None:
        """The arm model (``so100``, ``so101``, ``koch``) whose box the safety layer uses by default."""
        return None if self.arm is None else self.config.arm_name

    @property
    def lerobot(self) -> Any:
        """The lerobot robot object (built on first use)."""
        if self._robot is None:
            self._robot = make_lerobot_device("robot", self.config.robot_type, self.config.lerobot_fields())
            self._check_features(self._robot)
        return self._robot

    def _check_features(self, robot: Any) -> None:
        cfg = self.config
        self.map.check(robot.action_features, f"lerobot robot {cfg.robot_type}")
        check_units(robot, cfg.joint_names, cfg.degrees, cfg.robot_type)
        obs_ft = robot.observation_features
        for name, (h, w) in cfg.cameras.items():
            shape = obs_ft.get(name)
            if shape is not None and tuple(shape) != (h, w, 3):
                raise ConfigError(f"camera {name}: lerobot delivers {tuple(shape)}, config.cameras says {(h, w, 3)}")

    @property
    def _has_pose(self) -> bool:
        return self.kinematics is not None or self.arm is not None

    @property
    def has_pose(self) -> bool:
        """Whether the measured state carries a real end-effector pose (an arm model or a kinematics function)."""
        return self._has_pose

    def set_compliant(self, on: bool) -> None:
        """Motors off (``True``: the arm is moved by hand, `robot-rl robot find-limits`) or holding again.

        Before the torque comes back the goal is set to where the arm is: the goal register still holds the last
        command, and enabling torque towards it would swing the arm back there.
        """
        bus = getattr(self._robot, "bus", None)
        if bus is None or not self.is_connected:
            raise ConfigError(f"{type(self).__name__} has no motor bus to switch off (a simulated arm cannot be moved "
                              "by hand): move it with a teleop device instead")
        with self._lock:
            if on:
                bus.disable_torque()
                return
            present = bus.sync_read("Present_Position")
            bus.sync_write("Goal_Position", present)
            bus.enable_torque()

    @property
    def features(self) -> EnvSpec:
        """``state`` = joints (+ pose with an arm model or kinematics) + gripper; cameras; the mode's action."""
        n = self.config.num_joints + 1 + (6 if self._has_pose else 0)
        obs = {"state": ArraySpec((n,), "float32")}
        for name, (h, w) in self.config.cameras.items():
            obs[f"image.{name}"] = ArraySpec((h, w, 3), "uint8", 0, 255)
        return EnvSpec(observation=obs, action=ArraySpec((self.config.action_dim,), "float32", -1.0, 1.0),
                       extras={"control_mode": self.config.control_mode, "lerobot_type": self.config.robot_type})

    @property
    def is_connected(self) -> bool:
        """Whether lerobot's robot reports a connection."""
        return self._robot is not None and bool(self._robot.is_connected)

    def connect(self) -> None:
        """Check the calibration, then connect lerobot's robot; the arm does not move."""
        if self.is_connected:
            return
        robot = self.lerobot
        cfg = self.config
        if self.arm is not None:
            motors = [*cfg.joint_names, *([cfg.gripper_name] if cfg.gripper_name else [])]
            check_calibration(robot, motors, calibrate_command(cfg.robot_type, cfg.port, cfg.id, cfg.calibration_dir))
            if not cfg.degrees:
                self.map = dataclasses.replace(self.map, unit_deg=degrees_per_unit(robot, cfg.joint_names))
        try:
            with self._lock:
                robot.connect()
        except (ImportError, ValueError):
            raise
        except Exception as e:  # serial errors, lerobot's DeviceNotConnectedError, timeouts …
            raise RobotError(f"could not connect to the lerobot {cfg.robot_type} on {cfg.port}: "
                             f"{type(e).__name__}: {e}. Check the cable/power and the port "
                             "(`lerobot-find-port`)") from e
        if not self._has_pose:
            log.warning("%s: no arm model or kinematics, the safety layer checks joint limits and speeds but not "
                        "the Cartesian workspace box", cfg.robot_type)

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

    def _pose(self, q: np.ndarray) -> np.ndarray | None:
        if self.kinematics is not None:
            return np.asarray(self.kinematics(q), dtype=np.float64)
        if self.arm is not None:
            with self._lock:  # one ArmKinematics, one MuJoCo buffer
                return self.arm.pose(q)
        return None

    def _state(self, obs: dict[str, Any]) -> RobotState:
        q = self.map.joints(obs)
        pose = self._pose(q)
        state = RobotState(joints=q, ee_pose=np.full(6, np.nan) if pose is None else pose,  # NaN: unknown
                           gripper=self.map.gripper(obs), timestamp=time.monotonic())
        self._read = (state, obs)
        return state

    def measure(self) -> RobotState:
        """Joints (radians), pose (NaN without an arm model or kinematics) and gripper opening, read through lerobot."""
        return self._state(self._observation())

    def observe(self) -> dict[str, np.ndarray]:
        """``state`` and the cameras lerobot delivers (or attached :class:`OpenCVCamera` s)."""
        obs = self._observation()
        s = self._state(obs)
        parts = [s.joints, s.ee_pose] if self._has_pose else [s.joints]
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
        """The tool pose at ``joints`` by the given kinematics or the arm model, or None without either."""
        return self._pose(np.asarray(joints, dtype=np.float64))

    def _joint_goal(self, target: np.ndarray, measured: RobotState) -> np.ndarray:
        if self.config.control_mode in JOINT_MODES:
            return target
        assert self.arm is not None  # the config refuses ee_delta without an arm model
        with self._lock:
            scaled = self.arm.scaled_steps
            goal = self.arm.step(measured.joints, measured.ee_pose, target)
        if self.arm.scaled_steps > scaled and self.arm.scaled_steps in (1, 10, 100, 1000):
            log.warning("%s: an ee_delta step asked a joint to swing more than max_ik_joint_step_rad=%g (a pose near "
                        "a singularity); scaled down (%d times so far)", self.config.robot_type,
                        self.config.max_ik_joint_step_rad, self.arm.scaled_steps)
        # The joint limits as the safety layer applies them: never past one, unless already past it.
        lo, hi = np.asarray(self.config.joint_low), np.asarray(self.config.joint_high)
        return np.clip(goal, np.minimum(lo, measured.joints), np.maximum(hi, measured.joints))

    def _command(self, target: np.ndarray, gripper: float) -> None:
        measured = self._measured if self._measured is not None else self.measure()
        goal = self._joint_goal(target, measured)
        values = self.map.to_lerobot(goal, gripper)
        if self._read is not None and self._read[0] is measured:
            # A joint told to stay gets its reading back unconverted: through radians and back it can land a
            # hair below, and lerobot truncates goals to whole motor ticks, so "stay" would creep a tick a step.
            # The gripper's opening comes back through a float32 action: equal within 1e-6 (a tick is ~1e-3).
            raw = self._read[1]
            for name, g, q in zip(self.config.joint_names, goal, measured.joints):
                if g == q:
                    values[f"{name}.pos"] = float(raw[f"{name}.pos"])
            grip = self.config.gripper_name
            if grip and abs(gripper - measured.gripper) <= 1e-6:
                values[f"{grip}.pos"] = float(raw[f"{grip}.pos"])
        with self._lock:
            try:
                sent = self._robot.send_action(values)
            except Exception as e:
                raise RobotError(f"lerobot {self.config.robot_type}: send_action failed: {e}") from e
        self._applied = self._as_action({**values, **(sent or {})}, measured)

    def _as_action(self, sent: dict[str, Any], measured: RobotState) -> np.ndarray:
        """The action of this mode that commands the goals lerobot reports it sent."""
        cfg, q = self.config, self.map.joints(sent)
        if cfg.control_mode == "joint":
            arm = _normalise(cfg, q)
        elif cfg.control_mode == "joint_delta":
            arm = (q - measured.joints) / cfg.max_step_joint_rad
        else:
            assert self.arm is not None
            with self._lock:
                d = self.arm.pose(q) - measured.ee_pose
            arm = np.concatenate([d[:3] / cfg.max_step_m, wrap_angle(d[3:6]) / cfg.max_step_rad])
        return np.append(np.clip(arm, -1.0, 1.0), 2.0 * self.map.gripper(sent) - 1.0).astype(np.float32)

    def send_action(self, action: np.ndarray, measured: RobotState | None = None) -> np.ndarray:
        """Apply an action of the configured mode; returns what lerobot applied (after its own clipping)."""
        if measured is None and self.is_connected:
            measured = self.measure()
        self._applied, self._measured = None, measured
        try:
            clipped = super().send_action(action, measured)
        finally:
            self._measured = None
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
