"""PPO for many parallel environments, after rsl_rl (Schulman et al. 2017, arXiv:1707.06347).

The actor is a Gaussian with a state-dependent mean (an MLP over normalised ``state``) and a learnable,
state-independent standard deviation (log σ, or σ itself as in rsl_rl). The critic is a separate MLP
over the same normalised observation; it stays in the learner.

Actions and log-probabilities. The policy samples ``u ~ N(μ(s), σ²)`` and returns ``clamp(u, low, high)``
as the action, so the env, the transition's ``action`` field and the safety layer all see what was
applied. The unclamped sample travels in ``extras["raw_action"]`` with ``extras["log_prob"] = log π(u|s)``
and the Gaussian mean ``extras["mean"]`` (for the KL); the learner's ratio uses the raw sample, so
clamping never biases the gradient (rsl_rl gets the same by storing the raw sample and letting the env
clip). Rows a human drove (``intervened``) use the applied action, scored under the policy at update time.

Asynchronous actors (``loop.on_policy_sync=false``). Rows may come from weights up to ``loop.max_staleness``
versions behind the learner's (:meth:`RolloutStorage.behind`); the update is then decoupled PPO
(:mod:`robot_rl.policies.decoupled_ppo`): the clip's proximal policy is the learner's at the start of the update,
and each row is weighted by the clipped ``π_prox/π_behaviour``. On-policy rows weigh exactly 1, so a synchronous
rollout gives the same PPO step as before, bit for bit.

Values are not computed by actors: ``update`` evaluates ``V(obs)`` for the whole rollout in one batched
pass (the weights have not changed since the rollout started) and ``V(next_obs)`` where the successor is
not already a stored observation. That keeps the critic out of the actor weights and gives the exact
value of each truncated episode's final observation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from robot_rl.core.algorithm import MLPActorParts, OnPolicyAlgorithm, Policy, Weights
from robot_rl.core.config import ALGOS, AlgoConfig, ConfigError
from robot_rl.core.data_parallel import DataParallel, moments
from robot_rl.core.extras import LOG_PROB, MEAN, RAW_ACTION
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs
from robot_rl.policies.decoupled_ppo import decoupled_surrogate_loss
from robot_rl.policies.modules.mlp import MLP
from robot_rl.policies.modules.normalizer import RunningNormalizer
from robot_rl.replay.rollout import RolloutStorage, compute_gae, iter_minibatches

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@ALGOS.register("ppo")
@dataclass
class PPOConfig(AlgoConfig):
    """Proximal policy optimisation with GAE, clipped value loss and a KL-adaptive learning rate."""

    rollout_length: int = 24
    """Steps collected per sub-env before each update (rsl_rl's ``num_steps_per_env``)."""
    num_epochs: int = 5
    """Passes over the rollout per update."""
    num_minibatches: int = 4
    """Minibatches per epoch; each holds ``rollout_length × num_envs / num_minibatches`` rows."""
    clip: float = 0.2
    """Surrogate clip ε: the probability ratio is kept in ``[1 − ε, 1 + ε]``."""
    use_clipped_value_loss: bool = True
    """Clip the value update around the rollout's values (``value_clip``) as in rsl_rl."""
    value_clip: float = 0.2
    """How far the new value may move from the rollout's value before the loss stops rewarding it."""
    gamma: float = 0.99
    """Discount factor."""
    lam: float = 0.95
    """GAE λ (0 = one-step TD advantage, 1 = Monte-Carlo)."""
    lr: float = 1e-3
    """Initial Adam learning rate (the ``adaptive`` schedule changes it)."""
    schedule: Literal["adaptive", "fixed"] = "adaptive"
    """``adaptive``: scale the learning rate by the KL of each minibatch step; ``fixed``: keep ``lr``."""
    desired_kl: float = 0.01
    """KL target of the adaptive schedule: above 2× it the lr shrinks by 1.5, below ½× it grows by 1.5."""
    min_lr: float = 1e-5
    """Lower bound of the adaptive learning rate."""
    max_lr: float = 1e-2
    """Upper bound of the adaptive learning rate."""
    entropy_coef: float = 0.005
    """Weight of the entropy bonus."""
    value_coef: float = 1.0
    """Weight of the value loss."""
    max_grad_norm: float = 1.0
    """Clip the gradient norm of the actor and of the critic (each separately) to this."""
    init_noise_std: float = 1.0
    """Initial standard deviation of the Gaussian action noise."""
    noise_std_type: Literal["scalar", "log"] = "log"
    """Learn ``log σ`` (``log``: σ stays positive, steps are relative) or σ itself (``scalar``, rsl_rl's
    default, clamped at 1e-6)."""
    actor_hidden: tuple[int, ...] = (256, 256, 256)
    """Hidden layer widths of the actor MLP."""
    critic_hidden: tuple[int, ...] = (256, 256, 256)
    """Hidden layer widths of the critic MLP."""
    activation: str = "elu"
    """Activation of both MLPs (relu, elu, tanh, gelu, silu)."""
    normalize_obs: bool = True
    """Normalise observations by running mean/std (updated by the learner after each update)."""
    normalize_advantage_per_minibatch: bool = False
    """Normalise advantages within each minibatch instead of once over the whole rollout."""
    behaviour_ratio_clip: float = 2.0
    """Asynchronous actors (``loop.on_policy_sync=false``): clip of the importance weight ``π_prox/π_behaviour``
    of rows acted by older weights (decoupled PPO); bounds how much one stale row can weigh."""

    def build(self, spec: EnvSpec, device: torch.device | str, seed: int) -> PPOAlgorithm:
        """Build the PPO learner for envs with ``spec``."""
        return PPOAlgorithm(self, spec, device, seed)

    def build_policy(self, spec: EnvSpec, device: torch.device | str, seed: int = 0) -> PPOPolicy:
        """The actor alone (normaliser, Gaussian; no critic, no optimiser); ``seed`` seeds its init and its noise."""
        device = torch.device(device)
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            policy = ppo_policy(self, spec, torch.Generator(device=device).manual_seed(seed))
        return policy.to(device)


# --------------------------------------------------------------------------------------------
# Gaussian helpers (diagonal, summed over every action dimension)
# --------------------------------------------------------------------------------------------


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """``log N(x; μ, σ²) = Σ_i −½((x_i − μ_i)/σ_i)² − log σ_i − ½ log 2π`` over the last axis → ``[B]``."""
    z = (x - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - _LOG_SQRT_2PI).sum(-1)


def gaussian_kl(mean_p: torch.Tensor, log_std_p: torch.Tensor, mean_q: torch.Tensor,
                log_std_q: torch.Tensor) -> torch.Tensor:
    """``KL(p‖q) = Σ_i log(σ_q/σ_p) + (σ_p² + (μ_p − μ_q)²)/(2σ_q²) − ½`` over the last axis → ``[B]``."""
    var_ratio = torch.exp(2.0 * (log_std_p - log_std_q))
    mean_term = (mean_p - mean_q).square() * torch.exp(-2.0 * log_std_q)
    return (log_std_q - log_std_p + 0.5 * (var_ratio + mean_term) - 0.5).sum(-1)


def adaptive_lr(lr: float, kl: float, desired_kl: float, min_lr: float = 1e-5, max_lr: float = 1e-2) -> float:
    """rsl_rl's rule: ``kl > 2·d → lr/1.5``, ``0 < kl < d/2 → lr·1.5``, clamped to ``[min_lr, max_lr]``."""
    if kl > 2.0 * desired_kl:
        return max(min_lr, lr / 1.5)
    if 0.0 < kl < 0.5 * desired_kl:
        return min(max_lr, lr * 1.5)
    return lr


def clipped_surrogate_loss(log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor,
                           clip: float) -> torch.Tensor:
    """``L = mean(max(−A·ρ, −A·clip(ρ, 1−ε, 1+ε)))`` with ``ρ = exp(log π − log π_old)``."""
    ratio = torch.exp(log_prob - old_log_prob)
    return torch.max(-advantages * ratio, -advantages * ratio.clamp(1.0 - clip, 1.0 + clip)).mean()


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               clip: float | None) -> torch.Tensor:
    """``mean(max((V − R)², (V_old + clip(V − V_old, ±c) − R)²))``, or ``mean((V − R)²)`` if ``clip`` is None.

    The max makes the loss pessimistic: moving V beyond ``V_old ± c`` toward R earns nothing.
    """
    loss = (values - returns).square()
    if clip is None:
        return loss.mean()
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    return torch.max(loss, (clipped - returns).square()).mean()


# --------------------------------------------------------------------------------------------
# Policy (actor side)
# --------------------------------------------------------------------------------------------


def _state_dim(spec: EnvSpec) -> int:
    extra = sorted(set(spec.observation) - {"state"})
    if "state" not in spec.observation or extra:
        what = f"this task also observes {extra}" if extra else "this task has no 'state' observation"
        raise ConfigError(f"PPO takes a flat 'state' observation only; {what}. Train a camera task with SAC "
                          "(--algo sac, which encodes images), or pick a state task (robot-rl tasks)")
    shape = spec.observation["state"].shape
    if len(shape) != 1:
        raise ValueError(f"PPO needs a flat 'state' [D], got {list(shape)}")
    return shape[0]


class PPOPolicy(Policy):
    """Observation normaliser + Gaussian actor; ``act`` returns the clamped action and the raw sample.

    ``extras``: ``log_prob`` ``[N]`` (of the raw sample), ``raw_action`` and ``mean``
    ``[N, *action_shape]``.
    """

    def __init__(self, spec: EnvSpec, hidden: tuple[int, ...], activation: str, init_noise_std: float,
                 normalize_obs: bool, noise_std_type: str = "log",
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        obs_dim = _state_dim(spec)
        self.action_shape = spec.action.shape
        self.low, self.high = spec.action.low, spec.action.high
        act_dim = math.prod(self.action_shape)
        self.normalizer: nn.Module = RunningNormalizer(obs_dim) if normalize_obs else nn.Identity()
        self.actor = MLP(obs_dim, hidden, act_dim, activation)
        if noise_std_type not in ("scalar", "log"):
            raise ValueError(f"noise_std_type must be 'scalar' or 'log', got {noise_std_type!r}")
        self.std_is_log = noise_std_type == "log"
        init = math.log(init_noise_std) if self.std_is_log else init_noise_std
        self.std_param = nn.Parameter(torch.full((act_dim,), init))
        self.generator = generator

    def log_std(self) -> torch.Tensor:
        """``log σ`` ``[A]`` (differentiable)."""
        if self.std_is_log:
            return self.std_param
        # A plain σ parameter can be pushed through zero by a step; the clamp keeps σ ≥ 1e-6.
        return self.std_param.clamp_min(1e-6).log()

    def normalize(self, state: torch.Tensor) -> torch.Tensor:
        """The actor's (and critic's) input: normalised ``state``."""
        return self.normalizer(state)

    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(clamp(u, low, high), {"log_prob": log π(u|s), "raw_action": u, "mean": μ})``, ``u ~ N(μ, σ²)``."""
        with torch.no_grad():
            mean = self.actor(self.normalize(obs["state"]))
            log_std = self.log_std()
            if deterministic:
                raw = mean
            else:
                noise = torch.randn(mean.shape, device=mean.device, dtype=mean.dtype,
                                    generator=self.generator)
                raw = mean + noise * torch.exp(log_std)
            log_prob = gaussian_log_prob(raw, mean, log_std)
            shape = (raw.shape[0], *self.action_shape)
            raw, mean = raw.reshape(shape), mean.reshape(shape)
            bounded = self.low is not None or self.high is not None
            action = raw.clamp(self.low, self.high) if bounded else raw
        return action, {LOG_PROB.name: log_prob, RAW_ACTION.name: raw, MEAN.name: mean}


    def deterministic_action(self, obs: Obs) -> torch.Tensor:
        """The Gaussian mean clamped to the bounds, ``clamp(μ(s), low, high)`` → ``[N, *action_shape]``."""
        mean = self.actor(self.normalize(obs["state"])).reshape(-1, *self.action_shape)
        return mean.clamp(self.low, self.high) if self.low is not None or self.high is not None else mean

    def mlp_parts(self) -> MLPActorParts:
        """Normaliser, actor MLP and ``clamp`` (``identity`` without bounds)."""
        act_dim = math.prod(self.action_shape)
        low = torch.full((act_dim,), -math.inf if self.low is None else float(self.low))
        high = torch.full((act_dim,), math.inf if self.high is None else float(self.high))
        norm = self.normalizer if isinstance(self.normalizer, RunningNormalizer) else None
        bounded = self.low is not None or self.high is not None
        return MLPActorParts(_first_linear(self.actor).in_features, norm, self.actor, act_dim,
                             "clamp" if bounded else "identity", low, high, tuple(self.action_shape))


def _first_linear(mlp: nn.Module) -> nn.Linear:
    return next(m for m in mlp.modules() if isinstance(m, nn.Linear))


def ppo_policy(cfg: PPOConfig, spec: EnvSpec, generator: torch.Generator | None) -> PPOPolicy:
    """A fresh :class:`PPOPolicy` for ``cfg`` (on the CPU; its sampling noise from ``generator``)."""
    return PPOPolicy(spec, cfg.actor_hidden, cfg.activation, cfg.init_noise_std, cfg.normalize_obs,
                     cfg.noise_std_type, generator)


# --------------------------------------------------------------------------------------------
# Algorithm (learner side)
# --------------------------------------------------------------------------------------------


class PPOTrainForward(nn.Module):
    """What one PPO minibatch step evaluates: the actor's mean, the log-std and the critic's value.

    One module so that DistributedDataParallel sees every trained parameter (σ lives outside the actor MLP).
    """

    def __init__(self, policy: PPOPolicy, critic: nn.Module) -> None:
        super().__init__()
        self.policy, self.critic = policy, critic

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(mean, log_std, value)`` for normalised observations."""
        return self.policy.actor(obs), self.policy.log_std(), self.critic(obs).squeeze(-1)


class PPOAlgorithm(OnPolicyAlgorithm):
    """The PPO learner: actor (+ normaliser, σ), critic, Adam, KL-adaptive learning rate."""

    corrects_staleness = True

    def __init__(self, cfg: PPOConfig, spec: EnvSpec, device: torch.device | str, seed: int) -> None:
        self.cfg = cfg
        self.spec = spec
        self.device = torch.device(device)
        self.seed = seed
        self.rollout_length = cfg.rollout_length
        self.lr = cfg.lr
        self._policies_made = 0
        # Seed the initialisation without touching the caller's global RNG streams.
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)  # the CPU stream only: modules start on the CPU
            self.policy = self._new_policy(None).to(self.device)
            self.critic = MLP(_state_dim(spec), cfg.critic_hidden, 1, cfg.activation).to(self.device)
        params = [*self.policy.parameters(), *self.critic.parameters()]
        # The fused kernel is one call per step instead of a dozen small ops per parameter tensor.
        self.optimizer = torch.optim.Adam(params, lr=cfg.lr, fused=self.device.type in ("cpu", "cuda"))
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.data_parallel: DataParallel | None = None
        self._forward: nn.Module = PPOTrainForward(self.policy, self.critic)

    def enable_data_parallel(self, dp: DataParallel) -> None:
        """Average gradients (DDP), advantage moments, KL and normaliser statistics over ``dp``'s ranks.

        Every rank must start from the same weights: DDP copies rank 0's parameters to the others here.
        """
        self.data_parallel = dp
        self._forward = dp.wrap(PPOTrainForward(self.policy, self.critic))
        self.seed += 100_003 * dp.rank  # the actors' noise (make_policy): equal on every rank, it would repeat

    def _new_policy(self, generator: torch.Generator | None) -> PPOPolicy:
        return ppo_policy(self.cfg, self.spec, generator)

    def make_policy(self) -> PPOPolicy:
        """An independent actor copy with its own noise generator (seeded from the run seed)."""
        self._policies_made += 1
        gen = torch.Generator(device=self.device).manual_seed(self.seed * 1_000_003 + self._policies_made)
        policy = self._new_policy(gen).to(self.device)
        policy.load_actor_weights(self.policy.state_dict())
        return policy

    def make_storage(self, num_envs: int) -> RolloutStorage:
        """A ``[rollout_length, num_envs]`` rollout on the learner's device."""
        return RolloutStorage(self.spec, num_envs, self.cfg.rollout_length, self.device)

    def actor_weights(self) -> Weights:
        """Normaliser statistics, actor MLP and log-std (detached CPU copies); no critic, no optimiser."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.policy.state_dict().items()}

    def load_actor_weights(self, weights: Weights) -> None:
        """Load actor weights (strict) into the learner's actor."""
        self.policy.load_actor_weights(weights)

    # ---- supervised learning (co-training, SFT): robot_rl.core.algorithm.SupervisedLoss -------------

    def supervised_loss(self, obs: Obs, action: torch.Tensor, mask: torch.Tensor | None = None,
                        generator: torch.Generator | None = None, train_encoder: bool = False) -> torch.Tensor:
        """Behaviour cloning: ``−mean_b log N(a_b; μ(s_b), σ²)`` for demonstrated actions ``[B, *A]``.

        ``mask``, ``generator`` and ``train_encoder`` are not used (one action per row, no noise, no encoder).
        """
        policy = self.policy
        mean = policy.actor(policy.normalize(obs["state"].float()))
        return -gaussian_log_prob(action.reshape(mean.shape), mean, policy.log_std()).mean()

    def supervised_parameters(self) -> list[nn.Parameter]:
        """The actor MLP and its log-std (the normaliser's statistics are buffers)."""
        return list(self.policy.parameters())

    def prepare_supervised(self, obs: Obs) -> None:
        """Fold the demos' ``state`` into the observation normaliser (the policy's inputs must be the RL's)."""
        if isinstance(self.policy.normalizer, RunningNormalizer):
            self.policy.normalizer.update(obs["state"].float())

    def finish_supervised(self) -> None:
        """Nothing follows the actor: the critic learns its values from the first rollout."""

    def _set_lr(self, lr: float) -> None:
        self.lr = lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    @torch.no_grad()
    def value_targets(self, storage: RolloutStorage, obs_normalized: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(V(s_t), A_t, R_t)`` ``[T, N]`` for a full rollout under the current critic.

        ``V(s'_t)`` is the value of ``next_obs`` (the true successor, the final observation where an
        episode ended), so truncated steps bootstrap from the right state (see ``compute_gae``).
        """
        norm, critic = self.policy.normalize, self.critic
        obs, nxt = storage.obs["state"], storage.next_obs["state"]
        values = critic(norm(obs) if obs_normalized is None else obs_normalized).squeeze(-1)
        # Where an episode goes on inside the rollout, next_obs[t] is obs[t + 1] (same column, next
        # step) and V(s'_t) = values[t + 1] is known already. The critic runs only on the other
        # successors: episode ends, the last step, and any row where the two differ (checked).
        fresh = torch.ones_like(storage.done)
        fresh[:-1] = storage.done[:-1] | (nxt[:-1] != obs[1:]).any(-1)
        next_values = torch.zeros_like(values)
        next_values[:-1] = values[1:]
        rows = fresh.nonzero(as_tuple=True)
        next_values[rows] = critic(norm(nxt[rows])).squeeze(-1)
        advantages, returns = compute_gae(storage.reward, values, next_values, storage.terminated,
                                          storage.done, self.cfg.gamma, self.cfg.lam)
        return values, advantages, returns

    @torch.no_grad()
    def _rollout_fields(self, storage: RolloutStorage) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The ``[T, N, ...]`` tensors the minibatches draw from, and the log-std they were scored with."""
        c, policy = self.cfg, self.policy
        # The normaliser is fixed during the update (its stats move only at the end), so the
        # inputs are normalised once for every epoch.
        obs = policy.normalize(storage.obs["state"])
        values, advantages, returns = self.value_targets(storage, obs)
        if not c.normalize_advantage_per_minibatch:
            adv_mean, adv_std = moments(advantages, self.data_parallel)
            advantages = (advantages - adv_mean) / (adv_std + 1e-8)
        flat = (*storage.reward.shape, policy.std_param.numel())
        old_mean = storage.extras[MEAN.name].reshape(flat) if MEAN.name in storage.extras else policy.actor(obs)
        old_log_std = policy.log_std().detach().clone()
        raw = storage.extras.get(RAW_ACTION.name, storage.action).reshape(flat)
        raw = torch.where(storage.intervened.unsqueeze(-1), storage.action.reshape(flat), raw)
        # A human's action was not sampled by the policy: score it under the pre-update policy.
        scored = gaussian_log_prob(raw, old_mean, old_log_std)
        stored = storage.extras.get(LOG_PROB.name)
        behaviour = scored if stored is None else torch.where(storage.intervened, scored, stored)
        prox_mean, prox = old_mean, behaviour
        behind = storage.behind()
        if behind is not None:
            # Rows acted by older weights: the proximal policy is the learner's own (decoupled PPO); a
            # human's row there is scored under it on both sides (weight 1: the policy did not act it).
            stale = behind > 0
            current_mean = policy.actor(obs)
            current = gaussian_log_prob(raw, current_mean, old_log_std)
            prox_mean = torch.where(stale.unsqueeze(-1), current_mean, old_mean)
            prox = torch.where(stale, current, behaviour)
            behaviour = torch.where(stale & storage.intervened, current, behaviour)
        return {"obs": obs, "action": raw, "old_log_prob": prox, "behaviour_log_prob": behaviour,
                "old_mean": prox_mean, "old_value": values, "advantage": advantages, "return": returns}, old_log_std

    def update(self, batch: RolloutStorage) -> dict[str, float]:
        """Learn from a full rollout, then clear it. Returns mean losses, entropy, KL, lr and noise std."""
        storage, c = batch, self.cfg
        if not storage.is_full():
            raise RuntimeError(f"PPO update needs a full rollout; it holds {len(storage)} of "
                               f"{storage.length * storage.num_envs} rows")
        policy, critic, dp = self.policy, self.critic, self.data_parallel
        fields, old_log_std = self._rollout_fields(storage)
        value_clip = c.value_clip if c.use_clipped_value_loss else None
        sums = torch.zeros(4, device=self.device)  # value loss, surrogate, entropy, kl
        n = 0
        for mb in iter_minibatches(fields, c.num_minibatches, c.num_epochs, self.generator):
            adv = mb["advantage"]
            if c.normalize_advantage_per_minibatch:
                adv_mean, adv_std = moments(adv, dp)
                adv = (adv - adv_mean) / (adv_std + 1e-8)
            mean, log_std, value = self._forward(mb["obs"])
            log_prob = gaussian_log_prob(mb["action"], mean, log_std)
            # Entropy of a diagonal Gaussian, Σ_i ½ + ½ log 2π + log σ_i (state-independent σ).
            entropy = (0.5 + _LOG_SQRT_2PI + log_std).sum()
            # The KL(π_prox ‖ π_θ) reached so far sets this step's size (rule in ``adaptive_lr``); every rank
            # takes the same step.
            with torch.no_grad():
                kl = gaussian_kl(mb["old_mean"], old_log_std, mean, log_std).mean()
                if dp is not None:
                    kl = dp.mean(kl)
            if c.schedule == "adaptive":
                self._set_lr(adaptive_lr(self.lr, float(kl), c.desired_kl, c.min_lr, c.max_lr))
            surrogate = decoupled_surrogate_loss(log_prob, mb["old_log_prob"], mb["behaviour_log_prob"], adv, c.clip,
                                                 c.behaviour_ratio_clip)
            v_loss = value_loss(value, mb["old_value"], mb["return"], value_clip)
            # L = L_clip + c_v·L_V − c_H·H  (each term's formula is on its helper above).
            loss = surrogate + c.value_coef * v_loss - c.entropy_coef * entropy
            aux = self.aux_loss()  # an extension's term, e.g. co-training's λ·BC loss on real demos
            if aux is not None:
                loss = loss + aux

            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), c.max_grad_norm)
            nn.utils.clip_grad_norm_(critic.parameters(), c.max_grad_norm)
            self.optimizer.step()
            sums += torch.stack([v_loss.detach(), surrogate.detach(), entropy.detach(), kl])
            n += 1

        if isinstance(policy.normalizer, RunningNormalizer):
            # Every rank's observations, so that the statistics stay equal across ranks.
            state = storage.obs["state"]
            policy.normalizer.update(state if dp is None else dp.cat(state.reshape(-1, state.shape[-1])))
        storage.clear()
        value_l, surrogate_l, entropy_m, kl_m = (sums / max(n, 1)).tolist()
        return {"value_loss": value_l, "surrogate_loss": surrogate_l, "entropy": entropy_m, "kl": kl_m,
                "lr": self.lr, "noise_std": float(policy.log_std().detach().exp().mean())}

    def state_dict(self) -> dict[str, Any]:
        """Actor (with normaliser stats and log-std), critic, optimiser, lr and the shuffle RNG."""
        return {"policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
                "optimizer": self.optimizer.state_dict(), "lr": self.lr,
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (strict: every key must be present)."""
        missing = {"policy", "critic", "optimizer", "lr", "generator"} - set(state)
        if missing:
            raise KeyError(f"PPO state is missing {sorted(missing)}")
        self.policy.load_state_dict(state["policy"], strict=True)
        self.critic.load_state_dict(state["critic"], strict=True)
        self.optimizer.load_state_dict(state["optimizer"])
        self._set_lr(float(state["lr"]))
        self.generator.set_state(state["generator"].cpu())

