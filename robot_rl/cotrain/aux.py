"""The auxiliary supervised loss of stage 2, matched to the policy class, and the hook learners call.

Learners call :meth:`robot_rl.core.algorithm.Algorithm.aux_loss` once per gradient step of their actor
and add what it returns to the actor's loss. :class:`AuxLoss` is the co-training hook behind it: it
draws a batch from the **real** demonstrations only (its own generator) and returns
``λ(t) · L_sup(real batch)``, or ``None`` when ``λ(t) = 0`` — then nothing is sampled or computed,
so λ = 0 is plain RL bit for bit.

``L_sup`` by policy class (:func:`supervised_loss`):

- PPO (Gaussian): ``−mean log N(a; μ(s), σ²)`` — the BC negative log-likelihood;
- SAC (tanh-Gaussian): ``−mean log π(a|s)`` with ``u = atanh(a)`` and the tanh log-det; the features
  are detached in stage 2 (the critic trains the encoder, as in SAC's own actor loss);
- flow policies (``flow_ppo``, a bare :class:`~robot_rl.policies.flow.model.FlowVLAPolicy`): the
  rectified-flow matching loss on the target chunks.

Another algorithm plugs in by defining ``supervised_loss(obs, action, mask, generator, train_encoder)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from robot_rl.cotrain.config import CotrainConfig
from robot_rl.cotrain.data import DemoSet

#: Actions are pulled this far inside ±1 before ``atanh`` (a demo at the bound has no finite pre-image).
SQUASH_EPS = 1e-3


def _ppo_loss(algo: Any, obs: dict[str, torch.Tensor], action: torch.Tensor) -> torch.Tensor:
    from robot_rl.policies.ppo import gaussian_log_prob

    policy = algo.policy
    mean = policy.actor(policy.normalize(obs["state"].float()))
    return -gaussian_log_prob(action.reshape(mean.shape), mean, policy.log_std()).mean()


def _sac_loss(algo: Any, obs: dict[str, torch.Tensor], action: torch.Tensor, train_encoder: bool) -> torch.Tensor:
    actor = algo.actor
    features = actor.encoder(obs)
    if not train_encoder:
        features = features.detach()
    mean, log_std = actor.gaussian(features)
    a = ((action.reshape(mean.shape) - actor.action_bias) / actor.action_scale).clamp(-1 + SQUASH_EPS, 1 - SQUASH_EPS)
    u = torch.atanh(a)
    z = (u - mean) * torch.exp(-log_std)
    # log π(a|s) = log N(u; μ, σ²) − Σ log(1 − a²)  (the change of variables of a = tanh u)
    log_prob = (-0.5 * z.square() - log_std - 0.5 * math.log(2 * math.pi) - torch.log1p(-a.square())).sum(-1)
    return -log_prob.mean()


def flow_policy_of(algo: Any) -> nn.Module | None:
    """The :class:`FlowVLAPolicy` trained by ``algo`` (or ``algo`` itself), else ``None``."""
    from robot_rl.policies.flow.model import FlowVLAPolicy

    if isinstance(algo, FlowVLAPolicy):
        return algo
    policy = getattr(algo, "policy", None)
    return policy if isinstance(policy, FlowVLAPolicy) else None


def supervised_loss(algo: Any, obs: dict[str, torch.Tensor], action: torch.Tensor, mask: torch.Tensor | None,
                    generator: torch.Generator | None = None, train_encoder: bool = False) -> torch.Tensor:
    """The policy-matched supervised loss of (obs, action) rows (see the module docstring)."""
    custom = getattr(algo, "supervised_loss", None)
    if callable(custom):
        return custom(obs, action, mask, generator, train_encoder)  # type: ignore[no-any-return]
    flow = flow_policy_of(algo)
    if flow is not None:
        return flow.flow_matching_loss(obs, action, mask, generator)  # type: ignore[operator, no-any-return]
    from robot_rl.policies.ppo import PPOAlgorithm
    from robot_rl.policies.sac import SACAlgorithm

    if isinstance(algo, PPOAlgorithm):
        return _ppo_loss(algo, obs, action)
    if isinstance(algo, SACAlgorithm):
        return _sac_loss(algo, obs, action, train_encoder)
    raise TypeError(f"co-training has no supervised loss for {type(algo).__name__}; supported: ppo, sac, "
                    "flow_ppo (or define supervised_loss(obs, action, mask, generator, train_encoder) on it)")


class AuxLoss:
    """The stage-2 hook: ``λ(t) · L_sup`` on a real batch per call (``t`` = the learner's update count)."""

    def __init__(self, cfg: CotrainConfig, real: DemoSet, progress: Callable[[], int], seed: int) -> None:
        self.cfg = cfg
        self.real = real
        self.progress = progress
        device = real.action.device
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.calls = 0
        self.weight = cfg.weight_at(0)
        self._sum = torch.zeros((), device=device)
        self._count = 0

    def __call__(self, algo: Any) -> torch.Tensor | None:
        """``λ·L_sup(real batch)``, or ``None`` (nothing drawn) when ``λ(t) = 0``."""
        self.weight = self.cfg.weight_at(self.progress())
        if self.weight == 0.0:
            return None
        obs, action, mask = self.real.sample(self.cfg.batch_size, self.generator)
        loss = supervised_loss(algo, obs, action, mask, self.generator, train_encoder=False)
        self.calls += 1
        self._sum += loss.detach()
        self._count += 1
        return self.weight * loss

    def pop_stats(self) -> dict[str, float]:
        """λ now and the mean unweighted aux loss since the last call (one host sync)."""
        out = {"cotrain/lambda": float(self.weight)}
        if self._count:
            out["cotrain/aux_loss"] = float(self._sum) / self._count
            self._sum.zero_()
            self._count = 0
        return out
