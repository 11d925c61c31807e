"""Hold Ctrl-C and SIGTERM over a few lines that must finish together, then deliver them.

A stop that lands between "the episode is on disk" and "the summary counts it" leaves a summary that disagrees
with the disk. Inside :func:`interrupts_held` the signals are noted, not raised; on the way out the first one is
delivered as the handler that was in force would have delivered it (Ctrl-C's KeyboardInterrupt, or the verb's
own SIGTERM handler). A second signal inside the block interrupts at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["interrupts_held"]

_HELD = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block is done (only the main thread receives signals: elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[tuple[int, Any]] = []

    def note(signum: int, frame: Any) -> None:
        if pending:  # a second stop: the person means it (a hung disk must not hold the verb forever)
            raise KeyboardInterrupt(signal.Signals(signum).name)
        pending.append((signum, frame))

    # A signal the process ignores (a background job's SIGINT, nohup) stays ignored: holding it would un-ignore it.
    held = [s for s in _HELD if signal.getsignal(s) not in (signal.SIG_IGN, None)]
    previous: dict[int, Any] = {int(s): signal.signal(s, note) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if pending:
            signum, frame = pending[0]
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)
