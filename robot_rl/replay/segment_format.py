"""The segment file format: ``MAGIC | u32 header length | u32 header CRC32 | header JSON | payload``.

The header lists each array (name, dtype, shape, offset), the payload's byte count and CRC32, and what the
log records beside the rows (``chunks``, ``source_rows``; see :mod:`robot_rl.replay.segments`). Nothing
here touches a directory: :class:`~robot_rl.replay.segments.SegmentLog` commits and opens the files.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

MAGIC = b"RRLSEG01"
_PREFIX = struct.Struct("<8sII")
FORMAT = 1


class SegmentError(ValueError):
    """A segment file failed verification (the message says how)."""


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().contiguous().numpy()


def encode_segment(t0: int, t1: int, o0: int, o1: int, arrays: dict[str, torch.Tensor],
                   chunks: dict[str, Any] | None = None, extra: dict[str, Any] | None = None
                   ) -> list[bytes | memoryview]:
    """The bytes of a segment file holding ``arrays`` (row arrays ``[t1-t0, ...]``, slot arrays ``[o1-o0, ...]``).

    ``chunks`` (session → ``{"floor", "above"}``) and ``extra`` (e.g. ``source_rows``) go into the header,
    covered by its checksum.
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
                         "payload_bytes": offset, "payload_crc": crc, "chunks": chunks or {},
                         **(extra or {})}).encode()
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


def header_only(path: Path) -> dict[str, Any] | None:
    """A segment's verified header, reading only its first bytes; ``None`` if unreadable (loading will say why)."""
    try:
        with path.open("rb") as f:
            prefix = f.read(_PREFIX.size)
            if len(prefix) < _PREFIX.size:
                return None
            return read_header(prefix + f.read(_PREFIX.unpack(prefix)[1]), path.name)[0]
    except (OSError, SegmentError, ValueError):
        return None
