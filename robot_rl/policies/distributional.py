"""A distributional (C51) critic pair and the categorical projection of its TD target (Bellemare et al., 2017).

The critic predicts, for each of two members, a categorical distribution over ``K`` fixed atoms
``z_k = v_min + k·Δz``, ``Δz = (v_max − v_min)/(K − 1)``; ``Q(s, a) = Σ_k p_k z_k``. FastTD3 and FastSAC
(Seo et al., 2025) train it with the cross-entropy to the target distribution: the target critic's distribution
at ``(s', a')``, shifted and shrunk by the Bellman operator ``z ↦ r + γ^m·(1 − terminated)·z`` and projected
back onto the atoms (:func:`categorical_projection`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from robot_rl.policies.modules.ensemble import EnsembleMLP


def categorical_projection(probs: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
                           support: torch.Tensor) -> torch.Tensor:
    """Project ``r + discount·z`` with probabilities ``probs`` ``[B, K]`` onto ``support`` ``[K]`` → ``[B, K]``.

    ``reward``, ``discount`` ``[B]`` (``discount`` = γ^m·(1 − terminated): 0 on terminal rows). Each shifted atom
    ``Tz_j = clamp(r + discount·z_j, v_min, v_max)`` sits at fractional index ``b_j = (Tz_j − v_min)/Δz`` and
    splits its mass between its neighbours: ``(1 − f)·p_j`` to ``⌊b_j⌋`` and ``f·p_j`` to ``⌊b_j⌋ + 1``,
    ``f = b_j − ⌊b_j⌋``. Taking ``⌊b_j⌋ ≤ K − 2`` makes ``b_j = K − 1`` give all its mass to the last atom, and an
    integer ``b_j`` all its mass to atom ``b_j`` (the naive ``⌈b⌉``/``⌊b⌋`` pair loses it there, the bug FastTD3's
    "projection fix" patched). Two ``scatter_add_`` calls over the atom dimension: no loop over the batch.
    The projection keeps the total mass (each row still sums to 1) and the mean ``Σ p_j Tz_j``.
    """
    k = support.shape[0]
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (k - 1)
    target_z = (reward[:, None] + discount[:, None] * support[None, :]).clamp(v_min, v_max)
    b = (target_z - v_min) / delta
    lower = b.floor().clamp(0, k - 2)
    frac = b - lower
    lower_i = lower.long()
    projected = torch.zeros_like(probs)
    projected.scatter_add_(1, lower_i, probs * (1.0 - frac))
    projected.scatter_add_(1, lower_i + 1, probs * frac)
    return projected


class DistributionalCritic(nn.Module):
    """C51 critics run as one batched ensemble: ``(features [B, F], action [B, A])`` → logits ``[E, B, K]``.

    ``support``: the ``K`` atoms (a buffer, saved with the weights).
    """

    support: torch.Tensor

    def __init__(self, in_dim: int, hidden: Sequence[int], num_critics: int, num_atoms: int, v_min: float,
                 v_max: float, layer_norm: bool) -> None:
        super().__init__()
        if num_atoms < 2 or not v_min < v_max:
            raise ValueError(f"need num_atoms >= 2 and v_min < v_max, got {num_atoms}, [{v_min}, {v_max}]")
        self.q = EnsembleMLP(num_critics, in_dim, hidden, num_atoms, layer_norm)
        self.register_buffer("support", torch.linspace(v_min, v_max, num_atoms))

    def forward(self, features: torch.Tensor, action: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """Logits of every member's distribution (float32)."""
        return self.q(torch.cat([features, action], dim=-1), detach_params)

    def value(self, logits: torch.Tensor) -> torch.Tensor:
        """``Q = Σ_k softmax(logits)_k·z_k``: ``[..., K]`` → ``[...]``."""
        return (F.softmax(logits.float(), dim=-1) * self.support).sum(dim=-1)

    def target(self, next_logits: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
               clipped: bool = True) -> torch.Tensor:
        """The projected target distribution ``[B, K]`` from the target members' logits ``[E, B, K]`` at ``(s', a')``.

        ``clipped`` (clipped double Q, FastTD3's ``use_cdq``): per row, the distribution of the member whose mean is
        lowest; otherwise the members' mixture (the mean of their probabilities).
        """
        probs = F.softmax(next_logits.float(), dim=-1)
        if clipped:
            lowest = (probs * self.support).sum(dim=-1).argmin(dim=0)  # [B]
            chosen = probs.gather(0, lowest[None, :, None].expand(1, *probs.shape[1:])).squeeze(0)
        else:
            chosen = probs.mean(dim=0)
        return categorical_projection(chosen, reward, discount, self.support)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``Σ_members mean_b [−Σ_k target_k·log softmax(logits)_k]`` for logits ``[E, B, K]`` and a target ``[B, K]``."""
    return -(target * F.log_softmax(logits.float(), dim=-1)).sum(dim=-1).mean(dim=-1).sum()
