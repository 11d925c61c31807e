"""Composing a reward from terms, potential-based shaping, and relabelling after a model is retrained.

``r = w_s · success + γ Φ(s') − Φ(s) (PRM shaping) + human + penalties``, each term returned
separately so the run log shows them apart.

- **Shaping** is potential-based (Ng, Harada & Russell 1999): ``F = γ Φ(s') − Φ(s)`` with the same
  γ as the learner, so the optimal policy is unchanged. ``Φ`` is the PRM's progress from the
  episode's first frame; at a terminal transition ``Φ(s') = 0`` (the standard convention that keeps
  the guarantee for episodic tasks).
- **Human keys** override: a ``+1`` key (success) or ``−1`` key (failure) at a step sets the success
  term to ``human_success`` / ``human_failure`` there.
- **Penalties**: a per-step cost and a cost per change of a binary signal (e.g. the gripper command).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from robot_rl.data.episode import Episode


@dataclass
class ComposerConfig:
    """Weights of the reward terms."""

    gamma: float = 0.99
    """Discount of the learner (shaping must use the same γ to leave the optimal policy unchanged)."""
    success_weight: float = 1.0
    """Reward on a success step (from the env or the classifier)."""
    shaping_weight: float = 1.0
    """Scale of the potential Φ (any scale keeps the guarantee)."""
    human_success: float = 1.0
    """Success term where a human pressed the success key."""
    human_failure: float = -1.0
    """Success term where a human pressed the failure key."""
    step_penalty: float = 0.0
    """Subtracted on every step."""
    change_penalty: float = 0.0
    """Subtracted when the watched binary signal (e.g. gripper closed) changes."""


def shaping(phi: torch.Tensor, phi_next: torch.Tensor, terminated: torch.Tensor, gamma: float) -> torch.Tensor:
    """``F = γ Φ(s') − Φ(s)``, with ``Φ(s') = 0`` where the transition terminated."""
    return gamma * torch.where(terminated, torch.zeros_like(phi_next), phi_next) - phi


def compose(cfg: ComposerConfig, success: torch.Tensor, terminated: torch.Tensor,
            phi: torch.Tensor | None = None, phi_next: torch.Tensor | None = None,
            human: torch.Tensor | None = None, signal: torch.Tensor | None = None,
            signal_prev: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The total reward ``[N]`` and each term ``{name: [N]}``.

    ``success`` ``[N]`` bool; ``phi``/``phi_next`` potentials ``[N]``; ``human`` ``[N]`` int8 in
    {−1, 0, +1} (0 = no key); ``signal``/``signal_prev`` ``[N]`` bool for the change penalty.
    """
    terms: dict[str, torch.Tensor] = {"success": success.float() * cfg.success_weight}
    if human is not None:
        h = human.to(terms["success"].device)
        terms["success"] = torch.where(h > 0, torch.full_like(terms["success"], cfg.human_success),
                                       torch.where(h < 0, torch.full_like(terms["success"], cfg.human_failure),
                                                   terms["success"]))
        terms["human_keys"] = (h != 0).float()
    if phi is not None and phi_next is not None:
        terms["shaping"] = cfg.shaping_weight * shaping(phi, phi_next, terminated, cfg.gamma)
    if cfg.step_penalty:
        terms["step_penalty"] = torch.full_like(terms["success"], -cfg.step_penalty)
    if cfg.change_penalty and signal is not None and signal_prev is not None:
        terms["change_penalty"] = -cfg.change_penalty * (signal != signal_prev).float()
    total = sum((v for k, v in terms.items() if k != "human_keys"), torch.zeros_like(terms["success"]))
    return total, terms


RewardTerm = Callable[[dict[str, torch.Tensor], dict[str, torch.Tensor]], torch.Tensor]
"""A model's reward term of transitions: ``(obs, next_obs) → [B]``."""


@torch.no_grad()
def relabel_batch(reward: torch.Tensor, obs: dict[str, torch.Tensor], next_obs: dict[str, torch.Tensor],
                  old_term: RewardTerm, new_term: RewardTerm, keep: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards with the old model's term swapped for the new one's: ``r − old + new``.

    Rows where the terms agree (bit for bit) or ``keep`` is set (e.g. human-labelled rows, whose
    label wins over any model) are returned unchanged. Returns ``(new_reward, changed_mask)``.
    """
    old, new = old_term(obs, next_obs), new_term(obs, next_obs)
    changed = old != new
    if keep is not None:
        changed &= ~keep.to(changed.device)
    return torch.where(changed, reward - old + new, reward), changed


@torch.no_grad()
def relabel_replay(buffer: object, old_term: RewardTerm, new_term: RewardTerm, chunk: int = 1024,
                   keep_intervened: bool = False) -> int:
    """Relabel every live row of a :class:`~robot_rl.replay.buffer.ReplayBuffer` in place; returns rows changed.

    Reads each row's stored observation and next observation, and rewrites only the reward rows whose
    term changed (see :func:`relabel_batch`); ``keep_intervened`` leaves human-driven rows alone.
    """
    from robot_rl.replay.buffer import ReplayBuffer

    if not isinstance(buffer, ReplayBuffer):
        raise TypeError(f"relabel_replay needs a ReplayBuffer, got {type(buffer).__name__}")
    total = 0
    for lo in range(0, len(buffer), chunk):
        pos = buffer.live_positions(lo, lo + chunk)
        obs, nxt, reward, intervened = buffer.raw_rows(pos)
        new, changed = relabel_batch(reward, obs, nxt, old_term, new_term, intervened if keep_intervened else None)
        buffer.rewrite_rewards(pos, new)
        total += int(changed.sum())
    return total


@torch.no_grad()
def relabel_store(src: Path | str, out: Path | str, old_term: RewardTerm, new_term: RewardTerm) -> int:
    """Write a copy of the episode store ``src`` to ``out`` with relabelled rewards; returns steps changed.

    Committed episodes are never rewritten (the store's guarantee), so the result is a new store.
    """
    from robot_rl.data.store import EpisodeStore

    store = EpisodeStore(src)
    dst = EpisodeStore.create(out, store.spec, fps=store.fps, task=store.task,
                              source={"relabelled_from": str(src)})
    total = 0
    for ep in store:
        total += _relabel_episode(ep, old_term, new_term)
        dst.append(ep)
    return total


def _relabel_episode(ep: Episode, old_term: RewardTerm, new_term: RewardTerm) -> int:
    obs = {k: torch.from_numpy(v) for k, v in ep.obs.items()}
    if ep.final_obs is not None:
        nxt = {k: torch.cat([obs[k][1:], torch.from_numpy(ep.final_obs[k])[None]]) for k in obs}
    else:
        nxt = {k: torch.cat([obs[k][1:], obs[k][-1:]]) for k in obs}
    new, changed = relabel_batch(torch.from_numpy(ep.reward), obs, nxt, old_term, new_term,
                                 torch.from_numpy(ep.intervened))
    ep.reward = new.numpy().astype(np.float32)
    return int(changed.sum())
