"""The one-step policy of flow Q-learning (FQL; Park, Li & Levine 2025) for Q-chunking's chunk critic.

Best-of-N acting (:mod:`robot_rl.policies.flow.qchunk`'s default) improves on the flow only as far as its N
samples reach. FQL instead trains a second, one-step policy ``μ_ω(s, z) → chunk`` (an MLP over the critic's
observation features and a noise chunk ``z ~ N(0, I)``) to maximise the critic while staying close to what the
flow makes of the same noise::

    L(ω) = α · mean ‖μ_ω(s, z) − ODE_flow(s, z)‖²  −  λ · mean_j,b Q_j(s, clip(μ_ω(s, z)))

with ``ODE_flow`` the flow's noise-free integration from ``z`` (no gradient: the flow keeps learning by flow
matching alone, so it stays the behaviour model), ``α`` the distillation weight (``fql_alpha``: larger keeps the
policy nearer the data), and ``λ = 1 / mean |Q|`` (no gradient) so that ``α`` means the same at any reward scale.
This is Q-chunking's QC-FQL: the one-step policy acts (``z = 0`` when deterministic), and it gives the TD target's
next chunk ``clip(μ(s', z'))`` in place of the best of N flow samples. No ODE is integrated to act, so acting costs
one MLP pass instead of N flow integrations.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from robot_rl.policies.flow.model import clamp_to_bounds
from robot_rl.policies.modules.mlp import MLP


class OneStepChunkPolicy(nn.Module):
    """``μ_ω(features [B, C], noise [B, H, A]) → chunk [B, H, A]`` (unbounded; :meth:`bounded` clips)."""

    def __init__(self, feature_dim: int, horizon: int, action_dim: int, hidden: tuple[int, ...],
                 low: float | torch.Tensor | None, high: float | torch.Tensor | None) -> None:
        super().__init__()
        self.horizon, self.action_dim = horizon, action_dim
        self.net = MLP(feature_dim + horizon * action_dim, hidden, horizon * action_dim, layer_norm=True)
        self.low, self.high = low, high

    def forward(self, features: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The unbounded chunk (distillation reads this, as FQL does, so the bounds do not hide its error)."""
        out = self.net(torch.cat([features, noise.flatten(1)], dim=-1))
        return out.view(-1, self.horizon, self.action_dim)

    def bounded(self, chunk: torch.Tensor) -> torch.Tensor:
        """``chunk`` clipped to the action bounds (what is executed and what the critic scores)."""
        return clamp_to_bounds(chunk, self.low, self.high)


def fql_loss(onestep: OneStepChunkPolicy, critic: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
             features: torch.Tensor, noise: torch.Tensor, flow_chunks: torch.Tensor, execute: int, alpha: float,
             normalize_q: bool = True, across: Callable[[torch.Tensor], torch.Tensor] | None = None
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(L(ω), {"distill": …, "q": …})`` of the module docstring, over rows ``[B]``.

    ``flow_chunks`` ``[B, H, A]``: ``ODE_flow(s, noise)``, computed without gradient. ``critic`` maps
    ``(features, executed chunk [B, E·A]) → [members, B]``; its parameters get no step here (the caller's
    optimiser holds only ``onestep``'s). ``across``: on data-parallel ranks, the mean over ranks, so that ``λ`` is
    the whole batch's.
    """
    chunk = onestep(features, noise)
    distill = (chunk - flow_chunks).square().mean()
    q = critic(features, onestep.bounded(chunk)[:, :execute].flatten(1)).mean(dim=0)
    magnitude = q.detach().abs().mean()
    if across is not None:
        magnitude = across(magnitude)
    scale = 1.0 / magnitude.clamp_min(1e-6) if normalize_q else torch.ones((), device=q.device)
    loss = alpha * distill - scale * q.mean()
    return loss, {"distill": distill.detach(), "q": q.detach().mean()}


def distil_flow(onestep: OneStepChunkPolicy, optim: torch.optim.Optimizer, features: torch.Tensor,
                cond: torch.Tensor, flow_chunks: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], steps: int,
                batch_size: int, generator: torch.Generator) -> float:
    """``steps`` distillation-only steps (no Q term) on the states ``features`` / ``cond`` ``[S, ...]``.

    ``flow_chunks(cond, z)``: the flow's chunk from noise ``z``. The optimiser's moments restart afterwards, so
    the steps that follow are not carried by this phase's. Returns the last mean squared error.
    """
    error = torch.tensor(float("nan"))
    device = features.device
    for _ in range(steps):
        rows = torch.randint(0, features.shape[0], (batch_size,), generator=generator, device=device)
        z = torch.randn(batch_size, onestep.horizon, onestep.action_dim, generator=generator, device=device)
        with torch.no_grad():
            target = flow_chunks(cond[rows], z)
        loss = (onestep(features[rows], z) - target).square().mean()
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
        error = loss.detach()
    optim.state.clear()
    return float(error)
