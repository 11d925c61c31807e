"""The one way tests wait for something to happen: poll a condition, fail loudly at the deadline.

A fixed ``time.sleep`` as synchronisation is either too short on a loaded machine (a flaky failure) or too
long everywhere (a slow suite); a poll loop that gives up silently turns a broken feature into a confusing
assertion further down, or none at all. ``wait_until`` polls the real condition and, at its deadline, fails
the test saying what it waited for and what it last saw.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, poll_s: float = 0.01,
               seen: Callable[[], object] | None = None) -> T:
    """Poll ``predicate`` every ``poll_s`` seconds until it returns something truthy, and return that.

    At ``timeout_s`` the test fails with ``what`` (the condition, in words) and what was last seen: ``seen()``
    if given, else the predicate's last value. The predicate is always tried once more at the deadline, so a
    condition that became true while the poller slept is not reported as a failure.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            value = predicate()
            if value:
                return value
            last = seen() if seen is not None else value
            pytest.fail(f"waited {timeout_s:g} s for {what}; last saw: {last!r}")
        time.sleep(poll_s)
