"""Who acts this step: the policy or the human, and what happens when the human's device fails.

:class:`InterventionController` reads the teleop device once per control step and returns the action to
send (through the safety layer) with an ``intervened`` flag for the transition.

- **Hold** mode (default): the human acts while the device's intervene control is held. **Toggle** mode:
  a ``toggle`` event (or a press of the intervene control) takes over, the next hands back.
  :attr:`InterventionController.mode_hint` says which, for the UI.
- **Bumpless**: devices are relative, their deltas apply to the measured pose (``ee_delta`` actions), so
  a takeover starts from where the arm is. The gripper keeps its last target until the human changes it.
- **Device lost**: a reading older than ``stale_after_s`` or a disconnected device is "not intervening".
  If an intervention was in progress it ends *safely*: the arm holds (zero delta, gripper unchanged) and
  the policy does not get control back until the device is fresh again and released (or the human
  engages again). Counted as ``teleop_lost``.
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
from robot_rl.hardware.teleop import JointReading, TeleopDevice, TeleopReading

log = logging.getLogger(__name__)


@dataclass
class InterventionConfig:
    """How the human takes over."""

    mode: str = "hold"
    """``hold`` (intervene while the control is held) or ``toggle`` (press to take over, press to hand back)."""
    stale_after_s: float = 0.2
    """A device reading older than this counts as 'not intervening'."""
    engage_tolerance_deg: float = 10.0
    """An absolute device (a leader arm) takes over only once each of its joints is within this of the follower's:
    its joints become the follower's goal, so a larger gap would be a jump."""

    def __post_init__(self) -> None:
        if self.mode not in ("hold", "toggle"):
            raise ValueError(f"intervention mode {self.mode!r}; valid: hold, toggle")
        if self.stale_after_s <= 0:
            raise ValueError("stale_after_s must be positive")
        if not 0 < self.engage_tolerance_deg <= 45:
            raise ValueError(f"engage_tolerance_deg {self.engage_tolerance_deg}: must be in (0, 45]")


@dataclass
class InterventionStep:
    """The outcome of one step: the action to send, who produced it, and the events pressed."""

    action: np.ndarray
    intervened: bool
    source: str
    """``policy``, ``human`` or ``hold`` (the device was lost mid-intervention)."""
    events: tuple[str, ...] = ()


@dataclass
class EpisodeInterventions:
    """Per-episode intervention statistics (for the logs)."""

    steps: int = 0
    intervened_steps: int = 0
    interventions: int = 0
    lengths: list[int] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Fraction of steps under human control."""
        return self.intervened_steps / self.steps if self.steps else 0.0


def leader_ee_step(fk: Callable[[np.ndarray], np.ndarray | None], leader: np.ndarray, follower: np.ndarray,
                   max_step_m: float, max_step_rad: float) -> np.ndarray:
    """A leader arm's pose as an ``ee_delta`` step ``[6]`` from the follower's (both by forward kinematics).

    HIL-SERL's way of driving an end-effector policy's arm with a leader: the same kinematic model on both
    sides, so only the difference of the two poses matters; each entry is clipped to one step.
    """
    target, now = fk(np.asarray(leader, np.float64)), fk(np.asarray(follower, np.float64))
    if target is None or now is None:
        raise ConfigError("a leader arm in ee_delta needs the follower's forward kinematics (robot.arm=so101, …)")
    rot = (np.asarray(target[3:6]) - np.asarray(now[3:6]) + np.pi) % (2 * np.pi) - np.pi  # the short way round
    step = np.concatenate([(np.asarray(target[:3]) - np.asarray(now[:3])) / max_step_m, rot / max_step_rad])
    return np.clip(step, -1.0, 1.0)


def check_device_mode(device: TeleopDevice, control_mode: str) -> None:
    """Raise ``ValueError`` unless ``device`` can take over a robot in ``control_mode`` (no connection needed)."""
    if device.takes_over and device.relative and control_mode != "ee_delta":
        raise ConfigError("relative teleop devices need the ee_delta control mode (deltas on the measured pose)")
    if device.takes_over and not device.relative and control_mode not in ("joint_delta", "ee_delta"):
        raise ConfigError(f"{device.name} is absolute (joint positions): it intervenes in "
                          "robot.control_mode=joint_delta or ee_delta, stepping the follower towards it")


def check_leader_kinematics(device: TeleopDevice, robot: Any) -> None:
    """Raise ``ValueError`` if ``device`` (a leader arm) would drive ``robot`` in ee_delta without its kinematics.

    Some robots compute their forward kinematics on their controller (an xArm): call it once ``robot`` is connected.
    """
    rc = robot.config
    if device.takes_over and not device.relative and robot.control_mode == "ee_delta" and \
            robot.forward_kinematics(np.asarray(rc.joint_low)) is None:
        raise ConfigError(f"{device.name} (a leader arm) in ee_delta needs the robot's forward kinematics (set "
                          "robot.arm, e.g. so101), or use robot.control_mode=joint_delta")


class InterventionController:
    """Merges a policy and a teleop device into one action per step.

    Relative devices (keyboard, gamepad, SpaceMouse) give ``ee_delta`` actions; an absolute one (a leader arm)
    gives joints, turned into a step towards them from the measured joints: a ``joint_delta`` action (at most
    ``joint_step_rad`` per joint) or, with the follower's forward kinematics ``fk``, an ``ee_delta`` one
    (:func:`leader_ee_step`, ``ee_steps`` = the robot's ``(max_step_m, max_step_rad)``). It takes over only
    within ``engage_tolerance_deg`` of the follower.
    """

    def __init__(self, device: TeleopDevice, config: InterventionConfig | None = None,
                 control_mode: str = "ee_delta", joint_step_rad: float = 0.05,
                 fk: Callable[[np.ndarray], np.ndarray | None] | None = None,
                 ee_steps: tuple[float, float] = (0.01, 0.05)) -> None:
        check_device_mode(device, control_mode)
        self.device = device
        self.config = config or InterventionConfig()
        self.control_mode = control_mode
        self.joint_step_rad = joint_step_rad
        self.fk = fk
        self.ee_steps = ee_steps
        self.waiting_gap_deg: float | None = None
        """A leader arm asked to take over this far (max over joints) from the follower: not engaged yet."""
        self.counts: Counter[str] = Counter()
        self.episode = EpisodeInterventions()
        self._active = False
        self._toggled = False
        self._engaged_before = False
        self._lost = False
        self._gripper: float | None = None
        self._run_len = 0

    @property
    def mode_hint(self) -> str:
        """What the UI should tell the operator; with no person at the device, who takes over (if anyone)."""
        if not self.device.takes_over:
            return f"nobody takes over (teleop {self.device.name} never acts: the policy acts alone)"
        if self.device.stand_in:
            return f"no person at the teleop: {self.device.stand_in} takes over by itself"
        if self.config.mode == "hold":
            return "HOLD the intervene control to take over; release to hand back"
        return "PRESS the toggle control to take over; press again to hand back"

    @property
    def hint(self) -> str:
        """The status line's how-to: take over, or (a leader arm too far away) match the follower first."""
        if not self.device.takes_over:
            return "nobody takes over"
        if self.device.stand_in:
            return "a script takes over"
        if self.waiting_gap_deg is not None:
            return f"leader {self.waiting_gap_deg:.0f}° off: match the follower"
        return "hold to take over" if self.config.mode == "hold" else "toggle to take over"

    @property
    def active(self) -> bool:
        """Whether the human is acting."""
        return self._active

    def step(self, policy_action: np.ndarray, measured_joints: np.ndarray | None = None) -> InterventionStep:
        """Decide this step's action from ``policy_action`` and the device's newest reading.

        ``measured_joints`` (radians) are needed with an absolute device: its joints are a goal from there.
        """
        policy_action = np.asarray(policy_action, dtype=np.float64).reshape(-1)
        reading = self.device.read() if self.device.is_connected else None
        fresh = reading is not None and time.monotonic() - reading.timestamp <= self.config.stale_after_s
        events: tuple[str, ...] = reading.events if (fresh and reading is not None) else ()
        engaged = False
        if fresh and reading is not None:
            pressed = reading.engage and not self._engaged_before
            self._engaged_before = reading.engage
            if self.config.mode == "toggle":
                if "toggle" in events or pressed:
                    self._toggled = not self._toggled
                engaged = self._toggled
            else:
                engaged = reading.engage
            if self._lost and (engaged or not reading.engage):
                self._lost = False
                log.info("teleop device back")
        elif self._active or self._lost:
            if not self._lost:
                self.counts["teleop_lost"] += 1
                log.warning("teleop device %s went stale mid-intervention: holding the arm",
                            "disconnected" if not self.device.is_connected else "stopped updating")
            self._lost, self._toggled, self._engaged_before = True, False, False
        if self._lost:
            self._end_run()
            return self._out(self._hold(policy_action), False, "hold", events)
        human = self._human_motion(reading, measured_joints) if engaged and reading is not None else None
        if not engaged:
            self.waiting_gap_deg = None
        if human is not None and reading is not None:
            if not self._active:
                self.counts["interventions"] += 1
                self.episode.interventions += 1
            self._active = True
            self._run_len += 1
            if reading.gripper is not None:
                self._gripper = float(reading.gripper)
            grip = self._gripper if self._gripper is not None else float(policy_action[-1])
            return self._out(np.append(human, grip), True, "human", events)
        self._end_run()
        self._gripper = float(policy_action[-1])
        return self._out(policy_action, False, "policy", events)

    def _human_motion(self, reading: TeleopReading, measured: np.ndarray | None) -> np.ndarray | None:
        """The human's motion part of the action, or None while a leader arm is too far to take over."""
        if self.device.relative:
            return reading.delta
        leader = reading.joints if isinstance(reading, JointReading) else None
        if leader is None or measured is None:
            raise ValueError(f"{self.device.name}: an absolute device needs its joints and the measured joints")
        gap = np.asarray(leader, np.float64) - np.asarray(measured, np.float64)
        gap_deg = float(np.degrees(np.abs(gap)).max())
        if not self._active and gap_deg > self.config.engage_tolerance_deg:
            self.waiting_gap_deg = gap_deg
            return None
        self.waiting_gap_deg = None
        if self.control_mode == "ee_delta":
            if self.fk is None:
                raise ConfigError("a leader arm in ee_delta needs the follower's forward kinematics")
            return leader_ee_step(self.fk, np.asarray(leader), np.asarray(measured), *self.ee_steps)
        return np.clip(gap / self.joint_step_rad, -1.0, 1.0)

    def hold_action(self, policy_action: np.ndarray) -> np.ndarray:
        """Stay where the arm is: a zero step with the gripper as last commanded (both delta modes)."""
        return self._hold(np.asarray(policy_action, dtype=np.float64).reshape(-1)).astype(np.float32)

    def _hold(self, policy_action: np.ndarray) -> np.ndarray:
        grip = self._gripper if self._gripper is not None else float(policy_action[-1])
        return np.append(np.zeros(policy_action.shape[0] - 1), grip)  # a zero delta: stay (both delta modes)

    def _end_run(self) -> None:
        if self._active and self._run_len:  # a run already closed by reset_episode is not counted twice
            self.episode.lengths.append(self._run_len)
        self._active, self._run_len = False, 0

    def _out(self, action: np.ndarray, intervened: bool, source: str, events: tuple[str, ...]) -> InterventionStep:
        self.episode.steps += 1
        self.episode.intervened_steps += int(intervened)
        return InterventionStep(action.astype(np.float32), intervened, source, events)

    def reset_episode(self) -> EpisodeInterventions:
        """Close the episode's statistics and start new ones (an intervention in progress continues)."""
        if self._active:
            self.episode.lengths.append(self._run_len)
            self._run_len = 0
        done, self.episode = self.episode, EpisodeInterventions()
        return done
