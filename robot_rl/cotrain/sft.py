"""Stage 1: SFT warm start of any supported learner on a mix of real and simulated demonstrations.

Each step draws ``round(sft_real_fraction · B)`` rows from the real demos and the rest from the sim demos
and minimises the policy-matched supervised loss (:func:`~robot_rl.cotrain.aux.supervised_loss`) with
its own Adam over the actor's parameters. Afterwards whatever the RL stage anchors to the starting
policy follows it: PPO's observation normaliser holds the demo statistics, SAC's target encoder the new
encoder, flow_ppo's KL-guard reference and critic encoder the SFT policy.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from robot_rl.cotrain.aux import flow_policy_of, supervised_loss
from robot_rl.cotrain.config import CotrainConfig
from robot_rl.cotrain.data import DemoSet

log = logging.getLogger(__name__)


def _actor_params(algo: Any) -> list[nn.Parameter]:
    flow = flow_policy_of(algo)
    if flow is not None:
        return [p for n, p in flow.named_parameters() if n != "log_sigma"]
    from robot_rl.policies.ppo import PPOAlgorithm
    from robot_rl.policies.sac import SACAlgorithm

    if isinstance(algo, PPOAlgorithm):
        return list(algo.policy.parameters())
    if isinstance(algo, SACAlgorithm):
        return list(algo.actor.parameters())
    params = getattr(algo, "supervised_parameters", None)
    if callable(params):
        return list(params())
    raise TypeError(f"co-training stage 1 does not know the actor parameters of {type(algo).__name__}")


def _prepare(algo: Any, demos: list[DemoSet]) -> None:
    """Fit observation normalisers to the demos (before SFT: the policy's inputs must be the RL's)."""
    from robot_rl.policies.modules.normalizer import RunningNormalizer
    from robot_rl.policies.ppo import PPOAlgorithm
    from robot_rl.policies.sac import SACAlgorithm

    for d in demos:
        if isinstance(algo, PPOAlgorithm) and isinstance(algo.policy.normalizer, RunningNormalizer):
            algo.policy.normalizer.update(d.obs["state"].float())
        elif isinstance(algo, SACAlgorithm):
            algo.actor.encoder.update_normalizer(d.obs)


def _finish(algo: Any) -> None:
    from robot_rl.policies.sac import SACAlgorithm

    if isinstance(algo, SACAlgorithm):
        algo.load_actor_weights(algo.actor_weights())  # refreshes the target encoder from the SFT encoder
    reference = getattr(algo, "reference", None)
    flow = flow_policy_of(algo)
    if flow is not None and isinstance(reference, nn.Module):
        # flow_ppo's KL guard and critic start from the SFT policy, as with algo.init_from.
        reference.load_state_dict(flow.state_dict(), strict=True)
        critic_encoder = getattr(getattr(algo, "critic", None), "encoder", None)
        encoder = getattr(flow, "encoder", None)
        if isinstance(critic_encoder, nn.Module) and isinstance(encoder, nn.Module):
            critic_encoder.load_state_dict(encoder.state_dict())


def warm_start(algo: Any, real: DemoSet, sim: DemoSet | None, cfg: CotrainConfig, seed: int) -> list[float]:
    """Run ``cfg.sft_steps`` mixed SFT steps on ``algo``'s actor; returns the loss of every step."""
    if cfg.sft_steps <= 0:
        return []
    if sim is None and cfg.sft_real_fraction < 1.0:
        log.info("cotrain: no sim_dataset; stage 1 trains on the real demonstrations only")
    n_real = cfg.sft_batch_size if sim is None else round(cfg.sft_real_fraction * cfg.sft_batch_size)
    n_sim = cfg.sft_batch_size - n_real
    _prepare(algo, [real] + ([sim] if sim is not None else []))
    params = _actor_params(algo)
    flags = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(True)  # e.g. flow_ppo's frozen encoder is trained in SFT
    opt = torch.optim.Adam(params, lr=cfg.sft_lr)
    gen = torch.Generator(device=real.action.device).manual_seed(seed)
    losses: list[float] = []
    try:
        for _ in range(cfg.sft_steps):
            parts = []
            if n_real:
                parts.append(real.sample(n_real, gen))
            if n_sim and sim is not None:
                parts.append(sim.sample(n_sim, gen))
            obs = {k: torch.cat([p[0][k] for p in parts]) for k in parts[0][0]}
            action = torch.cat([p[1] for p in parts])
            masks = [p[2] for p in parts]
            mask = None if any(m is None for m in masks) else torch.cat([m for m in masks if m is not None])
            loss = supervised_loss(algo, obs, action, mask, gen, train_encoder=True)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(params, 10.0)
            opt.step()
            losses.append(float(loss.detach()))
    finally:
        for p, f in zip(params, flags, strict=True):
            p.requires_grad_(f)
            p.grad = None
    _finish(algo)
    log.info("cotrain stage 1: %d SFT steps (%d real + %d sim rows per batch), loss %.4f → %.4f",
             cfg.sft_steps, n_real, n_sim, losses[0], losses[-1])
    return losses
