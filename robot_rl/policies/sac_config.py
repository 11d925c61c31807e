"""SAC's config: the learner's settings, with their help (``robot-rl config``), and the loss terms they switch on.

The learner is :mod:`robot_rl.policies.sac`, its networks :mod:`robot_rl.policies.sac_networks`, its loss terms
:mod:`robot_rl.policies.sac_terms`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch

from robot_rl.core.algorithm import Policy
from robot_rl.core.config import ALGOS, AlgoConfig, ConfigError
from robot_rl.core.specs import EnvSpec
from robot_rl.policies.modules.pretrained import check_image_encoder
from robot_rl.policies.sac_networks import SACPolicy, SACValueEstimator
from robot_rl.policies.sac_terms import SAC_LOSS_TERMS, BCWarmupConfig, CQLConfig, SACLossTermConfig

if TYPE_CHECKING:
    from robot_rl.policies.sac import SACAlgorithm

__all__ = ["SACConfig"]


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
    return (``batch.extras["mc_return"]``), so offline Q stays on the scale of returns and fine-tuning online
    starts without an unlearning dip. Needs ``cql_alpha > 0``."""
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
    loss_terms: tuple[SACLossTermConfig, ...] = ()
    """More terms of the critic's or the actor's loss, by registered name (robot_rl.policies.sac_terms), e.g.
    ``[{type: cql, alpha: 1.0}]``. CQL and the BC warm-up are usually set by the keys above."""

    def validate(self) -> None:
        """Raise ``ValueError`` on an impossible setting."""
        check_image_encoder(self.image_encoder)
        if self.image_backbone and self.image_encoder == "cnn":
            raise ConfigError("image_backbone needs image_encoder resnet10 or resnet18")
        if (min(self.cql_alpha, self.actor_bc_updates, self.cql_samples - 1, self.image_conv_stride - 1) < 0
                or (self.calql and not self.cql_alpha)):
            raise ConfigError("cql_alpha and actor_bc_updates must be >= 0, cql_samples and image_conv_stride >= 1; "
                              "calql needs cql_alpha > 0")
        terms = self.loss_term_configs()
        for term in terms:
            term.validate()
        names = [SAC_LOSS_TERMS.name_of(t) for t in terms]
        if len(set(names)) < len(names):
            raise ConfigError(f"a loss term is given twice ({', '.join(names)}): set CQL by algo.cql_alpha or "
                              "algo.loss_terms, the BC warm-up by algo.actor_bc_updates or algo.loss_terms")

    def loss_term_configs(self) -> list[SACLossTermConfig]:
        """The terms these settings switch on: the flat keys' (CQL / Cal-QL, the BC warm-up), then ``loss_terms``."""
        flat: list[SACLossTermConfig] = []
        if self.cql_alpha > 0:
            flat.append(CQLConfig(self.cql_alpha, self.cql_samples, self.calql))
        if self.actor_bc_updates > 0:
            flat.append(BCWarmupConfig(self.actor_bc_updates))
        return [*flat, *self.loss_terms]

    def build(self, spec: EnvSpec, device: torch.device | str, seed: int) -> SACAlgorithm:
        """The learner for environments with ``spec``, its networks seeded by ``seed``."""
        from robot_rl.policies.sac import SACAlgorithm

        return SACAlgorithm(self, spec, torch.device(device), seed)

    def build_policy(self, spec: EnvSpec, device: torch.device | str, seed: int = 0) -> SACPolicy:
        """The actor alone (encoder and head; no critics, no optimisers), initialised from ``seed``."""
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            return SACPolicy(spec, self).to(device)

    def build_value_estimator(self, spec: EnvSpec, policy: Policy) -> SACValueEstimator | None:
        """The critic ensemble for an actor acting with ``policy``, or None if not a SACPolicy (its encoder)."""
        return SACValueEstimator(spec, self, policy) if isinstance(policy, SACPolicy) else None
