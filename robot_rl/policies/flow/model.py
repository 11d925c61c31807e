"""``FlowVLAPolicy``: cameras + language + proprioception → action chunks ``[H, A]`` by flow matching.

Observation encoder (:class:`VLAEncoder`): one small CNN per camera (:class:`~robot_rl.policies.modules.cnn.
MultiCameraEncoder`), a language encoder over the built-in hashed tokens (embedding + position, a small
transformer layer, masked mean pool), and an MLP over ``state``; their features are concatenated into the
condition ``c``. The action expert (:class:`ActionExpert`, an MLP or a small transformer over the ``H``
chunk steps) predicts the velocity ``v_θ(x_t, t, c)``.

Rectified flow (x0 = noise, x1 = data)::

    x_t = (1 − t) x0 + t x1,   target velocity u = x1 − x0,   L = E ‖v_θ(x_t, t, c) − u‖²

Sampling integrates ``dx/dt = v_θ`` from ``t = 0`` (``x0 ~ N(0, I)``, or ``x0 = 0`` when deterministic) to
``t = 1`` in ``num_steps`` steps, with the ``euler`` or ``midpoint`` rule. Actions are expected in
``[-1, 1]`` (the built-in tasks' bounds) and are clamped to the spec's bounds on the way out.

Flow-Noise (pi_RL): with a learnable std ``σ_k`` per denoising step, each step becomes Gaussian,
``x_{k+1} ~ N(μ_k, σ_k²)`` with ``μ_k`` the integrator's update, so the whole chain has the exact
log-likelihood ``log N(x_0; 0, I) + Σ_k log N(x_{k+1}; μ_k, σ_k²)`` (:meth:`FlowVLAPolicy.chain_log_prob`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from robot_rl.core.algorithm import Policy
from robot_rl.core.config import ConfigError
from robot_rl.core.extras import CHAIN, ELEMENT_LOG_PROB, LOG_PROB
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.core.transition import Obs
from robot_rl.policies.flow.backbone import ResNetCameras, load_backbone_weights
from robot_rl.policies.modules.cnn import MultiCameraEncoder
from robot_rl.policies.modules.mlp import MLP

_LOG_2PI = math.log(2.0 * math.pi)


def clamp_to_bounds(x: torch.Tensor, low: float | torch.Tensor | None, high: float | torch.Tensor | None
                    ) -> torch.Tensor:
    """``x`` clamped to an action space's bounds (either may be ``None``: unbounded on that side)."""
    if low is None and high is None:
        return x
    return x.clamp(low, high)  # type: ignore[arg-type]  # floats or tensors, as clamp takes


@dataclass
class FlowVLAConfig:
    """Architecture and sampler of a :class:`FlowVLAPolicy` (a section of ``flow_ppo`` and of SFT)."""

    horizon: int = 8
    """Actions per predicted chunk ``H``."""
    num_steps: int = 10
    """Denoising (integration) steps per chunk."""
    integrator: Literal["euler", "midpoint"] = "euler"
    """ODE rule: ``euler`` (1 velocity call per step) or ``midpoint`` (2, second order)."""
    expert: Literal["mlp", "transformer"] = "mlp"
    """Action expert: an MLP over the flattened chunk, or a small transformer over the chunk steps."""
    hidden: int = 256
    """Width of the action expert (and of the transformer's tokens)."""
    expert_layers: int = 3
    """Hidden layers of the MLP expert, or transformer layers."""
    image_features: int = 64
    """Features per camera."""
    cnn_channels: int = 32
    """Channels of each camera's conv layers."""
    cnn_layers: int = 3
    """Conv layers per camera."""
    keypoint_gain: float = 10.0
    """``spatial_softmax``: initial inverse temperature of each keypoint softmax (a learned per-channel
    parameter). A small object covers a few of the map's hundreds of pixels, so at a low gain its keypoint
    is pulled towards the image centre by the background's share of the softmax."""
    camera_encoder: Literal["spatial_softmax", "conv", "resnet18"] = "spatial_softmax"
    """``spatial_softmax``: conv maps → expected (x, y) per channel (keypoints, Levine et al. 2016), which
    localises objects from few demos; ``conv``: the DrQ-style encoder of ``policies/modules/cnn.py``;
    ``resnet18``: torchvision's ResNet-18 trunk (``backbone.py``), usually with ``pretrained_path``."""
    pretrained_path: str | None = None
    """Local weights file (``torch.save``'d state dict) loaded into every camera's backbone when the policy is
    built: ``resnet18`` → the ResNet-18 trunk (``fc.*`` ignored), ``spatial_softmax`` → its conv stack.
    Nothing is downloaded; a missing file or mismatched keys is an error."""
    freeze_backbone: bool = False
    """Keep the pretrained backbone's weights (and BatchNorm statistics) fixed during training."""
    state_features: int = 64
    """Features of the ``state`` MLP."""
    lang_features: int = 64
    """Width of the language encoder."""
    vocab_size: int = 256
    """Token ids the language embedding covers (must match the task's tokenizer)."""
    context_length: int = 8
    """Most language tokens the encoder accepts."""
    init_noise_std: float = 0.05
    """Flow-Noise: initial σ of every denoising step (RL fine-tuning only)."""

    def validate(self) -> None:
        """Raise ``ValueError`` on an impossible setting."""
        if self.horizon < 1 or self.num_steps < 1:
            raise ConfigError(f"horizon and num_steps must be >= 1, got {self.horizon}, {self.num_steps}")
        if self.integrator not in ("euler", "midpoint"):
            raise ConfigError(f"integrator must be 'euler' or 'midpoint', got {self.integrator!r}")
        if self.camera_encoder not in ("spatial_softmax", "conv", "resnet18"):
            raise ConfigError(f"camera_encoder must be 'spatial_softmax', 'conv' or 'resnet18', got "
                              f"{self.camera_encoder!r}")
        if self.pretrained_path and self.camera_encoder == "conv":
            raise ConfigError("pretrained_path needs camera_encoder 'resnet18' or 'spatial_softmax'")
        if self.expert not in ("mlp", "transformer"):
            raise ConfigError(f"expert must be 'mlp' or 'transformer', got {self.expert!r}")
        if self.init_noise_std <= 0:
            raise ConfigError(f"init_noise_std must be > 0, got {self.init_noise_std}")


def time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding ``[B, dim]`` of flow times ``t`` ``[B]`` in ``[0, 1]``."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, device=t.device, dtype=torch.float32) * (-math.log(1000.0) / max(half, 1)))
    angles = 1000.0 * t.float().unsqueeze(-1) * freqs
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


class SpatialSoftmaxCamera(nn.Module):
    """One camera, uint8 ``[N, H, W, C]`` → ``[N, features]`` via keypoints.

    ``num_layers`` 3×3 convolutions (padding 1, the first with stride 2) give ``channels`` maps; a softmax
    over each map's pixels gives the expected image coordinates ``(x, y)`` ∈ [−1, 1]² per channel, and a
    Linear layer maps the ``2·channels`` keypoints to ``features``. Positions come out as numbers
    directly, which is what reaching needs and what a plain conv + Linear learns slowly.
    """

    grid_x: torch.Tensor
    grid_y: torch.Tensor

    def __init__(self, image_shape: tuple[int, ...], features: int, channels: int, num_layers: int,
                 gain: float = 1.0) -> None:
        super().__init__()
        if gain <= 0:
            raise ValueError(f"keypoint_gain must be > 0, got {gain}")
        h, w, c = image_shape
        layers: list[nn.Module] = [nn.Conv2d(c, channels, 3, stride=2, padding=1), nn.ReLU()]
        for _ in range(num_layers - 1):
            layers += [nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU()]
        self.convs = nn.Sequential(*layers[:-1])  # no ReLU before the softmax: maps may be negative
        hh, ww = (h + 1) // 2, (w + 1) // 2
        self.register_buffer("grid_x", torch.linspace(-1, 1, ww).repeat(hh), persistent=False)
        self.register_buffer("grid_y", torch.linspace(-1, 1, hh).repeat_interleave(ww), persistent=False)
        self.projection = nn.Sequential(nn.Linear(2 * channels, features), nn.GELU())
        # Log-parameterised so the gain stays positive and can grow by orders of magnitude under Adam.
        self.log_gain = nn.Parameter(torch.full((channels, 1), math.log(gain)))

    def keypoints(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[N, H, W, C]`` → expected ``(x, y)`` in [−1, 1] of each channel's map, ``[N, channels]`` each."""
        x = self.convs(images.permute(0, 3, 1, 2).float() / 255.0 - 0.5)
        attn = torch.softmax(x.flatten(2) * self.log_gain.exp(), dim=-1)  # [N, C, H·W]
        return (attn * self.grid_x).sum(-1), (attn * self.grid_y).sum(-1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``[N, H, W, C]`` → ``[N, features]``."""
        kx, ky = self.keypoints(images)
        return self.projection(torch.cat([kx, ky], dim=-1))


class SpatialSoftmaxCameras(nn.Module):
    """Several cameras with :class:`SpatialSoftmaxCamera` each → concatenated features (sorted keys)."""

    def __init__(self, image_shapes: dict[str, tuple[int, ...]], features: int, channels: int, num_layers: int,
                 gain: float = 1.0) -> None:
        super().__init__()
        self.keys = sorted(image_shapes)
        self.cameras = nn.ModuleDict({k.replace(".", "_"): SpatialSoftmaxCamera(image_shapes[k], features, channels,
                                                                                num_layers, gain)
                                      for k in self.keys})
        self.out_dim = features * len(self.keys)

    def forward(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """Encode every camera and concatenate."""
        return torch.cat([self.cameras[k.replace(".", "_")](images[k]) for k in self.keys], dim=-1)


class LanguageEncoder(nn.Module):
    """Token ids ``int64 [N, L]`` (0 = padding) → ``[N, features]``: embedding, one attention layer, masked mean."""

    def __init__(self, vocab_size: int, context_length: int, features: int) -> None:
        super().__init__()
        self.vocab_size, self.context_length = vocab_size, context_length
        self.embed = nn.Embedding(vocab_size, features, padding_idx=0)
        self.position = nn.Parameter(torch.zeros(context_length, features))
        self.layer = nn.TransformerEncoderLayer(features, nhead=4, dim_feedforward=2 * features, dropout=0.0,
                                                batch_first=True)
        self.out_dim = features

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Encode ``[N, L]`` tokens; ``L`` above the context or ids outside the vocabulary are an error."""
        if tokens.shape[-1] > self.context_length:
            raise SpecMismatchError(f"language has {tokens.shape[-1]} tokens, more than the policy's context of "
                                    f"{self.context_length}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise SpecMismatchError(f"language token ids must be in [0, {self.vocab_size}), got "
                                    f"[{int(tokens.min())}, {int(tokens.max())}]")
        pad = tokens == 0
        x = self.embed(tokens) + self.position[: tokens.shape[-1]]
        # An all-padding instruction would mask every key (NaN attention); let it attend to everything.
        key_mask = pad & ~pad.all(dim=-1, keepdim=True)
        x = self.layer(x, src_key_padding_mask=key_mask)
        keep = (~pad).float().unsqueeze(-1)
        return (x * keep).sum(1) / keep.sum(1).clamp_min(1.0)


class VLAEncoder(nn.Module):
    """Observation dict → condition ``[N, out_dim]`` (cameras, language and state, each when present)."""

    def __init__(self, spec: EnvSpec, cfg: FlowVLAConfig) -> None:
        super().__init__()
        self.image_keys = spec.image_keys
        self.has_language = "language" in spec.observation
        self.has_state = "state" in spec.observation
        dim = 0
        self.cameras: MultiCameraEncoder | SpatialSoftmaxCameras | ResNetCameras | None = None
        self.freeze_backbone = cfg.freeze_backbone
        if self.image_keys:
            shapes = {k: spec.observation[k].shape for k in self.image_keys}
            if cfg.camera_encoder == "conv":
                self.cameras = MultiCameraEncoder(shapes, cfg.image_features, cfg.cnn_channels, cfg.cnn_layers)
            elif cfg.camera_encoder == "resnet18":
                self.cameras = ResNetCameras(shapes, cfg.image_features)
            else:
                self.cameras = SpatialSoftmaxCameras(shapes, cfg.image_features, cfg.cnn_channels, cfg.cnn_layers,
                                                     cfg.keypoint_gain)
            dim += self.cameras.out_dim
            if cfg.pretrained_path:
                for backbone in self.backbones():
                    load_backbone_weights(backbone, cfg.pretrained_path)
            if cfg.freeze_backbone:
                for backbone in self.backbones():
                    backbone.requires_grad_(False)
                self.train(self.training)  # frozen backbones run in eval mode from the start
        self.language: LanguageEncoder | None = None
        if self.has_language:
            length = spec.observation["language"].shape[0]
            if length > cfg.context_length:
                raise SpecMismatchError(f"the task's language has {length} tokens, more than the policy's "
                                        f"context_length={cfg.context_length}")
            self.language = LanguageEncoder(cfg.vocab_size, cfg.context_length, cfg.lang_features)
            dim += cfg.lang_features
        self.state: MLP | None = None
        if self.has_state:
            self.state = MLP(spec.observation["state"].shape[0], (cfg.state_features,), cfg.state_features, "gelu")
            dim += cfg.state_features
        if dim == 0:
            raise SpecMismatchError("FlowVLAPolicy needs at least one of image.<camera>, language, state")
        self.out_dim = dim

    def backbones(self) -> list[nn.Module]:
        """Each camera's backbone (what ``pretrained_path`` loads): ResNet trunks or spatial-softmax conv stacks."""
        if isinstance(self.cameras, ResNetCameras):
            return [cam.get_submodule("backbone") for cam in self.cameras.cameras.values()]
        if isinstance(self.cameras, SpatialSoftmaxCameras):
            return [cam.get_submodule("convs") for cam in self.cameras.cameras.values()]
        return []

    def train(self, mode: bool = True) -> VLAEncoder:
        """As ``nn.Module.train``, but a frozen backbone stays in eval mode (fixed BatchNorm statistics)."""
        super().train(mode)
        if self.freeze_backbone:
            for backbone in self.backbones():
                backbone.eval()
        return self

    def forward(self, obs: Obs) -> torch.Tensor:
        """``[N, out_dim]``; a missing observation key is a :class:`SpecMismatchError` naming it."""
        needed = [*self.image_keys, *(["language"] if self.has_language else []),
                  *(["state"] if self.has_state else [])]
        missing = [k for k in needed if k not in obs]
        if missing:
            raise SpecMismatchError(f"observation is missing {missing} (the policy was built with cameras "
                                    f"{self.image_keys}{', language' if self.has_language else ''}"
                                    f"{', state' if self.has_state else ''})")
        parts = []
        if self.cameras is not None:
            parts.append(self.cameras({k: obs[k] for k in self.image_keys}))
        if self.language is not None:
            parts.append(self.language(obs["language"]))
        if self.state is not None:
            parts.append(self.state(obs["state"].float()))
        return torch.cat(parts, dim=-1)


class ActionExpert(nn.Module):
    """Velocity field ``v(x [B, H, A], t [B], c [B, C]) → [B, H, A]``."""

    def __init__(self, cfg: FlowVLAConfig, action_dim: int, cond_dim: int) -> None:
        super().__init__()
        self.kind, self.horizon, self.action_dim, self.hidden = cfg.expert, cfg.horizon, action_dim, cfg.hidden
        self.cond = nn.Sequential(nn.Linear(cond_dim + cfg.hidden, cfg.hidden), nn.GELU())
        self.net: nn.Module
        if cfg.expert == "mlp":
            self.net = MLP(cfg.hidden + cfg.horizon * action_dim, (cfg.hidden,) * cfg.expert_layers,
                           cfg.horizon * action_dim, "gelu")
        else:
            self.inp = nn.Linear(action_dim, cfg.hidden)
            self.position = nn.Parameter(torch.zeros(cfg.horizon + 1, cfg.hidden))
            layer = nn.TransformerEncoderLayer(cfg.hidden, nhead=4, dim_feedforward=2 * cfg.hidden, dropout=0.0,
                                               batch_first=True)
            self.net = nn.TransformerEncoder(layer, cfg.expert_layers, enable_nested_tensor=False)
            self.out = nn.Linear(cfg.hidden, action_dim)

    def forward(self, x: torch.Tensor, t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """The predicted velocity, same shape as ``x``."""
        h = self.cond(torch.cat([c, time_embedding(t, self.hidden)], dim=-1))
        if self.kind == "mlp":
            return self.net(torch.cat([h, x.flatten(1)], dim=-1)).view_as(x)
        tokens = torch.cat([h.unsqueeze(1), self.inp(x)], dim=1) + self.position
        return self.out(self.net(tokens)[:, 1:])


def element_log_density(chain: torch.Tensor, means: torch.Tensor, log_sigma: torch.Tensor) -> torch.Tensor:
    """``log N(x_{k+1}; μ_k, σ_k²)`` per step and element of chains ``[B, K + 1, H, A]`` → ``[B, K, H, A]``."""
    z = (chain[:, 1:] - means) * torch.exp(-log_sigma)
    return -0.5 * z.square() - log_sigma - 0.5 * _LOG_2PI


def chain_log_prob_of(chain: torch.Tensor, elements: torch.Tensor) -> torch.Tensor:
    """``log N(x_0; 0, I) + Σ`` of the element log-densities → ``[B]``: the whole chain's log-likelihood."""
    x0 = chain[:, 0].flatten(1)
    return (-0.5 * x0.square() - 0.5 * _LOG_2PI).sum(-1) + elements.flatten(1).sum(-1)


class FlowVLAPolicy(Policy):
    """Encoder + action expert + Flow-Noise stds; ``act`` returns a whole chunk ``[N, H, A]``.

    ``act(obs, deterministic=False)`` samples the Flow-Noise chain (``x0 ~ N(0, I)``, Gaussian steps with
    ``σ_k``) and returns ``extras = {"chain": [N, K + 1, H, A], "log_prob": [N], "element_log_prob": [N, K, H, A]}``
    for chunk-level RL;
    ``deterministic=True`` integrates the ODE from ``x0 = 0`` without noise. Use
    :meth:`sample` for plain (noise-free) flow sampling from ``x0 ~ N(0, I)``.
    """

    def __init__(self, spec: EnvSpec, cfg: FlowVLAConfig) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        shape = spec.action.shape
        if len(shape) == 2 and shape[0] != cfg.horizon:
            raise SpecMismatchError(f"the task's action chunk has horizon {shape[0]}, the policy's is "
                                    f"{cfg.horizon}; set the same horizon on both")
        self.action_dim = shape[-1]
        self.low, self.high = spec.action.low, spec.action.high
        self.encoder = VLAEncoder(spec, cfg)
        self.expert = ActionExpert(cfg, self.action_dim, self.encoder.out_dim)
        self.log_sigma = nn.Parameter(torch.full((cfg.num_steps, cfg.horizon, self.action_dim),
                                                 math.log(cfg.init_noise_std)))
        self.generator: torch.Generator | None = None

    def reseed(self, seed: int) -> None:
        """Draw this policy's sampling noise from its own generator seeded ``seed``: same seed → same chunks.

        Without it, ``act`` uses torch's global RNG (shared with everything else in the process).
        """
        device = next(self.parameters()).device
        self.generator = torch.Generator(device=device).manual_seed(int(seed))

    # ---- flow matching -----------------------------------------------------------------------

    def velocity(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """``v_θ(x, t, c)`` for chunks ``x`` ``[B, H, A]``, times ``t`` ``[B]``, conditions ``c`` ``[B, C]``."""
        return self.expert(x, t, cond)

    def flow_matching_loss(self, obs: Obs, actions: torch.Tensor, mask: torch.Tensor | None = None,
                           generator: torch.Generator | None = None) -> torch.Tensor:
        """Rectified-flow loss ``E‖v_θ(x_t, t, c) − (x1 − x0)‖²`` on target chunks ``actions`` ``[B, H, A]``.

        ``mask`` ``[B, H]`` (1 = a real action, 0 = padding past the episode end) weights the chunk steps.
        """
        if actions.dim() != 3 or tuple(actions.shape[1:]) != (self.cfg.horizon, self.action_dim):
            raise SpecMismatchError(f"target chunks must be [B, {self.cfg.horizon}, {self.action_dim}], "
                                    f"got {list(actions.shape)}")
        cond = self.encoder(obs)
        b = actions.shape[0]
        x0 = torch.randn(actions.shape, device=actions.device, generator=generator)
        t = torch.rand(b, device=actions.device, generator=generator)
        xt = (1 - t)[:, None, None] * x0 + t[:, None, None] * actions
        err = (self.velocity(xt, t, cond) - (actions - x0)).square().mean(-1)
        if mask is None:
            return err.mean()
        return (err * mask).sum() / mask.sum().clamp_min(1.0)

    # ---- supervised learning (co-training, SFT): robot_rl.core.algorithm.SupervisedLoss --------------

    def supervised_loss(self, obs: Obs, action: torch.Tensor, mask: torch.Tensor | None = None,
                        generator: torch.Generator | None = None, train_encoder: bool = False) -> torch.Tensor:
        """The flow-matching loss on target chunks ``[B, H, A]`` (:meth:`flow_matching_loss`).

        The encoder always trains with it (``train_encoder`` is not used: no other loss trains it).
        """
        return self.flow_matching_loss(obs, action, mask, generator)

    def supervised_parameters(self) -> list[nn.Parameter]:
        """Everything but the Flow-Noise ``log_sigma`` (flow matching does not use σ)."""
        return [p for n, p in self.named_parameters() if n != "log_sigma"]

    def prepare_supervised(self, obs: Obs) -> None:
        """Nothing to fit: the encoder has no running statistics."""

    def finish_supervised(self) -> None:
        """Nothing follows a bare policy."""

    def _mean_step(self, x: torch.Tensor, k: int, cond: torch.Tensor) -> torch.Tensor:
        """The integrator's update ``μ_k(x)`` from ``t_k = k/K`` to ``t_{k+1}``."""
        dt = 1.0 / self.cfg.num_steps
        t = torch.full((x.shape[0],), k * dt, device=x.device)
        v = self.velocity(x, t, cond)
        if self.cfg.integrator == "midpoint":
            v = self.velocity(x + 0.5 * dt * v, t + 0.5 * dt, cond)
        return x + dt * v

    def sample(self, obs: Obs, x0: torch.Tensor | None = None, generator: torch.Generator | None = None
               ) -> torch.Tensor:
        """Integrate the flow ODE from ``x0`` (default ``N(0, I)``) → chunks ``[N, H, A]`` (not clamped)."""
        cond = self.encoder(obs)
        n = cond.shape[0]
        x = x0 if x0 is not None else torch.randn(n, self.cfg.horizon, self.action_dim, device=cond.device,
                                                  generator=generator)
        for k in range(self.cfg.num_steps):
            x = self._mean_step(x, k, cond)
        return x

    # ---- Flow-Noise: the chain as a Gaussian Markov chain ------------------------------------

    def sample_chain(self, obs: Obs, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(chain [N, K + 1, H, A], log_prob [N])``: ``x_{k+1} = μ_k(x_k) + σ_k ε_k``, exact log-likelihood."""
        chain, log_prob, _ = self.sample_scored_chain(obs, generator)
        return chain, log_prob

    def sample_scored_chain(self, obs: Obs, generator: torch.Generator | None = None
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`sample_chain` and the chain's element log-densities ``[N, K, H, A]`` (:func:`element_log_density`)."""
        cond = self.encoder(obs)
        n = cond.shape[0]
        x = torch.randn(n, self.cfg.horizon, self.action_dim, device=cond.device, generator=generator)
        chain = [x]
        sigma = self.log_sigma.exp()
        for k in range(self.cfg.num_steps):
            eps = torch.randn(x.shape, device=x.device, generator=generator)
            x = self._mean_step(x, k, cond) + sigma[k] * eps
            chain.append(x)
        states = torch.stack(chain, dim=1)
        means, log_sigma = self.chain_means(states, cond), self.log_sigma.unsqueeze(0)
        elements = element_log_density(states, means, log_sigma)
        return states, chain_log_prob_of(states, elements), elements

    def chain_means(self, chain: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """``μ_k(x_k)`` for every step of stored chains ``[B, K + 1, H, A]`` → ``[B, K, H, A]`` (one batched pass)."""
        b, k1 = chain.shape[:2]
        k = k1 - 1
        x = chain[:, :-1].reshape(b * k, *chain.shape[2:])
        dt = 1.0 / self.cfg.num_steps
        t = (torch.arange(k, device=chain.device, dtype=torch.float32) * dt).repeat(b)
        c = cond.repeat_interleave(k, dim=0)
        v = self.velocity(x, t, c)
        if self.cfg.integrator == "midpoint":
            v = self.velocity(x + 0.5 * dt * v, t + 0.5 * dt, c)
        return (x + dt * v).view(b, k, *chain.shape[2:])

    def chain_log_prob(self, chain: torch.Tensor, obs: Obs | None = None, cond: torch.Tensor | None = None
                       ) -> torch.Tensor:
        """``log p(x_0..x_K | s) = log N(x_0; 0, I) + Σ_k log N(x_{k+1}; μ_k(x_k), σ_k²)`` → ``[B]``."""
        if cond is None:
            if obs is None:
                raise ValueError("chain_log_prob needs obs or cond")
            cond = self.encoder(obs)
        if chain.shape[1] != self.cfg.num_steps + 1:
            raise SpecMismatchError(f"chain has {chain.shape[1] - 1} steps, the policy {self.cfg.num_steps}")
        return self.gaussian_chain_log_prob(chain, self.chain_means(chain, cond), self.log_sigma.unsqueeze(0))

    @staticmethod
    def gaussian_chain_log_prob(chain: torch.Tensor, means: torch.Tensor, log_sigma: torch.Tensor) -> torch.Tensor:
        """The chain log-likelihood from precomputed step means ``[B, K, H, A]`` and ``log σ`` (broadcast) → ``[B]``."""
        return chain_log_prob_of(chain, element_log_density(chain, means, log_sigma))

    # ---- Policy ------------------------------------------------------------------------------

    def _bound(self, x: torch.Tensor) -> torch.Tensor:
        return clamp_to_bounds(x, self.low, self.high)

    def encode(self, obs: Obs) -> torch.Tensor:
        """The condition ``[B, F]`` the action expert reads (:class:`~robot_rl.core.algorithm.FeatureEncoder`)."""
        return self.encoder(obs)

    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(chunk [N, H, A] clamped to the bounds, extras)``; see the class docstring for ``extras``."""
        with torch.no_grad():
            if deterministic:
                cond_obs = obs
                n = next(iter(obs.values())).shape[0]
                ref = next(iter(self.parameters()))
                x0 = torch.zeros(n, self.cfg.horizon, self.action_dim, device=ref.device)
                return self._bound(self.sample(cond_obs, x0=x0)), {}
            chain, log_prob, elements = self.sample_scored_chain(obs, self.generator)
        return self._bound(chain[:, -1]), {CHAIN.name: chain, LOG_PROB.name: log_prob, ELEMENT_LOG_PROB.name: elements}
