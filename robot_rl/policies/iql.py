"""Implicit Q-Learning (Kostrikov, Nair & Levine, 2021): offline RL that never queries Q off the data's actions.

Top to bottom: config → learner, with the update maths in comments next to the code. IQL learns three things
from dataset transitions ``(s, a, r, s')`` alone:

- a value ``V(s)``, fitted to an upper *expectile* τ of the target critics' ``Q̄(s, a)`` over the data's
  actions (:func:`~robot_rl.policies.offline_rl.expectile_loss`): with τ → 1 it approaches the best action in
  the data's support, without evaluating any action the data does not contain;
- twin critics ``Q_j(s, a)`` by TD to ``r + γ·(1 − terminated)·V(s')`` (no ``max_a'`` and no policy sample in
  the target: the source of offline over-estimation is gone);
- the policy by advantage-weighted regression: maximise ``min(exp(β·(Q̄(s, a) − V(s))), w_max)·log π(a|s)``,
  behaviour cloning that copies the data's better-than-expected actions more.

Online fine-tuning (the paper's second experiment) runs the same losses on the replay the actors fill, with the
offline data kept in the demo buffer (``demo_ratio``); nothing switches when the offline phase ends.

The networks are SAC's (:mod:`robot_rl.policies.sac_networks`): the tanh-squashed Gaussian actor, so actors,
checkpoints, ``robot-rl eval`` and export treat an IQL policy as a :class:`~robot_rl.policies.sac_networks.SACPolicy`,
and the critic ensemble with two members. Observations are state vectors (pixels: use SAC). Non-finite rows
never reach the learner: actors quarantine them and the offline loader sets such episodes aside, as for SAC.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robot_rl.core.algorithm import OffPolicyAlgorithm, Weights
from robot_rl.core.config import ALGOS, AlgoConfig, ConfigError
from robot_rl.core.data_parallel import DataParallel
from robot_rl.core.extras import DISCOUNT
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs, TransitionBatch
from robot_rl.policies.modules.mlp import MLP
from robot_rl.policies.offline_rl import expectile_loss
from robot_rl.policies.replay_storage import check_demo_ratio, make_replay
from robot_rl.policies.sac import SACConfig
from robot_rl.policies.sac_networks import SACCritic, SACPolicy, check_state_keys
from robot_rl.replay.buffer import MixingSampler, ReplayBuffer

__all__ = ["IQLAlgorithm", "IQLConfig"]


@ALGOS.register("iql")
@dataclass
class IQLConfig(AlgoConfig):
    """Implicit Q-Learning: expectile value, twin-Q TD to V, advantage-weighted actor; defaults from the paper."""

    actor_hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor MLP (SAC's tanh-squashed Gaussian)."""
    critic_hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of each of the two Q networks and of the V network."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the two Q networks."""
    value_lr: float = 3e-4
    """Adam learning rate of the V network."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak rate of the target critics: θ̄ ← (1 − τ)·θ̄ + τ·θ after every update (IQL's α)."""
    expectile: float = 0.7
    """Expectile τ of Q over the data's actions that V is fitted to, in (0, 1). 0.5 = the mean (SARSA-like value
    of the data's policy); → 1 = the best action in the data. The paper uses 0.7 on locomotion and 0.9 on
    AntMaze; 0.9 is the common choice for manipulation from mixed-quality demonstrations."""
    beta: float = 3.0
    """Inverse temperature β of the advantage weights ``exp(β·(Q − V))``, > 0. Small: close to behaviour cloning of
    all the data; large: imitate only the best actions (the paper: 3 on locomotion, 10 on AntMaze)."""
    max_weight: float = 100.0
    """Upper clip of the advantage weights (the paper's 100), > 0: one large advantage cannot dominate a batch."""
    batch_size: int = 256
    """Transitions per gradient update."""
    utd_ratio: float = 1.0
    """Update-to-data ratio online: gradient updates per transition received (fractions accumulate)."""
    learning_starts: int = 5_000
    """Transitions to collect before the first online update (the offline data in the replay counts)."""
    buffer_size: int = 1_000_000
    """Replay capacity (online buffer)."""
    demo_buffer_size: int = 100_000
    """Capacity of the demo buffer (used when ``demo_ratio > 0``; the offline phase's data goes there)."""
    demo_ratio: float = 0.0
    """Fraction of each batch drawn from the demo buffer, in [0, 1) (0.5 = RLPD's symmetric sampling; 0 = one
    buffer, where ``--offline`` puts its data alongside the online rows, as in the paper's fine-tuning)."""
    n_step: int = 1
    """n-step TD targets ``Σ_{i<m} γ^i r_{t+i} + γ^m·V(s_{t+m})``, m ≤ n, stopping at episode ends (built by the
    replay at sample time)."""
    critic_layer_norm: bool = False
    """LayerNorm after each hidden layer of the Q and V networks (RLPD: curbs over-estimation online)."""
    normalize_obs: bool = False
    """Normalise ``state`` by running mean/std (statistics from the replayed batches, saved with the actor
    weights)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` on an impossible setting (checked when the config is made)."""
        if not 0.0 < self.expectile < 1.0:
            raise ConfigError(f"expectile must be in (0, 1), got {self.expectile}: 0.7 (paper, locomotion) or 0.9 "
                              "(manipulation); 0.5 fits the data's mean value, 1 would be an unbounded max")
        if not self.beta > 0:
            raise ConfigError(f"beta (the inverse temperature of the advantage weights) must be > 0, got {self.beta}")
        if not self.max_weight > 0:
            raise ConfigError(f"max_weight (the clip of the advantage weights) must be > 0, got {self.max_weight}")
        if not 0.0 < self.tau <= 1.0 or not 0.0 < self.gamma <= 1.0:
            raise ConfigError(f"tau and gamma must be in (0, 1], got tau={self.tau}, gamma={self.gamma}")
        if self.batch_size < 1 or self.n_step < 1 or self.buffer_size < 1 or self.demo_buffer_size < 1:
            raise ConfigError("batch_size, n_step, buffer_size and demo_buffer_size must be >= 1")
        if min(self.actor_lr, self.critic_lr, self.value_lr) <= 0:
            raise ConfigError("actor_lr, critic_lr and value_lr must be > 0")
        check_demo_ratio(self.demo_ratio)

    def networks(self) -> SACConfig:
        """The SAC config the shared networks are built from: the actor, and an ensemble of two critics."""
        return SACConfig(actor_hidden=self.actor_hidden, critic_hidden=self.critic_hidden, num_critics=2,
                         critic_layer_norm=self.critic_layer_norm, normalize_obs=self.normalize_obs)

    def build(self, spec: EnvSpec, device: torch.device | str, seed: int) -> IQLAlgorithm:
        """The learner for environments with ``spec``, its networks seeded by ``seed``."""
        return IQLAlgorithm(self, spec, torch.device(device), seed)

    def build_policy(self, spec: EnvSpec, device: torch.device | str, seed: int = 0) -> SACPolicy:
        """The actor alone (no critics, no optimisers), initialised from ``seed``: SAC's policy class."""
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            return SACPolicy(spec, self.networks()).to(device)


# --------------------------------------------------------------------------------------------
# Learner
# --------------------------------------------------------------------------------------------


class IQLAlgorithm(OffPolicyAlgorithm):
    """The IQL learner. ``self.actor`` is its own policy (act with it in-process); ``self.value`` is V."""

    def __init__(self, cfg: IQLConfig, spec: EnvSpec, device: torch.device, seed: int) -> None:
        if spec.image_keys:
            raise ValueError(f"IQL here learns from state observations; the spec has cameras {spec.image_keys} "
                             "(use algo=sac, whose critic trains an image encoder)")
        cfg.validate()
        self.cfg, self.spec, self.device = cfg, spec, device
        self.batch_size, self.utd_ratio, self.learning_starts = cfg.batch_size, cfg.utd_ratio, cfg.learning_starts
        nets = cfg.networks()
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's RNG
            torch.random.default_generator.manual_seed(seed)
            self.actor = SACPolicy(spec, nets).to(device)
            self.critic = SACCritic(self.actor.encoder.out_dim, self.actor.act_dim, nets).to(device)
            self.value = MLP(self.actor.encoder.out_dim, cfg.critic_hidden, 1,
                             layer_norm=cfg.critic_layer_norm).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        fused = device.type in ("cpu", "cuda")
        self.actor_optim = torch.optim.Adam(self.actor.trunk.parameters(), lr=cfg.actor_lr, fused=fused)
        self.critic_optim = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr, fused=fused)
        self.value_optim = torch.optim.Adam(self.value.parameters(), lr=cfg.value_lr, fused=fused)
        self._online: list[torch.Tensor] = list(self.critic.parameters())
        self._targets: list[torch.Tensor] = list(self.critic_target.parameters())
        self.num_updates = 0
        self._value_loss, self._actor_loss, self._critic_loss = self.value_loss, self.actor_loss, self.critic_loss
        self.data_parallel: DataParallel | None = None

    def enable_data_parallel(self, dp: DataParallel) -> None:
        """Average V's, the actor's and the critics' gradients over ``dp``'s ranks (DDP, one module per optimiser).

        IQL's update draws no random numbers and its losses are means over rows, so with the normaliser fed every
        rank's states each rank takes the step one process takes on the ranks' batches together (equal batch
        sizes). Rank 0's parameters are copied here.
        """
        self.data_parallel = dp
        self._value_loss = dp.wrap_loss(self.value_loss, list(self.value.parameters()))
        self._actor_loss = dp.wrap_loss(self.actor_loss, self.actor_optim.param_groups[0]["params"])
        self._critic_loss = dp.wrap_loss(self.critic_loss, list(self.critic.parameters()))

    # ---- the pieces the loop asks for ---------------------------------------------------------

    def make_policy(self) -> SACPolicy:
        """An independent copy of the current actor (for actor threads/processes)."""
        return copy.deepcopy(self.actor)

    def make_storage(self, num_envs: int) -> ReplayBuffer | MixingSampler:
        """A replay buffer, or with ``demo_ratio > 0`` one mixing ``online``/``demos`` (as SAC's)."""
        return make_replay(self.spec, self.device, self.cfg)

    def actor_weights(self) -> Weights:
        """The actor: normaliser statistics, head and action scaling (CPU copies); never critics or V."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.actor.state_dict().items()}

    def load_actor_weights(self, weights: Weights) -> None:
        """Load actor weights (e.g. a behaviour-cloned policy), strictly."""
        self.actor.load_state_dict(weights, strict=True)

    # ---- the losses -----------------------------------------------------------------------------

    def unit_action(self, action: torch.Tensor) -> torch.Tensor:
        """Env actions ``[B, *A]`` → the squashed space ``[B, |A|]`` the critics read (clamped to ±1)."""
        n = action.shape[0]
        return ((action.reshape(n, -1) - self.actor.action_bias) / self.actor.action_scale).clamp(-1.0, 1.0)

    def value_loss(self, features: torch.Tensor, q_data: torch.Tensor) -> torch.Tensor:
        """``L_V`` for features ``[B, F]`` and the target critics' ``min_j Q̄_j(s, a)`` ``[B]`` of the data's actions."""
        # L_V = mean_b |τ − 1(u_b < 0)|·u_b²,  u = min_j Q̄_j(s, a) − V(s): the τ-expectile of Q over the data's a.
        return expectile_loss(q_data - self.value(features).squeeze(-1), self.cfg.expectile)

    def awr_weights(self, advantage: torch.Tensor) -> torch.Tensor:
        """``min(exp(β·A), w_max)`` for advantages ``A = Q̄(s, a) − V(s)`` ``[B]`` (no gradient flows through)."""
        # Clipping the exponent, not the exponential, keeps a large advantage from overflowing to inf first.
        return torch.exp((self.cfg.beta * advantage.detach()).clamp(max=math.log(self.cfg.max_weight)))

    def actor_loss(self, features: torch.Tensor, action: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``L_π`` for features ``[B, F]``, env actions ``[B, *A]`` and advantage weights ``[B]``."""
        # L_π = mean_b w_b·‖tanh μ(s_b) − a_b‖²: regression onto the data's actions, weighted by how much better
        # than V(s) each was. This is −w·log π of IQL's reference policy (a Gaussian around tanh μ with one σ), not
        # of the tanh-Gaussian, whose likelihood of actions on the bound does not fit them (squashed_mean_error).
        return (weight * self.actor.data_error(features, action)).mean()

    def critic_loss(self, features: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
                    terminated: torch.Tensor, next_features: torch.Tensor,
                    discount: torch.Tensor | float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(L_Q, Q [2, B] detached)``; ``discount``: γ, or the per-row γ^m of n-step rows."""
        # y = r + γ·(1 − terminated)·V(s'): V, not max_a' Q̄(s', a'), so no action outside the data is evaluated.
        # Truncated rows bootstrap (next_obs is the true final observation); terminated ones do not.
        with torch.no_grad():
            gamma = self.cfg.gamma if discount is None else discount
            target = reward + gamma * (1.0 - terminated.float()) * self.value(next_features).squeeze(-1)
        # L_Q = ½ Σ_j mean_b (Q_j(s, a) − y)²
        q = self.critic(features, action)
        return 0.5 * (q - target).square().mean(dim=1).sum(), q.detach()

    # ---- supervised learning (co-training, SFT): robot_rl.core.algorithm.SupervisedLoss -------------

    def supervised_loss(self, obs: Obs, action: torch.Tensor, mask: torch.Tensor | None = None,
                        generator: torch.Generator | None = None, train_encoder: bool = False) -> torch.Tensor:
        """Behaviour cloning, ``mean_b ‖tanh μ(s_b) − a_b‖²``: IQL's actor loss with every weight 1.

        The state encoder has no trainable parameters, so ``train_encoder`` changes nothing; ``mask`` and
        ``generator`` are not used (one action per row, no noise).
        """
        return self.actor.data_error(self.actor.encode(obs), action).mean()

    def supervised_parameters(self) -> list[nn.Parameter]:
        """The actor's head (the only trainable part of the policy)."""
        return [p for p in self.actor.parameters() if p.requires_grad]

    def prepare_supervised(self, obs: Obs) -> None:
        """Fold the demos' ``state`` into the observation normaliser."""
        self.actor.encoder.update_normalizer(obs)

    def finish_supervised(self) -> None:
        """Nothing follows the actor here: the targets are critics, and V is trained from them alone."""

    # ---- the update -----------------------------------------------------------------------------

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        """One IQL step, in the paper's order: V, then the actor (with the new V), then Q, then the targets."""
        dp = self.data_parallel
        # Every rank folds every rank's states into its normaliser, in rank order: the statistics stay equal.
        shared = dp is not None and self.actor.encoder.normalizer is not None
        self.actor.encoder.update_normalizer({"state": dp.cat(batch.obs["state"])} if shared and dp else batch.obs)
        # The state encoder has no trainable parameters (only the normaliser), so every loss reads the same features.
        with torch.no_grad():
            features, next_features = self.actor.encoder(batch.obs), self.actor.encoder(batch.next_obs)
            action = self.unit_action(batch.action)
            q_data = self.critic_target(features, action).min(dim=0).values

        value_loss = self._value_loss(features, q_data)
        self.value_optim.zero_grad(set_to_none=True)
        value_loss.backward()
        self.value_optim.step()

        with torch.no_grad():
            advantage = q_data - self.value(features).squeeze(-1)
            weight = self.awr_weights(advantage)
        actor_loss = self._actor_loss(features, batch.action, weight)
        aux = self.aux_loss()  # an extension's term (co-training), as in SAC
        self.actor_optim.zero_grad(set_to_none=True)
        (actor_loss if aux is None else actor_loss + aux).backward()
        self.actor_optim.step()

        critic_loss, q = self._critic_loss(features, action, batch.reward, batch.terminated, next_features,
                                           batch.extras.get(DISCOUNT.name))
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optim.step()

        self.soft_update_targets()
        self.num_updates += 1
        clipped = (weight >= self.cfg.max_weight * (1 - 1e-6)).float().mean()
        stats = torch.stack([critic_loss.detach(), value_loss.detach(), actor_loss.detach(), q.mean(),
                             (q_data - advantage).mean(), advantage.mean(), weight.mean(), clipped]).tolist()
        names = ("critic_loss", "value_loss", "actor_loss", "q_mean", "v_mean", "advantage_mean", "awr_weight_mean",
                 "awr_clipped_fraction")
        return dict(zip(names, stats))  # one host sync for all statistics

    @torch.no_grad()
    def soft_update_targets(self) -> None:
        """Polyak averaging, fused over every target tensor: θ̄ ← θ̄ + τ·(θ − θ̄)."""
        torch._foreach_lerp_(self._targets, self._online, self.cfg.tau)

    @torch.no_grad()
    def td_error(self, batch: TransitionBatch) -> float:
        """Mean squared TD error ``(Q_j(s, a) − r − γ(1 − terminated)·V(s'))²`` of the critics on ``batch``."""
        encode = self.actor.encoder
        loss, _ = self.critic_loss(encode(batch.obs), self.unit_action(batch.action), batch.reward, batch.terminated,
                                   encode(batch.next_obs), batch.extras.get(DISCOUNT.name))
        return float(loss)  # ½·Σ_j mean_b over two critics: the mean over critics of the mean squared error

    # ---- checkpoints ----------------------------------------------------------------------------

    _STATE_KEYS = ("actor", "critic", "critic_target", "value", "actor_optim", "critic_optim", "value_optim",
                   "num_updates")

    def state_dict(self) -> dict[str, Any]:
        """Networks, target critics, optimisers, normaliser statistics and the update count."""
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "value": self.value.state_dict(),
            "actor_optim": self.actor_optim.state_dict(),
            "critic_optim": self.critic_optim.state_dict(),
            "value_optim": self.value_optim.state_dict(),
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output exactly; a missing or unknown key is an error."""
        check_state_keys("IQL", state, self._STATE_KEYS)
        self.actor.load_state_dict(state["actor"], strict=True)
        self.critic.load_state_dict(state["critic"], strict=True)
        self.critic_target.load_state_dict(state["critic_target"], strict=True)
        self.value.load_state_dict(state["value"], strict=True)
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.critic_optim.load_state_dict(state["critic_optim"])
        self.value_optim.load_state_dict(state["value_optim"])
        self.num_updates = int(state["num_updates"])
