"""The feature hint: the student's encoder learns to predict the teacher's observation features.

FitNets (Romero et al., 2015): besides the action, the student's encoder features ``φ_s(o)``, through a linear map
``W`` trained with it (and dropped afterwards: it is not part of the exported student), regress the teacher's
features ``φ_t(o)`` standardised by their statistics on the teacher's own rollouts (round 0):

    L_hint(θ, W) = mean_{D, j} (W φ_s(o) − (φ_t(o) − m) / s)_j²

Why: a trained SAC pixel actor saturates its pre-tanh action at about ±2 over most of the state space, so its
action labels say on which side the goal is but hardly how far; a pixel student fitted to them alone stays at the
"ignore the image" plateau (on ``reach_pixels`` its loss stayed at 85–100 % of the labels' variance through 36,000
updates and its success at 0). The teacher's features locate the goal densely; with the hint the same student
fits the action labels to ~1 % of their variance in 4,000 updates (benchmarks/RESULTS_export.md, "Distillation").
Teachers with no features to give (a scripted expert, a LeRobot VLA) train on the action loss alone.
"""

from __future__ import annotations

import torch
from torch import nn

from robot_rl.core.algorithm import FeatureEncoder, Policy
from robot_rl.core.transition import Obs


@torch.no_grad()
def teacher_features(policy: Policy, obs: Obs) -> torch.Tensor | None:
    """The observation features ``[N, F]`` (float32) the teacher's action head reads, or None if it gives none.

    Any :class:`~robot_rl.core.algorithm.FeatureEncoder`: SAC-family actors (camera encoder and state), our flow
    policies (their condition encoder).
    """
    if not isinstance(policy, FeatureEncoder):
        return None
    f = policy.encode(obs)
    return f.float().reshape(f.shape[0], -1)


class FeatureHint(nn.Module):
    """``W`` and the standardisation ``(m, s)`` of :math:`L_{hint}` (module docstring)."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, student_dim: int, reference: torch.Tensor) -> None:
        """``reference``: teacher features ``[M, F]`` of the teacher's own rollouts, for ``m`` and ``s``."""
        super().__init__()
        self.proj = nn.Linear(student_dim, reference.shape[1])
        self.register_buffer("mean", reference.mean(0))
        # Features a tanh/LayerNorm pins (std ~0) would otherwise blow up: floor s.
        self.register_buffer("std", reference.std(0).clamp_min(1e-2))

    def loss(self, student_features: torch.Tensor, teacher_feats: torch.Tensor) -> torch.Tensor:
        """:math:`L_{hint}` on one batch."""
        target = (teacher_feats - self.mean) / self.std
        return (self.proj(student_features.float()) - target).square().mean()
