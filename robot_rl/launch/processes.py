"""Child processes that die with their parent: a launcher killed by SIGKILL must not leave orphans training."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Linux only: the kernel sends SIGTERM to this child when the thread that started it exits, so an actor drains
    # and says goodbye even when its supervisor (a launcher, a Ray worker) was killed outright.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def preexec() -> Callable[[], None] | None:
    """The ``preexec_fn`` for a supervised child on this platform (None where the death signal does not exist)."""
    return _die_with_parent if sys.platform.startswith("linux") else None


def start(argv: list[str], stdout: IO[Any] | int | None, stderr: IO[Any] | int | None = None,
          cwd: str | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session (a terminal's Ctrl-C reaches the launcher, which passes it on)."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=env, cwd=cwd, start_new_session=True,
                            preexec_fn=preexec())


def start_logged(argv: list[str], log_path: Path, cwd: str | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` (in ``cwd``) with stdout and stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        return start(argv, out, subprocess.STDOUT, cwd)


def send(p: subprocess.Popen[bytes], sig: int) -> None:
    """Signal ``p`` if it still runs."""
    try:
        p.send_signal(sig)
    except ProcessLookupError:
        pass


def stop(procs: list[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGTERM to each, then SIGKILL to any still running after ``grace_s`` (as engines stop processes)."""
    import time

    for p in procs:
        if p.poll() is None:
            send(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            send(p, signal.SIGKILL)
            p.wait()
