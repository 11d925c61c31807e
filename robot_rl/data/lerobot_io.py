"""LeRobotDataset v3 interop: read a local dataset as :class:`Episode` s, write episodes as a dataset.

Feature mapping (LeRobot key → toolkit):

=====================================  ==========================================================
``observation.state``                  ``state`` float32 ``[D]`` (``observation.environment_state``
                                       is appended when present)
``observation.images.<cam>``           ``image.<cam>`` uint8 ``[H, W, C]`` (``image`` or ``video``)
``observation.image``                  ``image.main``
``action``                             action float32 ``[A]`` (or ``[horizon, A]``)
``next.reward``                        reward (0 when absent)
``next.done`` / ``next.truncated``     terminated = done ∧ ¬truncated, truncated
``next.success``                       success (False when absent)
``complementary_info.is_intervention``  intervened (False when absent)
``complementary_info.rac_segment``      segment: rewind-and-correct label, int64 0/1/2 (absent: None)
=====================================  ==========================================================

Writing (:class:`LeRobotWriter`) produces LeRobot 0.4.x's v3.0 files natively by default
(:mod:`robot_rl.data.lerobot_v3`: pyarrow, Pillow, PyAV; no lerobot package), or through LeRobot's own
``LeRobotDataset.create`` / ``add_frame`` / ``save_episode`` / ``finalize`` with ``backend="lerobot"``.

Reading goes straight to the v3 files (``meta/info.json``, ``meta/episodes/*.parquet``,
``data/chunk-*/file-*.parquet``, ``videos/<key>/chunk-*/file-*.mp4``) with pyarrow, Pillow and PyAV,
whole episodes at a time. LeRobot's own loader serves single frames (decoding a video per frame,
through torchcodec, or ``torchvision.io.VideoReader``, which torchvision ≥ 0.22 no longer has);
the tests check this reader against it frame by frame. A LeRobot frame has no successor
observation, so the last step of an imported episode has no ``final_obs``.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.core.specs import ArraySpec, EnvSpec, SpecMismatchError
from robot_rl.data.episode import Episode

INSTALL_HINT = ("pip install 'robot-rl[datasets]' to read and write the files; only the backend='lerobot' writer "
                "needs the lerobot package (docs/datasets.md gives the tested install lines)")
STATE_KEYS = ("observation.state", "observation.environment_state")
IMAGE_PREFIX = "observation.images."
REWARD, DONE, TRUNCATED, SUCCESS = "next.reward", "next.done", "next.truncated", "next.success"
INTERVENTION = "complementary_info.is_intervention"
SEGMENT = "complementary_info.rac_segment"
_INTERVENTION_ALIASES = (INTERVENTION, "intervened", "next.intervened", "complementary_info.intervened")
_BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def _require(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"reading/writing LeRobot datasets needs {module.split('.')[0]} ({e}); {INSTALL_HINT}") from e


def is_lerobot_dataset(path: Path | str) -> bool:
    """Whether ``path`` holds a LeRobotDataset v3 (``meta/info.json`` with ``codebase_version`` v3.x)."""
    info = Path(path) / "meta" / "info.json"
    if not info.is_file():
        return False
    try:
        return str(json.loads(info.read_text()).get("codebase_version", "")).startswith("v3")
    except (ValueError, OSError):
        return False


def camera_of(lerobot_key: str) -> str | None:
    """``observation.images.front`` → ``front``; ``observation.image`` → ``main``; else ``None``."""
    if lerobot_key.startswith(IMAGE_PREFIX):
        return lerobot_key[len(IMAGE_PREFIX):]
    if lerobot_key == "observation.image":
        return "main"
    return None


def _hwc(feature: dict[str, Any]) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in feature["shape"])
    names = list(feature.get("names") or [])
    if len(shape) != 3:
        raise SpecMismatchError(f"image feature of shape {list(shape)}: expected 3 dims")
    if names[:1] == ["channels"] or (not names and shape[0] in (1, 3, 4) and shape[2] not in (1, 3, 4)):
        return shape[1], shape[2], shape[0]
    return shape  # type: ignore[return-value]


class LeRobotReader:
    """A local LeRobotDataset v3 directory, read episode by episode.

    ``spec`` is the :class:`EnvSpec` the features map to (module docstring); ``features``, ``fps``,
    ``num_episodes`` and ``num_frames`` come from ``meta/info.json``.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        if not is_lerobot_dataset(self.root):
            raise FileNotFoundError(f"{self.root} is not a LeRobotDataset v3 directory (no meta/info.json "
                                    "with codebase_version v3.x)")
        self.info: dict[str, Any] = json.loads((self.root / "meta" / "info.json").read_text())
        self.features: dict[str, dict[str, Any]] = self.info["features"]
        self.fps = float(self.info["fps"])
        self.num_episodes = int(self.info.get("total_episodes", 0))
        self.num_frames = int(self.info.get("total_frames", 0))
        self.state_keys = [k for k in STATE_KEYS if k in self.features]
        self.image_keys = sorted(k for k in self.features if camera_of(k) is not None)
        self.video_keys = [k for k in self.image_keys if self.features[k]["dtype"] == "video"]
        if "action" not in self.features:
            raise SpecMismatchError(f"{self.root}: no 'action' feature; features: {sorted(self.features)}")
        self.spec = self._spec()

    def _spec(self) -> EnvSpec:
        obs: dict[str, ArraySpec] = {}
        if self.state_keys:
            dims = []
            for k in self.state_keys:
                shape = self.features[k]["shape"]
                if len(shape) != 1:
                    raise SpecMismatchError(f"{k} has shape {shape}; only flat state vectors map to 'state'")
                dims.append(int(shape[0]))
            obs["state"] = ArraySpec((sum(dims),), "float32")
        for k in self.image_keys:
            obs[f"image.{camera_of(k)}"] = ArraySpec(_hwc(self.features[k]), "uint8", low=0, high=255)
        if not obs:
            raise SpecMismatchError(f"{self.root}: no observation.state or observation.images.* feature")
        return EnvSpec(observation=obs, action=ArraySpec(tuple(self.features["action"]["shape"]), "float32"))

    # ---- metadata ---------------------------------------------------------------------------

    def episode_table(self) -> list[dict[str, Any]]:
        """``meta/episodes`` rows (episode_index, length, tasks, data and video file locations)."""
        pq = _require("pyarrow.parquet")
        files = sorted((self.root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
        if not files:
            raise FileNotFoundError(f"{self.root}: no meta/episodes/chunk-*/file-*.parquet")
        rows: list[dict[str, Any]] = []
        for f in files:
            names = pq.read_schema(f).names
            cols = [c for c in names if not c.startswith("stats/")]
            rows += pq.read_table(f, columns=cols).to_pylist()
        return sorted(rows, key=lambda r: int(r["episode_index"]))

    def tasks(self) -> dict[int, str]:
        """``task_index`` → task text (``meta/tasks.parquet``)."""
        pq = _require("pyarrow.parquet")
        path = self.root / "meta" / "tasks.parquet"
        if not path.is_file():
            return {}
        cols = pq.read_table(path).to_pydict()
        # LeRobot writes a pandas frame indexed by the task text; without pandas metadata it is a column.
        text = next((cols[k] for k in ("task", "__index_level_0__") if k in cols), None)
        if text is None:
            return {}
        return {int(i): str(t) for t, i in zip(text, cols["task_index"])}

    # ---- episodes ---------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Episode]:
        """Every episode, in ``episode_index`` order."""
        pq = _require("pyarrow.parquet")
        episodes = {int(r["episode_index"]): r for r in self.episode_table()}
        tasks = self.tasks()
        pattern = str(self.info.get("data_path", "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"))
        files = sorted({(int(r["data/chunk_index"]), int(r["data/file_index"])) for r in episodes.values()})
        for chunk, file in files:
            path = self.root / pattern.format(chunk_index=chunk, file_index=file)
            columns = pq.read_table(path).to_pydict()
            ep_col = np.asarray(columns["episode_index"])
            for ep_idx in sorted(set(ep_col.tolist())):
                rows = np.flatnonzero(ep_col == ep_idx)
                yield self._episode({k: [v[i] for i in rows] for k, v in columns.items()},
                                    episodes[int(ep_idx)], tasks)

    def _episode(self, cols: dict[str, list[Any]], meta_row: dict[str, Any], tasks: dict[int, str]) -> Episode:
        n = len(cols["episode_index"])
        obs: dict[str, np.ndarray] = {}
        if self.state_keys:
            obs["state"] = np.concatenate([_stack(cols[k], np.float32).reshape(n, -1) for k in self.state_keys], 1)
        for k in self.image_keys:
            key = f"image.{camera_of(k)}"
            if k in self.video_keys:
                obs[key] = self._decode_video(k, meta_row, np.asarray(cols["timestamp"], np.float64))
            else:
                obs[key] = np.stack([self._decode_image(v) for v in cols[k]])
            want = self.spec.observation[key].shape
            if tuple(obs[key].shape[1:]) != want:
                raise SpecMismatchError(f"{k}: decoded frames are {list(obs[key].shape[1:])}, info.json says "
                                        f"{list(want)} (HWC)")
        done = _flag(cols, (DONE,), n)
        if DONE not in cols:
            done[-1] = True  # an episode's end is where the recording of it stopped
        truncated = _flag(cols, (TRUNCATED,), n)
        if DONE not in cols and TRUNCATED not in cols:
            truncated[-1] = True
        task_idx = cols.get("task_index", [None])[0]
        return Episode(
            obs=obs, action=_stack(cols["action"], np.float32),
            reward=_stack(cols[REWARD], np.float32).reshape(n) if REWARD in cols else np.zeros(n, np.float32),
            terminated=done & ~truncated, truncated=truncated, intervened=_flag(cols, _INTERVENTION_ALIASES, n),
            success=_flag(cols, (SUCCESS,), n), final_obs=None,
            task=tasks.get(int(task_idx), "") if task_idx is not None else "",
            meta={"lerobot_episode_index": int(meta_row["episode_index"])},
            segment=np.asarray(cols[SEGMENT]).reshape(n, -1)[:, 0].astype(np.int8) if SEGMENT in cols else None,
        )

    def _decode_image(self, value: Any) -> np.ndarray:
        from PIL import Image

        if isinstance(value, dict):
            data, rel = value.get("bytes"), value.get("path")
            src: Any = io.BytesIO(data) if data else self.root / str(rel)
        else:
            src = io.BytesIO(value)
        with Image.open(src) as img:
            arr = np.asarray(img.convert("RGB") if img.mode not in ("RGB", "L") else img)
        return arr[..., None] if arr.ndim == 2 else arr

    def _decode_video(self, key: str, row: dict[str, Any], timestamps: np.ndarray) -> np.ndarray:
        """Frames of one episode from its (possibly shared) mp4, matched to ``from_timestamp + timestamp``."""
        av = _require("av")
        default = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
        pattern = str(self.info.get("video_path", default))
        path = self.root / pattern.format(video_key=key, chunk_index=int(row[f"videos/{key}/chunk_index"]),
                                          file_index=int(row[f"videos/{key}/file_index"]))
        start = float(row[f"videos/{key}/from_timestamp"])
        targets = start + timestamps
        tol = 0.5 / self.fps
        frames: list[np.ndarray] = []
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            base = float(stream.time_base) if stream.time_base else 1e-6
            container.seek(max(int((targets[0] - tol) / base), 0), stream=stream, backward=True, any_frame=False)
            j = 0
            for frame in container.decode(stream):
                t = float(frame.time) if frame.time is not None else math.nan
                if t > targets[j] + tol:
                    raise SpecMismatchError(f"{path}: no frame near t={targets[j]:.4f}s (next frame at {t:.4f}s)")
                if abs(t - targets[j]) <= tol:
                    frames.append(frame.to_ndarray(format="rgb24"))
                    j += 1
                if j == len(targets):
                    break
        if len(frames) != len(targets):
            raise SpecMismatchError(f"{path}: decoded {len(frames)} of {len(targets)} frames of episode "
                                    f"{row['episode_index']} ({key})")
        return np.stack(frames)


def _stack(values: list[Any], dtype: Any) -> np.ndarray:
    return np.asarray(values, dtype=dtype)


def _flag(cols: dict[str, list[Any]], names: tuple[str, ...], n: int) -> np.ndarray:
    for name in names:
        if name in cols:
            return np.asarray(cols[name]).reshape(n, -1)[:, 0].astype(bool)
    return np.zeros(n, dtype=bool)


def read_lerobot(root: Path | str) -> list[Episode]:
    """Every episode of the LeRobotDataset v3 in ``root`` (see :class:`LeRobotReader`)."""
    return list(LeRobotReader(root))


# --------------------------------------------------------------------------------------------
# Writing (natively by default, or through LeRobot's own API)
# --------------------------------------------------------------------------------------------


def lerobot_features(spec: EnvSpec, use_videos: bool = False, rac_segments: bool = False) -> dict[str, dict[str, Any]]:
    """The LeRobot ``features`` dict for episodes of ``spec`` (inverse of the module's mapping).

    ``rac_segments`` adds the per-step rewind-and-correct label column.
    """
    features: dict[str, dict[str, Any]] = {}
    for key, s in spec.observation.items():
        if key == "state":
            features["observation.state"] = {"dtype": "float32", "shape": s.shape, "names": None}
        elif key.startswith("image."):
            features[IMAGE_PREFIX + key[len("image."):]] = {
                "dtype": "video" if use_videos else "image", "shape": s.shape,
                "names": ["height", "width", "channels"]}
        else:
            raise SpecMismatchError(f"observation {key!r} has no LeRobot counterpart (state and image.* export)")
    features["action"] = {"dtype": "float32", "shape": spec.action.shape, "names": None}
    for name, dtype in ((REWARD, "float32"), (DONE, "bool"), (TRUNCATED, "bool"), (SUCCESS, "bool"),
                        (INTERVENTION, "bool")):
        features[name] = {"dtype": dtype, "shape": (1,), "names": None}
    if rac_segments:
        features[SEGMENT] = {"dtype": "int64", "shape": (1,), "names": None}
    return features


def episode_columns(ep: Episode, rac_segments: bool = False) -> dict[str, np.ndarray]:
    """One episode as LeRobot feature columns ``[T, *shape]`` (keys of :func:`lerobot_features`)."""
    n = len(ep)
    cols: dict[str, np.ndarray] = {IMAGE_PREFIX + k[len("image."):]: np.ascontiguousarray(v)
                                   for k, v in ep.obs.items() if k.startswith("image.")}
    if "state" in ep.obs:
        cols["observation.state"] = ep.obs["state"].astype(np.float32)
    cols["action"] = ep.action.astype(np.float32)
    cols[REWARD] = ep.reward.astype(np.float32).reshape(n, 1)
    cols[DONE] = (ep.terminated | ep.truncated).astype(bool).reshape(n, 1)
    cols[TRUNCATED] = ep.truncated.astype(bool).reshape(n, 1)
    cols[SUCCESS] = ep.success.astype(bool).reshape(n, 1)
    cols[INTERVENTION] = ep.intervened.astype(bool).reshape(n, 1)
    if rac_segments:
        seg = ep.segment if ep.segment is not None else np.zeros(n, np.int64)
        cols[SEGMENT] = np.asarray(seg, np.int64).reshape(n, 1)
    return cols


class LeRobotWriter:
    """Writes episodes into a new LeRobotDataset v3 at ``root`` (an episode sink for the recorder).

    ``backend="native"`` (the default) writes the files itself (:mod:`robot_rl.data.lerobot_v3`; needs
    only pyarrow, Pillow and, for ``use_videos``, PyAV: ``pip install 'robot-rl[datasets]'``);
    ``backend="lerobot"`` goes through LeRobot's ``LeRobotDataset.create`` / ``add_frame`` /
    ``save_episode`` / ``finalize`` (needs the lerobot package). Call :meth:`close` (or use it as a
    context manager): the parquet footers and the metadata are written then. ``rac_segments`` adds the
    rewind-and-correct label column (``complementary_info.rac_segment``; 0 for episodes without labels).
    ``robot_type`` goes to ``meta/info.json``.
    """

    def __init__(self, root: Path | str, spec: EnvSpec, fps: float, repo_id: str = "local/robot_rl",
                 task: str = "", use_videos: bool = False, robot_type: str | None = None,
                 vcodec: str = "libsvtav1", rac_segments: bool = False,
                 backend: Literal["native", "lerobot"] = "native") -> None:
        self.root = Path(root)
        if self.root.exists() and any(self.root.iterdir()):
            raise FileExistsError(f"{self.root} exists and is not empty; a LeRobot dataset is written to a new "
                                  "directory")
        if fps <= 0 or abs(fps - round(fps)) > 1e-6:
            raise ConfigError(f"LeRobot datasets need a whole-number fps > 0, got {fps}")
        self.spec = spec
        self.task = task or "robot_rl"
        self.rac_segments = rac_segments
        self.backend = backend
        features = lerobot_features(spec, use_videos, rac_segments)
        self.dataset: Any
        if backend == "native":
            for module in ("pyarrow.parquet", "PIL.Image", *(("av",) if use_videos else ())):
                _require(module)
            from robot_rl.data.lerobot_v3 import LeRobotV3Writer

            self.dataset = LeRobotV3Writer(self.root, features, round(fps), robot_type=robot_type, vcodec=vcodec)
        elif backend == "lerobot":
            lerobot_dataset = _require("lerobot.datasets.lerobot_dataset")
            if self.root.exists():
                self.root.rmdir()  # LeRobotDataset.create makes the directory itself and refuses an existing one
            self.dataset = lerobot_dataset.LeRobotDataset.create(
                repo_id=repo_id, fps=round(fps), features=features, root=self.root, robot_type=robot_type,
                use_videos=use_videos, vcodec=vcodec)
        else:
            raise ConfigError(f"unknown LeRobot writer backend {backend!r}; valid: native, lerobot")
        self.episodes = 0
        self.frames = 0
        self._closed = False

    def write(self, ep: Episode) -> None:
        """Add one episode (all its frames) and save it."""
        ep.validate(self.spec)
        cols = episode_columns(ep, self.rac_segments)
        task = ep.task or self.task
        if self.backend == "native":
            self.dataset.add_episode(cols, task)
        else:
            for t in range(len(ep)):
                self.dataset.add_frame({**{k: v[t] for k, v in cols.items()}, "task": task})
            self.dataset.save_episode()
        self.episodes += 1
        self.frames += len(ep)

    def close(self) -> None:
        """Finalize the dataset (idempotent)."""
        if not self._closed:
            self.dataset.finalize()
            self._closed = True

    def __enter__(self) -> LeRobotWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_lerobot(episodes: Iterable[Episode], spec: EnvSpec, root: Path | str, fps: float,
                  **kwargs: Any) -> tuple[int, int]:
    """Write ``episodes`` as a new LeRobotDataset v3 at ``root``; returns ``(episodes, frames)``.

    ``kwargs`` go to :class:`LeRobotWriter` (``repo_id``, ``task``, ``use_videos``, ``robot_type``,
    ``vcodec``, ``rac_segments``, ``backend``). Without ``rac_segments`` the RaC label column is written
    when the first episode carries labels.
    """
    it = iter(episodes)
    first = next(it, None)
    kwargs.setdefault("rac_segments", first is not None and first.segment is not None)
    with LeRobotWriter(root, spec, fps, **kwargs) as writer:
        for ep in itertools.chain([first] if first is not None else [], it):
            writer.write(ep)
    return writer.episodes, writer.frames
