"""mp4 files of one camera of a LeRobotDataset v3, encoded with PyAV.

LeRobot 0.4.x stores a camera's episodes one after another in ``videos/<key>/chunk-CCC/file-FFF.mp4``;
an episode is the span ``[from_timestamp, to_timestamp)`` of its file. LeRobot encodes each episode
to its own file and concatenates; here the frames of consecutive episodes go into one open stream
(frame ``n`` of a file at ``n / fps`` seconds), which gives the same layout without re-muxing. The
encoder settings are LeRobot's: yuv420p, a keyframe every 2 frames, CRF 30, SVT-AV1 preset 12.
A file is closed after the episode whose encoded frames take it past ``files_size_in_mb`` (so a file
overshoots the limit by about one episode: the count is of packets muxed so far, and SVT-AV1 holds
~25 frames back), and the next episode starts a new one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError

VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
CODECS = ("libsvtav1", "h264", "hevc")


def codec_options(vcodec: str) -> dict[str, str]:
    """The encoder options LeRobot's ``encode_video_frames`` uses (g=2, crf=30, SVT-AV1 preset 12)."""
    if vcodec not in CODECS:
        raise ConfigError(f"unknown video codec {vcodec!r}; valid: {', '.join(CODECS)}")
    options = {"g": "2", "crf": "30"}
    if vcodec == "libsvtav1":
        options["preset"] = "12"
    return options


def next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """The file after ``(chunk, file)``: ``chunks_size`` files per chunk directory (LeRobot's rule)."""
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


class CameraVideoWriter:
    """Appends episodes of one camera (``[T, H, W, 3]`` uint8) to its mp4 files."""

    def __init__(self, root: Path, key: str, fps: int, vcodec: str, files_size_in_mb: float,
                 chunks_size: int) -> None:
        self.root, self.key, self.fps, self.vcodec = root, key, fps, vcodec
        self.options = codec_options(vcodec)
        self.limit_bytes = files_size_in_mb * 2**20
        self.chunks_size = chunks_size
        self.chunk, self.file = 0, 0
        self.frames_in_file = 0
        self.bytes_in_file = 0
        self.info: dict[str, Any] | None = None
        self._container: Any = None
        self._stream: Any = None
        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its whole configuration to stderr otherwise

    def path(self) -> Path:
        """The file being written."""
        return self.root / VIDEO_PATH.format(video_key=self.key, chunk_index=self.chunk, file_index=self.file)

    def _open(self, height: int, width: int) -> None:
        with keep_thread_scheduling():
            self._open_container(height, width)

    def _open_container(self, height: int, width: int) -> None:
        import av

        path = self.path()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._container = av.open(str(path), "w")
        self._stream = self._container.add_stream(self.vcodec, rate=self.fps, options=self.options)
        self._stream.pix_fmt = "yuv420p"
        self._stream.width, self._stream.height = width, height
        self.frames_in_file = 0
        self.bytes_in_file = 0

    def add_episode(self, frames: np.ndarray) -> dict[str, Any]:
        """Encode one episode's frames; returns its ``videos/<key>/...`` columns of ``meta/episodes``."""
        import av

        if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
            raise ValueError(f"{self.key}: video frames must be uint8 [T, H, W, 3], got {frames.dtype} "
                             f"{list(frames.shape)}")
        if self._container is None:
            self._open(frames.shape[1], frames.shape[2])
        start = self.frames_in_file
        tb = Fraction(1, self.fps)
        with keep_thread_scheduling():
            for img in frames:
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
                frame.pts, frame.time_base = self.frames_in_file, tb
                self._mux(self._stream.encode(frame))
                self.frames_in_file += 1
        row = {f"videos/{self.key}/chunk_index": self.chunk, f"videos/{self.key}/file_index": self.file,
               f"videos/{self.key}/from_timestamp": start / self.fps,
               f"videos/{self.key}/to_timestamp": self.frames_in_file / self.fps}
        if self.bytes_in_file >= self.limit_bytes:
            self._close_file()
            self.chunk, self.file = next_file(self.chunk, self.file, self.chunks_size)
        return row

    def _mux(self, packets: list[Any]) -> None:
        self._container.mux(packets)
        self.bytes_in_file += sum(p.size for p in packets)  # the muxer buffers: the size on disk lags

    def _close_file(self) -> None:
        with keep_thread_scheduling():
            self._mux(self._stream.encode(None))
        self._container.close()
        self._container = self._stream = None
        if self.info is None:
            self.info = video_info(self.path())

    def close(self) -> None:
        """Flush the encoder and finish the open file (idempotent)."""
        if self._container is not None:
            self._close_file()


@contextmanager
def keep_thread_scheduling() -> Iterator[None]:
    """Give the calling thread its scheduling policy back after the encoder ran.

    SVT-AV1, in a process allowed real-time priorities (root), leaves the thread that drives it on SCHED_FIFO 99:
    found when a later test's child process inherited it. A recorder's control loop must not run on that.
    """
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    policy, priority = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    try:
        yield
    finally:
        if (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) != (policy, priority):
            os.sched_setscheduler(0, policy, os.sched_param(priority))


def video_info(path: Path) -> dict[str, Any]:
    """The ``info`` block of a video feature in ``meta/info.json``, read from a written file as LeRobot does."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return {"video.height": stream.height, "video.width": stream.width,
                "video.codec": stream.codec_context.codec.canonical_name, "video.pix_fmt": stream.pix_fmt,
                "video.is_depth_map": False, "video.fps": int(stream.base_rate or 0), "video.channels": 3,
                "has_audio": len(container.streams.audio) > 0}
