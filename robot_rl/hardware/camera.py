"""Cameras through OpenCV: USB index, video file or RTSP/HTTP URL, captured on their own thread.

The capture thread keeps only the newest frame (older ones are dropped and counted: a policy must act on
what the camera sees now, not on a queue). Each frame carries the :func:`time.monotonic` time it was
captured and a sequence number. A camera whose newest frame is older than ``stale_after_s`` is *stale*:
:meth:`OpenCVCamera.read` raises :class:`CameraStaleError`, and a robot with a stale camera reports it in
``stale_sensors()`` so that the safety layer holds the arm. Needs ``pip install 'robot-rl[camera]'``
(``opencv-python-headless``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

log = logging.getLogger(__name__)


class CameraStaleError(RuntimeError):
    """The camera has not delivered a frame for longer than its ``stale_after_s``."""


class FrameSource(Protocol):
    """What the capture thread reads from (``cv2.VideoCapture`` satisfies it)."""

    def read(self) -> tuple[bool, np.ndarray | None]:
        """Block until the next frame; ``(False, None)`` when there is none."""
        ...

    def release(self) -> None:
        """Close the source."""
        ...


@dataclass
class CameraConfig:
    """One camera."""

    source: str = "0"
    """A USB index (``"0"``), a video file path, or an ``rtsp://`` / ``http://`` URL."""
    width: int = 128
    """Width of the delivered image after crop and resize."""
    height: int = 128
    """Height of the delivered image after crop and resize."""
    crop: tuple[int, int, int, int] | None = None
    """``(x, y, w, h)`` region of the raw frame to keep before resizing (None = whole frame)."""
    fps: float = 0.0
    """Pace reading of video files at this rate (0 = the file's own rate); live sources deliver at theirs."""
    loop: bool = False
    """Video files: start again at the end instead of going stale."""
    stale_after_s: float = 0.5
    """A camera whose newest frame is older than this is stale and the robot holds."""
    open_timeout_s: float = 5.0
    """How long :meth:`OpenCVCamera.connect` waits for the first frame."""


def _opencv_source(cfg: CameraConfig) -> FrameSource:
    try:
        import cv2
    except ImportError as e:
        raise ImportError("cameras need OpenCV: pip install 'robot-rl[camera]' (opencv-python-headless)") from e
    src: int | str = int(cfg.source) if cfg.source.isdigit() else cfg.source
    cap = cv2.VideoCapture(src)
    if not cap.isOpened():
        raise RuntimeError(f"camera {cfg.source!r} could not be opened")
    if isinstance(src, int):
        cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # USB: don't let the driver queue old frames
    return cap  # type: ignore[no-any-return]


@dataclass
class Frame:
    """An RGB ``uint8 [H, W, 3]`` image with its capture time (``time.monotonic``) and sequence number."""

    image: np.ndarray
    timestamp: float
    seq: int

    @property
    def age_s(self) -> float:
        """Seconds since capture."""
        return time.monotonic() - self.timestamp


class OpenCVCamera:
    """A camera read by a background thread. ``source_factory`` replaces OpenCV (tests, synthetic sources)."""

    def __init__(self, config: CameraConfig, name: str = "camera",
                 source_factory: Callable[[CameraConfig], FrameSource] | None = None) -> None:
        self.config = config
        self.name = name
        self._factory = source_factory or _opencv_source
        self._source: FrameSource | None = None
        self._frame: Frame | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.frames = 0
        self.dropped = 0
        """Frames captured but replaced by a newer one before anyone read them."""
        self._last_read_seq = -1
        self.ended = False
        self.error: str | None = None

    def connect(self) -> None:
        """Open the source, start the capture thread and wait for the first frame."""
        self._source = self._factory(self.config)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"camera-{self.name}", daemon=True)
        self._thread.start()
        with self._cond:
            if not self._cond.wait_for(lambda: self._frame is not None or self.ended, self.config.open_timeout_s):
                raise CameraStaleError(f"camera {self.name!r} ({self.config.source}) delivered no frame within "
                                       f"{self.config.open_timeout_s} s")
        if self._frame is None:
            raise CameraStaleError(f"camera {self.name!r} ended before its first frame: {self.error or 'no data'}")

    def disconnect(self) -> None:
        """Stop the thread and release the source (a thread stuck in a read is abandoned, it is a daemon)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=0.3)
        if self._source is not None:
            self._source.release()
            self._source = None

    def __enter__(self) -> OpenCVCamera:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()

    def _process(self, raw: np.ndarray) -> np.ndarray:
        import cv2

        if self.config.crop is not None:
            x, y, w, h = self.config.crop
            raw = raw[y:y + h, x:x + w]
        if raw.shape[:2] != (self.config.height, self.config.width):
            raw = cv2.resize(raw, (self.config.width, self.config.height), interpolation=cv2.INTER_AREA)
        return np.ascontiguousarray(raw[..., ::-1])  # OpenCV is BGR; observations are RGB

    def _run(self) -> None:
        source = self._source
        assert source is not None
        period = 1.0 / self.config.fps if self.config.fps > 0 else 0.0
        next_t = time.monotonic()
        seq = 0
        while not self._stop.is_set():
            try:
                ok, raw = source.read()
            except Exception as e:  # a broken source is a stale camera, never a crashed control loop
                ok, raw, self.error = False, None, f"{type(e).__name__}: {e}"
            if not ok or raw is None:
                if self.config.loop and hasattr(source, "set"):
                    import cv2

                    source.set(cv2.CAP_PROP_POS_FRAMES, 0)
                    continue
                self.ended = True
                log.warning("camera %r stopped delivering (%s)", self.name, self.error or "end of stream")
                with self._cond:
                    self._cond.notify_all()
                return
            image = self._process(raw)
            frame = Frame(image, time.monotonic(), seq)
            with self._cond:
                if self._frame is not None and self._frame.seq != self._last_read_seq:
                    self.dropped += 1
                self._frame = frame
                self.frames += 1
                self._cond.notify_all()
            seq += 1
            if period:
                next_t += period
                delay = next_t - time.monotonic()
                if delay > 0:
                    self._stop.wait(delay)
                else:
                    next_t = time.monotonic()

    @property
    def stale(self) -> bool:
        """Whether the newest frame is older than ``stale_after_s`` (or there is none)."""
        f = self._frame
        return f is None or f.age_s > self.config.stale_after_s

    def read(self, wait_new: bool = False, timeout_s: float | None = None) -> Frame:
        """The newest frame; with ``wait_new``, wait for one not returned before. Raises when stale."""
        deadline = timeout_s if timeout_s is not None else self.config.stale_after_s
        with self._cond:
            if wait_new:
                self._cond.wait_for(lambda: self._frame is not None and self._frame.seq != self._last_read_seq,
                                    deadline)
            f = self._frame
            if f is None or f.age_s > self.config.stale_after_s:
                age = "no frame" if f is None else f"last frame {f.age_s * 1e3:.0f} ms ago"
                raise CameraStaleError(f"camera {self.name!r} is stale ({age}; limit "
                                       f"{self.config.stale_after_s * 1e3:.0f} ms)")
            self._last_read_seq = f.seq
            return f

    def info(self) -> dict[str, Any]:
        """Counters for logs: frames, dropped, stale, age of the newest frame."""
        f = self._frame
        return {"frames": self.frames, "dropped": self.dropped, "stale": self.stale,
                "age_ms": None if f is None else round(f.age_s * 1e3, 1)}
