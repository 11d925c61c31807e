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
    """Back every buffer of ``storage`` by ``root/<name>/`` and load what is there; reports by name.

    A :class:`MixingSampler`'s routed buffer opens last, matched to what its ``online`` buffer reloaded
    (:meth:`MixingSampler.resume_routing`), so a kill between the two buffers' commits loses no copy and
    repeats none.
    """
    buffers = named_buffers(storage)
    routed = None
    if isinstance(storage, MixingSampler) and storage.route_interventions_to != storage.online:
        routed = storage.route_interventions_to
    reports = {}
    for name in sorted(buffers, key=lambda n: n == routed):  # stable: the routed buffer last
        buf = buffers[name]
        seg = min(segment_transitions, buf._max_part)
        if seg < segment_transitions:
            log.info("replay %s: segments of %d rows (capacity %d is small)", name, seg, buf.capacity)
        limit = storage.buffers[storage.online].transitions_written if name == routed else None
        reports[name] = open_buffer(buf, Path(root) / name, seg, flush_every_s, delete_evicted, limit)
    if routed is not None:
        storage.resume_routing(reports[routed].source_rows)
    return {name: reports[name] for name in buffers}


def flush_replay(storage: Any) -> dict[str, list[int]]:
    """Commit every buffer's pending rows; the watermark ``[rows, slots]`` of each, by name."""
    return {name: list(buf.flush()) for name, buf in named_buffers(storage).items()}


def replay_sizes(storage: Any) -> dict[str, int]:
    """Rows held in memory, by buffer name."""
    return {name: len(buf) for name, buf in named_buffers(storage).items()}


def primary_buffer(storage: Any) -> ReplayBuffer | None:
    """The persisted buffer every received chunk goes to (``online``), or ``None`` without a segment log."""
    if isinstance(storage, ReplayBuffer):
        buf: ReplayBuffer | None = storage
    elif isinstance(storage, MixingSampler):
        buf = storage.buffers.get(storage.online)
    else:
        buf = None
    return buf if buf is not None and buf._log is not None else None


_warned_large_chunk = False


def keep_chunk_whole(buf: ReplayBuffer, rows: int) -> None:
    """Before adding a chunk of ``rows`` rows: commit the pending rows if the chunk would not fit the segment.

    Then the buffer's own size-based commit cannot fall inside the chunk, and a chunk is either
    wholly in a committed segment or not on disk at all (needed for exact de-duplication after a
    crash). A chunk larger than a segment must straddle; that is logged once.
    """
    global _warned_large_chunk
    pending = buf.rows_pending
    if pending and pending + rows > buf.segment_rows:
        buf.flush(wait=False)
    if rows > buf.segment_rows and not _warned_large_chunk:
        _warned_large_chunk = True
        log.warning("chunks of %d rows exceed replay.segment_transitions=%d: a chunk straddling two segments "
                    "may be stored twice if the learner is killed between them", rows, buf.segment_rows)


def mark_chunk(buf: ReplayBuffer, session: str, seq: int) -> None:
    """Record that chunk ``seq`` of actor ``session`` was just added whole to ``buf`` (see SegmentLog.mark)."""
    assert buf._log is not None
    buf._log.mark(buf.transitions_written, session, seq)


def durable_chunks(reports: dict[str, LoadReport], storage: Any) -> dict[str, dict[str, Any]]:
    """The chunk windows found on disk in the primary buffer (``{}`` if none), for the transport's dedup."""
    buf = primary_buffer(storage)
    if buf is None:
        return {}
    for name, b in named_buffers(storage).items():
        if b is buf and name in reports:
            return reports[name].chunks
    return {}
