"""The simulated pick task seen from outside: what a scripted "human" reads, the scripted pick and the intervener.

Both simulated robots (``sim_arm``, ``sim_so101``) implement :class:`PickScene`: from their last observation they
report the grip point, the cube and the gripper opening (:class:`PickView`), the way a person watching the cell
sees them. :func:`pick_expert` turns a view into an ``ee_delta`` action, and :class:`PickIntervener` is the
scripted person of the ``pick_demonstrator``, ``pick_fumbler`` and ``pick_intervener`` devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class PickView:
    """The pick task at one observation (metres, in the robot's base frame)."""

    grip: np.ndarray
    """``[3]`` the point between the fingers."""
    cube: np.ndarray
    """``[3]`` the cube's centre."""
    opening: float
    """Gripper opening 0 (closed) … 1 (open)."""
    rest_z: float
    """Height of the cube's centre when it lies where it starts."""
    lift_height: float
    """Success: the grasped cube this far above ``rest_z``."""
    max_step_m: float
    """ee_delta translation per step at action 1.0."""
    miss_dir: tuple[float, float, float] = (1.0, 0.0, 0.0)
    """Direction of a deliberate miss (``miss_m``): one along which the fingers close on nothing."""
    lift_follow: bool = True
    """While lifting, keep centring on the cube. False for a gripper that holds the cube off its grip point (the
    SO-101 presses it against its fixed jaw): following would chase the held cube sideways."""


@runtime_checkable
class PickScene(Protocol):
    """A robot that shows the pick task to a scripted person (the simulated robots)."""

    def pick_view(self) -> PickView | None:
        """The task at the last observation (None before the first); raises ValueError if it cannot be seen."""
        ...


def pick_expert(view: PickView, gain: float = 1.0, miss_m: float = 0.0) -> np.ndarray:
    """A scripted pick: the ``ee_delta`` action ``[7]`` for ``view``.

    Above the cube with the gripper open, down, close, lift. ``gain`` scales the motion (1.0: full speed).
    ``miss_m`` aims that far beside the cube (along ``miss_dir``): the same motions grasping nothing, the failures
    a success classifier must tell apart.
    """
    grip, opening, cube = view.grip, view.opening, view.cube
    off = cube + miss_m * np.asarray(view.miss_dir, np.float32) - grip
    a = np.zeros(7, np.float32)
    horizontal = float(np.linalg.norm(off[:2]))
    if horizontal > 0.012 and cube[2] < view.rest_z + 0.015:  # line up above the cube, at a safe height
        a[:2] = off[:2]
        a[2] = view.rest_z + 0.055 - grip[2]
        a[6] = 1.0
    elif grip[2] - cube[2] > 0.012 and opening > 0.6:  # descend open
        a[:2] = off[:2]
        a[2] = -(grip[2] - cube[2])
        a[6] = 1.0
    elif opening > 0.7:  # close
        a[6] = -1.0
    else:  # lift
        a[:2] = off[:2] if view.lift_follow else 0.0
        a[2] = 0.05
        a[6] = -1.0
    a[:3] = np.clip(gain * a[:3] / view.max_step_m, -1.0, 1.0)
    return a


def _lifted(view: PickView) -> bool:
    """The pick is done: the cube ``lift_height`` above where it lay, held between the fingers."""
    return bool(view.cube[2] - view.rest_z >= view.lift_height and np.linalg.norm(view.cube - view.grip) < 0.04)


class PickIntervener:
    """A scripted "human" for :class:`~robot_rl.human_loop.devices.scripted.ScriptedDevice` on the pick task.

    It watches what the robot last observed (:meth:`PickScene.pick_view`), and takes over with
    :func:`pick_expert` for ``takeover_steps`` steps when the policy made no progress (closer to the
    cube, or the cube higher) for ``patience`` steps (``patience=0``: always in control, i.e. demonstrations). With
    ``press_success`` it presses the success key when it sees the cube lifted. ``intervene=False`` keeps
    only the keys. ``miss_m > 0`` grasps that far beside the cube and presses *failure* once the empty gripper
    is lifted (failed attempts for a classifier's data). ``only_when_asked``: it takes over only when it hears the
    robot ask for help (:meth:`hear_help_request`), never unasked. Use: ``ScriptedDevice(PickIntervener(arm))``.
    """

    def __init__(self, arm: PickScene, patience: int = 8, takeover_steps: int = 30, press_success: bool = True,
                 intervene: bool = True, miss_m: float = 0.0, only_when_asked: bool = False) -> None:
        arm.pick_view()  # refuses now a robot whose task cannot be seen (sim_arm without object_in_state)
        self.arm = arm
        self.patience = patience
        self.takeover_steps = takeover_steps
        self.press_success = press_success
        self.intervene = intervene
        self.miss_m = miss_m
        self.only_when_asked = only_when_asked
        self.asked = False
        self._unanswered = False  # a request heard and not taken over yet
        self.takeovers = 0
        self._new_episode()
        self._prev_cube: np.ndarray | None = None

    def hear_help_request(self, asking: bool) -> None:
        """The robot asks for help (or no longer does).

        With ``only_when_asked`` a new request is the cue to take over, once per request: it hands back after
        ``takeover_steps``, as a person would.
        """
        if asking and not self.asked:
            self._unanswered = True
        if not asking and self.only_when_asked:
            # While the person acts a request stays open; it ends under them only with the episode (or a fallback).
            self._left = 0
        self.asked = asking

    def answer_reward_audit(self) -> bool | None:
        """Is the task done (the cube lifted in the gripper), as a person watching the cell sees it."""
        view = self.arm.pick_view()
        return None if view is None else bool(_lifted(view))

    def _new_episode(self) -> None:
        self._best = np.inf
        self._stall = 0
        self._left = 0
        self._pressed = False

    def __call__(self, step: int) -> Any:
        """The reading for this control step."""
        from robot_rl.hardware.teleop import TeleopReading

        view = self.arm.pick_view()
        if view is None:
            return TeleopReading(timestamp=0.0)
        grip, cube = view.grip, view.cube
        if (self._prev_cube is not None and np.linalg.norm(cube - self._prev_cube) > 0.02
                and cube[2] < view.rest_z + 0.005):
            self._new_episode()  # the cube jumped back onto the table: a reset happened
        self._prev_cube = cube.copy()
        events: tuple[str, ...] = ()
        lifted = _lifted(view)
        if self.press_success and lifted and not self._pressed:
            self._pressed = True
            events = ("success",)
        closed_high = view.opening < 0.7 and grip[2] - cube[2] >= view.lift_height
        if self.miss_m and closed_high and not lifted and not self._pressed:
            self._pressed = True
            events = ("failure",)
        # Progress is getting closer to the cube or raising it: a policy that holds the cube and lifts it is
        # left to try (as a human lets a lift go on), not taken over because the distance no longer shrinks.
        dist = float(np.linalg.norm(cube - grip)) - max(float(cube[2]) - view.rest_z, 0.0)
        if dist < self._best - 0.005:
            self._best, self._stall = dist, 0
        else:
            self._stall += 1
        wants = self.asked and self._unanswered if self.only_when_asked else self._stall >= self.patience
        if self.intervene and self._left == 0 and wants and not lifted:
            self._left, self._stall, self._unanswered = self.takeover_steps, 0, False
            self.takeovers += 1
        if self._left > 0:
            self._left -= 1
            a = pick_expert(view, miss_m=self.miss_m)
            return TeleopReading(timestamp=0.0, delta=a[:6], gripper=float(a[6]), engage=True, events=events)
        return TeleopReading(timestamp=0.0, events=events)


class PickWanderer:
    """A scripted person moving the gripper around the cell without picking: negatives for a success classifier.

    HIL-SERL trains its classifier on about a thousand frames of the arm moved around by teleop, not only on
    demonstrations: a policy explores poses no demo shows (the gripper high and closed, pressed against a face of
    the workspace box), and a classifier never shown them may call them success. This script goes from one random
    point around the cube to the next (``reach_m`` sideways, up to ``height_m`` above the table; points outside
    the safety box end at its face), opening or closing the gripper at each, and never descends onto the cube.
    """

    def __init__(self, arm: PickScene, seed: int = 0, reach_m: float = 0.15, height_m: float = 0.22,
                 steps_per_point: int = 20) -> None:
        arm.pick_view()  # refuses a robot whose task cannot be seen
        self.arm = arm
        self.rng = np.random.default_rng(seed)
        self.reach_m = reach_m
        self.height_m = height_m
        self.steps_per_point = steps_per_point
        self._goal: np.ndarray | None = None
        self._gripper = 1.0
        self._left = 0

    def _next_point(self, view: PickView) -> np.ndarray:
        r = self.reach_m
        goal = view.cube + self.rng.uniform([-r, -r, 0.0], [r, r, self.height_m])
        goal[2] = max(goal[2], view.rest_z - 0.02)
        if np.linalg.norm(goal[:2] - view.cube[:2]) < 0.06:  # over the cube: stay clear of it
            goal[2] = max(goal[2], view.rest_z + 0.07)
        self._gripper = float(self.rng.choice([-1.0, 1.0]))
        self._left = self.steps_per_point
        return goal

    def __call__(self, step: int) -> Any:
        """The reading for this control step: always in control, heading for the current point."""
        from robot_rl.hardware.teleop import TeleopReading

        view = self.arm.pick_view()
        if view is None:
            return TeleopReading(timestamp=0.0)
        if self._goal is None or self._left <= 0 or np.linalg.norm(self._goal - view.grip) < 0.01:
            self._goal = self._next_point(view)
        self._left -= 1
        a = np.zeros(7, np.float32)
        a[:3] = np.clip((self._goal - view.grip) / view.max_step_m, -1.0, 1.0)
        return TeleopReading(timestamp=0.0, delta=a[:6], gripper=self._gripper, engage=True)
