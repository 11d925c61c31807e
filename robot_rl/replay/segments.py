"""Crash-safe replay on disk: append-only, checksummed segment files plus a manifest written last.

Layout of one buffer's directory (e.g. ``<run>/replay/online/``)::

    seg_000000000000.rrs    rows [t0, t1) and observation slots [o0, o1), one immutable file
    seg_000000002000.rrs    ... the next rows, starting exactly where the previous segment ended
    manifest.json           counters and the segment list (a summary; rebuilt on every open)
    damaged/                segments set aside on open (bad checksum, truncated, after a gap)

A segment file is ``MAGIC | u32 header length | u32 header CRC32 | header JSON | payload``; the
header lists each array (name, dtype, shape, offset) and the payload's CRC32. Every commit is
temp → fsync → rename → fsync dir (:func:`~robot_rl.durable.commit_file`), then the manifest.

The header also carries ``chunks``: per actor session, the sequence numbers of every chunk whose
rows are all in this segment or an earlier one (a floor plus the few above it, cumulative), so the
newest verified segment alone says which chunks the disk holds, even after older segments were
pruned. A learner restarted after ``kill -9`` rebuilds its de-duplication window from it (see
:meth:`SegmentLog.mark`): a resend of a chunk that reached the disk but whose acknowledgement was
lost is dropped, not stored twice.

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
import struct
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from robot_rl.durable import commit_file, crash_point, fsync_dir, remove_temp_files

if TYPE_CHECKING:
    from robot_rl.replay.buffer import ReplayBuffer

log = logging.getLogger(__name__)

MAGIC = b"RRLSEG01"
_PREFIX = struct.Struct("<8sII")
FORMAT = 1


class SegmentError(ValueError):
    """A segment file failed verification (the message says how)."""


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

    def summary(self) -> str:
        """One line for logs."""
        text = f"{self.directory}: {self.transitions} transitions in {self.segments} segments"
        if self.dropped_segments:
            text += (f"; DROPPED {self.dropped_transitions} transitions in {len(self.dropped_segments)} damaged "
                     f"segment(s), moved to damaged/: " + "; ".join(self.dropped_segments))
        return text


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().contiguous().numpy()


def encode_segment(t0: int, t1: int, o0: int, o1: int, arrays: dict[str, torch.Tensor],
                   chunks: dict[str, Any] | None = None) -> list[bytes | memoryview]:
    """The bytes of a segment file holding ``arrays`` (row arrays ``[t1-t0, ...]``, slot arrays ``[o1-o0, ...]``).

    ``chunks`` (session → ``{"floor", "above"}``) goes into the header, covered by its checksum.
    """
    specs, payload, offset = [], [], 0
    crc = 0
    for name in sorted(arrays):
        a = _np(arrays[name])
        buf = memoryview(a.view(np.uint8).reshape(-1)) if a.size else memoryview(b"")  # type: ignore[arg-type]
        specs.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "offset": offset,
                      "nbytes": a.nbytes})
        crc = zlib.crc32(buf, crc)
        payload.append(buf)
        offset += a.nbytes
    header = json.dumps({"format": FORMAT, "t0": t0, "t1": t1, "o0": o0, "o1": o1, "arrays": specs,
                         "payload_bytes": offset, "payload_crc": crc, "chunks": chunks or {}}).encode()
    return [_PREFIX.pack(MAGIC, len(header), zlib.crc32(header)), header, *payload]


def read_header(blob: bytes | bytearray | memoryview, name: str) -> tuple[dict[str, Any], int]:
    """The verified header of a segment and where its payload starts."""
    if len(blob) < _PREFIX.size:
        raise SegmentError(f"{name}: truncated ({len(blob)} bytes)")
    magic, hlen, hcrc = _PREFIX.unpack_from(blob, 0)
    if magic != MAGIC:
        raise SegmentError(f"{name}: not a replay segment (bad magic)")
    header = bytes(blob[_PREFIX.size: _PREFIX.size + hlen])
    if len(header) != hlen or zlib.crc32(header) != hcrc:
        raise SegmentError(f"{name}: header truncated or corrupt")
    meta = json.loads(header)
    if meta.get("format") != FORMAT:
        raise SegmentError(f"{name}: unknown segment format {meta.get('format')}")
    return meta, _PREFIX.size + hlen


def decode_segment(blob: bytes | bytearray, name: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Verify a segment's checksums and return ``(header, arrays)``; :class:`SegmentError` if damaged."""
    meta, start = read_header(blob, name)
    payload = memoryview(blob)[start:]
    if len(payload) != meta["payload_bytes"]:
        raise SegmentError(f"{name}: payload is {len(payload)} bytes, header says {meta['payload_bytes']} "
                           "(truncated or extended)")
    if zlib.crc32(payload) != meta["payload_crc"]:
        raise SegmentError(f"{name}: payload checksum mismatch (bit rot or a torn write)")
    arrays = {}
    for s in meta["arrays"]:
        a = np.frombuffer(payload, dtype=np.dtype(s["dtype"]), count=int(np.prod(s["shape"])), offset=s["offset"])
        arrays[s["name"]] = torch.from_numpy(a.reshape(s["shape"]))
    return meta, arrays


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

    def submit(self, t0: int, t1: int, o0: int, o1: int, arrays: dict[str, torch.Tensor],
               floors: tuple[int, int]) -> None:
        """Queue one segment (CPU copies) for the writer thread, then prune below ``floors``."""
        done = [m for m in self._marks if m[0] <= t1]
        if done:
            self._marks = [m for m in self._marks if m[0] > t1]
            for _, session, seq in done:
                _add_seq(self._submitted_chunks, session, seq)
        chunks = {s: {"floor": w["floor"], "above": list(w["above"])} for s, w in self._submitted_chunks.items()}
        if self._error is not None:
            self.wait()  # raises it
        if self._thread is None:
            self._thread = threading.Thread(target=self._writer, name=f"replay-writer-{self.directory.name}",
                                            daemon=True)
            self._thread.start()
        self._queue.put((t0, t1, o0, o1, arrays, floors, chunks))

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
                    t0, t1, o0, o1, arrays, floors, chunks = item
                    self.commit(t0, t1, o0, o1, arrays, chunks=chunks)
                    self.prune(*floors)
            except BaseException as e:  # handed to the learner thread by wait()/submit()
                self._error = e
            finally:
                self._queue.task_done()

    # ---- writing ----------------------------------------------------------------------------

    def commit(self, t0: int, t1: int, o0: int, o1: int, arrays: dict[str, torch.Tensor],
               chunks: dict[str, Any] | None = None) -> SegmentInfo:
        """Durably write one segment, then the manifest. Raises DiskFullError when out of space.

        ``chunks`` is the cumulative chunk window to record (default: the last committed one).
        """
        if self.segments and (t0, o0) != (self.segments[-1].t1, self.segments[-1].o1):
            raise ValueError(f"segment [{t0}, {t1}) does not continue the log at {self.segments[-1].t1}")
        chunks = self.chunks if chunks is None else chunks
        blobs = encode_segment(t0, t1, o0, o1, arrays, chunks)
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

    def load_into(self, buffer: ReplayBuffer) -> LoadReport:
        """Verify every segment, replay the good chain into ``buffer``, set the rest aside, rewrite the manifest."""
        self.directory.mkdir(parents=True, exist_ok=True)
        report = LoadReport(self.directory, temp_files_removed=remove_temp_files(self.directory))
        listed = self._manifest_names()
        files = sorted(self.directory.glob("seg_*.rrs"))
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
            report.transitions += meta["t1"] - meta["t0"]
        if bad_from is not None:
            self._set_aside(files[bad_from:], report)
        missing = [n for n in listed if n not in {p.name for p in files}
                   and (not self.segments or n > self.segments[0].path.name)]
        if missing:
            report.dropped_segments.append(f"listed in the manifest but missing: {', '.join(missing)}")
        report.segments = len(self.segments)
        report.chunks = {s: {"floor": w["floor"], "above": list(w["above"])} for s, w in self.chunks.items()}
        self._submitted_chunks = {s: dict(w) for s, w in report.chunks.items()}
        self._marks = []
        self._start = (buffer.transitions_written, buffer.slots_written)
        self.write_manifest()
        # A fresh run's empty directory is not news on the console (a run logs INFO there); a resume's rows are.
        level = logging.WARNING if report.dropped_segments else logging.INFO if report.transitions else logging.DEBUG
        log.log(level, "replay %s", report.summary())
        return report

    def _manifest_names(self) -> list[str]:
        try:
            return [s[0] for s in json.loads((self.directory / "manifest.json").read_text())["segments"]]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return []

    def _set_aside(self, paths: list[Path], report: LoadReport) -> None:
        damaged = self.directory / "damaged"
        damaged.mkdir(exist_ok=True)
        for j, p in enumerate(paths):
            if j:  # the first one's reason is already recorded
                report.dropped_segments.append(f"{p.name}: after a damaged segment")
            try:
                meta, _ = read_header(p.read_bytes(), p.name)
                report.dropped_transitions += int(meta["t1"]) - int(meta["t0"])
            except (SegmentError, ValueError, KeyError):
                pass  # header unreadable: its row count is unknown
            os.replace(p, damaged / p.name)
        fsync_dir(damaged)
        fsync_dir(self.directory)

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
                flush_every_s: float = float("inf"), delete_evicted: bool = True) -> LoadReport:
    """Attach a :class:`SegmentLog` in ``directory`` to ``buffer`` and load what it holds."""
    return buffer.attach_log(SegmentLog(directory, delete_evicted), segment_transitions, flush_every_s)
