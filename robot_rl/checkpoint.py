"""Atomic checkpoints: write to a temp directory, fsync, rename; the pointer to the latest last.

Layout under ``<run>/checkpoints/``::

    step_000000120000/state.pt    torch.save of plain tensors/dicts (loaded with weights_only=True)
    step_000000120000/meta.json   counters, time, sha256 of state.pt
    latest                        the name of the newest committed checkpoint

The previous good checkpoint is never removed before the new one is committed; older ones beyond
``keep`` are pruned afterwards. Loading verifies the checksum and falls back to the previous
checkpoint (saying so) if the newest is damaged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """No usable checkpoint could be loaded."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    _write_file(tmp, text.encode())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def save_checkpoint(run_dir: Path, step: int, state: dict[str, Any], meta: dict[str, Any],
                    keep: int = 3) -> Path:
    """Commit ``state`` (tensors and plain data) as the checkpoint for ``step``; return its directory."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:012d}"
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    state_path = tmp / "state.pt"
    torch.save(state, state_path)
    with open(state_path, "rb+") as f:
        os.fsync(f.fileno())
    digest = hashlib.sha256(state_path.read_bytes()).hexdigest()
    _write_file(tmp / "meta.json", json.dumps({**meta, "step": step, "sha256": digest}, indent=2).encode())
    _fsync_dir(tmp)
    if final.exists():
        # Same step saved twice (e.g. an interrupt right after a periodic save): swap, then drop the old.
        old = root / f".old-{name}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    _atomic_write_text(root / "latest", name + "\n")
    _prune(root, keep, protect=name)
    return final


def _committed(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("step_*") if p.is_dir())


def _prune(root: Path, keep: int, protect: str) -> None:
    for old in _committed(root)[:-keep] if keep > 0 else []:
        if old.name != protect:
            shutil.rmtree(old, ignore_errors=True)


def _verify_and_load(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    meta = json.loads((path / "meta.json").read_text())
    blob = (path / "state.pt").read_bytes()
    if hashlib.sha256(blob).hexdigest() != meta.get("sha256"):
        raise CheckpointError(f"{path}: checksum mismatch")
    state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    return state, meta


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Committed checkpoint directories, oldest first."""
    root = Path(run_dir) / "checkpoints"
    return _committed(root) if root.is_dir() else []


def load_latest(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """Load the newest verifiable checkpoint: ``(state, meta, path)``.

    Tries the one named by ``latest`` first, then older ones, newest first, logging each failure.
    """
    root = Path(run_dir) / "checkpoints"
    candidates = list(reversed(list_checkpoints(run_dir)))
    pointer = root / "latest"
    if pointer.is_file():
        named = root / pointer.read_text().strip()
        if named in candidates:
            candidates.remove(named)
            candidates.insert(0, named)
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
