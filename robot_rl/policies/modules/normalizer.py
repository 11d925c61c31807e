"""Running mean/std observation normaliser (parallel Welford / Chan et al. update)."""

from __future__ import annotations

import torch
from torch import nn


class RunningNormalizer(nn.Module):
    """Normalise ``[..., dim]`` inputs by running statistics, kept as buffers so they are saved.

    ``update`` merges a batch's mean/var into the running ones:
    ``δ = μ_b − μ``, ``n' = n + n_b``, ``μ' = μ + δ·n_b/n'``,
    ``M2' = var·n + var_b·n_b + δ²·n·n_b/n'``, ``var' = M2'/n'``.
    """

    count: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.clip = clip
        self.eps = eps
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch ``[..., dim]`` into the statistics."""
        x = x.reshape(-1, x.shape[-1]).to(self.mean.dtype)
        n_b = x.shape[0]
        if n_b == 0:
            return
        mean_b = x.mean(dim=0)
        var_b = x.var(dim=0, unbiased=False)
        n = self.count.to(self.mean.dtype)
        total = n + n_b
        delta = mean_b - self.mean
        self.mean.add_(delta * n_b / total)
        m2 = self.var * n + var_b * n_b + delta.square() * n * n_b / total
        self.var.copy_(m2 / total)
        self.count.add_(n_b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``clip((x − μ)/sqrt(var + eps), ±clip)``."""
        return ((x - self.mean) / torch.sqrt(self.var + self.eps)).clamp(-self.clip, self.clip)
