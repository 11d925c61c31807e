"""The actor's open message: chunks copied straight into the packed frame of the message that will carry them.

A chunk handed over is copied once, on the caller's thread, into per-array regions of one preallocated buffer (the
copy ``copy_on_send`` asks for; nothing is copied again when the chunks that waited together leave as one message).
Arrays of at least :data:`HOT_BYTES` per chunk are checksummed right after their copy, while the rows are still in
the cache (CRC32C continues across chunks: the sum of a region is that of its rows in order); the rest once per
message. The I/O thread seals the message when it takes it: a full one is sent as it is, a partial one is compacted
in place (one ``memmove`` per array) to the packed layout of :mod:`~robot_rl.transport.codec`, which the receiver
checks as always.

Per chunk this costs a view and a copy per array and no other Python objects: the garbage collector's full passes
over a process holding torch scale with the containers a hot path leaves behind (measured in RESULTS_transport.md).
A message the learner acknowledged goes back to a :class:`MessagePool` and takes the next chunks: its memory is
mapped already (a fresh megabyte costs a page fault per 4 KiB on the copy that first touches it).
"""

from __future__ import annotations

import sys
from collections import deque

import numpy as np

from robot_rl.transport.codec import _ALIGN, _WIRE_BY_STR, CHECKSUM, CHECKSUMS, PACK_MAX_BYTES, PackedArrays

_ZEROS = bytes(_ALIGN)

#: An array with at least this many bytes per chunk is checksummed as it is copied in (one call per chunk, on rows
#: in the cache); smaller ones once per message at seal (one call per message: per chunk, the call costs more than
#: the bytes).
HOT_BYTES = 16 << 10


class OpenMessage:
    """Consecutive chunks of one layout (array names, dtypes, trailing shapes), rows appended along the first axis.

    ``names``/``arrays``: the first chunk's arrays (C-contiguous, little-endian wire dtypes: see :meth:`eligible`);
    room for ``max_chunks`` chunks of its size, at most ``max_bytes``. Not thread-safe: the caller holds a lock.
    """

    def __init__(self, names: tuple[str, ...], arrays: list[np.ndarray], max_chunks: int, max_bytes: int) -> None:
        rows = arrays[0].shape[0]
        self.names = names
        self.dtypes = [a.dtype for a in arrays]
        self.trailing = [a.shape[1:] for a in arrays]
        self.row_bytes = [a.nbytes // rows for a in arrays]
        self.capacity = self.rows_for(arrays, max_chunks, max_bytes)  # in rows
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
        self._view = self.buffer.data  # a memoryview of its bytes
        # (index, start, bytes per row) of the arrays summed as they are copied in
        hot = [rb * rows >= HOT_BYTES for rb in self.row_bytes]
        self._hot = [(i, s, rb) for i, (s, rb, h) in enumerate(zip(self.starts, self.row_bytes, hot)) if h]
        self._cold = [i for i, h in enumerate(hot) if not h]
        self.sums = [0] * len(arrays)
        self.rows = 0
        self.chunks = 0
        self.sealed = False
        # What holds the buffer while nothing else does (this object, its views): more means a sent frame still
        # points into it (ZeroMQ sends zero-copy), and it must not be written again.
        self._own_refs = sys.getrefcount(self.buffer)

    @staticmethod
    def rows_for(arrays: list[np.ndarray], max_chunks: int, max_bytes: int) -> int:
        """Rows a message for chunks like ``arrays`` holds: ``max_chunks`` of them, at most ``max_bytes``."""
        chunk_bytes = sum(a.nbytes for a in arrays)
        return arrays[0].shape[0] * max(1, min(max_chunks, max_bytes // max(chunk_bytes, 1)))

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
        """Copy a chunk's rows in (after :meth:`fits`); sum the large arrays' new rows while they are in the cache."""
        r0 = self.rows
        r1 = r0 + arrays[0].shape[0]
        for region, a in zip(self.regions, arrays):
            region[r0:r1] = a
        if self._hot:
            checksum, view, sums = CHECKSUMS[CHECKSUM], self._view, self.sums
            for i, s, rb in self._hot:
                sums[i] = checksum(view[s + r0 * rb:s + r1 * rb], sums[i])
        self.rows = r1
        self.chunks += 1

    def reusable(self) -> bool:
        """Whether nothing but this message holds its buffer (every frame sent from it was let go)."""
        return sys.getrefcount(self.buffer) <= self._own_refs  # measured the same way, in __init__

    def reset(self) -> None:
        """Empty again, for the next chunks (after :meth:`reusable`)."""
        self.rows = self.chunks = 0
        self.sums = [0] * len(self.sums)
        self.sealed = False

    def seal(self) -> PackedArrays:
        """The message's arrays laid out for the wire, with their checksums (call once the caller took it)."""
        rows, checksum, view = self.rows, CHECKSUMS[CHECKSUM], self._view
        spans: list[tuple[int, int]] = []
        off = 0
        for s, rb in zip(self.starts, self.row_bytes):
            off += -off % _ALIGN
            n = rb * rows
            if off != s:  # a partial message: move the region down to where the packed layout puts it
                view[off:off + n] = view[s:s + n]  # overlapping, dst below src: a memmove
            spans.append((off, n))
            off += n
        for (s, n), nxt in zip(spans, [start for start, _ in spans[1:]] + [off]):
            view[s + n:nxt] = _ZEROS[:nxt - s - n]  # alignment padding
        sums = self.sums
        for i in self._cold:
            s, n = spans[i]
            sums[i] = checksum(view[s:s + n])
        entries = [[name, _WIRE_BY_STR[d.str], [rows, *t], crc]
                   for name, d, t, crc in zip(self.names, self.dtypes, self.trailing, sums)]
        # A view, not a copy: the buffer is reused only once nothing holds this frame (:meth:`reusable`; a view of a
        # numpy slice, which holds the buffer, not a slice of the memoryview, which would not count).
        return PackedArrays(entries, [self.buffer[:off].data], len(entries), off, spans)


class MessagePool:
    """Open messages the learner acknowledged, reused for later chunks of the same layout and size (newest first).

    ``keep``: messages held at most (older ones are let go to the allocator). :meth:`give` and :meth:`take` may run
    on different threads: a deque's append and pop are atomic.
    """

    def __init__(self, keep: int) -> None:
        self._free: deque[OpenMessage] = deque(maxlen=keep)
        self.reused = 0

    def give(self, message: OpenMessage) -> None:
        """``message`` was acknowledged: it may take new chunks once ZeroMQ lets go of its frames."""
        self._free.append(message)

    def take(self, names: tuple[str, ...], arrays: list[np.ndarray], max_chunks: int, max_bytes: int) -> OpenMessage:
        """An empty message for chunks like ``arrays``: a pooled one if one fits and is free, else a new one."""
        rows = OpenMessage.rows_for(arrays, max_chunks, max_bytes)
        for _ in range(len(self._free)):
            try:
                message = self._free.pop()
            except IndexError:
                break
            if message.capacity == rows and message.reusable():
                message.reset()
                if message.fits(names, arrays):
                    self.reused += 1
                    return message
            # another layout or size, or ZeroMQ still sends from it: let it go
        return OpenMessage(names, arrays, max_chunks, max_bytes)
