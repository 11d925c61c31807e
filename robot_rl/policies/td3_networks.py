"""FastTD3's actor-side policy: a deterministic tanh actor over normalised state, with per-env exploration noise.

The learner (:mod:`robot_rl.policies.td3`) trains it; actors run it. Exploration follows FastTD3 (Seo et al.,
2025): every sub-env explores with its own Gaussian noise scale ``σ_e ~ U[std_min, std_max]``, so that a batch
of parallel envs covers cautious and bold behaviour at once. FastTD3 redraws ``σ_e`` when the sub-env's episode
ends; a :class:`~robot_rl.core.algorithm.Policy` sees observations only, not episode ends, so here each sub-env's
scale is redrawn with probability ``1/noise_hold_steps`` at every step (a memoryless hold of that many steps on
average, about an episode).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from robot_rl.core.algorithm import MLPActorParts
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs
from robot_rl.policies.fast_offpolicy import ActorWithEncoder, action_affine, state_encoder
from robot_rl.policies.modules.mlp import MLP

if TYPE_CHECKING:
    from robot_rl.policies.td3 import TD3Config


class TD3Policy(ActorWithEncoder):
    """``a = tanh(MLP(norm(state)))·scale + bias``; exploring, ``+ σ_e·ε`` in the unit space, clamped to ±1.

    Its ``state_dict`` (normaliser statistics, MLP, action scaling) is exactly what the learner publishes. The
    exploration noise comes from the policy's own generator (seeded by ``seed``; :meth:`reseed` for a copy).
    """

    action_scale: torch.Tensor
    action_bias: torch.Tensor

    def __init__(self, spec: EnvSpec, cfg: TD3Config, seed: int = 0) -> None:
        super().__init__()
        self.action_shape = spec.action.shape
        self.act_dim = math.prod(spec.action.shape)
        self.encoder = state_encoder(spec, cfg.normalize_obs, "fasttd3")
        self.trunk = MLP(self.encoder.out_dim, cfg.actor_hidden, self.act_dim)
        # FastTD3 starts the output layer near zero (init_scale 0.01): early actions are the exploration noise.
        out = self.trunk[-1]
        assert isinstance(out, nn.Linear)
        nn.init.normal_(out.weight, 0.0, cfg.init_scale)
        nn.init.zeros_(out.bias)
        scale, bias = action_affine(spec, self.act_dim)
        self.register_buffer("action_scale", scale)
        self.register_buffer("action_bias", bias)
        self.std_min, self.std_max, self.noise_hold_steps = cfg.std_min, cfg.std_max, cfg.noise_hold_steps
        self._seed = seed
        self._generator: torch.Generator | None = None
        self._scales: torch.Tensor | None = None  # [N, 1] per sub-env noise scale

    def reseed(self, seed: int) -> None:
        """Restart the exploration noise from ``seed`` (copies made for several actors explore differently)."""
        self._seed, self._generator, self._scales = seed, None, None

    def unit_action(self, features: torch.Tensor) -> torch.Tensor:
        """The deterministic action in ``[-1, 1]^{|A|}`` ``[B, |A|]`` (float32) for encoded observations."""
        return torch.tanh(self.trunk(features).float())

    def to_env(self, unit: torch.Tensor) -> torch.Tensor:
        """A unit-space action ``[B, |A|]`` in the env's bounds, ``[B, *action_shape]``."""
        return (unit * self.action_scale + self.action_bias).reshape(-1, *self.action_shape)

    def to_unit(self, action: torch.Tensor) -> torch.Tensor:
        """Env actions ``[B, *action_shape]`` back to ``[-1, 1]^{|A|}``, clamped (a replayed action may be a bound)."""
        return ((action.reshape(action.shape[0], -1) - self.action_bias) / self.action_scale).clamp(-1.0, 1.0)

    def data_loss(self, features: torch.Tensor, unit_action: torch.Tensor) -> torch.Tensor:
        """``‖μ(s) − a‖²`` per row (TD3+BC's behaviour-cloning term), in the unit action space."""
        return (self.unit_action(features) - unit_action).square().sum(dim=-1)

    def _noise_scales(self, n: int, device: torch.device) -> torch.Tensor:
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(self._seed)
        gen, lo, hi = self._generator, self.std_min, self.std_max
        fresh = lo + (hi - lo) * torch.rand((n, 1), generator=gen, device=device)
        if self._scales is None or self._scales.shape[0] != n:
            self._scales = fresh
        else:
            redraw = torch.rand((n, 1), generator=gen, device=device) < 1.0 / self.noise_hold_steps
            self._scales = torch.where(redraw, fresh, self._scales)
        return self._scales

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Actions ``[N, *action_shape]`` in the spec's bounds; no extras."""
        unit = self.unit_action(self.encoder(obs))
        if not deterministic:
            scales = self._noise_scales(unit.shape[0], unit.device)
            assert self._generator is not None
            noise = torch.randn(unit.shape, generator=self._generator, device=unit.device)
            unit = (unit + scales * noise).clamp(-1.0, 1.0)
        return self.to_env(unit), {}

    def deterministic_action(self, obs: Obs) -> torch.Tensor:
        """``tanh(MLP(norm(state)))·scale + bias`` → ``[N, *action_shape]`` (what export traces)."""
        return self.to_env(self.unit_action(self.encoder(obs)))

    def mlp_parts(self) -> MLPActorParts:
        """Normaliser, MLP and ``tanh_scale`` output: the C exporter's view of :meth:`deterministic_action`."""
        return MLPActorParts(self.encoder.state_dim, self.encoder.normalizer, self.trunk, self.act_dim, "tanh_scale",
                             self.action_scale, self.action_bias, tuple(self.action_shape))
