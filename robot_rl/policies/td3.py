"""FastTD3 (Seo et al., 2025, "FastTD3: Simple, Fast, and Capable RL for Humanoid Control").

TD3 (Fujimoto et al., 2018) made for thousands of parallel sub-envs: a deterministic actor explored with a
per-env noise scale (:mod:`robot_rl.policies.td3_networks`), target policy smoothing (clipped Gaussian noise on
the target action), clipped double Q and delayed actor updates, with FastTD3's changes:

- a distributional C51 critic pair (:mod:`robot_rl.policies.distributional`) trained by cross-entropy to the
  projected target, clipped double Q choosing per row the member with the lower mean;
- large batches and few updates per vectorised step (``updates_per_step`` for all sub-envs together), a
  replay laid out ``[num_envs, capacity]`` on the learner's device (:mod:`robot_rl.replay.device_ring`);
- no target actor (the smoothed target action comes from the online actor), a fast Polyak rate (τ = 0.1),
  AdamW with weight decay, observation normalisation, optional bf16 autocast and ``torch.compile``.

The paper's GPU settings, as overrides (``robot-rl train --algo fasttd3 …``)::

    task.num_envs=4096 algo.batch_size=32768 algo.updates_per_step=2 algo.actor_hidden=[512,256,128]
    algo.critic_hidden=[1024,512,256] algo.buffer_size=41943040 algo.amp=true algo.compile=true
    algo.compile_mode=reduce-overhead run.device=cuda

(FastTD3 keeps 10,240 steps per sub-env: 4096 × 10,240 here). The defaults (the shared fields are in
:class:`~robot_rl.policies.fast_offpolicy.FastOffPolicyConfig`) are sized for a 2-core CPU instead: a batch of
32,768 through those networks takes seconds per update there. ``v_min``/``v_max`` must
cover the task's discounted returns; the paper uses ±10 for IsaacLab/Playground locomotion, ±250 for
HumanoidBench.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from robot_rl.core.config import ALGOS, ConfigError
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.distributional import cross_entropy
from robot_rl.policies.fast_offpolicy import FastOffPolicyConfig, FastOffPolicyLearner, nan_scalar
from robot_rl.policies.td3_networks import TD3Policy

__all__ = ["TD3Algorithm", "TD3Config", "TD3Policy"]


@ALGOS.register("fasttd3")
@dataclass
class TD3Config(FastOffPolicyConfig):
    """FastTD3: TD3 with a distributional critic for many parallel sub-envs (GPU settings in the module doc)."""

    policy_noise: float = 0.001
    """σ of target policy smoothing, in the unit action space (paper: 0.001; TD3: 0.2)."""
    noise_clip: float = 0.5
    """Target smoothing noise is clipped to ±this."""
    std_min: float = 0.001
    """Lowest per-env exploration noise scale σ_e (unit action space)."""
    std_max: float = 0.4
    """Highest per-env exploration noise scale σ_e (paper: 0.4; 0.8 for manipulation)."""
    noise_hold_steps: int = 100
    """Steps a sub-env keeps its σ_e on average before it is redrawn (the paper redraws at episode ends)."""
    policy_frequency: int = 2
    """The actor (delayed policy update) learns once every this many critic updates."""
    init_scale: float = 0.01
    """σ of the actor output layer's initial weights (near-zero first actions)."""

    def validate(self) -> None:
        """Raise ``ValueError`` on an impossible setting."""
        super().validate()
        if not 0.0 <= self.std_min <= self.std_max or self.noise_hold_steps < 1:
            raise ConfigError(f"need 0 <= std_min <= std_max and noise_hold_steps >= 1, got {self.std_min}, "
                              f"{self.std_max}, {self.noise_hold_steps}")
        if self.policy_frequency < 1 or self.policy_noise < 0 or self.noise_clip < 0:
            raise ConfigError("policy_frequency must be >= 1, policy_noise and noise_clip >= 0")

    def build(self, spec: EnvSpec, device: torch.device | str, seed: int) -> TD3Algorithm:
        """The learner for environments with ``spec``, its networks seeded by ``seed``."""
        return TD3Algorithm(self, spec, torch.device(device), seed)

    def build_policy(self, spec: EnvSpec, device: torch.device | str, seed: int = 0) -> TD3Policy:
        """The actor alone (no critics, no optimisers), initialised and its noise seeded from ``seed``."""
        self.validate()
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            return TD3Policy(spec, self, seed).to(device)


class TD3Algorithm(FastOffPolicyLearner):
    """The FastTD3 learner. ``self.actor`` is its own policy (act with it in-process)."""

    actor: TD3Policy
    cfg: TD3Config

    def __init__(self, cfg: TD3Config, spec: EnvSpec, device: torch.device, seed: int) -> None:
        super().__init__(cfg, spec, device, seed, cfg.build_policy(spec, device, seed))
        self.actor_optim = torch.optim.AdamW(self.actor.trunk.parameters(), lr=cfg.actor_lr,
                                             weight_decay=cfg.weight_decay, fused=device.type in ("cpu", "cuda"))
        self.num_actor_updates = 0
        self._last_actor_loss = nan_scalar(device)
        self._critic_loss = self._compiled(self.critic_loss)
        self._actor_loss = self._compiled(self.actor_loss)

    def target_action(self, next_features: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Target policy smoothing: ``clamp(μ(s') + clamp(σ·ε, ±noise_clip), ±1)`` for standard normal ``ε``.

        FastTD3 has no target actor: the online actor gives μ(s').
        """
        smoothing = (noise * self.cfg.policy_noise).clamp(-self.cfg.noise_clip, self.cfg.noise_clip)
        return (self.actor.unit_action(next_features) + smoothing).clamp(-1.0, 1.0)

    def critic_loss(self, features: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
                    discount: torch.Tensor, next_features: torch.Tensor,
                    noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cross-entropy loss, mean Q)``; ``discount`` = γ^m·(1 − terminated) per row (pure: noise is an input)."""
        # Target distribution: Z̄(s', ã') shifted by r + discount·z and projected onto the atoms, ã' smoothed.
        with torch.no_grad():
            next_action = self.target_action(next_features, noise)
            next_logits = self.critic_target(next_features, next_action)
            target = self.critic_target.target(next_logits, reward, discount, self.cfg.clipped_double_q)
        logits = self.critic(features, action)
        return cross_entropy(logits, target), self.critic.value(logits.detach()).mean()

    def actor_loss(self, features: torch.Tensor) -> torch.Tensor:
        """``−mean_b Q(s, μ(s))``, Q the lower of the two critics' means (or their average without clipped double Q).

        The critic's weights are detached: the backward pass computes no critic gradients at all.
        """
        q = self.critic.value(self.critic(features, self.actor.unit_action(features), detach_params=True))
        q_pi = q.min(dim=0).values if self.cfg.clipped_double_q else q.mean(dim=0)
        return -q_pi.mean()

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        """One critic step; the actor's every ``policy_frequency``-th; then the target critics."""
        features, next_features, action, discount = self.prepare(batch)
        noise = self.draw_noise((len(batch), self.actor.act_dim))
        self.mark_graph_step()
        with self.autocast():
            critic_loss, q_mean = self._critic_loss(features, action, batch.reward.float(), discount,
                                                    next_features, noise)
        self.step_critic(critic_loss)
        critic_loss, q_mean = critic_loss.detach().clone(), q_mean.clone()  # out of a CUDA graph's pool
        if self.num_updates % self.cfg.policy_frequency == 0:
            with self.autocast():
                actor_loss = self._actor_loss(features)
            aux = self.aux_loss()  # an extension's term, e.g. co-training's
            self.actor_optim.zero_grad(set_to_none=True)
            (actor_loss if aux is None else actor_loss + aux).backward()
            self.actor_optim.step()
            self._last_actor_loss = actor_loss.detach().clone()
            self.num_actor_updates += 1
        self.soft_update_targets()
        stats = torch.stack([critic_loss, self._last_actor_loss, q_mean]).tolist()  # one host sync
        return dict(zip(("critic_loss", "actor_loss", "q_mean"), stats))

    def extra_state(self) -> dict[str, Any]:
        """The actor's optimiser and update count."""
        return {"actor_optim": self.actor_optim.state_dict(), "num_actor_updates": self.num_actor_updates}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`extra_state` output."""
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.num_actor_updates = int(state["num_actor_updates"])
