"""Leader arms (SO-100/SO-101, Koch … leaders) through lerobot's teleoperators, as a teleop device.

A leader arm is *absolute*: its readings carry joint positions (:class:`LeaderArmReading`, radians and a
gripper target in ``[-1, 1]``), for a follower in ``joint`` control mode. Taking over must not make the
follower jump to the leader's pose: :class:`JointBlend` measures the gap between leader and follower when
control starts and fades it out over ``blend_s`` seconds (a smoothstep, so the follower's speed does not
jump either); the safety layer's speed limits still apply on top. The gap is shown in the status line.

The leader has no buttons, so engage and the one-shot events (success, failure, reset, rewind, correct,
e-stop) come from a ``controls`` device, the terminal keyboard by default. ``engage_mode="always"``
(recording demos) lets the leader drive whenever its readings are fresh; ``"controls"`` follows the
controls device's intervene signal (deploying a policy with a human standing by).

A reader thread polls ``get_action()`` at ``poll_hz``; a failing or silent leader stops the thread, so the
device reads as disconnected and an intervention in progress ends safely. lerobot is imported in
:meth:`LeaderArmDevice.connect` only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.hardware.teleop import TELEOP_DEVICES, TeleopConfig, TeleopDevice, TeleopReading

log = logging.getLogger(__name__)


@dataclass
class LeaderArmReading(TeleopReading):
    """A :class:`TeleopReading` plus the leader's joints (radians, ``[n]``); ``delta`` stays zero."""

    joints: np.ndarray = field(default_factory=lambda: np.zeros(0))


class JointBlend:
    """Bumpless takeover: ``target = leader + w(t) · (follower₀ − leader₀)``, ``w`` falling 1 → 0 in ``blend_s``."""

    def __init__(self, blend_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if blend_s < 0:
            raise ValueError("blend_s must be >= 0")
        self.blend_s = blend_s
        self.clock = clock
        self.offset = np.zeros(0)
        self.grip_offset = 0.0
        self._t0 = 0.0

    def start(self, follower: np.ndarray, leader: np.ndarray, follower_grip: float, leader_grip: float) -> None:
        """Control starts now, with the follower at ``follower`` and the leader at ``leader`` (radians)."""
        follower, leader = np.asarray(follower, np.float64), np.asarray(leader, np.float64)
        if follower.shape != leader.shape:
            raise ConfigError(f"leader has {leader.shape[0]} joints, follower {follower.shape[0]}")
        self.offset = follower - leader
        self.grip_offset = float(follower_grip - leader_grip)
        self._t0 = self.clock()
        log.info("leader arm takeover: gap %.1f deg, blended out over %.1f s", self.initial_gap_deg, self.blend_s)

    def weight(self) -> float:
        """Share of the initial gap still applied (1 at the start, 0 once blended)."""
        if self.blend_s == 0:
            return 0.0
        x = min(max((self.clock() - self._t0) / self.blend_s, 0.0), 1.0)
        return 1.0 - x * x * (3.0 - 2.0 * x)

    @property
    def blending(self) -> bool:
        """Whether part of the gap is still applied."""
        return self.weight() > 0.0

    @property
    def initial_gap_deg(self) -> float:
        """Largest joint gap at the start, degrees."""
        return float(np.degrees(np.abs(self.offset).max())) if self.offset.size else 0.0

    def target(self, leader: np.ndarray, leader_grip: float) -> tuple[np.ndarray, float]:
        """Joint target (radians) and gripper target for the leader's present reading."""
        w = self.weight()
        return np.asarray(leader, np.float64) + w * self.offset, leader_grip + w * self.grip_offset

    def gap_text(self) -> str:
        """For the status line: the gap still blended in, of the gap at takeover."""
        return f"leader gap {self.initial_gap_deg * self.weight():.1f}° of {self.initial_gap_deg:.1f}°"


@TELEOP_DEVICES.register("leader_arm")
@dataclass
class LeaderArmConfig(TeleopConfig):
    """A lerobot leader arm (SO-101 leader by default), with the keyboard for engage and events."""

    teleop_type: str = "so101_leader"
    """lerobot's teleoperator type (``so100_leader``, ``so101_leader``, ``koch_leader``, ``omx_leader`` …)."""
    port: str = "/dev/ttyACM1"
    """Serial port of the leader's motor bus."""
    id: str = "leader"
    """lerobot's teleoperator id (names its calibration file)."""
    calibration_dir: str | None = None
    """Where lerobot keeps calibration files (default: its cache directory)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Further fields of lerobot's teleoperator config, e.g. ``use_degrees: true``."""
    joint_names: list[str] = field(default_factory=lambda: ["shoulder_pan", "shoulder_lift", "elbow_flex",
                                                            "wrist_flex", "wrist_roll"])
    """Leader motors in the follower's joint order."""
    gripper_name: str | None = "gripper"
    """The leader's gripper (trigger) motor; None: the gripper target does not change."""
    degrees: bool = True
    """The leader reports joints in degrees (converted to radians)."""
    gripper_range: tuple[float, float] = (0.0, 100.0)
    """Gripper motor values for closed and open."""
    engage_mode: str = "always"
    """``always`` (the leader drives while its readings are fresh) or ``controls`` (the controls device's
    intervene signal decides)."""
    controls: str | None = "keyboard"
    """Teleop device kind for engage and events (None: no events)."""
    poll_hz: float = 100.0
    """Reader thread rate."""

    def __post_init__(self) -> None:
        if self.engage_mode not in ("always", "controls"):
            raise ValueError(f"engage_mode {self.engage_mode!r}; valid: always, controls")
        if self.poll_hz <= 0:
            raise ValueError("poll_hz must be positive")

    def make(self) -> LeaderArmDevice:
        """An unconnected leader arm (lerobot is imported at connect)."""
        controls = None
        if self.controls is not None:
            controls = TELEOP_DEVICES.get(self.controls)().make()
        return LeaderArmDevice(self, controls=controls)

    @classmethod
    def discover(cls) -> tuple[list[str], str]:
        """Serial ports that could be a leader's bus (lerobot and pyserial needed)."""
        try:
            import lerobot  # noqa: F401
            from serial.tools import list_ports
        except ImportError as e:
            return [], f"needs lerobot: bash scripts/install-lerobot.sh VENV ({e})"
        ports = [f"{p.device} ({p.description})" for p in list_ports.comports()
                 if "usb" in (p.description or "").lower() or "acm" in p.device.lower()]
        return ports, "" if ports else "no USB serial port found (plug in the leader's bus)"


class LeaderArmDevice(TeleopDevice):
    """Polls lerobot's teleoperator on a thread; ``teleop`` may be passed in (tests pass a fake)."""

    name = "leader_arm"
    relative = False

    def __init__(self, config: LeaderArmConfig | None = None, teleop: Any = None,
                 controls: TeleopDevice | None = None) -> None:
        from robot_rl.hardware.lerobot_robot import JointMap

        self.config = config or LeaderArmConfig()
        c = self.config
        lo, hi = c.gripper_range
        self.map = JointMap(list(c.joint_names), c.gripper_name, c.degrees, (float(lo), float(hi)))
        self.teleop = teleop
        self.controls = controls
        self._lock = threading.Lock()
        self._joints: np.ndarray | None = None
        self._grip: float | None = None
        self._t = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def connect(self) -> None:
        """Connect the leader (and the controls device) and start polling."""
        from robot_rl.hardware.lerobot_robot import make_lerobot_device

        c = self.config
        if self.teleop is None:
            fields = {"port": c.port, "id": c.id, "calibration_dir": c.calibration_dir, **c.options}
            self.teleop = make_lerobot_device("teleoperator", c.teleop_type, fields)
        self.map.check(self.teleop.action_features, f"lerobot teleoperator {c.teleop_type}")
        if not self.teleop.is_connected:
            try:
                self.teleop.connect()
            except Exception as e:
                raise RuntimeError(f"could not connect to the leader arm ({c.teleop_type}) on {c.port}: "
                                   f"{type(e).__name__}: {e}") from e
        if self.controls is not None:
            self.controls.connect()
        self._poll()  # the first reading exists once connect returns
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="leader-arm", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        values = self.teleop.get_action()
        joints, grip = self.map.joints(values), self.map.gripper(values)
        with self._lock:
            self._joints, self._grip, self._t = joints, 2.0 * grip - 1.0, time.monotonic()

    def _run(self) -> None:
        period = 1.0 / self.config.poll_hz
        while not self._stop.wait(period):
            try:
                self._poll()
            except Exception as e:  # a failing leader = disconnected: interventions end safely
                self.error = f"{type(e).__name__}: {e}"
                log.error("leader arm stopped: %s", self.error)
                return

    def disconnect(self) -> None:
        """Stop polling and disconnect."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self.controls is not None:
            self.controls.disconnect()
        if self.teleop is not None and self.teleop.is_connected:
            self.teleop.disconnect()

    @property
    def is_connected(self) -> bool:
        """Whether the polling thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def read(self) -> LeaderArmReading | None:
        """Newest leader joints with the controls device's engage and events."""
        with self._lock:
            if self._joints is None:
                return None
            joints, grip, t = self._joints.copy(), self._grip, self._t
        events: tuple[str, ...] = ()
        engage = True
        if self.controls is not None:
            r = self.controls.read() if self.controls.is_connected else None
            events = r.events if r is not None else ()
            if self.config.engage_mode == "controls":
                engage = bool(r is not None and r.engage)
        return LeaderArmReading(timestamp=t, gripper=grip if self.config.gripper_name else None, engage=engage,
                                events=events, joints=joints)

    def buttons(self) -> dict[str, str]:
        """The leader's joints drive the follower's; the controls device gives the events."""
        out = {"leader joints": "follower joint targets (blended in from the follower's pose at takeover)",
               "leader gripper": "follower gripper"}
        if self.controls is not None:
            out.update({f"{self.config.controls}: {k}": v for k, v in self.controls.buttons().items()
                        if not any(w in v for w in ("+x", "+y", "+z", "roll", "pitch", "yaw", "gripper"))})
        return out
