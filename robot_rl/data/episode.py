"""One recorded episode as plain numpy arrays, and its conversion to learner transitions.

An :class:`Episode` of ``T`` steps holds, per step ``t``, the observation the policy saw, the action
applied, and what the env answered. Shapes exclude nothing but the time axis:

- ``obs[key]``: ``[T, *spec.observation[key].shape]`` (``state`` float32, ``image.<cam>`` uint8 HWC);
- ``final_obs[key]``: ``[*shape]``, the observation after the last step (the true successor of
  step ``T-1``), or absent when the source does not have it (LeRobot datasets store ``T`` frames);
- ``action``: ``[T, *action_shape]`` float32, the action actually applied (the human's when
  ``intervened``);
- ``reward`` ``[T]`` float32; ``terminated``, ``truncated``, ``intervened``, ``success`` ``[T]`` bool;
- ``segment`` ``[T]`` int8 or absent: the rewind-and-correct label of each step
  (:data:`SEGMENT_NONE`, :data:`SEGMENT_REWIND`, :data:`SEGMENT_CORRECTION`), set by `robot-rl record`.

An episode ends where ``terminated | truncated`` is set at its last step; one cut off by the end of
a recording may end with neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from robot_rl.core.specs import ArraySpec, EnvSpec, SpecMismatchError
from robot_rl.core.transition import TransitionBatch

STEP_FIELDS = ("action", "reward", "terminated", "truncated", "intervened", "success")
_BOOL_FIELDS = ("terminated", "truncated", "intervened", "success")

SEGMENT_NONE, SEGMENT_REWIND, SEGMENT_CORRECTION = 0, 1, 2
SEGMENT_NAMES: dict[int, str] = {SEGMENT_NONE: "none", SEGMENT_REWIND: "rewind", SEGMENT_CORRECTION: "correction"}


@dataclass
class Episode:
    """``T`` steps of one sub-env (see the module docstring for shapes)."""

    obs: dict[str, np.ndarray]
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    intervened: np.ndarray
    success: np.ndarray
    final_obs: dict[str, np.ndarray] | None = None
    task: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    segment: np.ndarray | None = None
    """Rewind-and-correct label per step ``[T]`` int8 (0 none, 1 rewind, 2 correction), or None."""

    def __len__(self) -> int:
        return int(self.reward.shape[0])

    @property
    def is_success(self) -> bool:
        """Whether the success criterion held at the last step (the toolkit's episode success rule)."""
        return bool(len(self) and self.success[-1])

    @property
    def episode_return(self) -> float:
        """Undiscounted sum of rewards."""
        return float(self.reward.sum(dtype=np.float64))

    def validate(self, spec: EnvSpec | None = None) -> None:
        """Raise :class:`SpecMismatchError` if lengths disagree or (given ``spec``) shapes/dtypes differ."""
        n = len(self)
        if n == 0:
            raise SpecMismatchError("an episode needs at least one step")
        for name in STEP_FIELDS:
            arr = getattr(self, name)
            if arr.shape[0] != n:
                raise SpecMismatchError(f"episode field {name} has {arr.shape[0]} steps, reward has {n}")
        for name in _BOOL_FIELDS:
            if getattr(self, name).dtype != np.bool_:
                raise SpecMismatchError(f"episode field {name} must be bool, got {getattr(self, name).dtype}")
        for key, arr in self.obs.items():
            if arr.shape[0] != n:
                raise SpecMismatchError(f"obs[{key!r}] has {arr.shape[0]} steps, reward has {n}")
        if self.segment is not None:
            if self.segment.shape != (n,):
                raise SpecMismatchError(f"segment has shape {list(self.segment.shape)}, expected [{n}]")
            if not np.isin(self.segment, list(SEGMENT_NAMES)).all():
                raise SpecMismatchError(f"segment labels must be in {sorted(SEGMENT_NAMES)}")
        if self.final_obs is not None and set(self.final_obs) != set(self.obs):
            raise SpecMismatchError(f"final_obs keys {sorted(self.final_obs)} != obs keys {sorted(self.obs)}")
        if spec is None:
            return
        if set(self.obs) != set(spec.observation):
            raise SpecMismatchError(f"episode observation keys {sorted(self.obs)} differ from the spec's "
                                    f"{sorted(spec.observation)}")
        for key, s in spec.observation.items():
            _check(f"obs[{key!r}]", self.obs[key], s)
            if self.final_obs is not None:
                _check(f"final_obs[{key!r}]", self.final_obs[key][None], s)
        _check("action", self.action, spec.action)

    def nonfinite_steps(self) -> int:
        """Steps whose float observation, action or reward holds NaN/inf."""
        bad = ~np.isfinite(self.reward) | ~np.isfinite(self.action.reshape(len(self), -1)).all(axis=1)
        for arr in self.obs.values():
            if np.issubdtype(arr.dtype, np.floating):
                bad |= ~np.isfinite(arr.reshape(len(self), -1)).all(axis=1)
        return int(bad.sum())


def _check(name: str, arr: np.ndarray, spec: ArraySpec) -> None:
    if tuple(arr.shape[1:]) != spec.shape:
        raise SpecMismatchError(f"{name}: shape {list(arr.shape[1:])} per step, the spec says {list(spec.shape)}")
    if str(arr.dtype) != spec.dtype:
        raise SpecMismatchError(f"{name}: dtype {arr.dtype}, the spec says {spec.dtype}")


def spec_of(episode: Episode, action_low: float | None = None, action_high: float | None = None) -> EnvSpec:
    """The :class:`EnvSpec` an episode's arrays describe (no bounds on observations)."""
    obs = {k: ArraySpec(tuple(v.shape[1:]), str(v.dtype)) for k, v in episode.obs.items()}
    act = ArraySpec(tuple(episode.action.shape[1:]), str(episode.action.dtype), low=action_low, high=action_high)
    return EnvSpec(observation=obs, action=act)


def to_transitions(episodes: list[Episode], device: torch.device | str = "cpu") -> tuple[TransitionBatch, int]:
    """Concatenate episodes into one :class:`TransitionBatch` for a replay buffer.

    ``next_obs`` of step ``t`` is ``obs[t+1]``; of the last step, ``final_obs``. Where ``final_obs`` is
    missing the last step is kept only if it terminated (its successor is never bootstrapped from, so
    ``obs[T-1]`` stands in); otherwise it is dropped. Steps with NaN/inf are dropped as well.
    Returns ``(batch, dropped_steps)``. ``env_index`` numbers the episodes; ``policy_version`` is -1.
    When any episode has rewind-and-correct labels, ``extras["segment"]`` holds them per row (int8; 0
    for episodes without labels).
    """
    if not episodes:
        raise ValueError("no episodes to convert")
    obs_parts: dict[str, list[np.ndarray]] = {k: [] for k in episodes[0].obs}
    next_parts: dict[str, list[np.ndarray]] = {k: [] for k in episodes[0].obs}
    rows: dict[str, list[np.ndarray]] = {f: [] for f in (*STEP_FIELDS, "env_index")}
    dropped = 0
    for i, ep in enumerate(episodes):
        n = len(ep)
        keep = np.ones(n, dtype=bool)
        if ep.final_obs is None and not ep.terminated[-1]:
            keep[-1] = False
        for key in obs_parts:
            o = ep.obs[key]
            last = ep.final_obs[key][None] if ep.final_obs is not None else o[-1:]
            nxt = np.concatenate([o[1:], last])
            if np.issubdtype(o.dtype, np.floating):
                keep &= np.isfinite(o.reshape(n, -1)).all(axis=1) & np.isfinite(nxt.reshape(n, -1)).all(axis=1)
            obs_parts[key].append(o)
            next_parts[key].append(nxt)
        keep &= np.isfinite(ep.reward) & np.isfinite(ep.action.reshape(n, -1)).all(axis=1)
        for f in STEP_FIELDS:
            rows[f].append(getattr(ep, f))
        rows.setdefault("segment", []).append(ep.segment.astype(np.int8) if ep.segment is not None
                                              else np.zeros(n, dtype=np.int8))
        rows["env_index"].append(np.full(n, i, dtype=np.int64))
        rows.setdefault("_keep", []).append(keep)
        dropped += int((~keep).sum())
    keep_all = torch.from_numpy(np.concatenate(rows.pop("_keep")))

    def cat(parts: list[np.ndarray]) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(np.concatenate(parts)))[keep_all].to(device)

    labelled = any(ep.segment is not None for ep in episodes)
    segment = rows.pop("segment")
    r = {f: cat(v) for f, v in rows.items()}
    batch = TransitionBatch(
        obs={k: cat(v) for k, v in obs_parts.items()}, next_obs={k: cat(v) for k, v in next_parts.items()},
        action=r["action"].float(), reward=r["reward"].float(), terminated=r["terminated"].bool(),
        truncated=r["truncated"].bool(), intervened=r["intervened"].bool(),
        policy_version=torch.full((int(keep_all.sum()),), -1, dtype=torch.int64, device=device),
        env_index=r["env_index"].long(), extras={"segment": cat(segment)} if labelled else {},
    )
    return batch, dropped
