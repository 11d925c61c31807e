"""Decoupled PPO's surrogate (Hilton et al. 2021, arXiv:2110.00641): PPO on rows acted by older weights.

Asynchronous actors (``loop.on_policy_sync=false``) act with weights up to ``loop.max_staleness`` versions behind
the learner's. Decoupled PPO separates the two roles of PPO's "old" policy: the *proximal* policy, whose ratio the
clip keeps close (the learner's weights when the update starts), and the *behaviour* policy, which acted the row
and whose likelihood only reweights it. Rows the learner's own weights acted have ``π_prox = π_behaviour``, weight
exactly 1, and the ordinary clipped loss. Shared by :mod:`robot_rl.policies.ppo` and
:mod:`robot_rl.policies.flow.ppo`.
"""

from __future__ import annotations

import torch


def decoupled_surrogate_loss(log_prob: torch.Tensor, prox_log_prob: torch.Tensor,
                             behaviour_log_prob: torch.Tensor, advantages: torch.Tensor, clip: float,
                             max_weight: float) -> torch.Tensor:
    """Decoupled PPO (Hilton et al. 2021): ``L = mean(w · max(−A·ρ, −A·clip(ρ, 1−ε, 1+ε)))``.

    ``ρ = exp(log π − log π_prox)`` is measured against the proximal policy (the learner's weights when the update
    started) and ``w = min(exp(log π_prox − log π_behaviour), max_weight)`` is the importance weight of the policy
    that acted (a constant: both log-probabilities are fixed). Where ``π_prox = π_behaviour``, ``w = 1`` exactly and
    this is :func:`clipped_surrogate_loss`, bit for bit.
    """
    weight = torch.exp(prox_log_prob - behaviour_log_prob).clamp(max=max_weight)
    ratio = torch.exp(log_prob - prox_log_prob)
    return (weight * torch.max(-advantages * ratio, -advantages * ratio.clamp(1.0 - clip, 1.0 + clip))).mean()
