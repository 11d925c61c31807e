"""Wiring a learner's replay storage to disk: one segment log per named buffer under ``<run>/replay/``.

A plain :class:`~robot_rl.replay.buffer.ReplayBuffer` is the buffer ``online``; a
:class:`~robot_rl.replay.mixing.MixingSampler` persists each of its named buffers (``online``,
``demos``, ``interventions`` …) in its own directory.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from robot_rl.replay.buffer import MixingSampler, ReplayBuffer
from robot_rl.replay.segments import LoadReport, open_buffer

log = logging.getLogger(__name__)


def named_buffers(storage: Any) -> dict[str, ReplayBuffer]:
    """The replay buffers inside ``storage`` by name (empty for on-policy rollouts)."""
    if isinstance(storage, ReplayBuffer):
        return {"online": storage}
    if isinstance(storage, MixingSampler):
        return dict(storage.buffers)
    return {}


def has_replay_on_disk(root: Path) -> bool:
    """``True`` if ``root`` (``<run>/replay``) holds any committed segment."""
    return Path(root).is_dir() and any(Path(root).glob("*/seg_*.rrs"))


def attach_replay(storage: Any, root: Path, segment_transitions: int, flush_every_s: float,
                  delete_evicted: bool) -> dict[str, LoadReport]:
    """Back every buffer of ``storage`` by ``root/<name>/`` and load what is there; reports by name."""
    reports = {}
    for name, buf in named_buffers(storage).items():
        seg = min(segment_transitions, buf._max_part)
        if seg < segment_transitions:
            log.info("replay %s: segments of %d rows (capacity %d is small)", name, seg, buf.capacity)
        reports[name] = open_buffer(buf, Path(root) / name, seg, flush_every_s, delete_evicted)
    return reports


def flush_replay(storage: Any) -> dict[str, list[int]]:
    """Commit every buffer's pending rows; the watermark ``[rows, slots]`` of each, by name."""
    return {name: list(buf.flush()) for name, buf in named_buffers(storage).items()}


def replay_sizes(storage: Any) -> dict[str, int]:
    """Rows held in memory, by buffer name."""
    return {name: len(buf) for name, buf in named_buffers(storage).items()}
