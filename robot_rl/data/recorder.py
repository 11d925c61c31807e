"""Record whole episodes from any env loop (a trained run's rollout: :mod:`robot_rl.loop.record_run`).

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

from robot_rl.core.config import ConfigError
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
    """What :func:`record_episodes` (and :func:`robot_rl.loop.record_run.record_run`) wrote."""

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
        raise ConfigError("episodes must be >= 1")
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


def __getattr__(name: str) -> Any:
    # record_run loads a run's config (the loop's TrainConfig): it moved above the loop, and the data package may not
    # import the loop back, so the old name answers with where it went instead of a re-export.
    if name == "record_run":
        raise ImportError("robot_rl.data.recorder.record_run moved: use `from robot_rl.loop.record_run import "
                          "record_run`")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
