"""FastSAC: SAC's stochastic actor on the FastTD3 recipe (Seo et al., 2025).

Everything but the actor is FastTD3's (:mod:`robot_rl.policies.fast_offpolicy`): the C51 critic pair with
LayerNorm trained by cross-entropy, the ``[num_envs, capacity]`` device replay, few large-batch updates per
vectorised step, fast Polyak averaging, AdamW, observation normalisation. The actor is SAC's tanh-squashed
Gaussian with learned σ (exploration comes from the policy itself, not from per-env noise scales), and the target
is the soft one:

    Z_target = r + γ^m·(1 − terminated)·(Z̄(s', a') − α·log π(a'|s')),    a' ~ π(·|s'),

which for a categorical Z̄ is the projection (:func:`~robot_rl.policies.distributional.categorical_projection`) of
``Z̄``'s atoms shifted by ``r − discount·α·log π(a'|s')`` and scaled by ``discount`` per row. The temperature α
tracks ``target_entropy`` as in :mod:`robot_rl.policies.sac`. State observations only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from robot_rl.core.algorithm import MLPActorParts
from robot_rl.core.config import ALGOS, ConfigError
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs, TransitionBatch
from robot_rl.policies.distributional import cross_entropy
from robot_rl.policies.fast_offpolicy import (
    ActorWithEncoder,
    FastOffPolicyConfig,
    FastOffPolicyLearner,
    action_affine,
    nan_scalar,
    state_encoder,
)
from robot_rl.policies.modules.mlp import MLP
from robot_rl.policies.sac_networks import squashed_mean_error, squashed_sample

__all__ = ["FastSACAlgorithm", "FastSACConfig", "FastSACPolicy"]

@ALGOS.register("fastsac")
@dataclass
class FastSACConfig(FastOffPolicyConfig):
    """FastSAC: SAC's squashed-Gaussian actor with FastTD3's distributional critic and large-batch recipe."""

    init_temperature: float = 0.01
    """Initial entropy coefficient α (small: with many sub-envs the replay is diverse without much entropy)."""
    target_entropy: float | None = None
    """Entropy target H̄ for the temperature (``null`` = −|A|/2)."""
    temperature_lr: float = 3e-4
    """Adam learning rate of log α."""
    autotune_entropy: bool = True
    """Learn α so that the policy entropy tracks ``target_entropy``; otherwise α stays fixed."""
    log_std_min: float = -5.0
    """Lower bound of the actor's log σ."""
    log_std_max: float = 0.0
    """Upper bound of the actor's log σ (σ ≤ 1 in the pre-tanh space: wider only saturates tanh)."""
    policy_frequency: int = 1
    """The actor and α learn once every this many critic updates."""

    def validate(self) -> None:
        """Raise ``ValueError`` on an impossible setting."""
        super().validate()
        if not self.log_std_min < self.log_std_max or self.init_temperature <= 0 or self.policy_frequency < 1:
            raise ConfigError("need log_std_min < log_std_max, init_temperature > 0 and policy_frequency >= 1")

    def build(self, spec: EnvSpec, device: torch.device | str, seed: int) -> FastSACAlgorithm:
        """The learner for environments with ``spec``, its networks seeded by ``seed``."""
        return FastSACAlgorithm(self, spec, torch.device(device), seed)

    def build_policy(self, spec: EnvSpec, device: torch.device | str, seed: int = 0) -> FastSACPolicy:
        """The actor alone (no critics, no optimisers), initialised and its sampling seeded from ``seed``."""
        self.validate()
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            return FastSACPolicy(spec, self, seed).to(device)


class FastSACPolicy(ActorWithEncoder):
    """``a = tanh(u)·scale + bias``, ``u ~ N(μ(s), σ(s))`` over normalised state; ``state_dict`` = the actor weights."""

    action_scale: torch.Tensor
    action_bias: torch.Tensor

    def __init__(self, spec: EnvSpec, cfg: FastSACConfig, seed: int = 0) -> None:
        super().__init__()
        self.action_shape = spec.action.shape
        self.act_dim = math.prod(spec.action.shape)
        self.encoder = state_encoder(spec, cfg.normalize_obs, "fastsac")
        self.trunk = MLP(self.encoder.out_dim, cfg.actor_hidden, 2 * self.act_dim)
        scale, bias = action_affine(spec, self.act_dim)
        self.register_buffer("action_scale", scale)
        self.register_buffer("action_bias", bias)
        self.log_std_min, self.log_std_max = cfg.log_std_min, cfg.log_std_max
        self._seed = seed
        self._generator: torch.Generator | None = None

    def reseed(self, seed: int) -> None:
        """Restart the sampling noise from ``seed``."""
        self._seed, self._generator = seed, None

    def gaussian(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log σ ``[B, |A|]`` of the pre-tanh Gaussian (log σ squashed smoothly into its bounds)."""
        mean, log_std = self.trunk(features).float().chunk(2, dim=-1)
        lo, hi = self.log_std_min, self.log_std_max
        return mean, lo + 0.5 * (hi - lo) * (torch.tanh(log_std) + 1.0)

    def sample(self, features: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised ``a = tanh(μ + σ·ε) ∈ [-1, 1]^{|A|}`` and ``log π(a|s)`` for noise ε ``[B, |A|]``.

        ``log π = Σ_i [−ε_i²/2 − log σ_i − log(2π)/2 − log(1 − tanh² u_i)]``, the last term in the stable form
        ``2·(log 2 − u − softplus(−2u))``.
        """
        return squashed_sample(*self.gaussian(features), noise)

    def data_loss(self, features: torch.Tensor, unit_action: torch.Tensor) -> torch.Tensor:
        """``‖tanh μ(s) − a‖²`` per row of demonstrated unit-space actions.

        Not the likelihood: it fails on actions at the bound
        (:func:`~robot_rl.policies.sac_networks.squashed_mean_error`).
        """
        return squashed_mean_error(self.gaussian(features)[0], unit_action)

    def to_env(self, unit: torch.Tensor) -> torch.Tensor:
        """A unit-space action ``[B, |A|]`` in the env's bounds, ``[B, *action_shape]``."""
        return (unit * self.action_scale + self.action_bias).reshape(-1, *self.action_shape)

    def to_unit(self, action: torch.Tensor) -> torch.Tensor:
        """Env actions ``[B, *action_shape]`` back to ``[-1, 1]^{|A|}``, clamped (a replayed action may be a bound)."""
        return ((action.reshape(action.shape[0], -1) - self.action_bias) / self.action_scale).clamp(-1.0, 1.0)

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Actions ``[N, *action_shape]`` in the spec's bounds (``tanh μ`` when deterministic); no extras."""
        if deterministic:
            return self.deterministic_action(obs), {}
        features = self.encoder(obs)
        gen = self._generator
        if gen is None or gen.device != features.device:
            gen = self._generator = torch.Generator(device=features.device).manual_seed(self._seed)
        noise = torch.randn((features.shape[0], self.act_dim), generator=gen, device=features.device)
        return self.to_env(self.sample(features, noise)[0]), {}

    def deterministic_action(self, obs: Obs) -> torch.Tensor:
        """``tanh(μ(s))·scale + bias`` → ``[N, *action_shape]`` (what export traces)."""
        return self.to_env(torch.tanh(self.gaussian(self.encoder(obs))[0]))

    def mlp_parts(self) -> MLPActorParts:
        """Normaliser, MLP (its first ``|A|`` outputs are μ) and ``tanh_scale``: the C exporter's view."""
        return MLPActorParts(self.encoder.state_dim, self.encoder.normalizer, self.trunk, self.act_dim, "tanh_scale",
                             self.action_scale, self.action_bias, tuple(self.action_shape))


class FastSACAlgorithm(FastOffPolicyLearner):
    """The FastSAC learner. ``self.actor`` is its own policy (act with it in-process)."""

    actor: FastSACPolicy
    cfg: FastSACConfig

    def __init__(self, cfg: FastSACConfig, spec: EnvSpec, device: torch.device, seed: int) -> None:
        super().__init__(cfg, spec, device, seed, cfg.build_policy(spec, device, seed))
        fused = device.type in ("cpu", "cuda")
        self.log_alpha = torch.tensor(math.log(cfg.init_temperature), device=device, requires_grad=True)
        self.target_entropy = float(cfg.target_entropy if cfg.target_entropy is not None else -self.actor.act_dim / 2)
        # log α in the actor's optimiser, without weight decay: one optimiser step fewer per update.
        self.actor_optim = torch.optim.AdamW(
            [{"params": list(self.actor.trunk.parameters()), "lr": cfg.actor_lr, "weight_decay": cfg.weight_decay},
             {"params": [self.log_alpha], "lr": cfg.temperature_lr, "weight_decay": 0.0}], fused=fused)
        self.num_actor_updates = 0
        self._last = (nan_scalar(device), nan_scalar(device))  # actor loss, entropy of the last actor update
        self._critic_loss = self._compiled(self.critic_loss)
        self._actor_loss = self._compiled(self.actor_loss)

    def critic_loss(self, features: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
                    discount: torch.Tensor, next_features: torch.Tensor, noise: torch.Tensor,
                    alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cross-entropy loss, mean Q)`` to the soft target (module docstring); pure: noise and α are inputs."""
        with torch.no_grad():
            next_action, next_log_prob = self.actor.sample(next_features, noise)
            next_logits = self.critic_target(next_features, next_action)
            soft_reward = reward - discount * alpha * next_log_prob
            target = self.critic_target.target(next_logits, soft_reward, discount, self.cfg.clipped_double_q)
        logits = self.critic(features, action)
        return cross_entropy(logits, target), self.critic.value(logits.detach()).mean()

    def actor_loss(self, features: torch.Tensor, noise: torch.Tensor,
                   alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean_b [α·log π(ã|s) − Q(s, ã)], detached log π)``, ã reparameterised; critic weights detached."""
        action, log_prob = self.actor.sample(features, noise)
        q = self.critic.value(self.critic(features, action, detach_params=True))
        q_pi = q.min(dim=0).values if self.cfg.clipped_double_q else q.mean(dim=0)
        return (alpha * log_prob - q_pi).mean(), log_prob.detach()

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        """One critic step; the actor's and α's every ``policy_frequency``-th; then the target critics."""
        features, next_features, action, discount = self.prepare(batch)
        noise = self.draw_noise((2, len(batch), self.actor.act_dim), dim=1)
        alpha = self.log_alpha.detach().exp()
        self.mark_graph_step()
        with self.autocast():
            critic_loss, q_mean = self._critic_loss(features, action, batch.reward.float(), discount,
                                                    next_features, noise[0], alpha)
        self.step_critic(critic_loss)
        critic_loss, q_mean = critic_loss.detach().clone(), q_mean.clone()  # out of a CUDA graph's pool
        if self.num_updates % self.cfg.policy_frequency == 0:
            with self.autocast():
                actor_loss, log_prob = self._actor_loss(features, noise[1], alpha)
            aux = self.aux_loss()
            self.actor_optim.zero_grad(set_to_none=True)
            (actor_loss if aux is None else actor_loss + aux).backward()
            # ∂/∂log α of −log α·(mean log π + H̄), written straight into .grad (as SAC does).
            if self.cfg.autotune_entropy:
                self.log_alpha.grad = -(self.batch_mean(log_prob) + self.target_entropy).reshape(self.log_alpha.shape)
            self.actor_optim.step()
            self._last = (actor_loss.detach().clone(), -log_prob.mean())
            self.num_actor_updates += 1
        self.soft_update_targets()
        stats = torch.stack([critic_loss, self._last[0], q_mean, alpha, self._last[1]]).tolist()  # one host sync
        return dict(zip(("critic_loss", "actor_loss", "q_mean", "alpha", "entropy"), stats))

    def extra_state(self) -> dict[str, Any]:
        """The actor's optimiser (with log α's), log α and the actor update count."""
        return {"actor_optim": self.actor_optim.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
                "num_actor_updates": self.num_actor_updates}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`extra_state` output."""
        self.actor_optim.load_state_dict(state["actor_optim"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.num_actor_updates = int(state["num_actor_updates"])
