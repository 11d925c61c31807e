"""The actor's open message: chunks copied straight into the packed frame of the message that will carry them.

A chunk handed over is copied once, on the caller's thread, into per-array regions of one preallocated buffer (the
copy ``copy_on_send`` asks for; nothing is copied again when the chunks that waited together leave as one message).
The I/O thread seals the message when it takes it: a full one is sent as it is, a partial one is compacted (one
``bytes.join``) to the packed layout of :mod:`~robot_rl.transport.codec`, which the receiver checks as always.

Per chunk this costs a view and a copy per array and no other Python objects: the garbage collector's full passes
over a process holding torch scale with the containers a hot path leaves behind (measured in RESULTS_transport.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_rl.transport.codec import _ALIGN, _WIRE_BY_STR, CHECKSUM, CHECKSUMS, PACK_MAX_BYTES, PackedArrays

_ZEROS = bytes(_ALIGN)


class OpenMessage:
    """Consecutive chunks of one layout (array names, dtypes, trailing shapes), rows appended along the first axis.

    ``names``/``arrays``: the first chunk's arrays (C-contiguous, little-endian wire dtypes: see :meth:`fits`);
    room for ``max_chunks`` chunks of its size, at most ``max_bytes``. Not thread-safe: the caller holds a lock.
    """

    def __init__(self, names: tuple[str, ...], arrays: list[np.ndarray], max_chunks: int, max_bytes: int) -> None:
        rows = arrays[0].shape[0]
        self.names = names
        self.dtypes = [a.dtype for a in arrays]
        self.trailing = [a.shape[1:] for a in arrays]
        self.row_bytes = [a.nbytes // rows for a in arrays]
        chunk_bytes = sum(self.row_bytes) * rows
        self.capacity = rows * max(1, min(max_chunks, max_bytes // max(chunk_bytes, 1)))  # in rows
        self.starts: list[int] = []
        off = 0
        for rb in self.row_bytes:
            off += -off % _ALIGN
            self.starts.append(off)
            off += rb * self.capacity
        self.buffer = np.empty(off, np.uint8)  # not zeroed: every byte sent is written (pads by seal)
        # One typed view per array over its region: a chunk's rows go in with one slice assignment each.
        self.regions = [self.buffer[s:s + rb * self.capacity].view(d).reshape(self.capacity, *t)
                        for s, rb, d, t in zip(self.starts, self.row_bytes, self.dtypes, self.trailing)]
        self.rows = 0
        self.chunks = 0
        self.sealed = False

    @staticmethod
    def eligible(arrays: list[np.ndarray], max_bytes: int) -> bool:
        """Whether a chunk can go this way: every array packable, a first axis of rows, wire dtypes, C order."""
        if not arrays:
            return False
        rows = arrays[0].shape[0] if arrays[0].ndim else 0
        total = 0
        for a in arrays:
            if (a.ndim == 0 or a.shape[0] != rows or a.dtype.str not in _WIRE_BY_STR or a.nbytes > PACK_MAX_BYTES
                    or not a.flags.c_contiguous):
                return False
            total += a.nbytes
        return rows > 0 and total <= max_bytes

    def fits(self, names: tuple[str, ...], arrays: list[np.ndarray]) -> bool:
        """Whether this chunk has the message's layout and there is room for its rows."""
        rows = arrays[0].shape[0] if arrays[0].ndim else 0
        if self.sealed or names != self.names or not 0 < rows <= self.capacity - self.rows:
            return False
        for a, d, t in zip(arrays, self.dtypes, self.trailing):
            # Checked, not left to numpy: an assignment would cast a dtype or broadcast a shape without a word.
            if (a.dtype is not d and a.dtype != d) or a.shape[1:] != t or a.shape[0] != rows:
                return False
        return True

    def append(self, arrays: list[np.ndarray]) -> None:
        """Copy a chunk's rows in (after :meth:`fits`)."""
        r0 = self.rows
        r1 = r0 + arrays[0].shape[0]
        for region, a in zip(self.regions, arrays):
            region[r0:r1] = a
        self.rows = r1
        self.chunks += 1

    def seal(self) -> PackedArrays:
        """The message's arrays laid out for the wire, with their checksums (call once the caller took it)."""
        rows, checksum = self.rows, CHECKSUMS[CHECKSUM]
        if rows == self.capacity:  # full: the regions already lie where the packed layout puts them
            payload: Any = self.buffer
            view = self.buffer.data  # a memoryview of its bytes
            spans = [(s, rb * rows) for s, rb in zip(self.starts, self.row_bytes)]
            for (s, n), nxt in zip(spans, [*self.starts[1:], len(self.buffer)]):
                view[s + n:nxt] = _ZEROS[:nxt - s - n]  # alignment padding
        else:  # compact to the rows written
            view = self.buffer.data  # a memoryview of its bytes
            pieces: list[Any] = []
            spans = []
            off = 0
            for s, rb in zip(self.starts, self.row_bytes):
                pad = -off % _ALIGN
                if pad:
                    pieces.append(_ZEROS[:pad])
                    off += pad
                spans.append((off, rb * rows))
                pieces.append(view[s:s + rb * rows])
                off += rb * rows
            payload = b"".join(pieces)
            view = memoryview(payload)
        entries = [[name, _WIRE_BY_STR[d.str], [rows, *t], checksum(view[s:s + n])]
                   for name, d, t, (s, n) in zip(self.names, self.dtypes, self.trailing, spans)]
        return PackedArrays(entries, [payload], len(entries), len(payload), spans)
