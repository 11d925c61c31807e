"""The test tiers (docs/testing.md), as a pytest plugin that ``tests/conftest.py`` loads.

Every test is ``unit`` unless it is marked ``integration`` or ``slow`` (itself, by its class or by its module's
``pytestmark``), so a new test lands in the unit tier by default and ``pytest -m unit`` is the edit-test loop.
A unit test is held to what the tier promises while it runs (its setup, call and teardown, unless that teardown
also closes its file's module fixtures):

- it starts no process (``subprocess``, ``os.fork``/``forkpty``/``posix_spawn``/``system``, ``multiprocessing``),
- it binds or connects no socket (``socket.socket``, ZeroMQ),
- it sleeps no longer than ``SLEEP_LIMIT_S`` at a time on the test's thread,
- and it takes at most ``CPU_LIMIT_S`` of this process's CPU time, and its thread is blocked (waiting, not
  computing and not queued for a CPU) at most ``BLOCKED_LIMIT_S``.

A test that breaks a rule fails, when its phase ends, with a line that says which rule, where, and to mark it
``integration``. The rules are checked in every run, not only under ``-m unit``: a unit test that starts a
process fails in the whole suite too, so the tier stays what it says as tests are added. Integration and slow
tests may do all of it.
"""

from __future__ import annotations

import ctypes.util
import multiprocessing.process
import os
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# One sleep on the test's thread that is longer than this is waiting, not a fake device's frame period or a
# rate loop's tick (those are 1/30 s and shorter in this suite).
SLEEP_LIMIT_S = 0.1
# The tier's budget is 2 minutes for ~1000 tests on 2 cores, ~0.1 s a test; a unit test may take 50x that.
# It is counted in this process's CPU time (all its threads), which other jobs on the machine barely change,
# so the rule holds on a loaded CI machine; at the limit a test is doing training or a simulator rollout.
CPU_LIMIT_S = 5.0
# What costs no CPU (a thread join, an Event.wait, a poll with short sleeps) is the time the test's thread was
# blocked: its wall time minus its time on a CPU and its wait in the run queue for one (Linux's schedstat), so a
# busy machine does not count (a wall-clock limit failed FastTD3's 3.8 s-CPU bandit at 24 s under load).
BLOCKED_LIMIT_S = 5.0
# A hung unit test stops here instead of at the suite's 300 s (pyproject.toml), unless it names its own.
UNIT_TIMEOUT_S = 60

_GUIDANCE = ("a unit test runs in one process with no subprocess, socket, sleep or long computation "
             "(docs/testing.md); mark it @pytest.mark.integration (a whole file: pytestmark = "
             "pytest.mark.integration), or @pytest.mark.slow if it takes more than ~10 s")


class _Watch:
    """The unit test now running (None between tests and during integration tests) and the rules it broke."""

    def __init__(self) -> None:
        self.item: pytest.Item | None = None
        self.thread: int | None = None
        self.violations: list[str] = []

    def breach(self, what: str) -> None:
        """Record a broken rule, and where; the test fails when its phase ends.

        The call goes ahead: failing it on the spot would leave the code under test half set up (a ZeroMQ
        context whose socket never closed blocks its garbage collection forever), so the test runs as it would
        in its right tier and its report says what to change.
        """
        self.violations.append(f"unit test {what}{_where(self.item)}: {_GUIDANCE}")


def _where(item: pytest.Item | None) -> str:
    """`` at file:line`` of the innermost frame in the test's file, else of the innermost frame outside this file."""
    frames = [f for f in traceback.extract_stack() if f.filename != __file__]
    ours = [f for f in frames if item is not None and f.filename == str(item.path)]
    frame = (ours or frames or [None])[-1]
    return "" if frame is None else f" at {os.path.relpath(frame.filename)}:{frame.lineno}"


_WATCH = _Watch()


def _describe(args: Any) -> str:
    text = " ".join(str(a) for a in args) if isinstance(args, (list, tuple)) else str(args)
    return " ".join(text.split())[:120]


# Processes that a library starts to answer a question, not ones the test starts: ctypes.util.find_library
# runs `ldconfig -p` (tests/needs.py asks it whether MuJoCo can render).
_LOOKUPS = (ctypes.util.__file__,)


def _a_lookup() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename in _LOOKUPS:
            return True
        frame = frame.f_back
    return False


def _guard(original: Callable[..., Any], what: Callable[..., str]) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _WATCH.item is not None and not _a_lookup():
            _WATCH.breach(what(*args, **kwargs))
        return original(*args, **kwargs)

    guarded.__wrapped__ = original  # type: ignore[attr-defined]
    return guarded


def _guarded_sleep(original: Callable[[float], None]) -> Callable[[float], None]:
    def sleep(seconds: float) -> None:
        if _WATCH.item is not None and seconds > SLEEP_LIMIT_S and threading.get_ident() == _WATCH.thread:
            _WATCH.breach(f"slept {seconds:g} s (time.sleep longer than {SLEEP_LIMIT_S} s)")
        original(seconds)

    return sleep


def _install() -> None:
    """Wrap what a unit test must not call, once per session; the wrappers pass through unless a unit test runs."""
    subprocess.Popen.__init__ = _guard(  # type: ignore[method-assign]
        subprocess.Popen.__init__,
        lambda self, *a, **k: f"started a process (subprocess: {_describe(a[0] if a else k.get('args'))})")
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            setattr(os, name, _guard(getattr(os, name), lambda *a, _n=name, **k: f"started a process (os.{_n})"))
    multiprocessing.process.BaseProcess.start = _guard(  # type: ignore[method-assign]
        multiprocessing.process.BaseProcess.start, lambda self: f"started a process (multiprocessing: {self.name})")
    for name in ("bind", "connect", "connect_ex"):
        setattr(socket.socket, name, _guard(
            getattr(socket.socket, name), lambda self, *a, _n=name: f"used a socket ({_n} {a[0] if a else ''!r})"))
    try:
        import zmq
    except ImportError:
        pass
    else:
        for name in ("bind", "connect"):
            setattr(zmq.Socket, name, _guard(getattr(zmq.Socket, name), lambda self, *a, _n=name, **k:
                                             f"used a socket (zmq {_n} {a[0] if a else k.get('addr')})"))
    time.sleep = _guarded_sleep(time.sleep)


def pytest_configure(config: pytest.Config) -> None:
    _install()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test ``unit`` that is not ``integration`` or ``slow``, before ``-m`` selects on the marks."""
    for item in items:
        tiers = {name for name in ("unit", "integration", "slow") if item.get_closest_marker(name) is not None}
        if "unit" in tiers and len(tiers) > 1:
            raise pytest.UsageError(f"{item.nodeid} is marked {' and '.join(sorted(tiers))}: a test has one tier")
        if tiers - {"unit"}:
            continue
        item.add_marker(pytest.mark.unit)
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))


_SPENT = pytest.StashKey[list[float]]()  # [blocked s, CPU s] of a unit test's phases so far


def _running_s() -> float:
    """Seconds this thread has been on a CPU or queued for one; without schedstat, its wall clock (never blocked)."""
    try:
        on_cpu_ns, queued_ns, _ = open("/proc/thread-self/schedstat").read().split()
    except (OSError, ValueError):
        return time.perf_counter()
    return (int(on_cpu_ns) + int(queued_ns)) / 1e9


def _is_unit(item: pytest.Item) -> bool:
    return item.get_closest_marker("unit") is not None


def _watched(item: pytest.Item, watch: bool = True) -> Iterator[None]:
    if not (watch and _is_unit(item)):
        return (yield)
    _WATCH.item, _WATCH.thread, _WATCH.violations = item, threading.get_ident(), []
    wall, running, cpu = time.perf_counter(), _running_s(), time.process_time()
    try:
        return (yield)
    finally:
        _WATCH.item = None
        spent = item.stash.setdefault(_SPENT, [0.0, 0.0])
        spent[0] += max(0.0, (time.perf_counter() - wall) - (_running_s() - running))
        spent[1] += time.process_time() - cpu


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _watched(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _watched(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # The last test of a file also tears down its module's fixtures, which may be integration tests' (a
    # simulator process): that teardown is theirs, so only a teardown with the next test in the same file counts.
    return (yield from _watched(item, nextitem is not None and nextitem.path == item.path))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Fail the phase of a unit test in which it broke a rule."""
    report: pytest.TestReport = yield
    if not _is_unit(item) or report.skipped:
        return report
    problems = list(dict.fromkeys(_WATCH.violations))
    if len(problems) > 3:
        problems = [*problems[:3], f"... and {len(problems) - 3} more"]
    _WATCH.violations = []
    blocked, cpu = item.stash.get(_SPENT, [0.0, 0.0])
    if cpu > CPU_LIMIT_S or blocked > BLOCKED_LIMIT_S:
        problems.append(f"unit test took {cpu:.1f} s CPU and waited {blocked:.1f} s (limits {CPU_LIMIT_S:g} s CPU, "
                        f"{BLOCKED_LIMIT_S:g} s waiting, through its {call.when}): {_GUIDANCE}")
        item.stash[_SPENT] = [float("-inf"), float("-inf")]  # report the overrun once
    if not problems:
        return report
    if report.passed:
        report.outcome = "failed"
        report.longrepr = "\n".join(problems)
    else:  # failed already: add what the traceback does not say
        said = str(report.longrepr)
        if missing := [p for p in problems if p not in said]:
            report.sections.append(("tier", "\n".join(missing)))
    return report
