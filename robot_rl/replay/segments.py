"""Crash-safe replay on disk: append-only, checksummed segment files plus a manifest written last.

Layout of one buffer's directory (e.g. ``<run>/replay/online/``)::

    seg_000000000000.rrs    rows [t0, t1) and observation slots [o0, o1), one immutable file
    seg_000000002000.rrs    ... the next rows, starting exactly where the previous segment ended
    manifest.json           counters and the segment list (a summary; rebuilt on every open)
    damaged/                segments set aside on open (bad checksum, truncated, after a gap)
    superseded/             a routed buffer's segments set aside on open (newer than its source's rows)

A segment file (:mod:`robot_rl.replay.segment_format`) is ``MAGIC | u32 header length | u32 header
CRC32 | header JSON | payload``; the header lists each array (name, dtype, shape, offset) and the
payload's CRC32. Every commit is temp → fsync → rename → fsync dir
(:func:`~robot_rl.durable.commit_file`), then the manifest.

The header also carries ``chunks``: per actor session, the sequence numbers of every chunk whose
rows are all in this segment or an earlier one (a floor plus the few above it, cumulative), so the
newest verified segment alone says which chunks the disk holds, even after older segments were
pruned. A learner restarted after ``kill -9`` rebuilds its de-duplication window from it (see
:meth:`SegmentLog.mark`): a resend of a chunk that reached the disk but whose acknowledgement was
lost is dropped, not stored twice.

A buffer that others' rows are routed to (the ``demos`` buffer that a
:class:`~robot_rl.replay.mixing.MixingSampler` copies interventions into) commits on its own schedule,
so a kill can fall between its commit and its source's. Its headers carry ``source_rows``: the segment
ends where the buffer holds the copies of every routed row among the source's first ``source_rows``
rows (``null`` for a segment cut in the middle of routing one batch; absent in logs written before this
was recorded, and in unrouted buffers). Opened with the source's row count
(:meth:`SegmentLog.load_into`'s ``source_limit``), the log keeps its segments up to the last such point
the source holds and sets the rest aside in ``superseded/``; the sampler then routes the source's
newer rows again (:meth:`~robot_rl.replay.mixing.MixingSampler.resume_routing`).

Opening trusts only the segment files: each is verified, they must chain (``t0``/``o0`` of one =
``t1``/``o1`` of the previous), and the first one that fails sets itself and everything after it
aside in ``damaged/`` with the reason. The manifest is then rewritten from what was loaded, so
opening twice gives the same state. Segments whose rows and slots have all left the in-memory
rings are deleted from the front (``prune``), which bounds the disk use to about one buffer.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from robot_rl.durable import commit_file, crash_point, fsync_dir, remove_temp_files
from robot_rl.replay.segment_format import (  # the format's names, importable from here as before
    FORMAT,
    MAGIC,
    SegmentError,
    decode_segment,
    encode_segment,
    header_only,
    read_header,
)

if TYPE_CHECKING:
    from robot_rl.replay.buffer import ReplayBuffer

log = logging.getLogger(__name__)


@dataclass
class SegmentInfo:
    """One committed segment: its file and the row/slot ranges it holds."""

    path: Path
    t0: int
    t1: int
    o0: int
    o1: int
    nbytes: int


@dataclass
class LoadReport:
    """What opening a buffer's directory found."""

    directory: Path
    segments: int = 0
    transitions: int = 0
    """Rows in the verified segments (the buffer keeps the newest ``capacity`` of them)."""
    dropped_segments: list[str] = field(default_factory=list)
    """``"name: reason"`` for every segment set aside in ``damaged/``."""
    dropped_transitions: int = 0
    """Rows in the set-aside segments, as far as their headers could be read."""
    temp_files_removed: int = 0
    chunks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Actor chunks wholly on disk: session → ``{"floor", "above"}`` (from the newest verified segment)."""
    source_rows: int | None = 0
    """Routed buffers: the source rows whose routed copies the loaded rows hold (0 for an empty log; ``None``
    when the newest loaded segment does not say, e.g. written before this was recorded)."""
    superseded: list[str] = field(default_factory=list)
    """Segments set aside in ``superseded/``: routed copies of source rows that were not loaded (see the module)."""

    def summary(self) -> str:
        """One line for logs."""
        text = f"{self.directory}: {self.transitions} transitions in {self.segments} segments"
        if self.dropped_segments:
            text += (f"; DROPPED {self.dropped_transitions} transitions in {len(self.dropped_segments)} damaged "
                     f"segment(s), moved to damaged/: " + "; ".join(self.dropped_segments))
        if self.superseded:
            text += (f"; set aside {len(self.superseded)} segment(s) in superseded/ that copied rows their source "
                     "buffer had not committed (routed again from it, or from the actors' resends)")
        return text


def _name(t0: int) -> str:
    return f"seg_{t0:015d}.rrs"


_MAX_SESSIONS = 4096  # chunk windows kept per log (oldest sessions forgotten first), as the transport does


def _add_seq(windows: dict[str, dict[str, Any]], session: str, seq: int) -> None:
    """Record ``seq`` in ``windows[session]`` (``{"floor": every seq below is held, "above": [...]}``)."""
    w = windows.pop(session, None) or {"floor": 0, "above": []}
    windows[session] = w  # most recently used last
    if seq >= w["floor"] and seq not in w["above"]:
        above = set(w["above"]) | {seq}
        floor = w["floor"]
        while floor in above:
            above.remove(floor)
            floor += 1
        w["floor"], w["above"] = floor, sorted(above)
    while len(windows) > _MAX_SESSIONS:
        windows.pop(next(iter(windows)))


class SegmentLog:
    """The segment files of one buffer (see the module docstring)."""

    def __init__(self, directory: Path | str, delete_evicted: bool = True) -> None:
        self.directory = Path(directory)
        self.delete_evicted = delete_evicted
        self.segments: list[SegmentInfo] = []
        self._start = (0, 0)
        # Commits run on one writer thread so the learner never waits for encode + fsync; at most two
        # segments queue up (then submit blocks: back-pressure when the disk is slower than the data).
        self._queue: queue.Queue[tuple[Any, ...] | None] = queue.Queue(maxsize=2)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.chunks: dict[str, dict[str, Any]] = {}
        """Chunk windows (session → ``{"floor", "above"}``) of every chunk whose rows are all durable."""
        self._marks: list[tuple[int, str, int]] = []  # (row end, session, seq), not yet in a submitted segment
        self._submitted_chunks: dict[str, dict[str, Any]] = {}  # windows up to the last submitted segment
        self._source: tuple[int, int] | None = None  # (row end, source rows) of a routed buffer: see mark_source

    @property
    def durable(self) -> tuple[int, int]:
        """``(rows, slots)`` committed: everything below is on disk and verified on the next open."""
        last = self.segments[-1] if self.segments else None
        return (last.t1, last.o1) if last is not None else self._start

    def mark(self, row_end: int, session: str, seq: int) -> None:
        """Say chunk ``seq`` of actor ``session`` ends before row ``row_end`` (its rows are all added).

        The first segment that reaches ``row_end`` records the chunk in its header; :attr:`chunks`
        holds it once that segment is committed. The learner never lets a chunk straddle two
        segments (see :func:`robot_rl.replay.persist.keep_chunk_whole`), so a chunk is either wholly
        on disk and recorded, or not on disk at all.
        """
        self._marks.append((row_end, session, seq))

    def mark_source(self, row_end: int, source_rows: int, durable: bool = False) -> None:
        """Say that this log's rows up to ``row_end`` copy what is routed from its source's first ``source_rows``.

        For a routed buffer (see the module). A segment that ends at or after ``row_end`` records
        ``source_rows``; one that ends before it (in the middle of routing one batch) records ``null``. Rows
        added straight to this buffer after ``row_end`` are no copies and change nothing. Without a mark the
        headers carry no ``source_rows`` (an unrouted buffer).

        ``durable``: also record it now in the manifest, for a reopened log whose newest segment says nothing
        (written before this was recorded), until a segment that says it is committed.
        """
        self._source = (row_end, source_rows)
        if durable:
            if row_end != self.durable[0] or self._thread is not None:
                raise RuntimeError("mark_source(durable=True) is for a reopened log, at its committed rows")
            self.write_manifest({"source": [row_end, source_rows]})

    def submit(self, t0: int, t1: int, o0: int, o1: int, arrays: dict[str, torch.Tensor],
               floors: tuple[int, int]) -> None:
        """Queue one segment (CPU copies) for the writer thread, then prune below ``floors``."""
        done = [m for m in self._marks if m[0] <= t1]
        if done:
            self._marks = [m for m in self._marks if m[0] > t1]
            for _, session, seq in done:
                _add_seq(self._submitted_chunks, session, seq)
        chunks = {s: {"floor": w["floor"], "above": list(w["above"])} for s, w in self._submitted_chunks.items()}
        src = self._source
        extra = None if src is None else {"source_rows": src[1] if t1 >= src[0] else None}
        if self._error is not None:
            self.wait()  # raises it
        if self._thread is None:
            self._thread = threading.Thread(target=self._writer, name=f"replay-writer-{self.directory.name}",
                                            daemon=True)
            self._thread.start()
        self._queue.put((t0, t1, o0, o1, arrays, floors, chunks, extra))

    def wait(self) -> None:
        """Block until every submitted segment is committed; re-raise a writer error (e.g. DiskFullError)."""
        self._queue.join()
        if self._error is not None:
            e, self._error = self._error, None
            raise e

    def close(self) -> None:
        """Commit what is queued and stop the writer thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        self.wait()

    def _writer(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._error is None:  # after a failure, skip until the buffer resubmits
                    t0, t1, o0, o1, arrays, floors, chunks, extra = item
                    self.commit(t0, t1, o0, o1, arrays, chunks=chunks, extra=extra)
                    self.prune(*floors)
            except BaseException as e:  # handed to the learner thread by wait()/submit()
                self._error = e
            finally:
                self._queue.task_done()

    # ---- writing ----------------------------------------------------------------------------

    def commit(self, t0: int, t1: int, o0: int, o1: int, arrays: dict[str, torch.Tensor],
               chunks: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> SegmentInfo:
        """Durably write one segment, then the manifest. Raises DiskFullError when out of space.

        ``chunks`` is the cumulative chunk window to record (default: the last committed one); ``extra``, more
        header fields (``source_rows``).
        """
        if self.segments and (t0, o0) != (self.segments[-1].t1, self.segments[-1].o1):
            raise ValueError(f"segment [{t0}, {t1}) does not continue the log at {self.segments[-1].t1}")
        chunks = self.chunks if chunks is None else chunks
        blobs = encode_segment(t0, t1, o0, o1, arrays, chunks, extra)
        path = self.directory / _name(t0)
        commit_file(path, blobs, crash_name="segment")
        info = SegmentInfo(path, t0, t1, o0, o1, sum(len(c) for c in blobs))
        self.segments.append(info)
        self.chunks = chunks
        crash_point("segment.before_manifest")
        self.write_manifest()
        return info

    def prune(self, row_floor: int, slot_floor: int) -> int:
        """Delete segments from the front whose rows are all below ``row_floor`` and slots below ``slot_floor``."""
        if not self.delete_evicted:
            return 0
        n = 0
        # The newest segment stays, so the log always knows where it continues.
        while len(self.segments) > 1 and self.segments[0].t1 <= row_floor and self.segments[0].o1 <= slot_floor:
            self.segments.pop(0).path.unlink(missing_ok=True)
            n += 1
        if n:
            fsync_dir(self.directory)
            self.write_manifest()
        return n

    def write_manifest(self, extra: dict[str, Any] | None = None) -> None:
        """Commit ``manifest.json`` (the counters and the segment list) after the segments it names."""
        segs = self.segments
        body = {"format": FORMAT, "transitions": segs[-1].t1 if segs else 0, "slots": segs[-1].o1 if segs else 0,
                "first_transition": segs[0].t0 if segs else 0,
                "segments": [[s.path.name, s.t0, s.t1, s.o0, s.o1, s.nbytes] for s in segs], **(extra or {})}
        commit_file(self.directory / "manifest.json", [json.dumps(body, indent=1).encode()], crash_name="manifest")

    # ---- opening ----------------------------------------------------------------------------

    def load_into(self, buffer: ReplayBuffer, source_limit: int | None = None) -> LoadReport:
        """Verify every segment, replay the good chain into ``buffer``, set the rest aside, rewrite the manifest.

        ``source_limit``: a routed buffer's source holds this many rows; the segments after the last one
        consistent with them are set aside in ``superseded/`` (see the module docstring).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        report = LoadReport(self.directory, temp_files_removed=remove_temp_files(self.directory))
        listed, hint = self._manifest_names(), self._manifest_source()
        on_disk = sorted(self.directory.glob("seg_*.rrs"))
        keep = len(on_disk) if source_limit is None else _consistent_prefix(on_disk, source_limit)
        files, superseded = on_disk[:keep], on_disk[keep:]
        self.segments = []
        self.chunks = {}
        bad_from: int | None = None
        for i, path in enumerate(files):
            try:
                meta, arrays = decode_segment(bytearray(path.read_bytes()), path.name)
                prev = self.segments[-1] if self.segments else None
                if prev is not None and (meta["t0"], meta["o0"]) != (prev.t1, prev.o1):
                    raise SegmentError(f"{path.name}: starts at row {meta['t0']}, expected {prev.t1} (a segment "
                                       "before it is missing)")
                self._check_layout(buffer, meta, arrays, path.name)
                chunks = _valid_chunks(meta.get("chunks"), path.name)
                buffer.load_segment(meta["t0"], meta["t1"], meta["o0"], meta["o1"], arrays)
            except SegmentError as e:
                report.dropped_segments.append(str(e))
                bad_from = i
                break
            self.segments.append(SegmentInfo(path, meta["t0"], meta["t1"], meta["o0"], meta["o1"], path.stat().st_size))
            self.chunks = chunks
            report.source_rows = meta.get("source_rows")
            report.transitions += meta["t1"] - meta["t0"]
        if bad_from is not None:
            self._set_aside(files[bad_from:], report)
        if superseded:
            _move(superseded, self.directory / "superseded")
            report.superseded = [p.name for p in superseded]
        missing = [n for n in listed if n not in {p.name for p in on_disk}
                   and (not self.segments or n > self.segments[0].path.name)]
        if missing:
            report.dropped_segments.append(f"listed in the manifest but missing: {', '.join(missing)}")
        report.segments = len(self.segments)
        report.chunks = {s: {"floor": w["floor"], "above": list(w["above"])} for s, w in self.chunks.items()}
        self._submitted_chunks = {s: dict(w) for s, w in report.chunks.items()}
        self._marks = []
        self._start = (buffer.transitions_written, buffer.slots_written)
        # A log from before segments recorded source_rows: the point its first reopening assumed (mark_source).
        if report.source_rows is not None or hint is None or hint[0] != self.durable[0]:
            hint = None
        if hint is not None:
            report.source_rows = hint[1]
        self.write_manifest(None if hint is None else {"source": list(hint)})
        # A fresh run's empty directory is not news on the console (a run logs INFO there); a resume's rows are.
        level = (logging.WARNING if report.dropped_segments else
                 logging.INFO if report.transitions or report.superseded else logging.DEBUG)
        log.log(level, "replay %s", report.summary())
        return report

    def _manifest_source(self) -> tuple[int, int] | None:
        try:
            end, rows = json.loads((self.directory / "manifest.json").read_text())["source"]
            return (end, rows) if isinstance(end, int) and isinstance(rows, int) else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _manifest_names(self) -> list[str]:
        try:
            return [s[0] for s in json.loads((self.directory / "manifest.json").read_text())["segments"]]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return []

    def _set_aside(self, paths: list[Path], report: LoadReport) -> None:
        for j, p in enumerate(paths):
            if j:  # the first one's reason is already recorded
                report.dropped_segments.append(f"{p.name}: after a damaged segment")
            try:
                meta, _ = read_header(p.read_bytes(), p.name)
                report.dropped_transitions += int(meta["t1"]) - int(meta["t0"])
            except (SegmentError, ValueError, KeyError):
                pass  # header unreadable: its row count is unknown
        _move(paths, self.directory / "damaged")

    @staticmethod
    def _check_layout(buffer: ReplayBuffer, meta: dict[str, Any], arrays: dict[str, torch.Tensor], name: str) -> None:
        n, m = meta["t1"] - meta["t0"], meta["o1"] - meta["o0"]
        expected = {f"row.{f}": (n, *t.shape[1:], t.dtype) for f, t in buffer._rows.items()}
        expected.update({f"obs.{k}": (m, *t.shape[1:], t.dtype) for k, t in buffer._obs.items()})
        expected["slot.prev"] = (m, torch.int64)
        got = {k: (*v.shape, v.dtype) for k, v in arrays.items()}
        if got != expected:
            diff = sorted(set(got.items()) ^ set(expected.items()), key=str)
            raise ValueError(f"{name} does not match this buffer's spec (was the run's spec changed?): "
                             f"differing arrays {diff}")


def _move(paths: list[Path], folder: Path) -> None:
    """Set ``paths`` aside in ``folder`` (never deleted), durably."""
    folder.mkdir(exist_ok=True)
    for p in paths:
        os.replace(p, folder / p.name)
    fsync_dir(folder)
    fsync_dir(folder.parent)


def _consistent_prefix(paths: list[Path], source_limit: int) -> int:
    """How many of a routed log's segments to load when its source holds ``source_limit`` rows.

    Up to the last segment that ends where the copies match a prefix of those rows: its ``source_rows`` is at
    most ``source_limit``, or absent (a log from before it was recorded: trusted as it is). The segments after
    it copied rows the source does not hold, or end in the middle of routing one batch.
    """
    keep = 0
    for i, path in enumerate(paths):
        meta = header_only(path)
        if meta is None:  # damaged: the load sets it aside with its reason, unless it follows segments cut here
            return len(paths) if keep == i else keep
        src = meta.get("source_rows", -1)  # -1: not recorded
        if src == -1 or (isinstance(src, int) and src <= source_limit):
            keep = i + 1
    return keep


def _valid_chunks(chunks: Any, name: str) -> dict[str, dict[str, Any]]:
    """The ``chunks`` of a verified header, checked (the checksum passed, but the writer may be older)."""
    if chunks is None:
        return {}  # written before chunk windows were recorded
    ok = isinstance(chunks, dict) and all(
        isinstance(w, dict) and isinstance(w.get("floor"), int) and w["floor"] >= 0
        and isinstance(w.get("above"), list) and all(isinstance(q, int) and q > w["floor"] for q in w["above"])
        for w in chunks.values())
    if not ok:
        raise SegmentError(f"{name}: malformed chunk windows in the header")
    return {str(s): {"floor": w["floor"], "above": list(w["above"])} for s, w in chunks.items()}


def open_buffer(buffer: ReplayBuffer, directory: Path | str, segment_transitions: int = 2000,
                flush_every_s: float = float("inf"), delete_evicted: bool = True,
                source_limit: int | None = None) -> LoadReport:
    """Attach a :class:`SegmentLog` in ``directory`` to ``buffer`` and load what it holds.

    ``source_limit``: ``buffer`` holds copies of another buffer's rows, which holds that many (see the module).
    """
    return buffer.attach_log(SegmentLog(directory, delete_evicted), segment_transitions, flush_every_s,
                             source_limit)


__all__ = ["FORMAT", "MAGIC", "LoadReport", "SegmentError", "SegmentInfo", "SegmentLog", "decode_segment",
           "encode_segment", "open_buffer", "read_header"]
