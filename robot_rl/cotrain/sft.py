"""Stage 1: SFT warm start of any supported learner on a mix of real and simulated demonstrations.

Each step draws ``round(sft_real_fraction · B)`` rows from the real demos and the rest from the sim demos
and minimises the algorithm's supervised loss (:class:`~robot_rl.core.algorithm.SupervisedLoss`) with its own
Adam over the algorithm's ``supervised_parameters``. The algorithm fits its observation normalisers to the
demos first (``prepare_supervised``: PPO's and SAC's normalisers hold the demo statistics) and afterwards
moves whatever the RL stage anchors to the starting policy (``finish_supervised``: SAC's target encoder,
flow_ppo's KL-guard reference and critic encoder, hiors's reference).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from robot_rl.cotrain.aux import supervised
from robot_rl.cotrain.config import CotrainConfig
from robot_rl.cotrain.data import DemoSet

log = logging.getLogger(__name__)


def warm_start(algo: object, real: DemoSet, sim: DemoSet | None, cfg: CotrainConfig, seed: int) -> list[float]:
    """Run ``cfg.sft_steps`` mixed SFT steps on ``algo``'s actor; returns the loss of every step."""
    if cfg.sft_steps <= 0:
        return []
    if sim is None and cfg.sft_real_fraction < 1.0:
        log.info("cotrain: no sim_dataset; stage 1 trains on the real demonstrations only")
    n_real = cfg.sft_batch_size if sim is None else round(cfg.sft_real_fraction * cfg.sft_batch_size)
    n_sim = cfg.sft_batch_size - n_real
    learner = supervised(algo)
    for demos in [real] + ([sim] if sim is not None else []):
        learner.prepare_supervised(demos.obs)  # the policy's inputs must be normalised as the RL's will be
    params = learner.supervised_parameters()
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
            loss = learner.supervised_loss(obs, action, mask, gen, train_encoder=True)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(params, 10.0)
            opt.step()
            losses.append(float(loss.detach()))
    finally:
        for p, f in zip(params, flags, strict=True):
            p.requires_grad_(f)
            p.grad = None
    learner.finish_supervised()
    log.info("cotrain stage 1: %d SFT steps (%d real + %d sim rows per batch), loss %.4f → %.4f",
             cfg.sft_steps, n_real, n_sim, losses[0], losses[-1])
    return losses
