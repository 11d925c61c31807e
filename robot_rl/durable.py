"""Durable file commits shared by replay segments, checkpoints and episode stores, and crash points for tests.

It imports nothing from the package, so the checkpoint and the replay both build on it without importing each other.

A commit is: write a temp file in the target directory, ``fsync`` it, ``rename`` it over the final
name, ``fsync`` the directory. After a crash the final name holds either the old or the new bytes,
never a mixture; a leftover temp file is ignored and cleaned up by whoever opens the directory.

Out-of-space errors (``ENOSPC``, ``EDQUOT``, ``EFBIG`` from a file-size limit) become
:class:`DiskFullError`, so callers can tell "the disk is full, hold the robot" from a bug.
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

#: errno values that mean "no room to write", not "something is broken".
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}

_CRASH_ENV = "ROBOT_RL_CRASH_POINT"
_crash_hits: dict[str, int] = {}


class DiskFullError(OSError):
    """A durable write failed for lack of space; what was committed before is intact."""


def is_disk_full(e: BaseException) -> bool:
    """``True`` for an ``OSError`` that means the disk (or a file-size limit) is full."""
    return isinstance(e, OSError) and e.errno in _FULL


def crash_point(name: str) -> None:
    """Die with SIGKILL here if ``$ROBOT_RL_CRASH_POINT`` is ``name`` or ``name:N`` (the N-th time).

    Tests use it to kill a process at an exact step of a commit (between the temp write and the
    rename, between the data and the manifest, …). Without the variable this is one dict lookup.
    """
    spec = os.environ.get(_CRASH_ENV)
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    _crash_hits[name] = _crash_hits.get(name, 0) + 1
    if _crash_hits[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, chunks: list[bytes | memoryview]) -> None:
    """Write ``chunks`` to a new file ``path`` and fsync it (no rename)."""
    with open(path, "wb") as f:
        for c in chunks:
            f.write(c)
        f.flush()
        os.fsync(f.fileno())


def commit_file(path: Path, chunks: list[bytes | memoryview], crash_name: str = "") -> None:
    """Atomically replace ``path`` with ``chunks``: temp → fsync → rename → fsync dir.

    On any failure the temp file is removed and ``path`` is untouched; a full disk raises
    :class:`DiskFullError` naming the file.
    """
    path = Path(path)
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    try:
        write_synced(tmp, chunks)
        if crash_name:
            crash_point(crash_name + ".before_rename")
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if is_disk_full(e):
            raise DiskFullError(e.errno, f"no space to write {path} ({os.strerror(e.errno or 0)}); "
                                         "everything committed before is intact") from e
        raise


def remove_temp_files(directory: Path) -> int:
    """Delete leftovers of interrupted commits (``.tmp-*``) in ``directory``; returns how many."""
    n = 0
    for p in Path(directory).glob(".tmp-*"):
        if p.is_file():
            p.unlink(missing_ok=True)
            n += 1
    return n
