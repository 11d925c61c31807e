"""What FastTD3 and FastSAC share (Seo et al., 2025): their config fields and the learner's skeleton.

Both learn from a ``[num_envs, capacity]`` device replay (:mod:`robot_rl.replay.device_ring`) with a few large-batch
updates per vectorised step of all sub-envs, train a pair of C51 critics
(:mod:`robot_rl.policies.distributional`) with LayerNorm by cross-entropy, Polyak-average the target critics after
every critic update, and normalise ``state`` by running statistics that travel with the actor weights. They differ
in the actor and in how the target action (and, for SAC, its entropy term) is drawn:
:mod:`robot_rl.policies.td3` and :mod:`robot_rl.policies.fastsac`.
"""

from __future__ import annotations

import abc
import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robot_rl.core.algorithm import OffPolicyAlgorithm, Policy, Weights
from robot_rl.core.config import AlgoConfig, ConfigError
from robot_rl.core.data_parallel import DataParallel, draw_rows
from robot_rl.core.extras import DISCOUNT
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs, TransitionBatch
from robot_rl.policies.distributional import DistributionalCritic
from robot_rl.policies.modules.obs_encoder import ObsEncoder
from robot_rl.replay.device_ring import DeviceReplay


@dataclass
class FastOffPolicyConfig(AlgoConfig):
    """Fields FastTD3 and FastSAC share (not registered itself)."""

    actor_hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor MLP (paper: 512, 256, 128)."""
    critic_hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of each critic (paper: 1024, 512, 256)."""
    critic_layer_norm: bool = True
    """LayerNorm after each hidden layer of the critics (keeps large-batch, high-τ critic training stable)."""
    actor_lr: float = 3e-4
    """AdamW learning rate of the actor."""
    critic_lr: float = 3e-4
    """AdamW learning rate of the critics."""
    weight_decay: float = 0.1
    """AdamW weight decay of both networks (paper: 0.1)."""
    gamma: float = 0.99
    """Discount factor (the paper uses 0.97 for Playground locomotion)."""
    tau: float = 0.1
    """Polyak rate of the target critics after every critic update (paper: 0.1)."""
    batch_size: int = 1024
    """Transitions per gradient update (paper: 32,768 on a GPU; on a 2-core CPU smaller batches and more updates
    per step reach the threshold sooner, docs/algorithms.md)."""
    updates_per_step: float = 8.0
    """Gradient updates per vectorised step of all sub-envs together (paper's ``num_updates``: 2 with its batch of
    32,768; 4-8 for manipulation). The learner's per-transition UTD ratio is this divided by the number of
    sub-envs."""
    learning_starts_steps: int = 10
    """Vectorised steps before the first update (paper: 10); at least ``batch_size`` transitions are kept
    before updates start whatever this says, so that a batch never asks for more than the replay holds."""
    buffer_size: int = 1_000_000
    """Replay capacity in transitions over all sub-envs, split evenly: ``buffer_size / num_envs`` steps each."""
    n_step: int = 1
    """n-step TD targets Σ_{i<m} γ^i r_{t+i} + γ^m·Q(s_{t+m}), m ≤ n, never across an episode end (paper: 1;
    3-8 for some locomotion tasks)."""
    num_atoms: int = 101
    """Atoms of the categorical value distribution (paper: 101; 251 for IsaacLab)."""
    v_min: float = -250.0
    """Lowest atom: the smallest discounted return the critic can represent (values below are clamped)."""
    v_max: float = 250.0
    """Highest atom."""
    clipped_double_q: bool = True
    """Target from the critic whose mean is lower, per row, and the actor maximises the lower Q (TD3); false = the
    critics' mixture and mean (the paper turns it off for dexterous in-hand tasks)."""
    normalize_obs: bool = True
    """Normalise ``state`` by running mean/std (statistics from the replayed batches, sent with the actor weights)."""
    amp: bool = False
    """bf16 autocast for the learner's hidden layers (paper: on, GPU); logits, values and optimiser state stay
    float32."""
    compile: bool = False
    """``torch.compile`` the critic and actor losses (paper: on; off by default: slow to start and, on CPU, slower)."""
    compile_mode: str = "default"
    """``torch.compile`` mode: ``default`` or ``reduce-overhead`` (CUDA graphs, the paper's choice)."""

    def validate(self) -> None:
        """Raise ``ValueError`` on an impossible setting."""
        if self.updates_per_step <= 0 or self.batch_size < 1 or self.n_step < 1 or not 0 < self.tau <= 1:
            raise ConfigError("batch_size and n_step must be >= 1, updates_per_step > 0 and tau in (0, 1]")
        if self.num_atoms < 2 or not self.v_min < self.v_max:
            raise ConfigError(f"need num_atoms >= 2 and v_min < v_max, got {self.num_atoms}, [{self.v_min}, "
                              f"{self.v_max}]")


def state_encoder(spec: EnvSpec, normalize: bool, algo: str) -> ObsEncoder:
    """The ``state``-only encoder (running normaliser or identity) FastTD3/FastSAC read; images are refused."""
    if spec.image_keys or "state" not in spec.observation:
        raise ValueError(f"{algo} learns from a 'state' vector only, this task has {sorted(spec.observation)}; "
                         "use sac for camera observations")
    return ObsEncoder(spec, normalize)


def action_affine(spec: EnvSpec, act_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scale, bias)`` ``[act_dim]`` mapping ``[-1, 1]`` onto the spec's bounds (unbounded: identity)."""
    low, high = spec.action.low, spec.action.high
    scale, bias = (1.0, 0.0) if low is None or high is None else ((high - low) / 2.0, (high + low) / 2.0)
    return torch.full((act_dim,), float(scale)), torch.full((act_dim,), float(bias))


class ActorWithEncoder(Policy):
    """What the shared learner needs of an actor: a ``state`` encoder, an MLP ``trunk`` and unit-space mapping."""

    encoder: ObsEncoder
    trunk: nn.Module
    act_dim: int

    @abc.abstractmethod
    def to_unit(self, action: torch.Tensor) -> torch.Tensor:
        """Env actions ``[B, *action_shape]`` back to ``[-1, 1]^{|A|}``."""

    @abc.abstractmethod
    def reseed(self, seed: int) -> None:
        """Restart the actor's exploration noise from ``seed`` (copies made for several actors explore differently)."""

    @abc.abstractmethod
    def data_loss(self, features: torch.Tensor, unit_action: torch.Tensor) -> torch.Tensor:
        """``[B]`` behaviour-cloning loss of demonstrated unit-space actions ``[B, |A|]`` at encoded observations."""


class FastOffPolicyLearner(OffPolicyAlgorithm):
    """The shared skeleton: critics, targets, optimisers, replay, rates, checkpoints. Subclasses add the losses."""

    actor: ActorWithEncoder
    #: The subclass's loss functions as the update calls them (compiled, or wrapped for DDP).
    _critic_loss: Any
    _actor_loss: Any

    def __init__(self, cfg: FastOffPolicyConfig, spec: EnvSpec, device: torch.device, seed: int,
                 actor: ActorWithEncoder) -> None:
        self.cfg, self.spec, self.device, self.seed, self.actor = cfg, spec, device, seed, actor
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's RNG
            torch.random.default_generator.manual_seed(seed + 1)
            self.critic = DistributionalCritic(actor.encoder.out_dim + actor.act_dim, cfg.critic_hidden, 2,
                                               cfg.num_atoms, cfg.v_min, cfg.v_max, cfg.critic_layer_norm).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        fused = device.type in ("cpu", "cuda")
        self.critic_optim = torch.optim.AdamW(self.critic.parameters(), lr=cfg.critic_lr,
                                              weight_decay=cfg.weight_decay, fused=fused)
        self._online: list[torch.Tensor] = list(self.critic.q.parameters())
        self._targets: list[torch.Tensor] = list(self.critic_target.q.parameters())
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.replay_generator = torch.Generator(device=device).manual_seed(seed + 1)
        self.num_updates = 0
        self._policies_made = 0
        self.data_parallel: DataParallel | None = None
        self._set_rates(1)

    def _set_rates(self, num_envs: int) -> None:
        # The loop counts in transitions: updates_per_step per vectorised step of num_envs sub-envs. On ranks the
        # lockstep schedule counts every rank's rows (robot_rl.loop.lockstep): the same steps before the first
        # update, and updates_per_step per step of each rank's sub-envs, each on batch_size rows of every shard.
        cfg, ranks = self.cfg, self.data_parallel.world_size if self.data_parallel is not None else 1
        self._num_envs = num_envs
        self.batch_size = cfg.batch_size
        self.utd_ratio = cfg.updates_per_step / num_envs
        self.learning_starts = max(cfg.learning_starts_steps * num_envs, cfg.batch_size) * ranks

    def enable_data_parallel(self, dp: DataParallel) -> None:
        """Average the critics' and the actor's gradients over ``dp``'s ranks (DDP, one module per optimiser).

        The per-row noise and the normaliser's batch are shared out as for SAC, so every rank takes the step one
        process takes on the ranks' batches together. Rank 0's parameters are copied here.
        """
        self.data_parallel = dp
        self._set_rates(self._num_envs)
        self._critic_loss = dp.wrap_loss(self._critic_loss, self.critic_optim.param_groups[0]["params"])
        self._actor_loss = dp.wrap_loss(self._actor_loss, list(self.actor.trunk.parameters()))

    def draw_noise(self, shape: tuple[int, ...], dim: int = 0) -> torch.Tensor:
        """Standard normal noise of ``shape`` from the learner's generator; on ranks, this rank's rows (``dim``)."""
        return draw_rows(lambda s: torch.randn(s, generator=self.generator, device=self.device), shape,
                         self.data_parallel, dim)

    def batch_mean(self, x: torch.Tensor) -> torch.Tensor:
        """The mean of ``x`` over the update's rows, every rank's on ranks (equal batch sizes)."""
        return x.mean() if self.data_parallel is None else self.data_parallel.mean(x.mean())

    def _compiled(self, fn: Any) -> Any:
        return torch.compile(fn, mode=self.cfg.compile_mode) if self.cfg.compile else fn

    # ---- the pieces the loop asks for ---------------------------------------------------------

    def make_policy(self) -> Policy:
        """An independent copy of the current actor, with its own exploration noise stream."""
        policy = copy.deepcopy(self.actor)
        self._policies_made += 1
        policy.reseed(self.seed + 7919 * self._policies_made)
        return policy

    def make_storage(self, num_envs: int) -> DeviceReplay:
        """A ``[num_envs, buffer_size / num_envs]`` device replay; sets the UTD ratio and learning start to match."""
        cfg = self.cfg
        self._set_rates(num_envs)
        capacity = DeviceReplay.per_env_capacity(cfg.buffer_size, num_envs, cfg.n_step)
        return DeviceReplay(self.spec, num_envs, capacity, self.device, n_step=cfg.n_step, gamma=cfg.gamma,
                            generator=self.replay_generator)

    def actor_weights(self) -> Weights:
        """Normaliser statistics, actor MLP and action scaling (CPU copies); never the critics."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.actor.state_dict().items()}

    def load_actor_weights(self, weights: Weights) -> None:
        """Load actor weights (e.g. a behaviour-cloned actor)."""
        self.actor.load_state_dict(weights, strict=True)

    # ---- supervised learning (co-training, SFT): robot_rl.core.algorithm.SupervisedLoss -------------

    def supervised_loss(self, obs: Obs, action: torch.Tensor, mask: torch.Tensor | None = None,
                        generator: torch.Generator | None = None, train_encoder: bool = False) -> torch.Tensor:
        """Behaviour cloning of demonstrated env actions ``[B, *A]``: the actor's :meth:`~ActorWithEncoder.data_loss`.

        The encoder is a normaliser without parameters, so ``train_encoder`` changes nothing; ``mask`` and
        ``generator`` are not used (one action per row, no noise).
        """
        return self.actor.data_loss(self.actor.encoder(obs), self.actor.to_unit(action)).mean()

    def supervised_parameters(self) -> list[nn.Parameter]:
        """The actor's MLP."""
        return list(self.actor.trunk.parameters())

    def prepare_supervised(self, obs: Obs) -> None:
        """Fold the demos' ``state`` into the observation normaliser."""
        self.actor.encoder.update_normalizer(obs)

    def finish_supervised(self) -> None:
        """Nothing follows the actor here: there is no target actor and the critics learn from the replay."""

    # ---- pieces of an update ----------------------------------------------------------------------

    def prepare(self, batch: TransitionBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(features, next features, unit action, discount)`` of a batch; folds its states into the normaliser.

        ``discount`` = γ^m·(1 − terminated) per row: truncated rows bootstrap from the true last observation.
        """
        encoder, dp = self.actor.encoder, self.data_parallel
        # On ranks, every rank folds every rank's states in, in rank order: the statistics stay equal.
        shared = dp is not None and encoder.normalizer is not None
        encoder.update_normalizer({"state": dp.cat(batch.obs["state"])} if shared and dp else batch.obs)
        with torch.no_grad():  # the encoder is a normaliser only: no parameters to train
            features, next_features = encoder(batch.obs), encoder(batch.next_obs)
        gamma = batch.extras.get(DISCOUNT.name)
        discount = (self.cfg.gamma if gamma is None else gamma) * (~batch.terminated).float()
        return features, next_features, self.actor.to_unit(batch.action), discount

    def autocast(self) -> torch.autocast:
        """bf16 autocast when ``amp`` is on (a no-op context otherwise)."""
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.cfg.amp)

    def mark_graph_step(self) -> None:
        """With CUDA graphs, outputs of a compiled call are overwritten at its next replay: mark a new step."""
        if self.cfg.compile and self.cfg.compile_mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()

    def step_critic(self, loss: torch.Tensor) -> None:
        """One optimiser step of the critics on ``loss``."""
        self.critic_optim.zero_grad(set_to_none=True)
        loss.backward()
        self.critic_optim.step()
        self.num_updates += 1

    @torch.no_grad()
    def soft_update_targets(self) -> None:
        """Polyak averaging over every target tensor: θ̄ ← θ̄ + τ·(θ − θ̄)."""
        torch._foreach_lerp_(self._targets, self._online, self.cfg.tau)

    # ---- checkpoints ----------------------------------------------------------------------------

    def extra_state(self) -> dict[str, Any]:
        """The subclass's own state (optimisers, counters, temperature)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`extra_state` output."""

    def state_dict(self) -> dict[str, Any]:
        """Networks, target critics, optimisers, normaliser statistics, update counts and RNG states."""
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                "critic_target": self.critic_target.state_dict(), "critic_optim": self.critic_optim.state_dict(),
                "num_updates": self.num_updates, "generator": self.generator.get_state(),
                "replay_generator": self.replay_generator.get_state(), **self.extra_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output exactly; a missing or unknown key is an error."""
        keys = set(self.state_dict())
        if set(state) != keys:
            raise KeyError(f"{type(self).__name__} state keys differ: missing {sorted(keys - set(state))}, "
                           f"unknown {sorted(set(state) - keys)}")
        self.actor.load_state_dict(state["actor"], strict=True)
        self.critic.load_state_dict(state["critic"], strict=True)
        self.critic_target.load_state_dict(state["critic_target"], strict=True)
        self.critic_optim.load_state_dict(state["critic_optim"])
        self.num_updates = int(state["num_updates"])
        self.generator.set_state(state["generator"].cpu())
        self.replay_generator.set_state(state["replay_generator"].cpu())
        self.load_extra_state(state)


def nan_scalar(device: torch.device) -> torch.Tensor:
    """A NaN scalar on ``device`` (a statistic not computed at this update)."""
    return torch.full((), math.nan, device=device)
