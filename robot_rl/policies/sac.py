"""Soft Actor-Critic (Haarnoja et al., 2018) for state and pixel observations.

Top to bottom: config → learner (the update maths in comments next to the code); the networks are in
:mod:`robot_rl.policies.sac_networks`. What robot learning adds to textbook SAC:

- a critic *ensemble* evaluated with batched matmuls, with targets taking the min over a random
  subset of ``num_critics_sampled`` members (REDQ / RLPD) and optional LayerNorm critics (RLPD);
- symmetric sampling from a second demo/intervention buffer (RLPD, HIL-SERL): ``demo_ratio``;
- pixels through a small CNN with DrQ random shifts; the critic's gradients train the encoder and
  the actor reads detached features (DrQ / SAC-AE). Or (``image_encoder=resnet10|resnet18``) through a
  pretrained, frozen ResNet trunk that actor, critic and target critic share and that runs once per
  update, each network with its own trainable spatial-embedding head (HIL-SERL);
- a lean update: fused Adam and Polyak averaging, one host sync per update, all randomness drawn up front so
  the loss functions are pure and can be compiled (``compile``), optional bf16 autocast (``amp_bf16``).

Actions. The policy samples ``u ~ N(μ(s), σ(s))`` and squashes ``a = tanh(u) ∈ [-1, 1]``; actors see
``low + (a + 1)(high − low)/2`` (a spec without bounds is treated as ``[-1, 1]``). Critics and the
entropy work in the squashed ``[-1, 1]`` space, so the replayed env actions are mapped back first.
An action chunk ``[H, A]`` is flattened to ``H·A`` for the MLP heads (one Gaussian over the whole
chunk, target entropy ``−H·A``) and reshaped to ``[N, H, A]`` on the way out.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

import torch
from torch import nn

from robot_rl.core.algorithm import OffPolicyAlgorithm, Policy, Weights
from robot_rl.core.config import ALGOS, AlgoConfig
from robot_rl.core.data_parallel import DataParallel, draw_rows
from robot_rl.core.extras import DISCOUNT
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs, TransitionBatch
from robot_rl.policies import sac_networks as nets
from robot_rl.policies.modules.cnn import random_shift
from robot_rl.policies.modules.pretrained import check_image_encoder
from robot_rl.policies.offline_rl import cql_penalty, mc_calibration, sampled_action_q
from robot_rl.policies.replay_storage import check_demo_ratio, make_replay
from robot_rl.policies.sac_networks import SACCritic, SACPolicy, SACValueEstimator, make_encoder
from robot_rl.replay.buffer import MixingSampler, ReplayBuffer

__all__ = ["SACAlgorithm", "SACConfig", "SACCritic", "SACPolicy"]


@ALGOS.register("sac")
@dataclass
class SACConfig(AlgoConfig):
    """Soft Actor-Critic with critic ensembles, demo mixing and pixel (DrQ) support."""

    actor_hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor MLP."""
    critic_hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of each critic in the ensemble."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics (and of the image encoder, which the critic loss trains)."""
    temperature_lr: float = 3e-4
    """Adam learning rate of log α when ``autotune_entropy``."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak rate of the target critics: θ̄ ← (1 − τ)·θ̄ + τ·θ after every update."""
    batch_size: int = 256
    """Transitions per gradient update."""
    utd_ratio: float = 1.0
    """Update-to-data ratio: gradient updates per transition received (fractions accumulate)."""
    learning_starts: int = 5_000
    """Transitions to collect before the first update."""
    buffer_size: int = 1_000_000
    """Replay capacity (online buffer). Each row stores one observation (next_obs is found by index)."""
    demo_buffer_size: int = 100_000
    """Capacity of the demo/intervention buffer (used when ``demo_ratio > 0``)."""
    n_step: int = 1
    """n-step TD targets: Σ_{i<m} γ^i r_{t+i} + γ^m·V(s_{t+m}), m ≤ n, stopping at episode ends (built
    by the replay at sample time)."""
    init_temperature: float = 1.0
    """Initial entropy coefficient α."""
    target_entropy: float | None = None
    """Entropy target H̄ for the temperature (``null`` = −|A|, the flattened action size)."""
    autotune_entropy: bool = True
    """Learn α so that the policy entropy tracks ``target_entropy``; otherwise α stays fixed."""
    num_critics: int = 2
    """Critic ensemble size E (2 = clipped double Q; RLPD/REDQ use 10)."""
    num_critics_sampled: int | None = None
    """Members M the target takes the min over, drawn at random per update (``null`` = all E).
    With M < E the actor maximises the ensemble mean (REDQ), otherwise the min."""
    critic_layer_norm: bool = False
    """LayerNorm after each hidden layer of the critics (RLPD)."""
    demo_ratio: float = 0.0
    """Fraction of each batch drawn from the demo/intervention buffer (0.5 = RLPD/HIL-SERL symmetric
    sampling; 0 = one buffer). Interventions go to both buffers."""
    image_features: int = 50
    """Features per camera after the CNN's LayerNorm+tanh projection."""
    image_channels: int = 32
    """Channels of each of the CNN's four 3×3 conv layers."""
    image_conv_stride: int = 1
    """Stride of the CNN's conv layers after the first (stride 2): 1 is DrQ's; 2 halves the map at each layer, a
    3.5× faster update at 64×64 on a CPU (benchmarks/RESULTS_encoders.md)."""
    image_shift_pad: int = 4
    """DrQ random-shift padding in pixels for images during updates (0 = no augmentation)."""
    image_encoder: Literal["cnn", "resnet10", "resnet18"] = "cnn"
    """Camera encoder: ``cnn`` (the CNN above, trained by the critic) or a ResNet trunk (torchvision layout)
    shared by actor, critic and target critic, each with its own trainable spatial-embedding head (HIL-SERL)."""
    image_backbone: str | None = None
    """Local weights file of the ResNet trunk, e.g. torchvision's resnet18 ``state_dict`` (nothing is downloaded).
    Only the learner reads it: actor weights and checkpoints carry the trunk. null = random weights."""
    freeze_backbone: bool = True
    """Keep the ResNet trunk fixed (no gradient, run once per update); false = the critic's loss fine-tunes it."""
    image_spatial_embeddings: int = 8
    """ResNet heads: learned spatial embeddings per trunk channel (HIL-SERL's ``num_spatial_blocks``)."""
    cql_alpha: float = 0.0
    """Weight of CQL's conservative term in the critic loss (Kumar et al., 2020): pushes down the Q of actions the
    data does not contain. 0 = off (online SAC); 1-5 for offline pre-training (docs/offline-to-online.md)."""
    cql_samples: int = 10
    """Actions sampled per state, from the policy and uniformly each, to estimate CQL's log-sum-exp."""
    calql: bool = False
    """Cal-QL (Nakamoto et al., 2023): clamp the policy's Q in the CQL term from below by the data's Monte-Carlo
    return (extras ``MC_RETURN``), so offline Q stays on the scale of returns and fine-tuning online starts
    without an unlearning dip. Needs ``cql_alpha > 0``."""
    actor_bc_updates: int = 0
    """The first updates train the actor to clone the batch's actions (``‖tanh μ − a‖²``; σ and α rest) instead
    of maximising Q, while the critics learn as usual and so evaluate a policy near the data's: CQL's
    ``policy_eval_start``, Cal-QL's ``bc_start_epochs``. For offline pre-training (fewer than ``offline.updates``)."""
    backup_entropy: bool = True
    """Subtract ``α·log π(a'|s')`` in the TD target (soft Q). CQL's and Cal-QL's reference implementations do not
    (false): their Q is on the scale of the returns Cal-QL calibrates against, and a near-deterministic policy
    (a clone of saturated demo actions has ``log π`` ≫ 0) does not drag it down by ``α·log π`` a step."""
    normalize_obs: bool = False
    """Normalise ``state`` by running mean/std (statistics from the replayed batches, saved with the
    actor weights)."""
    compile: bool = False
    """Opt-in ``torch.compile`` of the critic and actor loss functions (first updates are slow)."""
    compile_mode: str = "default"
    """``torch.compile`` mode when ``compile`` is on: ``default``, or ``reduce-overhead`` (CUDA graphs: on a GPU
    the small SAC networks are launch-bound, and graphs remove most of the launch cost)."""
    amp_bf16: bool = False
    """bf16 autocast for the learner's hidden layers (much faster on CPUs with AVX512-BF16/AMX and on
    recent GPUs); Q-values, log-probabilities and optimiser state stay float32."""

    def validate(self) -> None:
        """Raise ``ValueError`` on an impossible setting."""
        check_image_encoder(self.image_encoder)
        if self.image_backbone and self.image_encoder == "cnn":
            raise ValueError("image_backbone needs image_encoder resnet10 or resnet18")
        if (min(self.cql_alpha, self.actor_bc_updates, self.cql_samples - 1, self.image_conv_stride - 1) < 0
                or (self.calql and not self.cql_alpha)):
            raise ValueError("cql_alpha and actor_bc_updates must be >= 0, cql_samples and image_conv_stride >= 1; "
                             "calql needs cql_alpha > 0")

    def build(self, spec: EnvSpec, device: torch.device | str, seed: int) -> SACAlgorithm:
        """The learner for environments with ``spec``, its networks seeded by ``seed``."""
        return SACAlgorithm(self, spec, torch.device(device), seed)

    def build_policy(self, spec: EnvSpec, device: torch.device | str, seed: int = 0) -> SACPolicy:
        """The actor alone (encoder and head; no critics, no optimisers), initialised from ``seed``."""
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            return SACPolicy(spec, self).to(device)

    def build_value_estimator(self, spec: EnvSpec, policy: Policy) -> SACValueEstimator | None:
        """The critic ensemble for an actor acting with ``policy``, or None if not a SACPolicy (its encoder)."""
        return SACValueEstimator(spec, self, policy) if isinstance(policy, SACPolicy) else None


# ---- Learner -------------------------------------------------------------------------------


class SACAlgorithm(OffPolicyAlgorithm):
    """The SAC learner. ``self.actor`` is its own policy (shares weights; act with it in-process)."""

    def __init__(self, cfg: SACConfig, spec: EnvSpec, device: torch.device, seed: int) -> None:
        if cfg.num_critics < 1 or not 1 <= (cfg.num_critics_sampled or cfg.num_critics) <= cfg.num_critics:
            raise ValueError(f"need 1 <= num_critics_sampled <= num_critics, got {cfg.num_critics_sampled} "
                             f"and {cfg.num_critics}")
        check_demo_ratio(cfg.demo_ratio)
        self.cfg, self.spec, self.device = cfg, spec, device
        self.batch_size, self.utd_ratio, self.learning_starts = cfg.batch_size, cfg.utd_ratio, cfg.learning_starts
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's RNG
            torch.random.default_generator.manual_seed(seed)
            self.actor = SACPolicy(spec, cfg).to(device)
            backbone = self.actor.backbone  # with a trunk the critic gets its own head on the shared maps
            head = make_encoder(spec, cfg, backbone, share=self.actor.encoder) if backbone is not None else None
            self.critic = SACCritic(self.actor.encoder.out_dim, self.actor.act_dim, cfg, head).to(device)
        if backbone is not None and cfg.image_backbone:
            backbone.load(cfg.image_backbone)
        # Target copies share the live normaliser (its statistics are buffers, which Polyak averaging skips).
        norm = self.actor.encoder.normalizer
        self.critic_target = copy.deepcopy(self.critic, nets.shared_memo(norm)).requires_grad_(False)
        # The target critic reads its own Polyak-averaged copy of the CNN; a parameter-free encoder
        # (state, normaliser) is simply shared.
        has_cnn = self.actor.encoder.cnn is not None and head is None
        encoder_copy = copy.deepcopy(self.actor.encoder, nets.shared_memo(norm)) if has_cnn else None
        self.encoder_target = encoder_copy.requires_grad_(False) if encoder_copy is not None else None
        self._critic_encoder = head if head is not None else self.actor.encoder
        self._target_encoder = self.critic_target.encoder if head is not None else self.encoder_target
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_temperature), device=device))
        self.target_entropy = float(cfg.target_entropy if cfg.target_entropy is not None else -self.actor.act_dim)
        self.num_sampled = cfg.num_critics_sampled or cfg.num_critics

        fused = device.type in ("cpu", "cuda")
        # The critic's loss trains the CNN, or an unfrozen trunk; with a trunk each network trains its own head.
        critic_params = [*self.critic.parameters(), *(self.actor.encoder.parameters() if head is None else ())]
        actor_params = [*self.actor.trunk.parameters(), *(self.actor.encoder.parameters() if head is not None else ())]
        if backbone is not None and not cfg.freeze_backbone:
            critic_params += backbone.parameters()
        self.critic_optim = torch.optim.Adam(critic_params, lr=cfg.critic_lr, fused=fused)
        # log α is a second parameter group of the actor's optimiser: one optimiser step fewer per update.
        self.actor_optim = torch.optim.Adam([{"params": actor_params, "lr": cfg.actor_lr},
                                             {"params": [self.log_alpha], "lr": cfg.temperature_lr}], fused=fused)
        self._online: list[torch.Tensor] = list(self.critic.parameters())
        self._targets: list[torch.Tensor] = list(self.critic_target.parameters())
        if self.encoder_target is not None:
            self._online += list(self.actor.encoder.parameters())
            self._targets += list(self.encoder_target.parameters())

        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.num_updates = 0
        mode = cfg.compile_mode
        self._critic_loss = torch.compile(self.critic_loss, mode=mode) if cfg.compile else self.critic_loss
        self._actor_loss = torch.compile(self.actor_loss, mode=mode) if cfg.compile else self.actor_loss
        self._policy_loss = self.policy_loss
        self.data_parallel: DataParallel | None = None

    def enable_data_parallel(self, dp: DataParallel) -> None:
        """DDP over ``dp``'s ranks, one module per optimiser: each rank takes one process's step on all batches."""
        self.data_parallel = dp
        self._critic_loss = dp.wrap_loss(self._critic_loss, self.critic_optim.param_groups[0]["params"])
        # α has a gradient only when it is learned: DDP waits for a gradient of every parameter it wraps.
        actor = [*self.actor_optim.param_groups[0]["params"], *([self.log_alpha] if self.cfg.autotune_entropy else [])]
        self._policy_loss = dp.wrap_loss(self.policy_loss, actor)

    # ---- the pieces the loop asks for ---------------------------------------------------------

    def make_policy(self) -> SACPolicy:
        """An independent copy of the current actor (for actor threads/processes)."""
        return copy.deepcopy(self.actor)

    def make_storage(self, num_envs: int) -> ReplayBuffer | MixingSampler:
        """A replay buffer, or with ``demo_ratio > 0`` one mixing ``online``/``demos`` (:func:`make_replay`)."""
        return make_replay(self.spec, self.device, self.cfg, track_returns=self.cfg.calql)  # Cal-QL online

    def actor_weights(self) -> Weights:
        """Encoder (CNN, or trunk and head; normaliser statistics), actor head and action scaling; never critics."""
        # A frozen trunk never changes, so its tensors go out uncopied: a checkpoint holding the learner's state
        # and these weights then stores them once (torch.save writes a shared storage once).
        trunk = self.actor.backbone
        fixed = trunk is not None and trunk.frozen

        def shared(key: str, v: torch.Tensor) -> bool:
            return fixed and key.startswith("backbone.") and v.device.type == "cpu"

        return {k: v if shared(k, v) else v.detach().to("cpu", copy=True) for k, v in self.actor.state_dict().items()}

    def critic_weights(self) -> Weights:
        """The critic ensemble (and its encoder head) for an actor's :class:`SACValueEstimator`: CPU copies."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.critic.state_dict().items()}

    def load_actor_weights(self, weights: Weights) -> None:
        """Load actor weights (e.g. behaviour cloning); the target encoder restarts from the new CNN."""
        self.actor.load_state_dict(weights, strict=True)
        if self.encoder_target is not None:
            self.encoder_target.load_state_dict(self.actor.encoder.state_dict())

    # ---- the update -----------------------------------------------------------------------------

    def critic_loss(self, obs: Obs, action: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor,
                    next_obs: Obs, noise: torch.Tensor, subset: torch.Tensor | None,
                    alpha: torch.Tensor, discount: torch.Tensor | float | None = None,
                    cql_draws: tuple[torch.Tensor, torch.Tensor] | None = None,
                    calibration: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(L_Q, mean Q, detached features of obs)`` for squashed actions and noise ``[B, |A|]``.

        A pure function of its inputs (``update`` draws the noise for a' and the critic subset).
        ``discount`` is γ, or the per-row γ^m of n-step rows (extras ``DISCOUNT``). ``cql_draws``: the Gaussian
        noise and uniform actions ``[K, B, |A|]`` of CQL's term (``cql_alpha > 0``), and ``calibration`` its
        Cal-QL reference values ``[B]`` (:mod:`robot_rl.policies.offline_rl`).
        """
        # Soft TD target, a' ~ π(·|s') and M ⊆ {1..E} a random subset (all members when M = E):
        #   y = r + γ·(1 − terminated)·(min_{j∈M} Q̄_j(s', a') − α·log π(a'|s')), the last term if backup_entropy
        # Truncated rows bootstrap: next_obs is the true final observation, not the reset one.
        with torch.no_grad():
            next_features = self.actor.encoder(next_obs)
            next_action, next_log_prob = self.actor.sample(next_features, noise)
            target_features = next_features if self._target_encoder is None else self._target_encoder(next_obs)
            q_next = self.critic_target(target_features, next_action)
            if subset is not None:
                q_next = q_next[subset]
            soft_value = q_next.min(dim=0).values - (alpha * next_log_prob if self.cfg.backup_entropy else 0.0)
            gamma = self.cfg.gamma if discount is None else discount
            target = reward + gamma * (1.0 - terminated.float()) * soft_value
        # L_Q = ½ Σ_j mean_b (Q_j(s, a) − y)²; its gradient also trains the image encoder (DrQ).
        features = self._critic_encoder(obs)
        q = self.critic(features, action)
        loss = 0.5 * (q - target).square().mean(dim=1).sum()
        if cql_draws is not None:  # + α_cql·Σ_j (log Σ_a exp Q_j(s, a) − Q_j(s, a_data))
            actor_features = features if self.critic.encoder is None else self.actor.encoder(obs)
            sampled = sampled_action_q(self.critic, self.actor.sample, features, actor_features, *cql_draws)
            loss = loss + self.cfg.cql_alpha * cql_penalty(q, *sampled, self.actor.act_dim, calibration).sum()
        return loss, q.detach().mean(), features.detach()

    def actor_loss(self, features: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor,
                   critic_features: torch.Tensor | None = None, clone: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(L_π, detached log π(ã|s))`` for encoded observations ``[B, F]`` and noise ``[B, |A|]``.

        ``critic_features``: what the critic reads when it has its own encoder (default: ``features``).
        ``clone``: the batch's squashed actions ``[B, |A|]`` during ``actor_bc_updates``, regressed instead (σ rests).
        """
        # L_π = mean_b [α·log π(ã|s) − Q(s, ã)], ã = tanh(μ + σ·ε) reparameterised, Q = min_j Q_j
        # (clipped double Q) or mean_j Q_j when targets use random subsets (REDQ). Features are
        # detached (DrQ: only the critic trains the encoder) and so are the critic weights, so the
        # backward pass computes no critic weight gradients at all.
        action, log_prob = self.actor.sample(features, noise)
        if clone is not None:  # no α·log π: its tanh term pulls μ off the bound, where demos often sit (σ rests)
            return nets.squashed_mean_error(self.actor.gaussian(features)[0], clone).mean(), log_prob.detach()
        q = self.critic(features if critic_features is None else critic_features, action, detach_params=True)
        q_pi = q.min(dim=0).values if self.num_sampled == self.cfg.num_critics else q.mean(dim=0)
        return (alpha * log_prob - q_pi).mean(), log_prob.detach()

    def policy_loss(self, obs: Obs, critic_features: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor,
                    clone: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(L_π, L_α, detached log π(ã|s))``: the actor's and the temperature's losses, for one ``backward``.

        ``critic_features``: the critic pass's (detached) features of ``obs``, which the actor reuses (saving a
        second CNN pass on pixels) unless it has its own head on a shared trunk's maps. ``clone``: see actor_loss.
        """
        if self.critic.encoder is None:
            actor_loss, log_prob = self._actor_loss(critic_features, noise, alpha, None, clone)
        else:
            own = self.actor.encoder({k: v.detach() for k, v in obs.items()})
            actor_loss, log_prob = self._actor_loss(own, noise, alpha, critic_features, clone)
        # Temperature: L_α = −log α · (mean_b log π(ã|s) + H̄), so ∂L/∂log α = −(mean_b log π + H̄): α grows while
        # the entropy −log π is below the target H̄ and shrinks above it (log π is detached: L_α trains α only).
        # In the warm-up (clone) α rests: a zero gradient, which moves nothing while Adam's moments are still 0.
        log_alpha = (self.log_alpha if self.cfg.autotune_entropy else self.log_alpha.detach()) * (clone is None)
        return actor_loss, -log_alpha * (log_prob.mean() + self.target_entropy), log_prob

    # ---- supervised learning (co-training, SFT): robot_rl.core.algorithm.SupervisedLoss -------------

    def supervised_loss(self, obs: Obs, action: torch.Tensor, mask: torch.Tensor | None = None,
                        generator: torch.Generator | None = None, train_encoder: bool = False) -> torch.Tensor:
        """Behaviour cloning, ``mean_b ‖tanh μ(s_b) − a_b‖²`` in the unit box, for demonstrated actions ``[B, *A]``.

        Not the likelihood: it fails on actions at the bound (:func:`~.sac_networks.squashed_mean_error`).
        ``train_encoder=False`` detaches the features: the critic trains the encoder, as in the actor loss.
        ``mask`` and ``generator`` are not used (one action per row, no noise).
        """
        features = self.actor.encode(obs)
        if not train_encoder:
            features = features.detach()
        return self.actor.data_error(features, action).mean()

    def supervised_parameters(self) -> list[nn.Parameter]:
        """The whole actor (encoder and head) but a frozen trunk."""
        return [p for p in self.actor.parameters() if p.requires_grad]

    def prepare_supervised(self, obs: Obs) -> None:
        """Fold the demos' ``state`` into the observation normaliser."""
        self.actor.encoder.update_normalizer(obs)

    def finish_supervised(self) -> None:
        """The target encoder restarts from the encoder supervised learning trained."""
        self.load_actor_weights(self.actor_weights())

    @torch.no_grad()
    def soft_update_targets(self) -> None:
        """Polyak averaging, fused over every target tensor: θ̄ ← θ̄ + τ·(θ − θ̄)."""
        torch._foreach_lerp_(self._targets, self._online, self.cfg.tau)

    @torch.no_grad()
    def td_error(self, batch: TransitionBatch) -> float:
        """Mean squared TD error of the critics on ``batch`` (held-out data: no update, no augmentation)."""
        n = len(batch)
        action = ((batch.action.reshape(n, -1) - self.actor.action_bias) / self.actor.action_scale).clamp(-1.0, 1.0)
        gen = torch.Generator(self.device).manual_seed(0)  # its own: checking leaves training's draws alone
        noise = torch.randn((n, self.actor.act_dim), generator=gen, device=self.device)
        obs, next_obs = batch.obs, batch.next_obs
        if self.actor.backbone is not None:
            obs, next_obs = self.actor.backbone(obs), self.actor.backbone(next_obs)
        loss, _, _ = self.critic_loss(obs, action, batch.reward, batch.terminated, next_obs, noise, None,
                                      self.log_alpha.exp(), batch.extras.get(DISCOUNT.name))
        return 2.0 * float(loss) / self.cfg.num_critics  # the loss is ½·Σ_j mean_b (Q_j − y)²

    def finish_offline(self) -> None:
        """Online rows have no Monte-Carlo return: the conservative term (CQL, Cal-QL) is the offline phase's."""
        self.cfg = replace(self.cfg, cql_alpha=0.0, calql=False)

    def _augment(self, obs: Obs) -> Obs:
        pad = self.cfg.image_shift_pad
        offsets = partial(torch.randint, 0, 2 * pad + 1)  # sample_shifts' draw, through _draw for the ranks' rows
        return {k: random_shift(v, pad, shifts=self._draw(offsets, (len(v), 2), dim=0)) if k.startswith("image.")
                else v for k, v in obs.items()}

    def _draw(self, draw: Callable[..., torch.Tensor], shape: tuple[int, ...], dim: int = 1) -> torch.Tensor:
        """``draw(shape)`` (torch.randn …) from the learner's generator: this rank's rows along ``dim`` (draw_rows)."""
        return draw_rows(partial(draw, generator=self.generator, device=self.device), shape, self.data_parallel, dim)

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        """One SAC step on a sampled minibatch: critics, actor, temperature, then the target critics."""
        cfg, n, dp = self.cfg, len(batch), self.data_parallel
        # Every rank folds every rank's states into its normaliser, in rank order: the statistics stay equal.
        shared = dp is not None and self.actor.encoder.normalizer is not None
        self.actor.encoder.update_normalizer({"state": dp.cat(batch.obs["state"])} if shared and dp else batch.obs)
        obs, next_obs = batch.obs, batch.next_obs
        if self.actor.encoder.cnn is not None and cfg.image_shift_pad > 0:
            obs, next_obs = self._augment(obs), self._augment(next_obs)  # independent shifts (DrQ)
        # Every random number of the step comes from the learner's generator, drawn here, so the loss functions
        # are pure (compilable) and a seed fixes the whole trajectory of parameters (on any number of ranks).
        noise = self._draw(torch.randn, (2, n, self.actor.act_dim))
        subset = None
        if self.num_sampled < cfg.num_critics:
            subset = torch.randperm(cfg.num_critics, generator=self.generator, device=self.device)[: self.num_sampled]
        # Replayed env actions back to the squashed space the critics and log π live in.
        action = ((batch.action.reshape(n, -1) - self.actor.action_bias) / self.actor.action_scale).clamp(-1.0, 1.0)
        alpha = self.log_alpha.detach().exp()
        autocast = torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=cfg.amp_bf16)
        if self.actor.backbone is not None:  # the shared trunk, once per batch for every network
            with autocast:
                obs = self.actor.backbone(obs)
                with torch.no_grad():
                    next_obs = self.actor.backbone(next_obs)
        graphs = cfg.compile and cfg.compile_mode == "reduce-overhead"
        if graphs:
            # CUDA graphs reuse their output memory on the next replay: mark the step, and copy what
            # outlives the next compiled call (the statistics) out of the graph's pool below.
            torch.compiler.cudagraph_mark_step_begin()

        cql_draws = calibration = None
        if cfg.cql_alpha > 0:
            shape = (cfg.cql_samples, n, self.actor.act_dim)
            cql_draws = (self._draw(torch.randn, shape), self._draw(torch.rand, shape) * 2.0 - 1.0)
            calibration = mc_calibration(batch.extras, n) if cfg.calql else None
        with autocast:
            critic_loss, q_mean, features = self._critic_loss(obs, action, batch.reward, batch.terminated,
                                                              next_obs, noise[0], subset, alpha,
                                                              batch.extras.get(DISCOUNT.name), cql_draws, calibration)
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optim.step()
        if graphs:
            critic_loss, q_mean, features = critic_loss.detach().clone(), q_mean.clone(), features.clone()

        # The actor's Q comes from the critic as just updated; α learns in the same backward (policy_loss).
        clone = action if self.num_updates < cfg.actor_bc_updates else None
        with autocast:
            actor_loss, temperature_loss, log_prob = self._policy_loss(obs, features, noise[1], alpha, clone)
        self.actor_optim.zero_grad(set_to_none=True)
        aux = self.aux_loss()  # an extension's term, e.g. co-training's λ·BC loss on real demos
        loss = actor_loss + temperature_loss
        (loss if aux is None else loss + aux).backward()
        self.actor_optim.step()  # actor head, and log α when it has a gradient

        self.soft_update_targets()
        self.num_updates += 1

        stats = torch.stack([critic_loss.detach(), actor_loss.detach(), alpha, -log_prob.mean(), q_mean,
                             temperature_loss.detach()]).tolist()  # one host sync for all statistics
        return dict(zip(("critic_loss", "actor_loss", "alpha", "entropy", "q_mean", "temperature_loss"), stats))

    # ---- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Networks, targets, optimisers, log α, normaliser statistics, update count and RNG state."""
        return {
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "encoder_target": self.encoder_target.state_dict() if self.encoder_target is not None else {},
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optim": self.actor_optim.state_dict(),
            "critic_optim": self.critic_optim.state_dict(),
            "num_updates": self.num_updates, "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output exactly; a missing or unknown key is an error."""
        nets.check_state_keys("SAC", state, tuple(self.state_dict()))
        self.critic.load_state_dict(state["critic"], strict=True)
        self.critic_target.load_state_dict(state["critic_target"], strict=True)
        if self.encoder_target is not None:
            self.encoder_target.load_state_dict(state["encoder_target"], strict=True)
        # Last, so that the actor's normaliser statistics win where the target copies share the module (a
        # checkpoint from before they shared it holds stale statistics in its target copies).
        self.actor.load_state_dict(state["actor"], strict=True)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.critic_optim.load_state_dict(state["critic_optim"])
        self.num_updates = int(state["num_updates"])
        self.generator.set_state(state["generator"].cpu())
