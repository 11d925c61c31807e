"""Recording teleoperated demonstrations from a robot, with live success and rewind-and-correct labels.

:class:`DemoRecorder` runs a fixed-rate loop (:class:`~robot_rl.core.rate.RateLoop`): each tick it
observes the robot, reads the teleop device, sends the operator's action through the
:class:`~robot_rl.hardware.safety.SafetyLayer` (always, also between episodes, so the watchdog stays fed
and the arm holds where it is) and, while an episode is being recorded, appends the step.

Device events (keyboard key / gamepad button in brackets; `robot-rl devices` lists them):

==========  ======================  ==============================================================
event       idle                    recording
==========  ======================  ==============================================================
``reset``   start an episode [n]    stop and save it (truncated) [n]
``success`` –                       label success *from this step on* [g]; ends the episode when
                                    ``end_on_success``
``failure`` –                       label failure, end and save the episode (terminated) [b]
``toggle``  –                       discard the episode (nothing is written) [t]
``rewind``  –                       start/stop a *rewind* segment (back to a familiar state) [[]
``correct`` –                       start/stop a *correction* segment (the recovery) []]
``estop``   e-stop                  e-stop; the episode in flight is discarded [space]
==========  ======================  ==============================================================

Rewind-and-correct (RaC): the ``segment`` label of each step is 0 (none), 1 (rewind) or 2 (correction);
pressing a segment key switches to that segment, pressing it again ends it. Labels are stored per step
(episode store: ``segment``; LeRobot: ``complementary_info.rac_segment``), and
:func:`robot_rl.data.demos.rac_weights` turns them into sample weights for fine-tuning.

Relative devices (keyboard, gamepad, SpaceMouse) need the ``ee_delta`` control mode: their deltas apply
to the measured pose, and the arm holds while the intervene control is released. A leader arm
(:class:`~robot_rl.human_loop.devices.leader_arm.LeaderArmDevice`) needs ``joint`` mode and is blended
in from the follower's pose over ``blend_s`` at the start of each episode and after the device was lost.
A stale or disconnected device holds the arm; the episode keeps recording the hold (``intervened`` False).

Every finished episode is committed on its own (:class:`~robot_rl.data.store.EpisodeStore` appends are
durable when they return), so a crash, a full disk or Ctrl-C loses at most the episode in flight.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.core.interrupts import interrupts_held
from robot_rl.core.rate import RateLoop, RateStats
from robot_rl.data.episode import SEGMENT_CORRECTION, SEGMENT_NAMES, SEGMENT_NONE, SEGMENT_REWIND, Episode
from robot_rl.data.recorder import EpisodeSink
from robot_rl.hardware.intervention import leader_ee_step
from robot_rl.hardware.robot import RobotState, TaskRobot, hold_action, joints_to_action
from robot_rl.hardware.safety import SafetyLayer, counts_text
from robot_rl.hardware.teleop import JointReading, TeleopDevice, TeleopReading
from robot_rl.viz.base import StepViz

log = logging.getLogger(__name__)

KEY_HELP = ("n start/stop+save · g success · b failure · t discard · [ rewind · ] correct · space E-STOP")


@dataclass
class RecordConfig:
    """How `robot-rl record` runs."""

    episodes: int = 10
    """Stop after this many saved episodes."""
    hz: float = 20.0
    """Control and recording rate (the dataset's fps)."""
    max_episode_steps: int = 600
    """An episode still recording after this many steps is saved as truncated."""
    task: str = ""
    """Task text stored with every episode (LeRobot's per-frame task)."""
    end_on_success: bool = True
    """End (and save) the episode at the step success is labelled; otherwise keep recording until stopped."""
    auto_start: bool = False
    """Start recording the first episode at once instead of waiting for the start key (a scripted device, one
    with ``drives_episodes``, starts every episode itself)."""
    seed: int = 0
    """Seed of the task resets between episodes, on a robot that knows its task (the simulated arm)."""
    stale_after_s: float = 0.2
    """A device reading older than this is 'lost': the arm holds."""
    blend_s: float = 1.0
    """Leader arms: seconds over which the gap between leader and follower is blended out (bumpless start)."""
    max_ticks: int | None = None
    """Stop after this many control ticks (tests and demos; None = until the episodes are saved)."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError("record.episodes must be >= 1")
        if not 1.0 <= self.hz <= 1000.0:
            raise ValueError(f"record.hz {self.hz} outside 1..1000")
        if self.max_episode_steps < 1:
            raise ValueError("record.max_episode_steps must be >= 1")
        if self.stale_after_s <= 0 or self.blend_s < 0:
            raise ValueError("record.stale_after_s must be > 0 and record.blend_s >= 0")


@dataclass
class RecordSummary:
    """What a recording session did."""

    saved: int = 0
    discarded: int = 0
    frames: int = 0
    successes: int = 0
    ticks: int = 0
    stop_reason: str = ""
    outcomes: list[str] = field(default_factory=list)
    """Outcome of each saved episode: ``success``, ``failure``, ``stopped`` or ``max_steps``."""
    safety_counts: dict[str, int] = field(default_factory=dict)
    device_lost_steps: int = 0
    rate: RateStats | None = None


class Segmenter:
    """The current rewind-and-correct label, switched by ``rewind`` / ``correct`` events."""

    def __init__(self) -> None:
        self.label = SEGMENT_NONE

    def on_event(self, event: str) -> None:
        """A segment key: switch to its segment, or end it when it is the current one."""
        want = {"rewind": SEGMENT_REWIND, "correct": SEGMENT_CORRECTION}.get(event)
        if want is not None:
            self.label = SEGMENT_NONE if self.label == want else want

    def reset(self) -> None:
        """Back to no segment (a new episode)."""
        self.label = SEGMENT_NONE


class _EpisodeBuffer:
    def __init__(self) -> None:
        self.obs: dict[str, list[np.ndarray]] = {}
        self.action: list[np.ndarray] = []
        self.intervened: list[bool] = []
        self.segment: list[int] = []
        self.success: list[bool] = []
        self.safety: Counter[str] = Counter()
        self.success_now = False
        self.rewards: list[float] | None = None
        """Per step, from a robot that knows its task (what deploy learns from); None: from the success labels."""

    def __len__(self) -> int:
        return len(self.action)

    def add(self, obs: dict[str, np.ndarray], action: np.ndarray, intervened: bool, segment: int) -> None:
        for k, v in obs.items():
            self.obs.setdefault(k, []).append(np.asarray(v))
        self.action.append(np.asarray(action, dtype=np.float32))
        self.intervened.append(intervened)
        self.segment.append(segment)
        self.success.append(self.success_now)

    def finish(self, final_obs: dict[str, np.ndarray], outcome: str, task: str) -> Episode:
        n = len(self)
        success = np.asarray(self.success, dtype=bool)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        if outcome in ("success", "failure"):
            terminated[-1] = True
        else:
            truncated[-1] = True
        reward = (np.asarray(self.rewards, dtype=np.float32) if self.rewards is not None and len(self.rewards) == n
                  else success.astype(np.float32))
        return Episode(obs={k: np.stack(v) for k, v in self.obs.items()}, action=np.stack(self.action),
                       reward=reward, terminated=terminated, truncated=truncated,
                       intervened=np.asarray(self.intervened, dtype=bool), success=success,
                       final_obs={k: np.asarray(v) for k, v in final_obs.items()}, task=task,
                       segment=np.asarray(self.segment, dtype=np.int8),
                       meta={"outcome": outcome, "safety_events": dict(self.safety)})


StatusFn = Callable[[str], None]


class DemoRecorder:
    """Records episodes from ``device`` acting on the robot behind ``layer`` into ``sink``.

    ``layer`` must be connected and armed (use it as a context manager around :meth:`run`); ``device``
    connected. ``status`` receives the one-line status about five times a second (None: no status). ``viz``: a
    live view of the recorded steps (``human`` when the operator acts, ``hold`` otherwise) on the tick timeline.
    """

    def __init__(self, layer: SafetyLayer, device: TeleopDevice, sink: EpisodeSink,
                 config: RecordConfig | None = None, status: StatusFn | None = None,
                 viz: StepViz | None = None) -> None:
        self.layer = layer
        self.device = device
        self.sink = sink
        self.config = config or RecordConfig()
        self.status = status
        self.viz = viz
        self._tick = 0
        self.robot_cfg = layer.robot.config
        self.leader = not device.relative
        if device.relative and self.robot_cfg.control_mode != "ee_delta":
            raise ConfigError(f"{device.name} sends pose deltas: record with the robot in ee_delta control mode "
                              f"(robot.control_mode=ee_delta), or use a leader arm for joint mode")
        if self.leader and self.robot_cfg.control_mode == "ee_delta" and \
                layer.robot.forward_kinematics(np.asarray(self.robot_cfg.joint_low)) is None:
            raise ConfigError(f"{device.name} is a leader arm (absolute joint positions): in ee_delta its pose comes "
                              "from the follower's forward kinematics, which this robot lacks (set robot.arm, e.g. "
                              "so101), or record in robot.control_mode=joint_delta")
        self.summary = RecordSummary()
        self.segmenter = Segmenter()
        self._episode: _EpisodeBuffer | None = None
        self._gripper: float | None = None
        self._blend: Any = None
        self._lost = False
        self._last_status = 0.0
        self._source = "hold"
        self._pending_end: str | None = None

    # ------------------------------------------------------------------ helpers

    def _measured(self, obs: dict[str, np.ndarray]) -> RobotState:
        # Joints lead and the gripper opening ends ``state`` in every driver's layout; no second read.
        state = np.asarray(obs["state"], dtype=np.float64)
        n = self.robot_cfg.num_joints
        grip = state[n + 6] if state.shape[0] >= n + 7 else state[n]  # [q, pose, grip, …] or [q, grip]
        return RobotState(joints=state[:n], ee_pose=np.zeros(6), gripper=float(grip), timestamp=time.monotonic())

    def _fresh(self, reading: TeleopReading | None) -> bool:
        return reading is not None and time.monotonic() - reading.timestamp <= self.config.stale_after_s

    def _action(self, reading: TeleopReading | None, measured: RobotState) -> tuple[np.ndarray, bool]:
        """The operator's action for this tick and whether the operator is acting."""
        if not self._fresh(reading) or reading is None:
            if not self._lost:
                log.warning("teleop device %s: holding the arm", "disconnected" if not self.device.is_connected
                            else "stopped updating")
            self._lost, self._blend = True, None
            self._source = "hold (device lost)"
            return hold_action(self.robot_cfg, measured), False
        if self._lost:
            log.info("teleop device back")
        self._lost = False
        if self.leader:
            return self._leader_action(reading, measured)
        if reading.gripper is not None:
            self._gripper = float(reading.gripper)
        grip = self._gripper if self._gripper is not None else 2.0 * measured.gripper - 1.0
        if not reading.engage:
            self._source = "hold"
            return np.array([0, 0, 0, 0, 0, 0, grip], dtype=np.float32), False
        self._source = "human"
        return np.append(reading.delta, grip).astype(np.float32), True

    def _leader_action(self, reading: TeleopReading, measured: RobotState) -> tuple[np.ndarray, bool]:
        from robot_rl.human_loop.devices.leader_arm import JointBlend

        joints = reading.joints if isinstance(reading, JointReading) else None
        if joints is None:
            raise TypeError(f"{self.device.name} is not relative but its readings carry no joints")
        grip = float(reading.gripper) if reading.gripper is not None else 2.0 * measured.gripper - 1.0
        if not reading.engage:  # engage_mode=controls and released: hold, and blend in again on re-engaging
            self._blend, self._source = None, "hold"
            return hold_action(self.robot_cfg, measured), False
        if self._blend is None:
            self._blend = JointBlend(self.config.blend_s)
            self._blend.start(measured.joints, np.asarray(joints), 2.0 * measured.gripper - 1.0, grip)
        target, grip = self._blend.target(np.asarray(joints), grip)
        self._source = "leader (blending)" if self._blend.blending else "leader"
        lo, hi = np.asarray(self.robot_cfg.joint_low), np.asarray(self.robot_cfg.joint_high)
        target = np.clip(target, lo, hi)
        if self.robot_cfg.control_mode == "joint_delta":  # the step towards the target, from where the arm is
            arm = np.clip((target - measured.joints) / self.robot_cfg.max_step_joint_rad, -1.0, 1.0)
        elif self.robot_cfg.control_mode == "ee_delta":
            arm = leader_ee_step(self.layer.robot.forward_kinematics, target, measured.joints,
                                 self.robot_cfg.max_step_m, self.robot_cfg.max_step_rad)
        else:
            arm = joints_to_action(self.robot_cfg, target)
        return np.append(arm, np.clip(grip, -1.0, 1.0)).astype(np.float32), True

    # ------------------------------------------------------------------ episodes

    @property
    def recording(self) -> bool:
        """Whether an episode is being recorded."""
        return self._episode is not None

    def _start(self) -> bool:
        """Begin an episode; True when the robot's task was reset (what was observed before is stale)."""
        robot = self.layer.robot
        reset = isinstance(robot, TaskRobot)
        if isinstance(robot, TaskRobot):
            # A new scene, as a person would set one up: the simulated arm places the cube and the arm anew,
            # then the change limit restarts from the measured state.
            robot.reset_task(self.config.seed * 100_003 + self.summary.saved + self.summary.discarded)
            if self.layer.estop_reason is None:  # an e-stop is never cleared here (rearm would refuse it)
                self.layer.rearm()
        self._episode = _EpisodeBuffer()
        if reset:
            self._episode.rewards = []
        self.segmenter.reset()
        self._blend = None  # a leader arm blends in again from wherever the follower is
        log.info("episode %d: recording", self.summary.saved + 1)
        return reset

    def _discard(self, why: str) -> None:
        if self._episode is not None:
            log.warning("episode discarded (%s, %d steps)", why, len(self._episode))
            self.summary.discarded += 1
            if self.viz is not None:
                self.viz.note(f"episode discarded ({why}, {len(self._episode)} steps)", self._tick)
        self._episode = None

    def _score_last_step(self, obs: dict[str, np.ndarray]) -> None:
        """A robot that knows its task judges the newest step by what it led to (``obs``), as deploy does.

        Its reward goes with the step, and its success ends the episode there (with ``end_on_success``).
        """
        ep, robot = self._episode, self.layer.robot
        if ep is None or ep.rewards is None or len(ep.rewards) >= len(ep) or not isinstance(robot, TaskRobot):
            return
        status = robot.task_status()
        ep.rewards.append(float(status.reward))
        if status.success and not ep.success[-1]:
            ep.success[-1] = ep.success_now = True
            if self.config.end_on_success:
                self._end("success", obs)

    def _end(self, outcome: str, final_obs: dict[str, np.ndarray] | None = None) -> None:
        if final_obs is None and self._episode is not None and len(self._episode):
            final_obs = self.layer.observe()
            self._score_last_step(final_obs)
        ep_buf, self._episode = self._episode, None
        if ep_buf is None or len(ep_buf) == 0 or final_obs is None:
            return
        ep = ep_buf.finish(final_obs, outcome, self.config.task)
        with interrupts_held():  # a stop lands after the count, so the summary says what the disk holds
            self._write_held(ep)  # committed before we go on: a later failure cannot lose it
            self.summary.saved += 1
            self.summary.frames += len(ep)
            self.summary.successes += int(ep.is_success)
            self.summary.outcomes.append(outcome)
        log.info("episode %d saved: %d steps, %s", self.summary.saved, len(ep), outcome)
        if self.viz is not None:
            self.viz.episode_end(self._tick, index=self.summary.saved - 1, outcome=outcome,
                                 ret=float(ep.reward.sum()), length=len(ep))

    def _write_held(self, ep: Any) -> None:
        """Write ``ep`` with the arm held and the watchdog paused, then watch again from the next command.

        The write (images, parquet, an fsync) can outlast the watchdog's timeout under load, and nothing commands
        the arm while it runs: a latch there would end a recording for a pause that was on purpose.
        """
        layer = self.layer
        watchdog = layer.watchdog if layer.latched is None else None
        if watchdog is not None:
            layer.robot.hold()
            watchdog.disarm()
        try:
            self.sink.write(ep)
        finally:
            if watchdog is not None and layer.latched is None:
                watchdog.arm()

    def _handle(self, events: tuple[str, ...], step_index: int) -> bool:
        """Act on the device's events; True when an episode started on a reset task (observe again)."""
        reset = False
        for ev in events:
            if ev == "estop":
                self.layer.estop.trigger("operator e-stop key")
            elif self._episode is None:
                if ev == "reset":
                    reset = self._start()
            elif ev == "reset":
                self._end("stopped")
            elif ev == "toggle":
                self._discard("operator")
            elif ev == "success":
                self._episode.success_now = True
            elif ev == "failure":
                self._episode.success_now = False
                self._pending_end = "failure"
            elif ev in ("rewind", "correct"):
                self.segmenter.on_event(ev)
        return reset

    # ------------------------------------------------------------------ the loop

    def run(self) -> RecordSummary:
        """Record until ``config.episodes`` are saved (or ``max_ticks``, a safety latch, Ctrl-C)."""
        cfg = self.config
        loop = RateLoop(cfg.hz, max_ticks=cfg.max_ticks)
        start_next = cfg.auto_start or self.device.drives_episodes
        try:
            for tick in loop:
                self.summary.ticks = tick + 1
                self._pending_end = None
                if self._episode is None and start_next:
                    self._start()
                    start_next = self.device.drives_episodes
                obs = self.layer.observe()
                self._score_last_step(obs)
                measured = self._measured(obs)
                reading = self.device.read() if self.device.is_connected else None
                events = reading.events if (reading is not None and self._fresh(reading)) else ()
                was_success = self._episode.success_now if self._episode is not None else False
                if self._handle(events, tick):
                    obs = self.layer.observe()
                    measured = self._measured(obs)
                action, acting = self._action(reading, measured)
                applied, info = self.layer.step(action)
                if self._lost:
                    self.summary.device_lost_steps += 1
                ep = self._episode
                if ep is not None:
                    ep.safety.update(info["safety_events"])
                    ep.add(obs, applied, acting, self.segmenter.label)
                    self._tick = tick  # the newest recorded step: where an episode's end is shown
                    if self.viz is not None:
                        self.viz.step(tick, applied, source="human" if acting else "hold", obs=obs,
                                      reward=float(ep.success_now), success=ep.success_now)
                    if self._pending_end == "failure":
                        self._end("failure")
                    elif ep.success_now and not was_success and cfg.end_on_success:
                        self._end("success")
                    elif len(ep) >= cfg.max_episode_steps:
                        self._end("max_steps")
                if info["safety_latched"] is not None:
                    self._discard(f"safety layer latched: {info['safety_latched']}")
                    self.summary.stop_reason = f"safety layer latched ({info['safety_latched']}); re-arm and " \
                                               "record again"
                    break
                self._show(loop)
                if self.summary.saved >= cfg.episodes:
                    self.summary.stop_reason = f"{cfg.episodes} episodes saved"
                    break
            else:
                self.summary.stop_reason = f"max_ticks ({cfg.max_ticks}) reached"
                self._discard("max_ticks reached")
        except KeyboardInterrupt:
            self._discard("stopped by Ctrl-C or SIGTERM")
            self.summary.stop_reason = "interrupted (Ctrl-C or SIGTERM); the running episode discarded"
        except BaseException:
            self._discard("error")
            raise
        finally:
            self.summary.safety_counts = dict(self.layer.counts)
            self.summary.rate = loop.stats()
        return self.summary

    def status_line(self, loop: RateLoop | None = None) -> str:
        """Episode, state, who acts, segment, success label, safety events, loop period and success rate."""
        s = self.summary
        ep = self._episode
        state = f"REC {len(ep):4d} steps" if ep is not None else "idle (n: start)"
        seg = SEGMENT_NAMES[self.segmenter.label] if ep is not None else "-"
        succ = ("SUCCESS" if ep.success_now else "-") if ep is not None else "-"
        period = ""
        if loop is not None and loop.periods:
            st = loop.stats()
            period = f" | period p50 {st.p50_s * 1e3:.0f}/p99 {st.p99_s * 1e3:.0f} ms, {st.overruns} overruns"
        rate = f"{s.successes}/{s.saved}" if s.saved else "-"
        safety = counts_text(self.layer.counts)  # by kind: the log says only the first of each
        gap = f" | {self._blend.gap_text()}" if self._blend is not None else ""
        return (f"ep {s.saved + 1}/{self.config.episodes} {state} | {self._source} | segment {seg} | {succ} | "
                f"safety events {safety} | success {rate} | discarded {s.discarded}{gap}{period}")

    def _show(self, loop: RateLoop) -> None:
        if self.status is None:
            return
        now = time.monotonic()
        if now - self._last_status >= 0.2:
            self._last_status = now
            self.status(self.status_line(loop))


class RichStatus:
    """A live one-line status at the bottom of the terminal (rich), with the key help under it."""

    def __init__(self, title: str = "robot-rl record") -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        self._text = Text
        self.console = Console(stderr=True)
        self.title = title
        self.live = Live(Text(""), console=self.console, refresh_per_second=5, transient=False)

    def __call__(self, line: str) -> None:
        """Show ``line``."""
        self.live.update(self._text(f"{line}\n{KEY_HELP}"))

    def __enter__(self) -> RichStatus:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)
