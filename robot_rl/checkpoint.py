"""Atomic checkpoints: write to a temp directory, fsync, rename; the pointer to the latest last.

Layout under ``<run>/checkpoints/``::

    step_000000120000/state.pt    torch.save of plain tensors/dicts (loaded with weights_only=True)
    step_000000120000/meta.json   counters, time, sha256 of state.pt
    latest                        the name of the newest committed checkpoint (for people and tools)

The rename commits a checkpoint; ``latest`` is written after it, so a kill between the two leaves it naming
the previous one. Loading therefore never trusts the pointer: it takes the committed checkpoint of the
highest step. The previous good checkpoint is never removed before the new one is committed; older ones
beyond ``keep`` are pruned afterwards. Loading verifies the checksum and falls back to the previous
checkpoint (saying so) if the newest is damaged. A write that runs out of space removes its temp
directory and raises :class:`~robot_rl.durable.DiskFullError`; the committed ones are
untouched. Replay buffers are not in ``state.pt``: they live in their own segment files
(:mod:`robot_rl.replay.segments`) and the checkpoint records their watermark.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from robot_rl.core.errors import UserError
from robot_rl.durable import DiskFullError, crash_point, is_disk_full

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError, UserError):
    """No usable checkpoint could be loaded."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes | memoryview) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a crash leaves the old file or the new one, never a torn one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    _write_file(tmp, text.encode())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def state_digest(state: Any) -> str:
    """SHA-256 over a nested state (tensors by dtype, shape and bytes; plain values by repr), key order fixed.

    Two states with the same digest hold the same weights, optimiser moments and counters, so a
    resume can prove it restored exactly what was saved.
    """
    h = hashlib.sha256()

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(x, dict):
            h.update(b"{")
            for k in sorted(x, key=str):
                h.update(repr(k).encode())
                walk(x[k])
            h.update(b"}")
        elif isinstance(x, (list, tuple)):
            h.update(b"[")
            for v in x:
                walk(v)
            h.update(b"]")
        else:
            h.update(repr(x).encode())

    walk(state)
    return h.hexdigest()


def save_checkpoint(run_dir: Path, step: int, state: dict[str, Any], meta: dict[str, Any],
                    keep: int = 3) -> Path:
    """Commit ``state`` (tensors and plain data) as the checkpoint for ``step``; return its directory.

    Raises :class:`DiskFullError` (after removing the partial copy) when the disk is full.
    """
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:012d}"
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    try:
        _write_dir(tmp, state, meta, step)
        crash_point("checkpoint.before_rename")
        if final.exists():
            # Same step saved twice (e.g. an interrupt right after a periodic save): swap, then drop the old.
            # A kill between the two renames leaves only the old copy, under its .old- name: loading finds it.
            old = root / f"{_SWAPPED}{name}-{os.getpid()}"
            os.replace(final, old)
            crash_point("checkpoint.mid_swap")
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync_dir(root)
        crash_point("checkpoint.before_latest")
        atomic_write_text(root / "latest", name + "\n")
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(e):
            raise DiskFullError(e.errno, f"no space to write checkpoint {final}; the previous checkpoints in "
                                         f"{root} are intact") from e
        raise
    _prune(root, keep, protect=name)
    return final


def _write_dir(tmp: Path, state: dict[str, Any], meta: dict[str, Any], step: int) -> None:
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    # Serialised in memory and written with plain file I/O, so a full disk is an OSError (ENOSPC)
    # rather than torch's C++ writer error, and the checksum needs no second read.
    blob = io.BytesIO()
    torch.save(state, blob)
    data = blob.getbuffer()
    _write_file(tmp / "state.pt", data)
    crash_point("checkpoint.after_state")
    digest = hashlib.sha256(data).hexdigest()
    _write_file(tmp / "meta.json", json.dumps({**meta, "step": step, "sha256": digest}, indent=2).encode())
    _fsync_dir(tmp)


_SWAPPED = ".old-"
"""Prefix of a committed checkpoint moved aside while a new save of the same step takes its name."""


def _committed(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("step_*") if p.is_dir())


def _stranded(root: Path) -> list[Path]:
    """Committed checkpoints moved aside for a same-step save that a kill stopped before its rename."""
    moved = [p for p in root.glob(f"{_SWAPPED}step_*-*") if p.is_dir()]
    return [p for p in moved if not (root / p.name[len(_SWAPPED):].rsplit("-", 1)[0]).exists()]


def _step_name(path: Path) -> str:
    """``step_…`` of a committed or a stranded checkpoint directory (the step orders them)."""
    return path.name[len(_SWAPPED):].rsplit("-", 1)[0] if path.name.startswith(_SWAPPED) else path.name


def _prune(root: Path, keep: int, protect: str) -> None:
    for old in _committed(root)[:-keep] if keep > 0 else []:
        if old.name != protect:
            shutil.rmtree(old, ignore_errors=True)
    for junk in root.glob(".tmp-step_*"):  # left by a process killed mid-write
        if junk.is_dir() and not junk.name.endswith(f"-{os.getpid()}"):
            shutil.rmtree(junk, ignore_errors=True)
    for moved in root.glob(f"{_SWAPPED}step_*"):  # moved aside by a killed same-step save: this one supersedes it
        if moved.is_dir() and _step_name(moved) <= protect:
            shutil.rmtree(moved, ignore_errors=True)


def _verify_and_load(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    meta = json.loads((path / "meta.json").read_text())
    blob = (path / "state.pt").read_bytes()
    if hashlib.sha256(blob).hexdigest() != meta.get("sha256"):
        raise CheckpointError(f"{path}: checksum mismatch")
    state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    return state, meta


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Committed checkpoint directories, oldest (lowest step) first.

    With a checkpoint that a kill left moved aside by a same-step save (its ``.old-`` name), in its step's place.
    """
    root = Path(run_dir) / "checkpoints"
    return sorted(_committed(root) + _stranded(root), key=_step_name) if root.is_dir() else []


def load_latest(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """Load the newest verifiable checkpoint: ``(state, meta, path)``.

    Tries the committed checkpoints newest (highest step) first, logging each failure. The ``latest`` pointer is
    not consulted: a kill after a commit's rename but before the pointer moved leaves it naming an older one.
    """
    root = Path(run_dir) / "checkpoints"
    candidates = list(reversed(list_checkpoints(run_dir)))
    if not candidates:
        raise CheckpointError(f"no checkpoint in {root}; start a new run without --resume")
    errors = []
    for path in candidates:
        try:
            state, meta = _verify_and_load(path)
        except Exception as e:
            errors.append(f"{path.name}: {e}")
            log.warning("checkpoint %s is unusable (%s); falling back to the previous one", path, e)
            continue
        return state, meta, path
    raise CheckpointError("every checkpoint failed verification: " + "; ".join(errors))
