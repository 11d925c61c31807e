"""SAC's networks: the actor-side policy (what actors run and the learner publishes) and the critic ensemble.

The learner, its losses and the config live in :mod:`robot_rl.policies.sac`; these are the whole models it
trains, built from the blocks in :mod:`robot_rl.policies.modules`. Pixels go through the policy's
observation encoder (the DrQ CNN), or through a pretrained ResNet trunk (``SACPolicy.backbone``) whose
feature maps the policy's and the critic's own heads read.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from robot_rl.core.algorithm import MLPActorParts, Policy
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs
from robot_rl.policies.modules.ensemble import EnsembleMLP
from robot_rl.policies.modules.mlp import MLP
from robot_rl.policies.modules.obs_encoder import ObsEncoder
from robot_rl.policies.modules.pretrained import CameraTrunk

if TYPE_CHECKING:
    from robot_rl.policies.sac_config import SACConfig

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def squashed_sample(mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reparameterised ``a = tanh(μ + σ·ε)`` and ``log π(a|s)`` ``[B]`` of a tanh-squashed Gaussian, ``[B, |A|]`` in.

    ``log π = Σ_i [−ε_i²/2 − log σ_i − log(2π)/2 − log(1 − tanh² u_i)]`` with the stable form
    ``log(1 − tanh² u) = 2·(log 2 − u − softplus(−2u))``.
    """
    u = mean + log_std.exp() * noise
    log_prob = (-0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)
                - 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(dim=-1)
    return torch.tanh(u), log_prob


def squashed_mean_error(mean: torch.Tensor, unit_action: torch.Tensor) -> torch.Tensor:
    """``‖tanh μ(s) − a‖²`` ``[B]``: behaviour cloning of actions in ``[-1, 1]^{|A|}`` onto the deterministic action.

    Not the tanh-Gaussian's ``−log π(a|s)``: demonstrated actions often sit on the bound (a saturated move), whose
    pre-image ``atanh a`` is infinite or, pulled inside, huge, and maximising the likelihood there shrinks σ
    while the means stay off. On mujoco/pick_cube's 50 scripted demos (26 % of move values at ±1), 6,000 steps of
    likelihood left the mean 0.16 from the demonstrated actions and the policy picked 0 of 32 cubes; this error
    reached 0.03 and 32 of 32 after 2,000 steps. It is the log-likelihood of a Gaussian around ``tanh μ`` with a
    state-independent σ up to scale (IQL's reference policy), and TD3+BC's term.
    """
    return (torch.tanh(mean) - unit_action.clamp(-1.0, 1.0)).square().sum(dim=-1)


# --------------------------------------------------------------------------------------------
# Networks
# --------------------------------------------------------------------------------------------


class SACCritic(nn.Module):
    """Q-ensemble: features ``[B, F]``, squashed action ``[B, |A|]`` → ``[E, B]``.

    ``encoder``: the critic's own observation encoder (a head on a shared trunk's maps), which the target
    copy then averages too; ``None`` = the critic reads the actor's encoder (the DrQ CNN).
    """

    def __init__(self, feature_dim: int, act_dim: int, cfg: SACConfig, encoder: ObsEncoder | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.q = EnsembleMLP(cfg.num_critics, feature_dim + act_dim, cfg.critic_hidden, 1, cfg.critic_layer_norm)

    def forward(self, features: torch.Tensor, action: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """``Q_j(s, a)`` for every member j."""
        return self.q(torch.cat([features, action], dim=-1), detach_params).squeeze(-1)


# --------------------------------------------------------------------------------------------
# Actor-side policy
# --------------------------------------------------------------------------------------------


class SACPolicy(Policy):
    """Tanh-squashed Gaussian policy: observation encoder (+ normaliser, CNN) and an MLP head.

    Its ``state_dict`` is exactly the actor weights the learner publishes.
    """

    action_scale: torch.Tensor
    action_bias: torch.Tensor

    def __init__(self, spec: EnvSpec, cfg: SACConfig) -> None:
        super().__init__()
        cfg.validate()
        self.action_shape = spec.action.shape
        self.act_dim = math.prod(spec.action.shape)
        images = {k: spec.observation[k].shape for k in spec.image_keys}
        self.backbone = (CameraTrunk(cfg.image_encoder, images, cfg.freeze_backbone)
                         if images and cfg.image_encoder != "cnn" else None)
        self.encoder = make_encoder(spec, cfg, self.backbone)
        self.trunk = MLP(self.encoder.out_dim, cfg.actor_hidden, 2 * self.act_dim)
        low, high = spec.action.low, spec.action.high
        scale, bias = (1.0, 0.0) if low is None or high is None else ((high - low) / 2.0, (high + low) / 2.0)
        self.register_buffer("action_scale", torch.full((self.act_dim,), scale))
        self.register_buffer("action_bias", torch.full((self.act_dim,), bias))

    def embed(self, obs: Obs) -> Obs:
        """``obs`` with each camera replaced by the trunk's feature map (unchanged without a trunk)."""
        return obs if self.backbone is None else self.backbone(obs)

    def encode(self, obs: Obs) -> torch.Tensor:
        """Observation → features ``[N, F]`` (trunk, then this policy's encoder)."""
        return self.encoder(self.embed(obs))

    def gaussian(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log-std ``[B, |A|]`` of the pre-tanh Gaussian (log σ squashed into its range smoothly)."""
        mean, log_std = self.trunk(features).float().chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1.0)
        return mean, log_std

    def sample(self, features: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised squashed action ``a ∈ [-1, 1]^{|A|}`` and ``log π(a|s)`` for noise ε ``[B, |A|]``.

        ``u = μ + σ·ε``, ``a = tanh u``,
        ``log π(a|s) = Σ_i [−ε_i²/2 − log σ_i − log(2π)/2 − log(1 − tanh² u_i)]`` with the stable form
        ``log(1 − tanh² u) = 2·(log 2 − u − softplus(−2u))``.
        """
        return squashed_sample(*self.gaussian(features), noise)

    def unit_action(self, action: torch.Tensor) -> torch.Tensor:
        """Env actions ``[N, *A]`` back in the squashed space ``[N, |A|]`` in ``[-1, 1]`` where Q and log π live."""
        return ((action.reshape(action.shape[0], -1) - self.action_bias) / self.action_scale).clamp(-1.0, 1.0)

    def data_error(self, features: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``‖tanh μ(s) − a‖²`` ``[B]`` of given env actions ``[B, *A]`` in the unit box (:func:`squashed_mean_error`).

        Behaviour cloning and IQL's advantage-weighted regression regress the deterministic action onto the data.
        """
        mean, _ = self.gaussian(features)
        return squashed_mean_error(mean, (action.reshape(mean.shape) - self.action_bias) / self.action_scale)

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Actions ``[N, *action_shape]`` in the spec's bounds (``tanh μ`` when deterministic); no extras."""
        if deterministic:
            return self.deterministic_action(obs), {}
        mean, log_std = self.gaussian(self.encode(obs))
        u = mean + log_std.exp() * torch.randn_like(mean)
        action = torch.tanh(u) * self.action_scale + self.action_bias
        return action.reshape(-1, *self.action_shape), {}

    def deterministic_action(self, obs: Obs) -> torch.Tensor:
        """The squashed mean ``tanh(μ(s))·scale + bias`` → ``[N, *action_shape]`` (what export traces)."""
        mean, _ = self.gaussian(self.encode(obs))
        return (torch.tanh(mean) * self.action_scale + self.action_bias).reshape(-1, *self.action_shape)

    def pre_squash_action(self, obs: Obs) -> torch.Tensor:
        """``μ(s)`` → ``[N, *action_shape]``, the mean before ``tanh`` (distillation matches it).

        :class:`~robot_rl.core.algorithm.SquashedActor`: ``deterministic_action = tanh(μ)·scale + bias``.
        """
        mean, _ = self.gaussian(self.encode(obs))
        return mean.reshape(-1, *self.action_shape)

    def mlp_parts(self) -> MLPActorParts | None:
        """Normaliser, head (its first ``|A|`` rows are μ) and ``tanh_scale``; ``None`` with a CNN encoder."""
        enc = self.encoder
        if enc.cnn is not None:
            return None
        return MLPActorParts(enc.state_dim, enc.normalizer, self.trunk, self.act_dim, "tanh_scale", self.action_scale,
                             self.action_bias, tuple(self.action_shape))


def make_encoder(spec: EnvSpec, cfg: SACConfig, trunk: CameraTrunk | None, share: ObsEncoder | None = None
                 ) -> ObsEncoder:
    """The observation encoder of one network: on ``trunk``'s maps when there is one; ``share``'s normaliser."""
    return ObsEncoder(spec, cfg.normalize_obs, cfg.image_features, cfg.image_channels,
                      map_shapes=trunk.map_shapes if trunk is not None else None,
                      spatial_embeddings=cfg.image_spatial_embeddings,
                      normalizer=share.normalizer if share is not None else None, conv_stride=cfg.image_conv_stride)


class SACValueEstimator(nn.Module):
    """The critic ensemble at the actor (:class:`~robot_rl.core.algorithm.ValueEstimator`).

    Q of the acting policy's actions, with the critic's own encoder head when a pretrained trunk is shared, else
    through the policy's encoder.
    """

    def __init__(self, spec: EnvSpec, cfg: SACConfig, policy: SACPolicy) -> None:
        super().__init__()
        head = make_encoder(spec, cfg, policy.backbone, share=policy.encoder) if policy.backbone is not None else None
        self.critic = SACCritic(policy.encoder.out_dim, policy.act_dim, cfg, head)
        self.critic.requires_grad_(False)

    def load_critic_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Load :meth:`SACAlgorithm.critic_weights` (strict)."""
        self.critic.load_state_dict(weights, strict=True)

    @torch.no_grad()
    def q_values(self, policy: Policy, obs: Obs, action: torch.Tensor) -> torch.Tensor:
        """``[E, N]`` Q of ``action`` (in the spec's bounds) at ``obs``."""
        if not isinstance(policy, SACPolicy):
            raise TypeError(f"SAC's critics read a SACPolicy's encoder, got {type(policy).__name__}")
        features = (self.critic.encoder(policy.embed(obs)) if self.critic.encoder is not None
                    else policy.encode(obs))
        return self.critic(features, policy.unit_action(action))


def shared_memo(*modules: nn.Module | None) -> dict[int, Any]:
    """A ``copy.deepcopy`` memo under which ``modules`` are shared by the copy, not copied."""
    return {id(m): m for m in modules if m is not None}


def check_state_keys(name: str, state: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Raise ``KeyError`` naming what a learner's checkpoint ``state`` lacks or has that ``keys`` do not list."""
    if set(state) != set(keys):
        raise KeyError(f"{name} state keys differ: missing {sorted(set(keys) - set(state))}, "
                       f"unknown {sorted(set(state) - set(keys))}")
