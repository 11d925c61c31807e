"""Drift of a fine-tuned flow policy from its SFT start, comparable across RL methods.

:func:`flow_chain_kl` is the KL between the two policies' Flow-Noise chains that share one fixed step
σ: both chains are Gaussian Markov chains with the same ``x_0 ~ N(0, I)`` and step std, so the KL is
``E_chain[Σ_k ‖μ_k(x_k) − μ_ref_k(x_k)‖² / (2σ²)]``, estimated on chains sampled from ``policy``
(nats per chunk). It measures how far the action expert and encoder moved, whatever trained them.
"""

from __future__ import annotations

import torch

from robot_rl.core.transition import Obs
from robot_rl.policies.flow.model import FlowVLAPolicy


@torch.no_grad()
def flow_chain_kl(policy: FlowVLAPolicy, reference: FlowVLAPolicy, obs: Obs, sigma: float | None = None,
                  generator: torch.Generator | None = None) -> float:
    """Mean ``KL(chain_policy ‖ chain_reference)`` over the rows of ``obs``, both with step std ``sigma``.

    ``sigma`` defaults to the policy's ``init_noise_std``; the two policies must share horizon and steps.
    """
    if (policy.cfg.horizon, policy.cfg.num_steps) != (reference.cfg.horizon, reference.cfg.num_steps):
        raise ValueError("flow_chain_kl needs policies with the same horizon and num_steps")
    s = float(sigma if sigma is not None else policy.cfg.init_noise_std)
    if s <= 0:
        raise ValueError(f"sigma must be > 0, got {s}")
    cond, ref_cond = policy.encoder(obs), reference.encoder(obs)
    n = cond.shape[0]
    shape = (n, policy.cfg.horizon, policy.action_dim)
    x = torch.randn(shape, device=cond.device, generator=generator)
    total = torch.zeros(n, device=cond.device)
    for k in range(policy.cfg.num_steps):
        mu = policy._mean_step(x, k, cond)
        total += (mu - reference._mean_step(x, k, ref_cond)).square().flatten(1).sum(-1) / (2 * s * s)
        x = mu + s * torch.randn(shape, device=cond.device, generator=generator)
    return float(total.mean())
