"""The transition record that actors send and learners store.

One :class:`TransitionBatch` is what an actor produces in one vectorised step (``B = num_envs``
rows), or several steps concatenated. It carries who produced it and with which weights, so the
learner can drop duplicates, measure weight lag and tell human interventions apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

Obs = dict[str, torch.Tensor]


def finite_obs_rows(obs: Obs, n: int) -> torch.Tensor:
    """``[n]`` bool: rows of a batched observation whose float arrays are all finite."""
    ok = torch.ones(n, dtype=torch.bool, device=next(iter(obs.values())).device)
    for v in obs.values():
        if v.is_floating_point():
            ok &= torch.isfinite(v.reshape(n, -1)).all(dim=1)
    return ok


DEMO_ACTOR_ID = -1
"""The ``actor_id`` of demonstration rows (loaded from a recording, not sent by an actor): their episode streams never
meet an actor's in a shared buffer, and a replay tells them from the rows a person intervened on online."""


@dataclass
class TransitionBatch:
    """``B`` transitions.

    Fields (shapes with the batch dimension ``B`` first):

    - ``obs``, ``next_obs``: ``{key: [B, ...]}``. ``next_obs`` is the true successor, i.e. the
      episode's final observation where ``terminated | truncated`` (never the auto-reset one).
    - ``action``: ``[B, *action_shape]`` float32, the action actually applied (after clamping, or the
      human's action when ``intervened``).
    - ``reward``: ``[B]`` float32; ``terminated``, ``truncated``: ``[B]`` bool.
    - ``intervened``: ``[B]`` bool, a human (teleop) chose this action.
    - ``policy_version``: ``[B]`` int64, the weight version that acted.
    - ``extras``: per-row tensors ``[B, ...]`` that one package writes and another reads, recorded at acting
      time (PPO's ``log_prob``, ``raw_action``, ``mean``) or at sampling time (the replay's n-step
      ``discount``). The shared keys, with dtype, shape and both sides, are declared once in
      :mod:`robot_rl.core.extras`; values are computed by the learner, so the critic never travels to actors.
    - ``env_index``: ``[B]`` int64, which sub-env of the actor produced the row (keeps trajectories
      apart for on-policy learners and n-step returns).
    - ``actor_id``: which actor sent it; ``seq``: the actor's chunk sequence number (dedup key with
      ``actor_id``).
    """

    obs: Obs
    action: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    next_obs: Obs
    intervened: torch.Tensor
    policy_version: torch.Tensor
    env_index: torch.Tensor
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    actor_id: int = 0
    seq: int = 0

    def __len__(self) -> int:
        return int(self.reward.shape[0])

    @property
    def done(self) -> torch.Tensor:
        """``terminated | truncated``."""
        return self.terminated | self.truncated

    def to(self, device: torch.device | str) -> TransitionBatch:
        """A copy on ``device`` (no copy for tensors already there)."""

        def move(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: v.to(device) for k, v in d.items()}

        return replace(
            self, obs=move(self.obs), next_obs=move(self.next_obs), action=self.action.to(device),
            reward=self.reward.to(device), terminated=self.terminated.to(device),
            truncated=self.truncated.to(device), intervened=self.intervened.to(device),
            policy_version=self.policy_version.to(device), env_index=self.env_index.to(device),
            extras=move(self.extras),
        )

    def index(self, rows: torch.Tensor | slice) -> TransitionBatch:
        """The subset of rows ``rows``."""

        def pick(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: v[rows] for k, v in d.items()}

        return replace(
            self, obs=pick(self.obs), next_obs=pick(self.next_obs), action=self.action[rows],
            reward=self.reward[rows], terminated=self.terminated[rows], truncated=self.truncated[rows],
            intervened=self.intervened[rows], policy_version=self.policy_version[rows],
            env_index=self.env_index[rows], extras=pick(self.extras),
        )

    def finite_rows(self) -> torch.Tensor:
        """``[B]`` bool: rows whose float fields are all finite (NaN from an env is never learned from)."""
        ok = torch.isfinite(self.reward) & torch.isfinite(self.action.reshape(len(self), -1)).all(dim=1)
        for d in (self.obs, self.next_obs):
            for v in d.values():
                if v.is_floating_point():
                    ok &= torch.isfinite(v.reshape(len(self), -1)).all(dim=1)
        return ok
