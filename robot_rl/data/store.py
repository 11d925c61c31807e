"""An append-only, checksummed directory of recorded episodes (the toolkit's own demo format).

Layout::

    DIR/meta.json                 format, version, EnvSpec, fps, task (written once, atomically)
    DIR/episodes/ep_000007.npz    one episode: numpy arrays, loaded with allow_pickle=False
    DIR/index.jsonl               one line per committed episode: file, sha256, size, frames, ...

Commit order for each episode: write ``.tmp-ep_N.npz-<pid>``, fsync, rename to ``ep_N.npz``, fsync the
directory, then append its index line and fsync the index. The index line is the commit point: a
crash before it leaves an *orphan* file (reported, ignored, overwritten by the next append); a crash
inside it leaves a torn last line (reported, ignored, cut off before the next append). Nothing that
was committed is ever rewritten, so an interrupted recording loses at most the episode in flight.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.errors import UserError
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.data.episode import STEP_FIELDS, Episode
from robot_rl.durable import commit_file

log = logging.getLogger(__name__)

FORMAT = "robot_rl.episodes"
VERSION = 1


class StoreError(RuntimeError, UserError):
    """The directory is not a usable episode store, or an episode failed verification."""


def _write_durable(path: Path, data: bytes) -> None:
    """Write via a temp file: fsync it, rename, fsync the directory (a full disk raises DiskFullError)."""
    commit_file(path, [data])


def is_store(path: Path) -> bool:
    """Whether ``path`` looks like an episode store (has a meta.json of this format)."""
    meta = Path(path) / "meta.json"
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text()).get("format") == FORMAT
    except (ValueError, OSError):
        return False


def encode_episode(ep: Episode) -> bytes:
    """The ``.npz`` bytes of one episode (uncompressed: recording must keep up with the robot)."""
    arrays: dict[str, np.ndarray] = {f"obs:{k}": v for k, v in ep.obs.items()}
    if ep.final_obs is not None:
        arrays.update({f"final:{k}": v for k, v in ep.final_obs.items()})
    arrays.update({f: getattr(ep, f) for f in STEP_FIELDS})
    if ep.segment is not None:
        arrays["segment"] = ep.segment.astype(np.int8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def decode_episode(data: bytes, task: str = "", meta: dict[str, Any] | None = None) -> Episode:
    """Inverse of :func:`encode_episode` (never unpickles)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    missing = [f for f in STEP_FIELDS if f not in arrays]
    if missing:
        raise StoreError(f"episode file lacks {missing}")
    obs = {k[4:]: v for k, v in arrays.items() if k.startswith("obs:")}
    final = {k[6:]: v for k, v in arrays.items() if k.startswith("final:")} or None
    return Episode(obs=obs, final_obs=final, task=task, meta=dict(meta or {}), segment=arrays.get("segment"),
                   **{f: arrays[f] for f in STEP_FIELDS})


@dataclass
class IndexEntry:
    """One committed episode, as its index line records it."""

    episode: int
    file: str
    sha256: str
    bytes: int
    frames: int
    success: bool
    episode_return: float
    intervened: int
    task: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """One index line (no trailing newline)."""
        return json.dumps({"episode": self.episode, "file": self.file, "sha256": self.sha256, "bytes": self.bytes,
                           "frames": self.frames, "success": self.success, "return": self.episode_return,
                           "intervened": self.intervened, "task": self.task, "meta": self.meta})

    @classmethod
    def from_json(cls, line: str) -> IndexEntry:
        """Parse one index line; ``ValueError``/``KeyError`` if it is torn or malformed."""
        d = json.loads(line)
        return cls(episode=int(d["episode"]), file=str(d["file"]), sha256=str(d["sha256"]), bytes=int(d["bytes"]),
                   frames=int(d["frames"]), success=bool(d["success"]), episode_return=float(d["return"]),
                   intervened=int(d["intervened"]), task=str(d.get("task", "")), meta=dict(d.get("meta", {})))


class EpisodeStore:
    """Open (or create with :meth:`create`) an episode store; append with :meth:`append`.

    ``entries`` lists the committed episodes; ``torn_lines`` and ``orphans`` report what a crash left
    behind (see the module docstring).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if not is_store(self.path):
            raise StoreError(f"{self.path} is not an episode store (no meta.json of format {FORMAT!r})")
        meta = json.loads((self.path / "meta.json").read_text())
        if int(meta.get("version", 0)) > VERSION:
            raise StoreError(f"{self.path}: store version {meta['version']} is newer than this toolkit's {VERSION}")
        self.meta: dict[str, Any] = meta
        self.spec = EnvSpec.from_dict(meta["spec"])
        self.fps = float(meta.get("fps") or 0) or None
        self.task = str(meta.get("task", ""))
        self.entries: list[IndexEntry] = []
        self.torn_lines = 0
        self._good_index_bytes = 0
        self._read_index()
        indexed = {e.file for e in self.entries}
        ep_dir = self.path / "episodes"
        self.orphans = sorted(p.relative_to(self.path).as_posix() for p in ep_dir.glob("ep_*.npz")
                              if p.relative_to(self.path).as_posix() not in indexed)

    @classmethod
    def create(cls, path: Path | str, spec: EnvSpec, fps: float | None = None, task: str = "",
               source: dict[str, Any] | None = None, exist_ok: bool = False) -> EpisodeStore:
        """Make a new empty store at ``path`` (or open it if ``exist_ok`` and it has the same spec)."""
        path = Path(path)
        if is_store(path):
            if not exist_ok:
                raise StoreError(f"{path} already holds an episode store")
            store = cls(path)
            store.spec.assert_compatible(spec, what=f"the store in {path}")
            return store
        if path.exists() and any(path.iterdir()):
            raise StoreError(f"{path} exists and is not an empty directory")
        (path / "episodes").mkdir(parents=True, exist_ok=True)
        meta = {"format": FORMAT, "version": VERSION, "spec": spec.to_dict(), "fps": fps, "task": task,
                "source": source or {}}
        _write_durable(path / "meta.json", json.dumps(meta, indent=2).encode())
        _write_durable(path / "index.jsonl", b"")
        return cls(path)

    def _read_index(self) -> None:
        raw = (self.path / "index.jsonl").read_bytes() if (self.path / "index.jsonl").exists() else b""
        offset = 0
        for line in raw.splitlines(keepends=True):
            try:
                if not line.endswith(b"\n"):
                    raise ValueError("no newline: the write was cut short")
                self.entries.append(IndexEntry.from_json(line.decode()))
            except (ValueError, KeyError, UnicodeDecodeError):
                # Only the tail can be torn (lines are appended); anything after it is ignored too.
                self.torn_lines = raw[offset:].count(b"\n") + (0 if raw.endswith(b"\n") else 1)
                log.warning("%s: ignoring %d torn/malformed index line(s) at the end", self.path, self.torn_lines)
                break
            offset += len(line)
        self._good_index_bytes = offset

    # ---- reading ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def total_frames(self) -> int:
        """Steps over all committed episodes."""
        return sum(e.frames for e in self.entries)

    def read(self, i: int, verify: bool = True) -> Episode:
        """Committed episode ``i`` (position in ``entries``); checks its sha256 unless ``verify=False``."""
        entry = self.entries[i]
        data = (self.path / entry.file).read_bytes()
        if verify:
            digest = hashlib.sha256(data).hexdigest()
            if digest != entry.sha256:
                raise StoreError(f"{entry.file}: sha256 {digest[:12]}… does not match the index "
                                 f"({entry.sha256[:12]}…); the file is damaged")
        ep = decode_episode(data, entry.task, entry.meta)
        if len(ep) != entry.frames:
            raise StoreError(f"{entry.file}: {len(ep)} frames, the index says {entry.frames}")
        return ep

    def __iter__(self) -> Iterator[Episode]:
        for i in range(len(self.entries)):
            yield self.read(i)

    # ---- writing ----------------------------------------------------------------------------

    def append(self, ep: Episode) -> IndexEntry:
        """Commit one episode (durable when this returns)."""
        ep.validate(self.spec)
        if self.torn_lines:
            # Cut the torn tail so the new line starts cleanly; the torn line was never committed.
            with open(self.path / "index.jsonl", "r+b") as f:
                f.truncate(self._good_index_bytes)
                f.flush()
                os.fsync(f.fileno())
            self.torn_lines = 0
        number = self.entries[-1].episode + 1 if self.entries else 0
        name = f"episodes/ep_{number:06d}.npz"
        data = encode_episode(ep)
        _write_durable(self.path / name, data)
        entry = IndexEntry(episode=number, file=name, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data),
                           frames=len(ep), success=ep.is_success, episode_return=ep.episode_return,
                           intervened=int(ep.intervened.sum()), task=ep.task or self.task, meta=ep.meta)
        line = (entry.to_json() + "\n").encode()
        with open(self.path / "index.jsonl", "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self._good_index_bytes += len(line)
        self.entries.append(entry)
        if name in self.orphans:
            self.orphans.remove(name)
        return entry


def open_or_create(path: Path | str, spec: EnvSpec, fps: float | None = None, task: str = "") -> EpisodeStore:
    """An existing store with a matching spec, or a new one."""
    try:
        return EpisodeStore.create(path, spec, fps=fps, task=task, exist_ok=True)
    except SpecMismatchError as e:
        raise StoreError(str(e)) from None
