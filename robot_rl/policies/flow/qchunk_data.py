"""Recorded episodes as the chunk transitions a Q-chunking critic learns from (``flow_qc``'s demos).

The chunk env (``chunk_horizon = H``, ``execute_steps = E``) turns one chunk into one transition: it executes the
chunk's first ``E`` actions, sums their rewards and stops at an episode end inside the chunk. Demos are usually
recorded per step, so :func:`chunk_transitions` builds the same transitions from them, one per start step ``t``:

- action: the chunk ``a[t : t + H]``, padded past the episode end with its last action; ``mask`` ``[H]`` marks
  the real actions (flow matching weights the chunk steps by it);
- reward: ``Σ_{h < m} d^h · r[t + h]`` over the ``m = min(E, T − t)`` steps the env would execute, with the
  chunk env's ``chunk_discount`` d (1: the plain sum) — summed as the env sums, so demo and online rows back up
  the same quantity;
- the successor ``t + m``: the episode's next observation, or at its end the recorded final observation;
  ``terminated`` / ``truncated`` when the chunk reaches the episode end. A chunk that reaches the end of an
  episode that was not terminated and has no final observation has nothing to bootstrap from and is left out.

Episodes recorded on a chunk env (actions ``[T, H, A]``) already are chunk transitions and are used as they are.
Frames are stored once; a transition holds the indices of its observation and of its successor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from robot_rl.core.extras import ACTION_MASK
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.core.transition import TransitionBatch
from robot_rl.data.episode import Episode


@dataclass
class ChunkTransitions:
    """``M`` chunk transitions over ``F`` stored frames (module docstring)."""

    frames: dict[str, torch.Tensor]
    """``{key: [F, ...]}``: every observation, once."""
    obs_index: torch.Tensor
    """``[M]`` int64: the frame of each transition's observation."""
    next_index: torch.Tensor
    """``[M]`` int64: the frame of its successor."""
    action: torch.Tensor
    """``[M, H, A]`` float32 chunks."""
    mask: torch.Tensor
    """``[M, H]`` float32: 1 for a recorded action, 0 for padding past the episode end."""
    reward: torch.Tensor
    """``[M]`` float32: the executed steps' summed reward."""
    terminated: torch.Tensor
    """``[M]`` bool."""
    truncated: torch.Tensor
    """``[M]`` bool."""

    def __len__(self) -> int:
        return int(self.reward.shape[0])

    def batch(self, rows: torch.Tensor, device: torch.device | str) -> TransitionBatch:
        """Transitions ``rows`` (``[B]`` int64) on ``device``; ``extras["action_mask"]`` is :attr:`mask`."""
        rows = rows.cpu()
        obs_i, next_i = self.obs_index[rows], self.next_index[rows]
        n = int(rows.shape[0])
        return TransitionBatch(
            obs={k: v[obs_i].to(device) for k, v in self.frames.items()},
            action=self.action[rows].to(device), reward=self.reward[rows].to(device),
            terminated=self.terminated[rows].to(device), truncated=self.truncated[rows].to(device),
            next_obs={k: v[next_i].to(device) for k, v in self.frames.items()},
            intervened=torch.zeros(n, dtype=torch.bool, device=device),
            policy_version=torch.full((n,), -1, dtype=torch.int64, device=device),
            env_index=torch.zeros(n, dtype=torch.int64, device=device),
            extras={ACTION_MASK.name: self.mask[rows].to(device)})


def _episode_rows(ep: Episode, horizon: int, execute: int, discount: float) -> dict[str, np.ndarray]:
    """One episode's transitions, with frame indices local to the episode (its ``T`` frames, then ``final_obs``)."""
    t_len = len(ep)
    a = np.asarray(ep.action, dtype=np.float32)
    t = np.arange(t_len)
    if a.ndim == 3:
        if a.shape[1] != horizon:
            raise SpecMismatchError(f"the demos' action chunks have horizon {a.shape[1]}, the policy's is {horizon}")
        chunks, mask, steps = a, np.ones((t_len, horizon), np.float32), 1
    elif a.ndim == 2:
        idx = t[:, None] + np.arange(horizon)[None, :]
        chunks, mask, steps = a[np.minimum(idx, t_len - 1)], (idx < t_len).astype(np.float32), execute
    else:
        raise SpecMismatchError(f"demo actions must be [T, A] or [T, H, A], got {list(a.shape)}")
    m = np.minimum(steps, t_len - t)
    end = t + m == t_len
    r = np.asarray(ep.reward, dtype=np.float64)
    if steps == 1:
        reward = r.astype(np.float32)
    else:  # Σ_{h < m} d^h r[t + h], the rewards past the episode end counting 0
        padded = np.concatenate([r, np.zeros(steps)])
        weights = discount ** np.arange(steps)
        window = padded[t[:, None] + np.arange(steps)[None, :]] * (np.arange(steps)[None, :] < m[:, None])
        reward = (window @ weights).astype(np.float32)
    has_final = ep.final_obs is not None
    terminated = end & bool(ep.terminated[-1])
    truncated = end & ~terminated
    # A successor that is not recorded is never bootstrapped from only when the episode terminated there.
    keep = ~truncated if not has_final else np.ones(t_len, dtype=bool)
    keep &= np.isfinite(reward) & np.isfinite(chunks.reshape(t_len, -1)).all(axis=1)
    next_index = np.where(end, t_len if has_final else t_len - 1, t + m)
    return {"obs_index": t[keep], "next_index": next_index[keep], "action": chunks[keep], "mask": mask[keep],
            "reward": reward[keep], "terminated": terminated[keep], "truncated": truncated[keep]}


def chunk_transitions(episodes: list[Episode], spec: EnvSpec, horizon: int, execute: int,
                      discount: float = 1.0) -> ChunkTransitions:
    """The chunk transitions of ``episodes`` for a chunk env executing ``execute`` of each ``horizon``-chunk.

    ``discount``: the chunk env's ``chunk_discount`` (its spec's ``extras``), which weighs a chunk's rewards.
    """
    if not episodes:
        raise ValueError("no demo episodes")
    if not 1 <= execute <= horizon:
        raise ValueError(f"execute must be in [1, horizon={horizon}], got {execute}")
    missing = sorted(set(spec.observation) - set(episodes[0].obs))
    if missing:
        raise SpecMismatchError(f"the demos lack observation keys {missing} that the task has")
    frames: dict[str, list[np.ndarray]] = {k: [] for k in spec.observation}
    parts: dict[str, list[np.ndarray]] = {}
    offset = 0
    for ep in episodes:
        rows = _episode_rows(ep, horizon, execute, discount)
        rows["obs_index"] = rows["obs_index"] + offset
        rows["next_index"] = rows["next_index"] + offset
        for k, v in rows.items():
            parts.setdefault(k, []).append(v)
        for k in frames:
            frames[k].append(np.asarray(ep.obs[k]))
            if ep.final_obs is not None:
                frames[k].append(np.asarray(ep.final_obs[k])[None])
        offset += len(ep) + (ep.final_obs is not None)
    cat = {k: torch.from_numpy(np.ascontiguousarray(np.concatenate(v))) for k, v in parts.items()}
    if not len(cat["reward"]):
        raise ValueError("no usable demo transitions (episodes without a final observation and not terminated)")
    if cat["action"].shape[-1] != spec.action_dim:
        raise SpecMismatchError(f"demo actions have {cat['action'].shape[-1]} dims, the task {spec.action_dim}")
    return ChunkTransitions({k: torch.from_numpy(np.concatenate(v)) for k, v in frames.items()},
                            cat["obs_index"].long(), cat["next_index"].long(), cat["action"].float(),
                            cat["mask"].float(), cat["reward"].float(), cat["terminated"].bool(),
                            cat["truncated"].bool())


def chunk_td_target(reward: torch.Tensor, terminated: torch.Tensor, next_value: torch.Tensor, gamma: float,
                    steps: int) -> torch.Tensor:
    """``y = R + γ^steps · (1 − terminated) · V(s')`` for chunk rows ``[B]`` (:mod:`.qchunk`'s target)."""
    return reward + (gamma ** steps) * (1.0 - terminated.float()) * next_value
