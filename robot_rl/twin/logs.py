"""Logged episodes for system identification: loaded, checked against the task, and padded into arrays.

The logs are an episode store (`robot-rl record`, `robot-rl data record`) or a LeRobotDataset v3 — the same
readers co-training uses for its real dataset. What a replay needs from each episode is its ``state``
observations and the actions applied between them; every way the logs can disagree with the simulated task
is refused here with an error that names the problem and what to do:

- **spec mismatch** (:class:`~robot_rl.core.specs.SpecMismatchError`): no ``state`` key, or a state or
  action length other than the task's;
- **a different control rate** (:class:`ControlRateError`): the logs' fps (store ``meta.json``, LeRobot
  ``info.json``) or their timestamps' spacing is not the task's control rate ``1 / (frame_skip · timestep)``;
- **dropped frames** (:class:`DroppedFramesError`): a gap between consecutive timestamps longer than
  1.5 control periods, or a jump in ``frame_index``. LeRobot datasets carry ``timestamp`` and ``frame_index``
  per frame; an episode store carries them when the recorder put ``timestamps`` (seconds) or
  ``frame_index`` lists into the episode's ``meta``. Without either, gaps cannot be seen in the log
  itself: the fit report then points at episodes whose error stays far above the others'.

Arrays (``E`` episodes, ``T`` the longest replay, ``D`` state length, ``A`` action length):
``states`` float64 ``[E, T + 1, D]`` (``states[e, t]`` is the state before action ``t``; the final
observation after the last action is ``states[e, lengths[e]]``), ``actions`` float64 ``[E, T, A]``,
``lengths`` int ``[E]``. Rows past an episode's length are padding (copies of its last row).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.errors import UserError
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.data.episode import Episode

log = logging.getLogger(__name__)

#: A gap between two frames longer than this many control periods is a dropped frame.
GAP_PERIODS = 1.5
#: Relative difference between the logs' rate and the task's control rate that is refused.
RATE_TOLERANCE = 0.01


class LogError(ValueError, UserError):
    """The logs cannot be replayed in the simulator as they are."""


class ControlRateError(LogError):
    """The logs were recorded at another control rate than the task steps at."""


class DroppedFramesError(LogError):
    """Frames are missing inside an episode (a gap in its timestamps or frame indices)."""


@dataclass
class Logs:
    """Episodes ready to replay (shapes in the module docstring)."""

    states: np.ndarray
    actions: np.ndarray
    lengths: np.ndarray
    fps: float | None
    source: str
    episode_ids: list[int] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)
    """Episodes left out (``skip_bad``), with the reason."""

    @property
    def num_episodes(self) -> int:
        """``E``."""
        return int(self.states.shape[0])

    def subset(self, rows: list[int]) -> Logs:
        """The episodes at positions ``rows`` (for splitting or bootstrapping)."""
        return Logs(self.states[rows], self.actions[rows], self.lengths[rows], self.fps, self.source,
                    [self.episode_ids[i] for i in rows])


def read_log_episodes(path: Path | str) -> tuple[list[Episode], EnvSpec, float | None, list[dict[str, Any]]]:
    """Episodes, spec and fps of an episode store or LeRobotDataset v3, and per-episode timing columns.

    The timing of episode ``i`` is ``{"timestamps": [...], "frame_index": [...]}`` as far as the source has
    them (LeRobot: both columns; a store: what the recorder put into the episode's ``meta``).
    """
    from robot_rl.data.lerobot_io import LeRobotReader, is_lerobot_dataset
    from robot_rl.data.store import EpisodeStore, is_store

    path = Path(path)
    if is_store(path):
        store = EpisodeStore(path)
        episodes = list(store)
        timing: list[dict[str, Any]] = [{k: ep.meta[k] for k in ("timestamps", "frame_index") if k in ep.meta}
                                        for ep in episodes]
        return episodes, store.spec, store.fps, timing
    if is_lerobot_dataset(path):
        reader = LeRobotReader(path)
        episodes = list(reader)
        return episodes, reader.spec, reader.fps, _lerobot_timing(path, len(episodes))
    raise FileNotFoundError(f"{path} is neither an episode store (robot-rl record / data record) nor a "
                            "LeRobotDataset v3 directory")


def _lerobot_timing(path: Path, n: int) -> list[dict[str, Any]]:
    """``timestamp`` and ``frame_index`` of every episode, read from the data parquet files."""
    import pyarrow.parquet as pq

    by_episode: dict[int, dict[str, list[float]]] = {}
    for f in sorted((path / "data").glob("chunk-*/file-*.parquet")):
        cols = pq.read_table(f, columns=["episode_index", "timestamp", "frame_index"]).to_pydict()
        for ep, ts, fi in zip(cols["episode_index"], cols["timestamp"], cols["frame_index"]):
            d = by_episode.setdefault(int(ep), {"timestamps": [], "frame_index": []})
            d["timestamps"].append(float(np.asarray(ts).reshape(-1)[0]))
            d["frame_index"].append(float(np.asarray(fi).reshape(-1)[0]))
    return [by_episode[k] for k in sorted(by_episode)][:n]


def check_spec(spec: EnvSpec, task_spec: EnvSpec, task: str, source: str) -> None:
    """Refuse logs whose ``state`` or action length differs from the task's, saying which and what to do."""
    problems = []
    want_state = task_spec.observation["state"].shape
    got_state = spec.observation["state"].shape if "state" in spec.observation else None
    if got_state is None:
        problems.append(f"the logs have no 'state' observation (keys: {', '.join(sorted(spec.observation))}); "
                        "system identification replays states, so record with a state observation")
    elif got_state != want_state:
        problems.append(f"state has {list(got_state)} numbers per step, {task} has {list(want_state)} (record with "
                        f"the same task and task.obs=state or state_pixels, or pass the task the logs came from)")
    if spec.action.shape != task_spec.action.shape:
        problems.append(f"action has shape {list(spec.action.shape)}, {task} takes {list(task_spec.action.shape)} "
                        "(check task.control: ee_delta or joint, and whether the gripper is commanded)")
    if problems:
        raise SpecMismatchError(f"the logs in {source} do not match {task}: " + "; ".join(problems))


def check_rate(fps: float | None, control_hz: float, task: str, source: str) -> None:
    """Refuse logs whose recorded rate is not the task's control rate."""
    if fps is None:
        log.warning("%s records no fps: assuming the task's control rate, %.4g Hz", source, control_hz)
        return
    if abs(fps - control_hz) > RATE_TOLERANCE * control_hz:
        raise ControlRateError(
            f"the logs in {source} were recorded at {fps:.4g} Hz but {task} steps at {control_hz:.4g} Hz "
            f"(task.frame_skip × task.timestep = {1 / control_hz:.4g} s): each logged action would be held "
            f"{fps / control_hz:.2f}× as long as on the robot. Make the task step at the logs' rate "
            f"(task.frame_skip / task.timestep with frame_skip·timestep = {1 / fps:.4g} s), or, if only the "
            "metadata is wrong (e.g. `robot-rl data record` with its default --fps 20 from a 25 Hz sim), "
            "pass --fps with the true rate")


def check_timing(timing: dict[str, Any], control_hz: float, episode: int, source: str) -> None:
    """Refuse an episode with a gap in its timestamps or frame indices, or timestamps at another rate."""
    period = 1.0 / control_hz
    frames = np.asarray(timing.get("frame_index", []), np.float64)
    if len(frames) > 1:
        jumps = np.flatnonzero(np.diff(frames) != 1)
        if len(jumps):
            i = int(jumps[0])
            raise DroppedFramesError(
                f"episode {episode} of {source} has dropped frames: frame_index jumps from {frames[i]:.0f} to "
                f"{frames[i + 1]:.0f} after step {i} ({len(jumps)} gap(s) in all). A replay would apply the actions "
                "around the gap at the wrong times: leave such episodes out (--skip-bad) or re-record them")
    stamps = np.asarray(timing.get("timestamps", []), np.float64)
    if len(stamps) > 1:
        dt = np.diff(stamps)
        gaps = np.flatnonzero(dt > GAP_PERIODS * period)
        if len(gaps):
            i = int(gaps[0])
            raise DroppedFramesError(
                f"episode {episode} of {source} has dropped frames: {dt[i]:.4g} s between steps {i} and {i + 1} "
                f"where the control period is {period:.4g} s ({len(gaps)} gap(s) in all). Leave such episodes out "
                "(--skip-bad) or re-record them")
        median = float(np.median(dt))
        if abs(median - period) > RATE_TOLERANCE * period:
            raise ControlRateError(
                f"episode {episode} of {source}: its timestamps are {median:.4g} s apart ({1 / median:.4g} Hz), "
                f"the task steps every {period:.4g} s ({control_hz:.4g} Hz); make the task's "
                "frame_skip × timestep equal the logs' period, or record at the task's rate")


def episode_arrays(ep: Episode) -> tuple[np.ndarray, np.ndarray]:
    """``(states [n + 1, D], actions [n, A])`` of one episode (the last action is dropped without final_obs)."""
    states = np.asarray(ep.obs["state"], np.float64)
    actions = np.asarray(ep.action, np.float64).reshape(len(ep), -1)
    if ep.final_obs is not None and "state" in ep.final_obs:
        return np.concatenate([states, np.asarray(ep.final_obs["state"], np.float64)[None]]), actions
    return states, actions[:-1]


def load_logs(path: Path | str, task_spec: EnvSpec, control_hz: float, task: str = "the task",
              fps: float | None = None, skip_bad: bool = False, max_steps: int | None = None) -> Logs:
    """Read, check (module docstring) and pad the episodes at ``path`` for a replay in ``task``.

    ``fps`` overrides the logs' recorded rate; ``skip_bad`` leaves episodes with dropped frames or
    non-finite numbers out (with a warning) instead of refusing the logs; ``max_steps`` cuts long episodes.
    """
    source = str(path)
    episodes, spec, recorded_fps, timing = read_log_episodes(path)
    if not episodes:
        raise LogError(f"{source} holds no episodes")
    check_spec(spec, task_spec, task, source)
    rate = fps if fps is not None else recorded_fps
    check_rate(rate, control_hz, task, source)
    kept: list[tuple[int, np.ndarray, np.ndarray]] = []
    skipped: dict[int, str] = {}
    for i, ep in enumerate(episodes):
        try:
            check_timing(timing[i] if i < len(timing) else {}, control_hz, i, source)
            states, actions = episode_arrays(ep)
            if not (np.isfinite(states).all() and np.isfinite(actions).all()):
                raise LogError(f"episode {i} of {source} holds NaN/inf states or actions; leave it out (--skip-bad)")
        except DroppedFramesError as e:
            if not skip_bad:
                raise
            skipped[i] = str(e)
            log.warning("skipping: %s", e)
            continue
        if max_steps is not None:
            states, actions = states[:max_steps + 1], actions[:max_steps]
        if len(actions) >= 1:
            kept.append((i, states, actions))
    if not kept:
        raise LogError(f"{source}: no episode left to replay" + (f" ({len(skipped)} skipped)" if skipped else ""))
    return _pad(kept, rate, source, skipped)


def _pad(kept: list[tuple[int, np.ndarray, np.ndarray]], fps: float | None, source: str,
         skipped: dict[int, str]) -> Logs:
    t_max = max(len(a) for _, _, a in kept)
    d, a_dim = kept[0][1].shape[1], kept[0][2].shape[1]
    states = np.zeros((len(kept), t_max + 1, d))
    actions = np.zeros((len(kept), t_max, a_dim))
    lengths = np.zeros(len(kept), np.int64)
    for row, (_, s, a) in enumerate(kept):
        n = len(a)
        states[row, :n + 1], states[row, n + 1:] = s, s[-1]
        actions[row, :n], actions[row, n:] = a, a[-1]
        lengths[row] = n
    return Logs(states, actions, lengths, fps, source, [i for i, _, _ in kept], skipped)
