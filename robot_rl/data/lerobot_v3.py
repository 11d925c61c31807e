"""A LeRobotDataset v3.0 writer that needs only pyarrow, PyAV and Pillow (no lerobot package).

It writes the layout of LeRobot 0.4.x (``codebase_version`` ``v3.0``), which LeRobot's own
``LeRobotDataset(repo_id, root=...)`` loads (``tests/test_lerobot_io.py`` checks it frame by frame):

=============================================  ================================================================
``meta/info.json``                             codebase_version, robot_type, fps, totals, chunks_size,
                                               ``*_files_size_in_mb``, data_path/video_path templates, splits,
                                               features (the given ones, then ``timestamp``, ``frame_index``,
                                               ``episode_index``, ``index``, ``task_index``; videos with ``info``)
``meta/stats.json``                            dataset stats per feature (:mod:`robot_rl.data.lerobot_stats`)
``meta/tasks.parquet``                         ``task_index`` and the task text as the pandas index
``meta/episodes/chunk-C/file-F.parquet``       one row per episode: index, tasks, length, data and video file
                                               locations, from/to index and timestamps, ``stats/<key>/<stat>``
``data/chunk-C/file-F.parquet``                one row per frame; ``(1,)`` features as scalars, vectors as
                                               fixed-size lists, images as ``{bytes: PNG, path}`` structs;
                                               Hugging Face ``datasets`` feature metadata in the schema
``videos/<key>/chunk-C/file-F.mp4``            :mod:`robot_rl.data.lerobot_video`
=============================================  ================================================================

Files roll over as LeRobot's do: a data (or episodes) file takes episodes while its size on disk plus
the next batch's estimated size stays under ``data_files_size_in_mb``; ``chunks_size`` files per chunk.
Not written: LeRobot's ``subtask_index`` and the dataset card (``README.md``, only used when pushing).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.data import lerobot_stats
from robot_rl.data.lerobot_video import VIDEO_PATH, CameraVideoWriter, next_file

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
BOOKKEEPING: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": (1,), "names": None},
    "frame_index": {"dtype": "int64", "shape": (1,), "names": None},
    "episode_index": {"dtype": "int64", "shape": (1,), "names": None},
    "index": {"dtype": "int64", "shape": (1,), "names": None},
    "task_index": {"dtype": "int64", "shape": (1,), "names": None},
}
PNG_COMPRESS_LEVEL = 6  # what LeRobot writes `image` features with
_META_BUFFER = 10  # episode rows per row group of meta/episodes, as LeRobot buffers them


def _pa() -> Any:
    import pyarrow as pa

    return pa


class RollingParquet:
    """Row groups appended to ``pattern`` files, moving to the next file when one would pass the size limit."""

    def __init__(self, root: Path, pattern: str, files_size_in_mb: float, chunks_size: int,
                 metadata: dict[str, str] | None = None) -> None:
        self.root, self.pattern = root, pattern
        self.limit_bytes = files_size_in_mb * 2**20
        self.chunks_size = chunks_size
        self.metadata = metadata
        self.chunk, self.file = 0, 0
        self.rows_in_file = 0
        self._writer: Any = None
        self._schema: Any = None

    def path(self) -> Path:
        """The file being written."""
        return self.root / self.pattern.format(chunk_index=self.chunk, file_index=self.file)

    def place(self, rows: int) -> tuple[int, int]:
        """``(chunk, file)`` that the next ``rows`` rows go to.

        LeRobot's rule: when the open file's size on disk plus ``rows`` times its bytes per row reaches
        the limit, a new file starts.
        """
        if self._writer is not None and self.rows_in_file:
            size = self.path().stat().st_size
            if size + size / self.rows_in_file * rows >= self.limit_bytes:
                self.close()
                self.chunk, self.file = next_file(self.chunk, self.file, self.chunks_size)
        return self.chunk, self.file

    def write(self, table: Any) -> None:
        """Append ``table`` (call :meth:`place` first) as one row group."""
        pq = _require_pq()
        if self._schema is None:
            meta = {k.encode(): v.encode() for k, v in (self.metadata or {}).items()}
            self._schema = table.schema.with_metadata(meta) if meta else table.schema
        table = table.cast(self._schema)
        if self._writer is None:
            self.path().parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.path(), self._schema, compression="snappy", use_dictionary=True)
            self.rows_in_file = 0
        self._writer.write_table(table)
        self.rows_in_file += table.num_rows

    def close(self) -> None:
        """Write the open file's footer (idempotent)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _require_pq() -> Any:
    import pyarrow.parquet as pq

    return pq


def hf_feature(ft: dict[str, Any]) -> dict[str, Any]:
    """The Hugging Face ``datasets`` feature (as JSON) LeRobot declares for a LeRobot feature."""
    shape = tuple(ft["shape"])
    if ft["dtype"] == "image":
        return {"_type": "Image"}
    if shape == (1,):
        return {"dtype": ft["dtype"], "_type": "Value"}
    if len(shape) == 1:
        return {"feature": {"dtype": ft["dtype"], "_type": "Value"}, "length": shape[0], "_type": "List"}
    if 2 <= len(shape) <= 5:
        return {"shape": list(shape), "dtype": ft["dtype"], "_type": f"Array{len(shape)}D"}
    raise ValueError(f"feature of shape {list(shape)} has no LeRobot column type")


def _png(img: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img).save(buf, format="PNG",
                                                                     compress_level=PNG_COMPRESS_LEVEL)
    return buf.getvalue()


def arrow_column(values: np.ndarray, ft: dict[str, Any]) -> Any:
    """One data column: ``values`` [T, *shape] as LeRobot's parquet files store them."""
    pa = _pa()
    if ft["dtype"] == "image":
        return pa.array([{"bytes": _png(img), "path": f"frame-{t:06d}.png"} for t, img in enumerate(values)],
                        pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    shape = tuple(ft["shape"])
    flat = np.ascontiguousarray(values, dtype=np.dtype(ft["dtype"])).reshape(-1)
    arr = pa.array(flat)
    if shape == (1,):
        return arr
    for size in reversed(shape):
        arr = pa.FixedSizeListArray.from_arrays(arr, size)
    return arr


class LeRobotV3Writer:
    """Writes episodes into a new LeRobotDataset v3.0 at ``root``; :meth:`finalize` writes the metadata.

    ``features`` is LeRobot's features dict without the bookkeeping keys (``timestamp``, ``frame_index``,
    ``episode_index``, ``index``, ``task_index``, which are filled in). Each episode is a dict of arrays
    ``[T, *shape]`` (images ``[T, H, W, C]`` uint8) and one task text.
    """

    def __init__(self, root: Path | str, features: dict[str, dict[str, Any]], fps: int,
                 robot_type: str | None = None, vcodec: str = "libsvtav1", chunks_size: int = 1000,
                 data_files_size_in_mb: float = 100, video_files_size_in_mb: float = 200) -> None:
        self.root = Path(root)
        if self.root.exists() and (not self.root.is_dir() or any(self.root.iterdir())):
            raise FileExistsError(f"{self.root} exists and is not empty; a LeRobot dataset is written to a new "
                                  "directory")
        if not isinstance(fps, int) or fps <= 0:
            raise ConfigError(f"LeRobot datasets need a whole-number fps > 0, got {fps!r}")
        for key in features:
            if "/" in key or key in BOOKKEEPING:
                raise ValueError(f"feature name {key!r}: names may not contain '/' or be one of {list(BOOKKEEPING)}")
        self.features = {**{k: {**v, "shape": tuple(v["shape"])} for k, v in features.items()}, **BOOKKEEPING}
        self.fps = fps
        self.video_keys = [k for k, ft in self.features.items() if ft["dtype"] == "video"]
        self.info: dict[str, Any] = {
            "codebase_version": CODEBASE_VERSION, "robot_type": robot_type, "total_episodes": 0,
            "total_frames": 0, "total_tasks": 0, "chunks_size": chunks_size,
            "data_files_size_in_mb": data_files_size_in_mb, "video_files_size_in_mb": video_files_size_in_mb,
            "fps": fps, "splits": {}, "data_path": DATA_PATH, "video_path": VIDEO_PATH if self.video_keys else None,
            "features": self.features}
        hf = {k: hf_feature(ft) for k, ft in self.features.items() if ft["dtype"] != "video"}
        self._data = RollingParquet(self.root, DATA_PATH, data_files_size_in_mb, chunks_size,
                                    {"huggingface": json.dumps({"info": {"features": hf}})})
        self._episodes = RollingParquet(self.root, EPISODES_PATH, data_files_size_in_mb, chunks_size)
        self._videos = {k: CameraVideoWriter(self.root, k, fps, vcodec, video_files_size_in_mb, chunks_size)
                        for k in self.video_keys}
        self.tasks: dict[str, int] = {}
        self._rows: list[dict[str, Any]] = []
        self._stats: list[dict[str, lerobot_stats.Stats]] = []
        self._finalized = False
        self.root.mkdir(parents=True, exist_ok=True)
        self._write_json("meta/info.json", self.info)

    def add_episode(self, columns: dict[str, np.ndarray], task: str) -> None:
        """Write one episode: ``columns`` holds every given feature as ``[T, *shape]``."""
        missing = [k for k in self.features if k not in columns and k not in BOOKKEEPING]
        lengths = {len(v) for v in columns.values()}
        if missing or len(lengths) != 1 or 0 in lengths:
            raise ValueError(f"episode columns: missing {missing}, lengths {sorted(lengths)} (need one length > 0)")
        n = lengths.pop()
        for key, values in columns.items():
            want = tuple(self.features[key]["shape"]) if key in self.features else None
            if want is None or values.shape[1:] not in (want, () if want == (1,) else want):
                raise ValueError(f"episode column {key!r}: {list(values.shape)} does not match the features "
                                 f"({[n, *want] if want else 'not a feature'})")
        ep_index, start = self.info["total_episodes"], self.info["total_frames"]
        task_index = self.tasks.setdefault(task, len(self.tasks))
        frame_index = np.arange(n, dtype=np.int64)
        cols = {**columns, "timestamp": (frame_index / self.fps).astype(np.float32), "frame_index": frame_index,
                "episode_index": np.full(n, ep_index, np.int64), "index": np.arange(start, start + n, dtype=np.int64),
                "task_index": np.full(n, task_index, np.int64)}
        pa = _pa()
        chunk, file = self._data.place(n)
        stored = [k for k, ft in self.features.items() if ft["dtype"] != "video"]
        self._data.write(pa.table({k: arrow_column(cols[k], self.features[k]) for k in stored}))
        row: dict[str, Any] = {"episode_index": ep_index, "tasks": [task], "length": n, "data/chunk_index": chunk,
                               "data/file_index": file, "dataset_from_index": start, "dataset_to_index": start + n}
        for key, video in self._videos.items():
            row.update(video.add_episode(cols[key]))
        stats = lerobot_stats.episode_stats(cols, self.features)
        row.update(lerobot_stats.flat_columns(stats))
        self._stats.append(stats)
        self._rows.append(row)
        if len(self._rows) >= _META_BUFFER:
            self._flush_rows()
        self.info["total_episodes"] += 1
        self.info["total_frames"] += n
        self.info["total_tasks"] = len(self.tasks)
        self.info["splits"] = {"train": f"0:{self.info['total_episodes']}"}

    def _flush_rows(self) -> None:
        if not self._rows:
            return
        chunk, file = self._episodes.place(len(self._rows))
        rows = [{**r, "meta/episodes/chunk_index": chunk, "meta/episodes/file_index": file} for r in self._rows]
        self._episodes.write(_pa().Table.from_pylist(rows))
        self._rows = []

    def finalize(self) -> None:
        """Close the files and write ``meta/`` (tasks, stats, info). Idempotent."""
        if self._finalized:
            return
        self._finalized = True
        self._data.close()
        self._flush_rows()
        self._episodes.close()
        for key, video in self._videos.items():
            video.close()
            if video.info is not None:
                self.features[key]["info"] = video.info
        self._write_tasks()
        if self._stats:
            self._write_json("meta/stats.json", lerobot_stats.to_json(lerobot_stats.aggregate(self._stats)))
        self._write_json("meta/info.json", self.info)

    def _write_tasks(self) -> None:
        pa, pq = _pa(), _require_pq()
        # pandas metadata makes pd.read_parquet (LeRobot's loader) index the frame by the task text.
        pandas_meta = {"index_columns": ["__index_level_0__"], "column_indexes": [
            {"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
             "metadata": {"encoding": "UTF-8"}}], "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
             "metadata": None},
            {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode", "numpy_type": "object",
             "metadata": None}], "creator": {"library": "pyarrow", "version": pa.__version__},
            "pandas_version": "2.2.0"}
        table = pa.table({"task_index": pa.array(list(self.tasks.values()), pa.int64()),
                          "__index_level_0__": pa.array(list(self.tasks), pa.string())})
        pq.write_table(table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)}),
                       self.root / "meta" / "tasks.parquet")

    def _write_json(self, rel: str, data: dict[str, Any]) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=4, ensure_ascii=False, default=_jsonable))

    def __enter__(self) -> LeRobotV3Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finalize()


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
