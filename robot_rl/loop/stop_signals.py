"""A stop request from SIGINT or SIGTERM that a loop checks between steps, instead of an exception mid-step.

Cluster engines (Ray, SLURM, Kubernetes) stop a process with SIGTERM and SIGKILL it after a grace period; a
person presses Ctrl-C. Either way a process holding unacknowledged data should finish the step it is in, drain,
say goodbye and exit 0 within the grace time. Raising ``KeyboardInterrupt`` wherever the signal lands would cut a
send in half; a flag lets the loop stop at a step boundary. A second signal is the impatient one: it raises
``KeyboardInterrupt`` at once.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Set by the first SIGINT/SIGTERM inside :meth:`installed`; :attr:`signal_name` says which."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name: str | None = None
        #: ``time.monotonic()`` of the first request (a grace period counts from it).
        self.requested_at: float | None = None
        self._callbacks: list[Callable[[], None]] = []

    def is_set(self) -> bool:
        """Whether a stop was asked for."""
        return self._event.is_set()

    def set(self, reason: str = "requested") -> None:
        """Ask for a stop (a signal, or code that wants the loop to end); later requests change nothing."""
        if self._event.is_set():
            return
        self.signal_name, self.requested_at = reason, time.monotonic()
        self._event.set()
        for fn in self._callbacks:
            fn()  # runs in the signalled thread, inside whatever it was doing: keep it to setting a value

    def when_requested(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once, at the first request (e.g. to bound a blocked send by the grace time)."""
        self._callbacks.append(fn)

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early on a stop; ``True`` if a stop was asked for."""
        return self._event.wait(seconds)

    def wait_for(self, ready: Any, timeout_s: float, slice_s: float = 0.2) -> Any:
        """Call ``ready(slice_s)`` until it returns non-None, the deadline passes or a stop is asked for.

        ``ready`` is a bounded wait (e.g. a weight wait with a timeout); slicing it keeps the stop prompt.
        """
        deadline = time.monotonic() + timeout_s
        while not self.is_set():
            out = ready(min(slice_s, max(deadline - time.monotonic(), 0.0)))
            if out is not None or time.monotonic() >= deadline:
                return out
        return None

    @contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """SIGINT and SIGTERM set this request while inside (main thread only; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        def on_signal(signum: int, frame: Any) -> None:
            if self.is_set():
                raise KeyboardInterrupt(signal.Signals(signum).name)
            self.set(signal.Signals(signum).name)

        previous = {s: signal.signal(s, on_signal) for s in _SIGNALS}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def deadline(self, grace_s: float) -> float:
        """``grace_s`` after the stop request (or after now when none came): when stopping must be done."""
        return (self.requested_at if self.requested_at is not None else time.monotonic()) + grace_s
