"""The Rerun sink: a loop's steps on an ``env_step`` (and ``wall_time``) timeline, live or in an ``.rrd`` file.

Entities (docs/visualisation.md):

==============================  ================================================================================
``camera/<name>``               the ``image.<name>`` observations (uint8 HWC), every ``viz.camera_every`` logged step
``observation/state``           the ``state`` observation, one series per dimension
``action/policy``               the action sent, on the steps the policy acted
``action/human``                the action sent, on the steps the human acted (an intervention or a demonstration)
``action/hold``                 the action sent while nobody acted (the arm held: device lost, or idle)
``action/policy_proposal``      the policy's own action on the steps the human overrode it
``reward``, ``success``         per step (success 0/1)
``intervention``                1 on the steps the human acted, else 0
``episode``                     one text line per finished episode (outcome, length, return)
``episode/return``, ``/length`` at each episode's last step
``notes``                       text lines from the loop (evaluations)
==============================  ================================================================================

Cost per step: :meth:`RerunSink.step` keeps one tuple (copies of the arrays); every 256 steps or ``viz.flush_s`` the
kept steps go to Rerun as one columnar chunk per entity (``rr.send_columns``), which Rerun encodes and writes on its
own thread.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlparse

import numpy as np

from robot_rl.viz.config import VizConfig

log = logging.getLogger(__name__)

DEFAULT_URL = "rerun+http://127.0.0.1:9876/proxy"
FLUSH_ROWS = 256
_COLOR_MODELS = {1: "L", 3: "RGB", 4: "RGBA"}


def import_rerun() -> Any:
    """``rerun``, or an ImportError that says which package to install."""
    try:
        import rerun
    except ImportError as e:
        raise ImportError(f"--viz rerun needs the Rerun SDK: pip install 'robot-rl[viz]' ({e})") from None
    return rerun


def viewer_listening(url: str = DEFAULT_URL, timeout_s: float = 0.2) -> bool:
    """Whether something accepts TCP connections at ``url``'s host and port (a Rerun viewer, presumably)."""
    parsed = urlparse(url.replace("rerun+http://", "http://").replace("rerun+https://", "https://")
                      .replace("rerun://", "http://"))
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 9876), timeout=timeout_s):
            return True
    except OSError:
        return False


def free_path(path: Path) -> Path:
    """``path``, or ``<stem>-2<suffix>``, ``-3`` … when it exists (a resumed run keeps its earlier recording)."""
    if not path.exists():
        return path
    n = 2
    while (candidate := path.with_name(f"{path.stem}-{n}{path.suffix}")).exists():
        n += 1
    return candidate


class _Step(NamedTuple):
    step: int
    time: float
    source: str
    action: np.ndarray
    reward: float
    success: bool
    proposal: np.ndarray | None
    state: np.ndarray | None
    images: dict[str, np.ndarray] | None


def _vectors(rr: Any, values: list[np.ndarray]) -> Any:
    arr = np.stack(values).astype(np.float64, copy=False)
    return rr.Scalars.columns(scalars=arr.reshape(-1)).partition([arr.shape[1]] * len(values))


def _images(rr: Any, values: list[np.ndarray]) -> Any:
    arr = np.stack(values)  # [N, H, W, C] uint8
    n, h, w, c = arr.shape
    fmt = rr.components.ImageFormat(width=w, height=h, color_model=_COLOR_MODELS[c], channel_datatype="U8")
    return rr.Image.columns(buffer=arr.reshape(n, -1), format=[fmt] * n)


class RerunSink:
    """A :class:`~robot_rl.viz.base.StepViz` writing to a Rerun viewer or ``.rrd`` file (see the module docstring).

    ``default_file`` is where the recording goes when ``cfg.file`` is unset and no viewer is reached (a free name
    next to it if it exists); ``recording_id`` groups files of one run (a resumed run's files open as one).
    """

    def __init__(self, cfg: VizConfig, default_file: Path, recording_id: str, name: str = "") -> None:
        self.rr = rr = import_rerun()
        self.cfg = cfg
        self.rec = rr.RecordingStream("robot_rl", recording_id=recording_id)
        self.file: Path | None = None
        self.url: str | None = None
        sinks = self._sinks(cfg, Path(default_file))
        if cfg.spawn:
            self.rec.spawn(connect=False)
            self.url = DEFAULT_URL
            sinks.insert(0, rr.GrpcSink(DEFAULT_URL))
        self.rec.set_sinks(*sinks)
        if name:
            self.rec.send_recording_name(name)
        self._steps: list[_Step] = []
        self._events: list[tuple[str, int, float, Any]] = []  # (entity, step, time, float or (text, level))
        self._last_flush = time.monotonic()
        self._last_step = 0
        self._lock = threading.Lock()
        self._closed = False

    def _sinks(self, cfg: VizConfig, default_file: Path) -> list[Any]:
        rr = self.rr
        sinks: list[Any] = []
        url = None if cfg.connect in ("off", "auto") else cfg.connect
        if cfg.connect == "auto" and not cfg.spawn and viewer_listening(DEFAULT_URL):
            url = DEFAULT_URL
        if url is not None:
            self.url = url
            sinks.append(rr.GrpcSink(url))
        if cfg.file is not None or (url is None and not cfg.spawn):
            self.file = Path(cfg.file) if cfg.file is not None else free_path(default_file)
            self.file.parent.mkdir(parents=True, exist_ok=True)
            sinks.append(rr.FileSink(str(self.file)))
        return sinks

    @property
    def where(self) -> str:
        """Where the steps go, in words (for the terminal)."""
        parts = [f"the Rerun viewer at {self.url}"] if self.url else []
        if self.file is not None:
            parts.append(f"{self.file} (open it with `rerun {self.file}`)")
        return " and ".join(parts)

    # ---- StepViz ------------------------------------------------------------------------------------------

    def due(self, step: int) -> bool:
        """Every ``viz.every``-th step is logged."""
        return step % self.cfg.every == 0

    def camera_due(self, step: int) -> bool:
        """Cameras on every ``viz.camera_every``-th logged step."""
        return step % (self.cfg.every * self.cfg.camera_every) == 0

    def step(self, step: int, action: Any, *, source: str, reward: float, success: bool,
             obs: Mapping[str, Any] | None = None, proposal: Any = None) -> None:
        """Keep one step (see :class:`~robot_rl.viz.base.StepViz`); sent in a batch every 256 steps or flush_s."""
        if not self.due(step):
            return
        state = images = None
        if obs is not None:
            if "state" in obs:
                state = np.array(obs["state"], dtype=np.float64).reshape(-1)
            if self.camera_due(step):
                images = _camera_images(obs)
        row = _Step(step, time.time(), source, np.array(action, dtype=np.float64).reshape(-1), float(reward),
                    bool(success), None if proposal is None else np.array(proposal, dtype=np.float64).reshape(-1),
                    state, images)
        with self._lock:
            self._steps.append(row)
            self._last_step = step
            if len(self._steps) >= FLUSH_ROWS or time.monotonic() - self._last_flush >= self.cfg.flush_s:
                self._flush_locked()

    def episode_end(self, step: int, *, index: int, outcome: str, ret: float, length: int) -> None:
        """An episode's last step: its return and length, and a text line."""
        now = time.time()
        text = f"episode {index}: {outcome} after {length} steps, return {ret:.3f}"
        with self._lock:
            self._events += [("episode/return", step, now, float(ret)), ("episode/length", step, now, float(length)),
                             ("episode", step, now, (text, "INFO" if outcome == "success" else "WARN"))]

    def note(self, text: str, step: int | None = None) -> None:
        """A text line under ``notes`` (at ``step``, or the last logged step)."""
        with self._lock:
            self._events.append(("notes", self._last_step if step is None else step, time.time(), (text, "INFO")))

    def flush(self) -> None:
        """Send everything kept so far now."""
        with self._lock:
            self._flush_locked()

    def _send(self, entity: str, steps: Any, times: Any, columns: Any) -> None:
        rr = self.rr
        indexes = [rr.TimeColumn("env_step", sequence=np.asarray(steps, dtype=np.int64)),
                   rr.TimeColumn("wall_time", timestamp=np.asarray(times, dtype=np.float64))]
        rr.send_columns(entity, indexes=indexes, columns=columns, recording=self.rec)

    def _flush_locked(self) -> None:
        rr, rows, events = self.rr, self._steps, self._events
        self._steps, self._events, self._last_flush = [], [], time.monotonic()
        if rows:
            steps = np.fromiter((r.step for r in rows), np.int64, len(rows))
            times = np.fromiter((r.time for r in rows), np.float64, len(rows))
            sources = [r.source for r in rows]
            for entity, values in (("reward", [r.reward for r in rows]), ("success", [r.success for r in rows]),
                                   ("intervention", [s == "human" for s in sources])):
                self._send(entity, steps, times, rr.Scalars.columns(scalars=np.asarray(values, dtype=np.float64)))
            for source in sorted(set(sources)):
                idx = [i for i, s in enumerate(sources) if s == source]
                self._send(f"action/{source}", steps[idx], times[idx], _vectors(rr, [rows[i].action for i in idx]))
            self._send_optional(rows, steps, times)
        for entity in sorted({e[0] for e in events}):
            mine = [e for e in events if e[0] == entity]
            values = [e[3] for e in mine]
            columns = (rr.TextLog.columns(text=[v[0] for v in values], level=[v[1] for v in values])
                       if isinstance(values[0], tuple) else rr.Scalars.columns(scalars=np.asarray(values)))
            self._send(entity, [e[1] for e in mine], [e[2] for e in mine], columns)

    def _send_optional(self, rows: list[_Step], steps: np.ndarray, times: np.ndarray) -> None:
        """The proposals, states and camera images of the rows that have them."""
        rr = self.rr
        for entity, field in (("action/policy_proposal", "proposal"), ("observation/state", "state")):
            idx = [i for i, r in enumerate(rows) if getattr(r, field) is not None]
            if idx:
                self._send(entity, steps[idx], times[idx], _vectors(rr, [getattr(rows[i], field) for i in idx]))
        cameras = sorted({k for r in rows if r.images for k in r.images})
        for cam in cameras:
            idx = [i for i, r in enumerate(rows) if r.images and cam in r.images]
            images = [r.images[cam] for r in (rows[i] for i in idx) if r.images]
            self._send(f"camera/{cam}", steps[idx], times[idx], _images(rr, images))

    def close(self) -> None:
        """Send the rest and finish the recording (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.flush()
        try:
            self.rec.flush(timeout_sec=30.0)
        finally:
            self.rec.disconnect()
        if self.file is not None:
            log.info("Rerun recording written to %s (open it with `rerun %s`)", self.file, self.file)


def _camera_images(obs: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
    """Copies of the ``image.<camera>`` observations that Rerun shows as images (uint8, 1/3/4 channels)."""
    out = {}
    for key, value in obs.items():
        if key.startswith("image."):
            img = np.asarray(value)
            if img.ndim == 2:
                img = img[:, :, None]
            if img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] in _COLOR_MODELS:
                out[key[len("image."):]] = img.copy()
    return out or None
