"""Spill files: chunks an actor cannot keep in memory, on disk with a checksum, resent later in order.

One file per chunk, named by sequence number so the order survives; the content is the chunk's wire
frames behind a small length table and a CRC32 of everything, so a torn or corrupted file is caught
on reading (counted and logged, never sent). The files are an overflow for memory, not a
durability promise: an actor killed with spilled chunks leaves them on disk, and a restarted actor
(a new session) does not resend them.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections import deque
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_MAGIC = b"RRLSPILL1"


def _pack(frames: list[Any]) -> bytes:
    parts = [_MAGIC, struct.pack("<I", len(frames))]
    parts += [struct.pack("<Q", memoryview(f).nbytes) for f in frames]
    body = b"".join(parts) + b"".join(bytes(f) for f in frames)
    return body + struct.pack("<I", zlib.crc32(body))


def _unpack(data: bytes) -> list[bytes]:
    if len(data) < len(_MAGIC) + 8 or not data.startswith(_MAGIC):
        raise ValueError("not a spill file")
    body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
    if zlib.crc32(body) != crc:
        raise ValueError("checksum mismatch")
    (n,) = struct.unpack_from("<I", body, len(_MAGIC))
    off = len(_MAGIC) + 4
    sizes = struct.unpack_from(f"<{n}Q", body, off)
    off += 8 * n
    frames = []
    for size in sizes:
        frames.append(body[off:off + size])
        off += size
    if off != len(body):
        raise ValueError("length table does not match the file")
    return frames


class SpillStore:
    """A FIFO of chunks in ``directory`` holding at most ``max_bytes``."""

    def __init__(self, directory: str | Path, session: str, max_bytes: int) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.session = session
        self.max_bytes = max_bytes
        self.bytes = 0
        self.spilled = 0
        self.dropped = 0
        self.corrupt = 0
        self._queue: deque[tuple[int, Path, int]] = deque()  # (seq, file, size), oldest first

    def __len__(self) -> int:
        return len(self._queue)

    def seqs(self) -> list[int]:
        """The sequence numbers held, oldest first."""
        return [seq for seq, _, _ in self._queue]

    def first_seq(self) -> int | None:
        """The oldest spilled chunk's sequence number."""
        return self._queue[0][0] if self._queue else None

    def put(self, seq: int, frames: list[Any]) -> bool:
        """Write a chunk; ``False`` (counted and logged) if the directory's byte budget is spent."""
        data = _pack(frames)
        if self.bytes + len(data) > self.max_bytes:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                log.error("spill directory %s is full (%d bytes): dropped chunk %d (%d dropped so far)",
                          self.dir, self.bytes, seq, self.dropped)
            return False
        path = self.dir / f"{self.session}-{seq:012d}.chunk"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        self._queue.append((seq, path, len(data)))
        self.bytes += len(data)
        self.spilled += 1
        return True

    def pop(self) -> tuple[int, list[bytes]] | None:
        """The oldest readable chunk ``(seq, frames)``, removed from disk; ``None`` when empty."""
        while self._queue:
            seq, path, size = self._queue.popleft()
            self.bytes -= size
            try:
                frames = _unpack(path.read_bytes())
            except (OSError, ValueError) as e:
                self.corrupt += 1
                log.error("spill file %s is unreadable (%s): chunk %d dropped", path, e, seq)
                frames = None
            path.unlink(missing_ok=True)
            if frames is not None:
                return seq, frames
        return None
