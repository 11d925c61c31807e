"""A watchdog thread that holds the robot when commands stop arriving.

Every fresh command calls :meth:`Watchdog.kick`. If no kick arrives within ``timeout_s`` of the last one, the
watchdog calls ``on_trip`` once from its own thread and stays tripped (latched) until :meth:`Watchdog.arm` is
called again. An armed watchdog starts counting at the first kick after :meth:`~Watchdog.arm`: what it guards is a
command stream that stops, and before the first command there is none (the robot holds what it measured at
arming). So a slow start (a first camera render, a policy loading) does not trip it; a stream that stalls after its
first command does. The thread sleeps on an event with the exact remaining time, so it fires within the OS
scheduling latency of the deadline, not on a polling grid.

Limit: this thread needs Python's GIL for a moment to run. A main thread stuck inside a C call that holds the GIL
delays it; :class:`~robot_rl.hardware.estop.EStopGuard` is a separate process that covers that case.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from robot_rl.core.config import ConfigError

log = logging.getLogger(__name__)


class Watchdog:
    """Calls ``on_trip`` when :meth:`kick` has not been called for ``timeout_s`` while armed."""

    def __init__(self, timeout_s: float, on_trip: Callable[[float], None], name: str = "robot-watchdog") -> None:
        if timeout_s <= 0:
            raise ConfigError("watchdog timeout must be positive")
        self.timeout_s = timeout_s
        self._on_trip = on_trip
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._armed = False
        self._started = False  # a kick arrived since arm(): the deadline runs
        self._last = time.monotonic()
        self.tripped = False
        self.trips = 0
        self.last_trip_delay_s: float | None = None
        """Seconds from the last kick to the moment ``on_trip`` was called (the measured stop latency)."""
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def arm(self) -> None:
        """Start (or restart after a trip) watching; the deadline counts from the next :meth:`kick`."""
        with self._lock:
            self._armed, self._started, self.tripped, self._last = True, False, False, time.monotonic()
        self._wake.set()

    def disarm(self) -> None:
        """Stop watching (e.g. while disconnected)."""
        with self._lock:
            self._armed = False
        self._wake.set()

    def kick(self) -> None:
        """A fresh command arrived."""
        with self._lock:
            self._last = time.monotonic()
            first, self._started = not self._started, True
        if first:
            self._wake.set()

    @property
    def armed(self) -> bool:
        """Whether the watchdog is watching (armed and not tripped)."""
        return self._armed

    def close(self) -> None:
        """Stop the thread."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                armed, last = self._armed and self._started, self._last
            if not armed:
                self._wake.wait()
                self._wake.clear()
                continue
            remaining = last + self.timeout_s - time.monotonic()
            if remaining > 0:
                self._wake.wait(remaining)
                self._wake.clear()
                continue
            with self._lock:
                if self._last != last or not self._armed:  # kicked or disarmed meanwhile
                    continue
                self._armed, self.tripped = False, True
            delay = time.monotonic() - last
            self.trips += 1
            self.last_trip_delay_s = delay
            try:
                self._on_trip(delay)
            except Exception:  # the thread must survive a failing hold to watch again after re-arm
                log.exception("watchdog: hold failed")
