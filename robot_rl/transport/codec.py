"""The wire format: a msgpack header followed by raw array frames. Never pickle.

A message is a list of ZeroMQ frames::

    frame 0   msgpack map  {"v": SCHEMA_VERSION, "type": str, "session": str, "seq": int, "ck": "crc32c"|"crc32",
                            "meta": {str: plain data}, "arrays": [[name, dtype, shape, checksum], ...],
                            "packed": P}
              followed by the CRC32 of those msgpack bytes (4 bytes, little-endian)
    frame 1   (when P > 0) the first P arrays of the header, packed: each one's raw little-endian bytes
              starting at the next multiple of 8 bytes after the previous one's end (zero padding), the
              frame ending with the last one's bytes
    frame 1+  each remaining array's raw little-endian bytes, one frame per array (zero-copy on send)

Small arrays (up to :data:`PACK_MAX_BYTES`) are packed: a chunk of small transitions is two frames instead of
a dozen, and ZeroMQ's cost is per frame, not per byte. Large ones (camera images) travel zero-copy in frames of
their own.

Decoding trusts nothing. Before any array is used it checks, in order: frame count and header size,
the header's CRC32 (a flipped bit in ``seq`` or ``session`` would otherwise store a chunk under the
wrong key or acknowledge the wrong one), msgpack structure with bounded lengths (no extension types,
so no objects are ever constructed),
schema version, message type, array entry shape, dtype against an allow-list, shape against the
size limit and the frame's byte length (the packed frame's length against the layout the header implies),
CRC32 per array, and — when the caller passes specs — the array's
dtype/shape against the spec exchanged at the handshake and finiteness where the spec asks. Every
failure raises :class:`WireError` with a short ``reason`` code that the receiver counts.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from robot_rl.core.specs import ArraySpec

SCHEMA_VERSION = 3  # 2: the header frame carries its own CRC32; 3: small arrays share one packed frame

#: Arrays up to this size are packed into one frame (one copy); larger ones go zero-copy in frames of their own.
PACK_MAX_BYTES = 256 << 10
_ALIGN = 8  # packed arrays start at multiples of this: numpy and torch views of them stay aligned
_ZEROS = bytes(_ALIGN)

#: Message types the toolkit sends; anything else is rejected as ``unknown_type``.
MESSAGE_TYPES = frozenset({"hello", "welcome", "transitions", "ack", "held", "weights", "heartbeat", "bye"})

_DTYPES: dict[str, np.dtype[Any]] = {name: np.dtype(name).newbyteorder("<") for name in (
    "float32", "float64", "float16", "uint8", "int8", "int16", "int32", "int64", "bool")}
_WIRE_BY_STR: dict[str, str] = {dtype.str: name for name, dtype in _DTYPES.items()}


def _checksums() -> dict[str, Any]:
    # CRC32C runs in hardware (SSE4.2 / ARMv8) through the small `crc32c` package: about 3x zlib's
    # CRC32 on camera frames. Without it, zlib's CRC32; the header says which one each message used.
    out: dict[str, Any] = {"crc32": zlib.crc32}
    try:
        import crc32c

        out["crc32c"] = crc32c.crc32c
    except ImportError:
        pass
    return out


CHECKSUMS = _checksums()
#: The array checksum this process writes.
CHECKSUM = "crc32c" if "crc32c" in CHECKSUMS else "crc32"


class WireError(ValueError):
    """A message failed validation; ``reason`` is a short code for counters (``bad_crc``, …)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class WireLimits:
    """Bounds applied before anything is allocated from a message."""

    max_header_bytes: int = 1 << 20
    max_arrays: int = 256
    max_array_bytes: int = 512 << 20
    max_rank: int = 6


DEFAULT_LIMITS = WireLimits()


@dataclass
class Message:
    """A decoded message: header fields and numpy arrays (read-only views of the received frames)."""

    type: str
    session: str
    seq: int
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class PackedArrays:
    """Arrays laid out for the wire (:func:`pack_arrays`): header entries, then their frames (packed first)."""

    entries: list[list[Any]]
    frames: list[bytes | memoryview]
    packed: int  # how many leading entries share frames[0]
    nbytes: int  # of all frames
    spans: list[tuple[int, int]] = field(default_factory=list)  # (start, bytes) of each packed entry in frames[0]


def _wire_array(name: str, arr: np.ndarray) -> tuple[np.ndarray, str]:
    a = np.ascontiguousarray(arr)
    # Keyed by the dtype's string ('<f4'): hashing a dtype object costs microseconds, a string is cached.
    dtype_name = _WIRE_BY_STR.get(a.dtype.str)
    if dtype_name is None:
        if a.dtype.byteorder == ">" and a.dtype.name in _DTYPES:
            a = a.astype(a.dtype.newbyteorder("<"))
            dtype_name = a.dtype.name
        else:
            raise ValueError(f"array {name!r}: dtype {a.dtype} cannot go on the wire")
    return a, dtype_name


def pack_arrays(arrays: dict[str, np.ndarray] | None, copy_large: bool = False,
                checksums: bool = True) -> PackedArrays:
    """The frames and header entries of ``arrays``: the small ones copied into one packed frame, the rest as they are.

    The packed frame is a copy: the arrays may change afterwards. ``copy_large``: copy the large ones too (the
    message then owns all its bytes); otherwise their frames are views the caller must keep unchanged until sent.
    ``checksums=False`` leaves the packed arrays' checksums to :func:`encode_packed` (on the I/O thread).
    """
    checksum = CHECKSUMS[CHECKSUM]
    small: list[list[Any]] = []  # [name, dtype, shape, bytes, offset in the packed frame]
    pieces: list[Any] = []
    large: list[tuple[list[Any], memoryview]] = []
    off = 0
    for name, arr in (arrays or {}).items():
        a, dtype_name = _wire_array(name, arr)
        nbytes = a.nbytes
        if nbytes <= PACK_MAX_BYTES:
            pad = -off % _ALIGN
            if pad:
                pieces.append(_ZEROS[:pad])
                off += pad
            small.append([name, dtype_name, list(a.shape), nbytes, off])
            if nbytes:
                pieces.append(a)  # bytes.join takes the array's buffer as it is: no view objects per array
            off += nbytes
        else:
            buf = memoryview(a.copy() if copy_large else a).cast("B")  # type: ignore[arg-type]
            large.append(([name, dtype_name, list(a.shape), checksum(buf)], buf))
    entries: list[list[Any]] = []
    frames: list[bytes | memoryview] = []
    if small:
        payload = b"".join(pieces)  # one C call copies them all
        view = memoryview(payload)
        # Checksums of the copy, not of the caller's arrays: what is sent (and resent) is what was summed.
        entries = [[name, dtype_name, shape, checksum(view[start:start + nbytes]) if checksums else None]
                   for name, dtype_name, shape, nbytes, start in small]
        frames.append(payload)
    for entry, buf in large:
        entries.append(entry)
        frames.append(buf)
    return PackedArrays(entries, frames, len(small), off + sum(buf.nbytes for _, buf in large),
                        [(start, nbytes) for *_, nbytes, start in small])


def encode_packed(msg_type: str, session: str, seq: int, arrays: PackedArrays, meta: dict[str, Any] | None = None,
                  *, types: frozenset[str] = MESSAGE_TYPES) -> list[bytes | memoryview]:
    """Frames of a message whose arrays :func:`pack_arrays` laid out (the header is the only new frame)."""
    if msg_type not in types:
        raise ValueError(f"unknown message type {msg_type!r}; valid: {sorted(types)}")
    if arrays.packed and arrays.entries[0][3] is None:  # packed without checksums: sum the copy now
        view, checksum = memoryview(arrays.frames[0]), CHECKSUMS[CHECKSUM]
        for entry, (start, nbytes) in zip(arrays.entries, arrays.spans):
            entry[3] = checksum(view[start:start + nbytes])
    header = pack_header({"v": SCHEMA_VERSION, "type": msg_type, "session": session, "seq": int(seq),
                          "ck": CHECKSUM, "meta": meta or {}, "arrays": arrays.entries, "packed": arrays.packed})
    return [header, *arrays.frames]


def encode(msg_type: str, session: str, seq: int, arrays: dict[str, np.ndarray] | None = None,
           meta: dict[str, Any] | None = None, *, types: frozenset[str] = MESSAGE_TYPES) -> list[bytes | memoryview]:
    """Frames for a message: small arrays packed into one frame (a copy), large ones zero-copy.

    ``types``: the message types of the protocol speaking (the transport's by default; the reward
    service has its own set on the same format).
    """
    if msg_type not in types:
        raise ValueError(f"unknown message type {msg_type!r}; valid: {sorted(types)}")
    if not arrays:  # control messages: no array work at all
        return [pack_header({"v": SCHEMA_VERSION, "type": msg_type, "session": session, "seq": int(seq),
                             "ck": CHECKSUM, "meta": meta or {}, "arrays": [], "packed": 0})]
    return encode_packed(msg_type, session, seq, pack_arrays(arrays), meta, types=types)


def pack_header(header: dict[str, Any]) -> bytes:
    """The header frame: msgpack bytes of ``header`` followed by their CRC32."""
    packed: bytes = msgpack.packb(header, use_bin_type=True)
    return packed + struct.pack("<I", zlib.crc32(packed))


def unpack_header(frame: bytes | memoryview, limits: WireLimits | None = None) -> dict[str, Any]:
    """The header map of a header frame, after its size, CRC and msgpack checks (raises WireError)."""
    return _header(frame, limits or DEFAULT_LIMITS)


def _header(frame: bytes | memoryview, limits: WireLimits) -> dict[str, Any]:
    if len(frame) > limits.max_header_bytes:
        raise WireError("oversized", f"header of {len(frame)} bytes > {limits.max_header_bytes}")
    raw = bytes(frame)
    if len(raw) < 5:
        raise WireError("truncated", f"header frame of {len(raw)} bytes")
    body, (crc,) = raw[:-4], struct.unpack("<I", raw[-4:])
    if zlib.crc32(body) != crc:
        raise WireError("bad_crc", "header checksum mismatch")
    try:
        header = msgpack.unpackb(
            body, raw=False, strict_map_key=True, use_list=True,
            max_bin_len=limits.max_header_bytes, max_str_len=limits.max_header_bytes,
            max_array_len=max(limits.max_arrays * 4, 1024), max_map_len=1024, max_ext_len=0,
        )
    except Exception as e:
        raise WireError("bad_header", f"not a msgpack header ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise WireError("bad_header", "header is not a map")
    return header


class SpecPlan:
    """Per-array expectations compiled once from specs (at the handshake or endpoint start).

    Decoding then checks each array with a dict lookup and comparisons on the header entry instead
    of numpy attribute calls.

    ``expected[name] = (dtype name, trailing shape as a list, must be finite)``.
    """

    def __init__(self, specs: dict[str, ArraySpec], batch_dims: int = 1) -> None:
        self.batch_dims = batch_dims
        self.expected: dict[str, tuple[str, list[int], bool]] = {
            name: (spec.dtype, list(spec.shape), bool(spec.finite) and _DTYPES[spec.dtype].kind == "f")
            for name, spec in specs.items()}
        self.specs = dict(specs)


def decode(frames: list[bytes] | list[memoryview] | list[Any], limits: WireLimits = DEFAULT_LIMITS,
           specs: dict[str, ArraySpec] | SpecPlan | None = None, batch_dims: int = 1,
           header: dict[str, Any] | None = None, *, types: frozenset[str] = MESSAGE_TYPES) -> Message:
    """Validate and decode frames; raise :class:`WireError` for anything wrong.

    With ``specs`` (or a :class:`SpecPlan` compiled from them), every array named there must be
    present with the spec's dtype and trailing shape (after ``batch_dims`` leading dimensions), and
    float arrays must be finite where the spec says. ``header`` is the result of
    :func:`unpack_header` on ``frames[0]`` when the caller already has it (saves parsing it twice);
    everything else is still checked.
    """
    if not frames:
        raise WireError("truncated", "no frames")
    if header is None:
        header = _header(frames[0], limits)
    version = header.get("v")
    if version != SCHEMA_VERSION:
        raise WireError("bad_version", f"schema version {version!r}, this peer speaks {SCHEMA_VERSION}")
    msg_type, session, seq = header.get("type"), header.get("session"), header.get("seq")
    if msg_type not in types:
        raise WireError("unknown_type", f"message type {msg_type!r}")
    if not isinstance(session, str) or not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise WireError("bad_header", "session must be a string and seq a non-negative integer")
    meta = header.get("meta", {})
    entries = header.get("arrays", [])
    if not isinstance(meta, dict) or not isinstance(entries, list):
        raise WireError("bad_header", "meta must be a map and arrays a list")
    if len(entries) > limits.max_arrays:
        raise WireError("oversized", f"{len(entries)} arrays > {limits.max_arrays}")
    packed = header.get("packed", 0)
    if type(packed) is not int or not 0 <= packed <= len(entries):
        raise WireError("bad_header", f"packed must count leading arrays (0..{len(entries)}), got {packed!r}")
    if len(entries) - packed + (packed > 0) != len(frames) - 1:
        raise WireError("truncated", f"header lists {len(entries)} arrays ({packed} packed) but {len(frames) - 1} "
                                     "frames followed")
    ck = header.get("ck")
    checksum = CHECKSUMS.get(ck) if isinstance(ck, str) else None
    if checksum is None:
        if ck == "crc32c":
            raise WireError("bad_checksum", "the peer checksums with CRC32C; `pip install crc32c` on this side")
        raise WireError("bad_header", f"unknown checksum {ck!r}")
    plan = specs if isinstance(specs, SpecPlan) or specs is None else SpecPlan(specs, batch_dims)
    expected = plan.expected if plan is not None else None
    batch_dims = plan.batch_dims if plan is not None else batch_dims
    arrays: dict[str, np.ndarray] = {}
    matched = 0
    parsed = [_entry(entry, limits) for entry in entries]
    bufs: list[Any] = [f.cast("B") if type(f) is memoryview else memoryview(f).cast("B") for f in frames[1:]]
    if packed:  # the packed frame's layout follows from the entries; its length must match it exactly
        pool, end = bufs[0], 0
        views = []
        for p in parsed[:packed]:
            start = end + (-end % _ALIGN)
            end = start + p[4]
            views.append(pool[start:end])
        if end != len(pool):
            raise WireError("bad_size", f"packed frame has {len(pool)} bytes, its arrays need {end}")
        bufs[:1] = views
    for (name, dtype_name, dtype, shape, nbytes), buf, entry in zip(parsed, bufs, entries):
        if len(buf) != nbytes:
            raise WireError("bad_size", f"{name}: frame has {len(buf)} bytes, dtype×shape needs {nbytes}")
        if checksum(buf) != entry[3]:
            raise WireError("bad_crc", f"{name}: checksum mismatch")
        if name in arrays:
            raise WireError("bad_header", f"array {name!r} appears twice")
        arr = arrays[name] = np.frombuffer(buf, dtype=dtype).reshape(shape)
        want = expected.get(name) if expected is not None else None
        if want is not None:
            matched += 1
            _check_spec(name, arr, dtype_name, shape, want, batch_dims)
    if expected is not None and matched != len(expected):
        missing = next(n for n in expected if n not in arrays)
        raise WireError("spec_mismatch", f"missing array {missing!r}")
    return Message(type=msg_type, session=session, seq=seq, arrays=arrays, meta=meta)


def _entry(entry: Any, limits: WireLimits) -> tuple[str, str, np.dtype[Any], list[int], int]:
    """``(name, dtype name, dtype, shape, bytes)`` of a header's array entry, after its checks."""
    if type(entry) is not list or len(entry) != 4:
        raise WireError("bad_header", "array entry must be [name, dtype, shape, crc32]")
    name, dtype_name, shape, crc = entry
    if type(name) is not str or type(dtype_name) is not str or type(crc) is not int:
        raise WireError("bad_header", "array entry has wrong field types")
    dtype = _DTYPES.get(dtype_name)
    if dtype is None:
        raise WireError("bad_dtype", f"{name}: dtype {dtype_name!r} is not allowed")
    if type(shape) is not list or len(shape) > limits.max_rank:
        raise WireError("bad_shape", f"{name}: shape {shape!r}")
    count = 1
    for s in shape:  # exact int (msgpack gives no bool here, but a crafted one is refused anyway)
        if type(s) is not int or not 0 <= s < 1 << 31:
            raise WireError("bad_shape", f"{name}: shape {shape!r}")
        count *= s
    nbytes = count * dtype.itemsize
    if nbytes > limits.max_array_bytes:
        raise WireError("oversized", f"{name}: {nbytes} bytes > {limits.max_array_bytes}")
    return name, dtype_name, dtype, shape, nbytes


def _check_spec(name: str, arr: np.ndarray, dtype_name: str, shape: list[int],
                want: tuple[str, list[int], bool], batch_dims: int) -> None:
    dtype, trailing, finite = want
    if dtype_name != dtype or len(shape) != batch_dims + len(trailing) or shape[batch_dims:] != trailing:
        raise WireError("spec_mismatch", f"{name}: got {dtype_name}{shape}, spec "
                                         f"{dtype}[*, {', '.join(map(str, trailing))}]")
    if finite and not _all_finite(arr):
        raise WireError("nonfinite", f"{name}: contains NaN or inf")


def _all_finite(arr: np.ndarray) -> bool:
    """True when no element is NaN or ±inf.

    Elementwise on purpose: a float64 sum of float32 values would be one reduction without the
    boolean temporary, but it measured no faster at chunk sizes and warns on +inf + -inf.
    """
    return bool(np.isfinite(arr).all())
