"""A fixed-rate control loop that measures its own period and overruns.

``for tick in RateLoop(20.0): ...`` runs the body at 20 Hz. The loop sleeps until each tick's deadline;
a body that takes longer than one period is an overrun: it is counted, and the schedule restarts from
now instead of firing a burst of catch-up ticks (a robot must not receive several commands at once).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from robot_rl.core.config import ConfigError


@dataclass
class RateStats:
    """Measured loop periods (seconds) and overruns since the loop started."""

    target_period_s: float
    ticks: int
    overruns: int
    p50_s: float
    p99_s: float
    max_s: float

    def summary(self) -> str:
        """One line for logs: ``period p50/p99/max ms, overruns``."""
        return (f"{1 / self.target_period_s:.0f} Hz: period p50 {self.p50_s * 1e3:.1f} ms, "
                f"p99 {self.p99_s * 1e3:.1f} ms, max {self.max_s * 1e3:.1f} ms, "
                f"{self.overruns} overruns in {self.ticks} ticks")


class RateLoop:
    """Iterate at ``hz`` (10–50 Hz for arm control; 1–1000 Hz accepted), measuring every period.

    Each iteration yields the tick index. ``overrun_tolerance`` is the fraction of a period a tick may be
    late before it counts as an overrun.
    """

    def __init__(self, hz: float, window: int = 10_000, overrun_tolerance: float = 0.1,
                 max_ticks: int | None = None) -> None:
        if not 1.0 <= hz <= 1000.0:
            raise ConfigError(f"rate {hz} Hz outside 1..1000 Hz")
        self.period_s = 1.0 / hz
        self.overrun_tolerance = overrun_tolerance
        self.max_ticks = max_ticks
        self.periods: deque[float] = deque(maxlen=window)
        self.overruns = 0
        self.ticks = 0
        self._last: float | None = None
        self._deadline: float | None = None

    def wait(self) -> None:
        """Sleep until the next tick is due, then record the period since the previous tick."""
        now = time.perf_counter()
        deadline = None if self._deadline is None else self._deadline + self.period_s
        slack = self.overrun_tolerance * self.period_s
        if deadline is not None and now > deadline + slack:
            self.overruns += 1
            deadline = None
        elif deadline is not None:
            while (remaining := deadline - time.perf_counter()) > 0:
                time.sleep(remaining)
        tick = time.perf_counter()
        # After an overrun the schedule restarts from this tick (not from `now`: the OS may have run something
        # else in between), so no burst of catch-up ticks follows.
        self._deadline = tick if deadline is None else deadline
        if self._last is not None:
            self.periods.append(tick - self._last)
        self._last = tick
        self.ticks += 1

    def pause(self) -> None:
        """The loop stops on purpose (a robot held while it waits): the next tick starts a new schedule.

        The time until that tick is neither a period nor an overrun.
        """
        self._deadline = self._last = None

    def __iter__(self) -> Iterator[int]:
        while self.max_ticks is None or self.ticks < self.max_ticks:
            self.wait()
            yield self.ticks - 1

    def stats(self) -> RateStats:
        """Period percentiles over the last ``window`` ticks."""
        p = np.asarray(self.periods) if self.periods else np.zeros(1)
        return RateStats(self.period_s, self.ticks, self.overruns, float(np.percentile(p, 50)),
                         float(np.percentile(p, 99)), float(p.max()))
