"""Jump-start RL (Uchendu et al., 2022): a guide policy rolls in, the learner takes over, the hand-over moves earlier.

For the first ``h`` steps of each episode a *guide* acts (an offline or SFT policy, or a scripted controller);
from step ``h`` on the learning policy acts. The learner thus starts from states the guide reaches, near the goal,
and learns backwards. ``h`` starts at ``horizon`` and shrinks by ``horizon / stages`` each time the learner's
success over the last ``window`` episodes reaches ``threshold``, down to 0 (plain online RL). Rows the guide
acted are flagged (``guided``) so the learner and its logs can tell them apart.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass
class JSRLConfig:
    """The guide's hand-over curriculum."""

    horizon: int = 40
    """Guide steps at the start (usually the episode length)."""
    stages: int = 10
    """The horizon goes to 0 in this many equal steps."""
    threshold: float = 0.8
    """Learner success over ``window`` episodes that moves the hand-over earlier."""
    window: int = 20
    """Episodes the success is measured over (the window restarts after each move)."""

    def __post_init__(self) -> None:
        if self.horizon < 0 or self.stages < 1 or self.window < 1 or not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"jsrl: horizon >= 0, stages >= 1, window >= 1 and threshold in (0, 1] (got {self})")


class JSRLSchedule:
    """Who acts at each step of an episode, and the curriculum over episodes (module docstring)."""

    def __init__(self, config: JSRLConfig) -> None:
        self.config = config
        self.stage = 0
        self.history: list[tuple[int, int]] = []
        """``(episode index, new guide horizon)`` at every move."""
        self._results: deque[bool] = deque(maxlen=config.window)
        self._episodes = 0

    @property
    def guide_steps(self) -> int:
        """Steps the guide acts at the start of an episode now."""
        c = self.config
        return max(0, round(c.horizon * (c.stages - self.stage) / c.stages))

    def guide_acts(self, step: int) -> bool:
        """Whether the guide acts at ``step`` (0-based) of the current episode."""
        return step < self.guide_steps

    def end_episode(self, success: bool) -> bool:
        """Record an episode's outcome; True when the hand-over moved earlier."""
        self._episodes += 1
        self._results.append(bool(success))
        c = self.config
        full = len(self._results) == c.window
        if self.guide_steps == 0 or not full or sum(self._results) / c.window < c.threshold:
            return False
        self.stage += 1
        self._results.clear()
        self.history.append((self._episodes, self.guide_steps))
        return True
