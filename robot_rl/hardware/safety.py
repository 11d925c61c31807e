"""The safety layer: every action from a policy or a teleop device passes here before the robot.

:class:`SafetyLayer` wraps a :class:`~robot_rl.hardware.robot.Robot` and exposes the same
``observe()`` / ``send_action()``; :meth:`SafetyLayer.step` also returns an info dict for the learner.
Checks, in order (each intervention is counted under its reason, logged, and listed in the step's info):

``latched``       the watchdog tripped or the e-stop fired: hold until :meth:`SafetyLayer.rearm`;
``sensor_stale``  a camera stopped delivering: hold while it is stale;
``nonfinite``     NaN/±inf anywhere in the action: hold (``np.clip`` would pass NaN through);
``clamped``       entries outside ``[-1, 1]`` clipped;
``change_limit``  each entry moves at most ``max_action_change`` from the previous applied action; after a
                  (re)start the previous action is the one that holds the *measured* state;
``velocity``      the physical motion per step stays under the linear/angular/joint speed limits;
``workspace``     on the *measured* pose: a command pushing further out through a face of the box is cut
                  on that axis, a command back in passes; in joint and joint_delta mode, joint limits the same
                  way and the Cartesian box through the robot's forward kinematics;
``watchdog``      no fresh command within ``watchdog_timeout_s``: the watchdog thread holds and latches.

The first event of each kind is a WARNING; the next ones are counted (``counts``, which the status lines and the
summaries of `record` and `deploy` show by kind) and logged at INFO only: 20 recorded demos pushing at the
workspace box once printed 200 warnings and scrolled everything else away.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.hardware.estop import EStop, EStopGuard
from robot_rl.hardware.kinematics.config import ARM_MODELS
from robot_rl.hardware.realtime import RealtimeScheduling, check_priority, enter_realtime
from robot_rl.hardware.robot import (
    ArmModelRobot,
    Robot,
    RobotState,
    action_to_target,
    hold_action,
    joint_target_to_action,
)
from robot_rl.hardware.watchdog import Watchdog

log = logging.getLogger(__name__)

ACTION_CHANGE = 0.5
"""Default ``max_action_change``: an entry reverses from full one way to full the other in four steps."""
ARM_ACTION_CHANGE = 1.0
MIN_WATCHDOG_S = 0.2
WATCHDOG_PERIODS = 3.0  # control periods without a command before the default watchdog trips
"""Default ``max_action_change`` on an arm with a kinematic model (SafetyConfig.max_action_change says why)."""

REASONS: tuple[str, ...] = ("latched", "sensor_stale", "nonfinite", "clamped", "change_limit", "velocity",
                            "workspace", "watchdog", "estop")
DEFAULT_WORKSPACE: tuple[list[float], list[float]] = ([0.15, -0.35, 0.02], [0.65, 0.35, 0.55])
"""The box when neither the config nor the robot names one: a tabletop arm the size of an xArm."""


@dataclass
class SafetyConfig:
    """Limits of the safety layer. Defaults suit a tabletop arm at 20 Hz."""

    control_hz: float = 20.0
    """Control rate the speed limits are converted with (one step = 1/control_hz seconds)."""
    workspace_low: list[float] | None = None
    """Lower corner of the end-effector box (x, y, z), metres in the robot base frame. None: the corner of
    ``workspace_preset``, else of the robot's own arm model (LeRobot SO-100/SO-101/Koch), else
    [0.15, -0.35, 0.02] (a tabletop arm the size of an xArm)."""
    workspace_high: list[float] | None = None
    """Upper corner of the end-effector box (x, y, z), metres. None: as ``workspace_low``, with the default
    [0.65, 0.35, 0.55]."""
    workspace_preset: str | None = None
    """An arm model whose workspace box fills the corners left at None: ``so100``, ``so101`` or ``koch``
    (robot_rl.hardware.kinematics.ARM_MODELS). None: the robot's own arm model when it has one."""
    max_action_change: float | None = None
    """Largest change of any action entry between consecutive steps (normalised units). None: 1.0 on an arm with
    a kinematic model (LeRobot SO-100/SO-101/Koch), else 0.5. Those drivers report the change the joint goals
    achieve, and a 5-joint arm cannot follow every rotation, so the next step is limited around what the arm did,
    not what was asked: at 0.5 the limit bound on 98 % of a learning policy's steps and the documented
    sim_so101 HIL-SERL run scored 0 of 20 in four runs; at 1.0, 19 of 20 in two 20-minute runs
    (benchmarks/RESULTS_so101.md, §3)."""
    max_linear_speed: float = 0.25
    """End-effector translation speed limit, m/s."""
    max_angular_speed: float = 1.0
    """End-effector rotation speed limit, rad/s."""
    max_joint_speed: float = 1.0
    """Joint speed limit in joint and joint_delta mode, rad/s per joint."""
    watchdog_timeout_s: float | None = None
    """Hold and latch when no fresh command arrives for this long (0 disables: not for hardware). None: three
    control periods, at least 0.2 s (0.3 s at 10 Hz): one late tick on a busy machine is a gap of two periods,
    and at 0.2 s it tripped the 10 Hz loop 6 times in 20 minutes (benchmarks/RESULTS_so101.md, §3)."""
    log_interval_s: float = 1.0
    """After each reason's first event (a WARNING), log it at INFO at most once per interval (counts are exact)."""
    realtime_priority: int | None = 0
    """SCHED_FIFO priority (1..99) for the control loop: the thread that connects the layer, the robot link's
    threads and a simulated robot's process; threads the loop starts later (a learner, torch's workers) keep the
    normal policy. For a steady control rate on a machine whose cores are busy. 0 (the library's default): the OS's
    normal scheduling, since the thread that connects the layer may do other heavy work after it (a test, a script
    that trains in the same thread), which on SCHED_FIFO would take a core from everything else. None: priority 50
    where the OS allows it (as ros2_control's controller manager does), else the normal scheduler and one warning
    that says how to allow it; `robot-rl deploy` and `record`, whose main thread is the loop, default to it.
    1..99: that priority, or a refusal that says how to allow it. Linux; needs root, CAP_SYS_NICE or an rtprio
    limit (robot_rl.hardware.realtime)."""

    def __post_init__(self) -> None:
        self.workspace_box()  # refuses an unknown preset or a box with low >= high now, not at connect
        for name in ("control_hz", "max_action_change", "max_linear_speed", "max_angular_speed",
                     "max_joint_speed"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if self.watchdog_timeout_s is not None and self.watchdog_timeout_s < 0:
            raise ValueError("watchdog_timeout_s must be >= 0")
        if self.realtime_priority is not None:
            check_priority(self.realtime_priority)

    def watchdog_timeout(self) -> float:
        """The watchdog's timeout in force, seconds (0: off): ``watchdog_timeout_s``, or three control periods."""
        if self.watchdog_timeout_s is not None:
            return self.watchdog_timeout_s
        return max(MIN_WATCHDOG_S, WATCHDOG_PERIODS / self.control_hz)

    def workspace_box(self, robot_arm: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The workspace box ``(low [3], high [3])``, metres.

        Corners left at None come from ``workspace_preset``, else from ``robot_arm``'s kinematics preset, else from
        the tabletop default.
        """
        preset = self.workspace_preset or robot_arm
        if preset is not None:
            if preset not in ARM_MODELS:
                raise ConfigError(f"workspace_preset {preset!r} is not an arm model; known: "
                                  f"{', '.join(ARM_MODELS.names())}")
            model = ARM_MODELS.get(preset)
            default_low, default_high = model.workspace_low, model.workspace_high
        else:
            default_low, default_high = DEFAULT_WORKSPACE
        lo = np.asarray(self.workspace_low if self.workspace_low is not None else default_low, dtype=np.float64)
        hi = np.asarray(self.workspace_high if self.workspace_high is not None else default_high, dtype=np.float64)
        if lo.shape != (3,) or hi.shape != (3,) or not (lo < hi).all():
            raise ConfigError(f"workspace box must be two xyz corners with low < high, got {lo} / {hi}")
        return lo, hi


def counts_text(counts: Mapping[str, int]) -> str:
    """``workspace 190, change_limit 12``: the events by kind, the most frequent first (``none`` without any)."""
    items = sorted(((n, k) for k, n in counts.items() if n), key=lambda t: (-t[0], t[1]))
    return ", ".join(f"{k} {n}" for n, k in items) or "none"


def _box_cut(target: np.ndarray, measured: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    # Never beyond a face, unless already beyond it: then never further out than the measured point.
    return np.minimum(np.maximum(target, np.minimum(low, measured)), np.maximum(high, measured))


class SafetyLayer:
    """Wraps a robot; use it (not the robot) everywhere. A context manager that connects and arms.

    ``estop``: an :class:`EStop` latch (one is made if not given). ``guard``: an optional running
    :class:`EStopGuard`; the layer beats its heartbeat on every step and latches when it has tripped.
    """

    def __init__(self, robot: Robot, config: SafetyConfig | None = None, estop: EStop | None = None,
                 guard: EStopGuard | None = None) -> None:
        self.robot = robot
        self.config = config or SafetyConfig()
        self.estop = estop or EStop()
        self.guard = guard
        self.counts: Counter[str] = Counter()
        self.steps = 0
        self._lock = threading.RLock()
        self._latched: str | None = "not armed"
        self._prev: np.ndarray | None = None
        self._last_log: dict[str, float] = {}
        arm = robot.arm_model_name if isinstance(robot, ArmModelRobot) else None
        self._low, self._high = self.config.workspace_box(arm)
        self.max_action_change = self.config.max_action_change or (ARM_ACTION_CHANGE if arm else ACTION_CHANGE)
        """The change limit in force (``max_action_change``, or the default for this robot)."""
        preset = self.config.workspace_preset or arm
        log.info("safety: workspace box %s .. %s m (%s)", self._low.tolist(), self._high.tolist(),
                 f"{preset} preset for the corners not set" if preset else "safety.workspace_low/high or the default")
        self._realtime: RealtimeScheduling | None = None
        timeout = self.config.watchdog_timeout()
        self.watchdog = Watchdog(timeout, self._on_watchdog) if timeout > 0 else None
        self.estop.on_trigger(self._on_estop)

    # ---------------------------------------------------------------- lifecycle

    @property
    def features(self) -> Any:
        """The wrapped robot's declared features."""
        return self.robot.features

    def connect(self) -> None:
        """Connect the robot and arm the layer (on SCHED_FIFO first, with ``realtime_priority``)."""
        if self._realtime is None:
            # Before connecting: the robot's threads and processes inherit it.
            self._realtime = enter_realtime(self.config.realtime_priority)
        try:
            self.robot.connect()
        except BaseException:
            self._restore_scheduling()
            raise
        if self._realtime is not None:
            self._realtime.seal()
        self.rearm()

    def _restore_scheduling(self) -> None:
        if self._realtime is not None:
            self._realtime.restore()
            self._realtime = None

    def disconnect(self) -> None:
        """Hold, disarm the watchdog and disconnect the robot."""
        if self.watchdog is not None:
            self.watchdog.disarm()
        if self.guard is not None:
            self.guard.pause()
        with self._lock:
            self._latched = "disconnected"
        if self.robot.is_connected:
            self.robot.disconnect()
        self._restore_scheduling()

    def close(self) -> None:
        """Disconnect and stop the watchdog thread."""
        self.disconnect()
        if self.watchdog is not None:
            self.watchdog.close()

    def __enter__(self) -> SafetyLayer:
        self.connect()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def rearm(self) -> None:
        """Clear a latch (after a watchdog trip or a reset e-stop) and restart from the measured state.

        Refused while the e-stop or the guard is still tripped.
        """
        if self.estop.is_set:
            raise RuntimeError(f"e-stop is set ({self.estop.reason}); reset it before re-arming")
        if self.guard is not None and self.guard.tripped:
            raise RuntimeError(f"e-stop guard tripped ({self.guard.reason}); reset it before re-arming")
        with self._lock:
            was, self._latched = self._latched, None
            self._prev = None  # the next command's change limit is relative to the measured state
        if self.watchdog is not None:
            self.watchdog.arm()
        if was is None:  # re-armed while armed (e.g. at every episode start): nothing to report
            log.debug("safety layer re-armed")
        else:
            log.info("safety layer armed" if was == "not armed" else f"safety layer re-armed (was holding: {was})")

    @property
    def latched(self) -> str | None:
        """Why the layer is holding until re-armed (None when armed)."""
        return self._latched

    @property
    def estop_reason(self) -> str | None:
        """Why the e-stop fired, in words (``"e-stop key (guard)"``); None while it has not.

        Covers the in-process latch and the guard process; either needs a manual reset before :meth:`rearm`.
        """
        if self.estop.is_set:
            return self.estop.reason or "estop"
        if self.guard is not None and self.guard.tripped:
            return f"{self.guard.reason or 'tripped'} (guard)"
        return None

    # ---------------------------------------------------------------- events

    def _event(self, reason: str, events: list[str], detail: str = "") -> None:
        self.counts[reason] += 1
        events.append(reason)
        now = time.monotonic()
        if reason not in self._last_log:
            self._last_log[reason] = now
            log.warning("safety: %s%s (the first; further ones are counted on the status line and in the summary)",
                        reason, f": {detail}" if detail else "")
        elif now - self._last_log[reason] >= self.config.log_interval_s:
            self._last_log[reason] = now
            log.info("safety: %s%s (%d so far)", reason, f": {detail}" if detail else "", self.counts[reason])

    def _latch(self, reason: str) -> None:
        # Called from the watchdog/e-stop threads too: no step lock here, so a step stuck in robot I/O
        # cannot keep the hold from being sent. Plain attribute writes are atomic under the GIL.
        self._latched = reason
        self._prev = None
        self.counts[reason] += 1
        try:
            self.robot.hold()
        finally:
            log.error("safety: holding the robot (%s); re-arm to continue", reason)

    def _on_watchdog(self, delay_s: float) -> None:
        self._latch("watchdog")
        # From the delay itself, not from the latch: the loop may re-arm (a new episode) before this line runs.
        log.error("%s", self._watchdog_detail(delay_s))

    def _watchdog_detail(self, delay: float) -> str:
        limit = self.config.watchdog_timeout()
        # Twice the gap seen, rounded up to 50 ms: room for the next stall of the same kind.
        suggest = max(limit * 2, -(-delay * 2 // 0.05) * 0.05)
        return (f"watchdog: no command for {delay * 1e3:.0f} ms > safety.watchdog_timeout_s={limit:g}; the "
                f"control loop stalled (machine load, a slow policy or camera). If the robot was fine, set "
                f"safety.watchdog_timeout_s={suggest:.2f} or lower safety.control_hz, then re-arm")

    @property
    def latch_detail(self) -> str | None:
        """Why the layer holds, in words a user can act on (the setting and a value that would have passed)."""
        reason = self._latched
        if reason == "watchdog" and self.watchdog is not None and self.watchdog.last_trip_delay_s is not None:
            return self._watchdog_detail(self.watchdog.last_trip_delay_s)
        if reason == "estop":
            return f"e-stop: {self.estop_reason or 'triggered'}; reset it, then re-arm"
        return reason

    def _on_estop(self, reason: str) -> None:
        self._latch("estop")

    # ---------------------------------------------------------------- the step

    def observe(self) -> dict[str, np.ndarray]:
        """The robot's observation (holds the robot if a sensor went stale)."""
        stale = self.robot.stale_sensors()
        if stale:
            self.robot.hold()
        return self.robot.observe()

    def send_action(self, action: np.ndarray) -> np.ndarray:
        """Check and apply ``action``; return the action actually applied."""
        return self.step(action)[0]

    def step(self, action: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """Check and apply ``action``. Returns ``(applied action, info)``.

        ``info``: ``safety_events`` (reasons that intervened this step), ``safety_held`` (the robot was held
        instead of following the command), ``safety_counts`` (totals by reason), ``safety_latched``.
        """
        with self._lock:
            self.steps += 1
            events: list[str] = []
            if self.guard is not None:
                self.guard.beat()
            if self.watchdog is not None:
                self.watchdog.kick()
            if self.guard is not None and self.guard.tripped and self._latched != "estop":
                self._latch("estop")
                log.error("e-stop: %s", self.estop_reason)
            measured = self.robot.measure()
            cfg = self.robot.config
            held = True
            if self._latched is not None:
                self._event("latched", events, self._latched)
                self.robot.hold()
                applied = hold_action(cfg, measured)
            elif stale := self.robot.stale_sensors():
                self._event("sensor_stale", events, ", ".join(stale))
                self.robot.hold()
                applied = hold_action(cfg, measured)
                self._prev = applied
            else:
                applied, held = self._filter(np.asarray(action, dtype=np.float64).reshape(-1), measured, events)
                applied = self.robot.send_action(applied, measured)
                self._prev = applied.astype(np.float64)
                if self._latched is not None:  # latched by another thread while we were sending
                    self.robot.hold()
                    held = True
            info = {"safety_events": tuple(events), "safety_held": held, "safety_latched": self._latched,
                    "safety_counts": dict(self.counts)}
            return applied.astype(np.float32), info

    def _filter(self, a: np.ndarray, measured: RobotState, events: list[str]) -> tuple[np.ndarray, bool]:
        cfg = self.robot.config
        if a.shape != (cfg.action_dim,):
            raise ValueError(f"action shape {a.shape}, expected ({cfg.action_dim},)")
        hold = hold_action(cfg, measured).astype(np.float64)
        if not np.isfinite(a).all():
            self._event("nonfinite", events, f"{a}")
            return hold, True
        clipped = np.clip(a, -1.0, 1.0)
        if not np.array_equal(clipped, a):
            self._event("clamped", events, f"max |a| {np.abs(a).max():.3g}")
        a = clipped
        ref = self._prev if self._prev is not None else hold
        step = self.max_action_change
        limited = np.clip(a, ref - step, ref + step)
        if not np.array_equal(limited, a):
            self._event("change_limit", events, f"max change {np.abs(a - ref).max():.3g}")
        a = limited
        dt = 1.0 / self.config.control_hz
        target, grip = action_to_target(cfg, a, measured)
        if cfg.control_mode == "ee_delta":
            target = self._limit_ee(target, measured, dt, events)
            delta = target - measured.ee_pose
            arm = np.concatenate([delta[:3] / cfg.max_step_m, delta[3:6] / cfg.max_step_rad])
        else:
            target = self._limit_joints(target, measured, dt, events)
            arm = joint_target_to_action(cfg, target, measured).astype(np.float64)
        return np.append(arm, 2.0 * grip - 1.0), False

    def _limit_ee(self, target: np.ndarray, measured: RobotState, dt: float, events: list[str]) -> np.ndarray:
        target = target.copy()
        lin = target[:3] - measured.ee_pose[:3]
        ang = target[3:6] - measured.ee_pose[3:6]
        vmax, wmax = self.config.max_linear_speed * dt, self.config.max_angular_speed * dt
        n_lin, n_ang = float(np.linalg.norm(lin)), float(np.linalg.norm(ang))
        if n_lin > vmax or n_ang > wmax:
            self._event("velocity", events, f"{n_lin / dt:.3g} m/s, {n_ang / dt:.3g} rad/s")
            if n_lin > vmax:  # scale, keeping the direction
                target[:3] = measured.ee_pose[:3] + lin * (vmax / n_lin)
            if n_ang > wmax:
                target[3:6] = measured.ee_pose[3:6] + ang * (wmax / n_ang)
        cut = _box_cut(target[:3], measured.ee_pose[:3], self._low, self._high)
        if not np.array_equal(cut, target[:3]):
            self._event("workspace", events, f"measured {np.round(measured.ee_pose[:3], 3)}")
            target[:3] = cut
        return target

    def _limit_joints(self, target: np.ndarray, measured: RobotState, dt: float, events: list[str]) -> np.ndarray:
        cfg = self.robot.config
        qmax = self.config.max_joint_speed * dt
        limited = np.clip(target, measured.joints - qmax, measured.joints + qmax)
        if not np.array_equal(limited, target):
            self._event("velocity", events, f"{np.abs(target - measured.joints).max() / dt:.3g} rad/s")
        target = _box_cut(limited, measured.joints, np.asarray(cfg.joint_low), np.asarray(cfg.joint_high))
        if not np.array_equal(target, limited):
            self._event("workspace", events, "joint limit")
        predicted = self.robot.forward_kinematics(target)
        if predicted is None:
            outside = (measured.ee_pose[:3] < self._low) | (measured.ee_pose[:3] > self._high)
            if outside.any():  # no kinematics: cannot tell which joint motion goes back in, so hold
                self._event("workspace", events, "outside the box, no forward kinematics: holding")
                return measured.joints.copy()
            return target
        cut = _box_cut(predicted[:3], measured.ee_pose[:3], self._low, self._high)
        if not np.allclose(cut, predicted[:3], atol=1e-9):
            self._event("workspace", events, f"predicted {np.round(predicted[:3], 3)} leaves the box")
            return measured.joints.copy()
        return target
