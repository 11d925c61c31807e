"""Record whole episodes from any env loop, and roll out a trained run's policy to record demos.

:class:`EpisodeRecorder` sits beside a :class:`~robot_rl.core.env.VecEnv` loop::

    rec = EpisodeRecorder(sink, num_envs=env.num_envs)
    obs = env.reset(); rec.reset(obs)
    while ...:
        action = policy(obs)
        result = env.step(action)
        rec.step(action, result, intervened=human_mask)   # finished episodes go to the sink
        obs = result.obs

It keeps one growing episode per sub-env and, when a sub-env's episode ends, writes it to the sink
with ``info["final_obs"]`` as its final observation (the auto-reset contract of
:mod:`robot_rl.core.env`). A sink is anything with ``write(episode)`` and ``close()``: an
:class:`~robot_rl.data.store.EpisodeStore` (append-only, checksummed) or a
:class:`~robot_rl.data.lerobot_io.LeRobotWriter` (straight into a LeRobotDataset v3).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from robot_rl.core.env import StepResult, VecEnv
from robot_rl.data.episode import Episode
from robot_rl.data.store import EpisodeStore

log = logging.getLogger(__name__)


@runtime_checkable
class EpisodeSink(Protocol):
    """Where finished episodes go."""

    def write(self, ep: Episode) -> None:
        """Store one finished episode."""

    def close(self) -> None:
        """Flush and release (idempotent)."""


class StoreSink:
    """An :class:`EpisodeStore` as a sink (each episode is durable once ``write`` returns)."""

    def __init__(self, store: EpisodeStore) -> None:
        self.store = store

    def write(self, ep: Episode) -> None:
        """Append ``ep`` to the store."""
        self.store.append(ep)

    def close(self) -> None:
        """Nothing to flush: every append is already committed."""


class _Track:
    """The growing episode of one sub-env."""

    def __init__(self) -> None:
        self.obs: dict[str, list[np.ndarray]] = {}
        self.steps: dict[str, list[Any]] = {f: [] for f in ("action", "reward", "terminated", "truncated",
                                                            "intervened", "success")}

    def __len__(self) -> int:
        return len(self.steps["reward"])


class EpisodeRecorder:
    """Turns a VecEnv loop's steps into :class:`Episode` s written to ``sink`` (module docstring)."""

    def __init__(self, sink: EpisodeSink, num_envs: int, task: str = "", max_episodes: int | None = None) -> None:
        self.sink = sink
        self.num_envs = num_envs
        self.task = task
        self.max_episodes = max_episodes
        self.episodes_written = 0
        self.successes = 0
        self._tracks = [_Track() for _ in range(num_envs)]
        self._obs: dict[str, np.ndarray] | None = None

    @property
    def full(self) -> bool:
        """Whether ``max_episodes`` episodes have been written."""
        return self.max_episodes is not None and self.episodes_written >= self.max_episodes

    def reset(self, obs: dict[str, torch.Tensor]) -> None:
        """Start fresh episodes in every sub-env from the observation ``env.reset()`` returned."""
        self._tracks = [_Track() for _ in range(self.num_envs)]
        self._obs = _np(obs)

    def step(self, action: torch.Tensor, result: StepResult, intervened: torch.Tensor | None = None) -> list[Episode]:
        """Record one vectorised step; return (and write) the episodes that ended in it."""
        if self._obs is None:
            raise RuntimeError("call reset(obs) with the first observation before step()")
        act = action.detach().cpu().numpy().astype(np.float32)
        rew = result.reward.detach().cpu().numpy().astype(np.float32)
        term = result.terminated.detach().cpu().numpy().astype(bool)
        trunc = result.truncated.detach().cpu().numpy().astype(bool)
        succ = result.info.get("success")
        succ_np = succ.detach().cpu().numpy().astype(bool) if succ is not None else np.zeros(self.num_envs, bool)
        inter = intervened.detach().cpu().numpy().astype(bool) if intervened is not None \
            else np.zeros(self.num_envs, bool)
        final = result.info.get("final_obs")
        final_np = _np(final) if final is not None else None
        finished: list[Episode] = []
        for i, track in enumerate(self._tracks):
            for k, v in self._obs.items():
                track.obs.setdefault(k, []).append(v[i])
            for name, arr in (("action", act), ("reward", rew), ("terminated", term), ("truncated", trunc),
                              ("intervened", inter), ("success", succ_np)):
                track.steps[name].append(arr[i])
            if term[i] or trunc[i]:
                ep = self._finish(track, {k: v[i] for k, v in final_np.items()} if final_np is not None else None)
                self._tracks[i] = _Track()
                if not self.full:
                    self.sink.write(ep)
                    self.episodes_written += 1
                    self.successes += int(ep.is_success)
                    finished.append(ep)
        self._obs = _np(result.obs)
        return finished

    def _finish(self, track: _Track, final_obs: dict[str, np.ndarray] | None) -> Episode:
        s = track.steps
        return Episode(obs={k: np.stack(v) for k, v in track.obs.items()}, final_obs=final_obs,
                       action=np.stack(s["action"]), reward=np.asarray(s["reward"], np.float32),
                       terminated=np.asarray(s["terminated"], bool), truncated=np.asarray(s["truncated"], bool),
                       intervened=np.asarray(s["intervened"], bool), success=np.asarray(s["success"], bool),
                       task=self.task)

    def close(self) -> int:
        """Drop unfinished episodes (they have no end) and close the sink; returns the steps dropped."""
        dropped = sum(len(t) for t in self._tracks)
        self._tracks = [_Track() for _ in range(self.num_envs)]
        self.sink.close()
        return dropped


def _np(obs: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in obs.items()}


# --------------------------------------------------------------------------------------------
# Rolling out a run's policy
# --------------------------------------------------------------------------------------------


@dataclass
class RecordResult:
    """What :func:`record_run` wrote."""

    out: Path
    episodes: int
    frames: int
    successes: int
    dropped_steps: int


def record_episodes(env: VecEnv, policy: Any, sink: EpisodeSink, episodes: int, seed: int = 0,
                    deterministic: bool = True, task: str = "") -> RecordResult:
    """Roll ``policy`` (``act(obs, deterministic)``) in ``env`` until ``episodes`` episodes are written.

    The sink is closed on return; the result's ``out`` is left empty for the caller to fill.
    """
    if episodes < 1:
        raise ValueError("episodes must be >= 1")
    rec = EpisodeRecorder(sink, env.num_envs, task=task, max_episodes=episodes)
    frames = 0
    obs = env.reset(seed=seed)
    rec.reset(obs)
    budget = (episodes // env.num_envs + 2) * env.max_episode_steps + 1
    try:
        with torch.no_grad():
            for _ in range(budget):
                action, _ = policy.act(obs, deterministic=deterministic)
                result = env.step(action)
                for ep in rec.step(action, result):
                    frames += len(ep)
                obs = result.obs
                if rec.full:
                    break
    finally:
        dropped = rec.close()
    if not rec.full:
        raise RuntimeError(f"recorded only {rec.episodes_written} of {episodes} episodes within {budget} steps; "
                           "does the env end episodes at max_episode_steps?")
    return RecordResult(Path(), rec.episodes_written, frames, rec.successes, dropped)


def record_run(run_dir: Path, out: Path, episodes: int = 10, fmt: str = "episodes", seed: int = 12345,
               device: str = "cpu", num_envs: int = 8, fps: float = 20.0, deterministic: bool = True,
               use_videos: bool = False) -> RecordResult:
    """Roll out the newest checkpoint of ``run_dir`` and record ``episodes`` episodes into ``out``.

    ``fmt="episodes"`` writes an :class:`EpisodeStore`; ``fmt="lerobot"`` a LeRobotDataset v3.
    """
    from robot_rl.data.provenance import task_settings
    from robot_rl.loop.run_context import load_run_config, resolve_device
    from robot_rl.policy_io import load_policy

    cfg = load_run_config(run_dir)
    dev = resolve_device(device)
    env = cfg.make_env(dev, seed, num_envs=max(1, min(num_envs, episodes)), role="eval")
    try:
        loaded = load_policy(run_dir, env.spec, dev)
    except BaseException:
        env.close()
        raise
    policy, ckpt = loaded.policy, loaded.checkpoint
    task = type(cfg.task).registry.name_of(cfg.task)
    # A simulated robot has no LeRobot robot type of its own: the task names it.
    source = {"run_dir": str(run_dir), "checkpoint": str(ckpt), "deterministic": deterministic, "seed": seed,
              "robot_type": task, "task_config": task_settings(cfg.task)}
    sink: EpisodeSink
    if fmt == "episodes":
        sink = StoreSink(EpisodeStore.create(out, env.spec, fps=fps, task=task, source=source))
    elif fmt == "lerobot":
        from robot_rl.data.lerobot_io import LeRobotWriter

        sink = LeRobotWriter(out, env.spec, fps, task=task, use_videos=use_videos, robot_type=task)
    else:
        raise ValueError(f"unknown recording format {fmt!r}; valid: episodes, lerobot")
    try:
        result = record_episodes(env, policy, sink, episodes, seed=seed, deterministic=deterministic, task=task)
    finally:
        env.close()
    result.out = Path(out)
    log.info("recorded %d episodes (%d frames) of %s into %s", result.episodes, result.frames, run_dir, out)
    return result
