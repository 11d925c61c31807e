"""A pretrained ResNet trunk shared by several networks, and the small trainable heads that read it (HIL-SERL).

HIL-SERL's pixel encoder is a pretrained ResNet-10, frozen, followed by a trainable pooling and projection.
Here the two halves are separate modules so that one :class:`CameraTrunk` serves every network that looks
at the cameras (SAC's actor, critic and target critic; a reward classifier's cameras): a frozen trunk
runs once per batch, and each network keeps only its own :class:`SpatialEmbeddingCameras` head.

- :class:`CameraTrunk`: ``{"image.<cam>": uint8 [N, H, W, 3]}`` → ``{"image.<cam>": [N, 512, h, w]}``
  (ImageNet normalisation, one ResNet for every camera; other keys pass through untouched). Its
  BatchNorm layers always run on their stored statistics: a batch of one at acting time and a replayed
  batch of 256 must see the same function.
- :class:`SpatialEmbeddingCameras`: each camera's map → learned spatial embeddings (a weighted sum over
  the ``h·w`` positions per channel, ``num_embeddings`` sets of weights: HIL-SERL's
  ``SpatialLearnedEmbeddings``, which keeps *where* things are, unlike global average pooling) →
  ``Linear → LayerNorm → tanh`` to ``features`` per camera, concatenated in sorted key order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path

import torch
from torch import nn

from robot_rl.core.config import ConfigError
from robot_rl.policies.modules.resnet import IMAGENET_MEAN, IMAGENET_STD, build_resnet, load_backbone

#: The camera encoders a config can name: the small CNN, or a pretrained ResNet trunk.
IMAGE_ENCODERS = ("cnn", "resnet10", "resnet18")


def check_image_encoder(name: str, field: str = "image_encoder") -> None:
    """``ValueError`` for an encoder name that is not one of :data:`IMAGE_ENCODERS`."""
    if name not in IMAGE_ENCODERS:
        raise ConfigError(f"{field} must be one of {list(IMAGE_ENCODERS)}, got {name!r}")


class CameraTrunk(nn.Module):
    """One ResNet trunk for every camera: images in, feature maps out (see the module docstring)."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, arch: str, image_shapes: Mapping[str, Sequence[int]], freeze: bool = True) -> None:
        super().__init__()
        self.keys = sorted(image_shapes)
        not_rgb = {k: list(s) for k, s in image_shapes.items() if s[-1] != 3}
        if not_rgb:
            raise ConfigError(f"a {arch} trunk needs RGB images [H, W, 3]; got {not_rgb}")
        self.arch = arch
        self.resnet = build_resnet(arch)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)
        self.map_shapes = {k: (self.resnet.out_dim, *self.resnet.map_size(int(s[0]), int(s[1])))
                           for k, s in image_shapes.items()}
        self.freeze(freeze)
        self.train(self.training)

    def freeze(self, frozen: bool = True) -> None:
        """Fix the trunk's weights (no gradient, no autograd graph) or let them train."""
        self.frozen = frozen
        self.resnet.requires_grad_(not frozen)

    def load(self, path: Path | str) -> None:
        """Load the trunk's weights from a local file (:func:`~robot_rl.policies.modules.resnet.load_backbone`)."""
        self.resnet.load_state_dict(load_backbone(path, self.arch).state_dict())

    def train(self, mode: bool = True) -> CameraTrunk:
        """As ``nn.Module.train``, but BatchNorm keeps its stored statistics (eval mode) either way."""
        super().train(mode)
        self.resnet.eval()
        return self

    def forward(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``obs`` with each camera ``[N, H, W, 3]`` replaced by its map ``[N, 512, h, w]`` float32."""
        out = dict(obs)
        # A frozen trunk builds no autograd graph even when the caller's loss has one. On a CPU it runs in float32
        # even under bf16 autocast: torch 2.13's oneDNN bf16 convolution returned NaN maps for about 1 in 13 freshly
        # built trunks once a process had built and freed others (0 in 40 with oneDNN off for the trunk, and the
        # native bf16 convolution is 36x slower), so a bf16 trunk's speed (1.5x float32's) is not worth it there.
        cpu_float32 = torch.autocast("cpu", enabled=False) if self.mean.device.type == "cpu" else nullcontext()
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen), cpu_float32:
            for k in self.keys:
                x = (obs[k].permute(0, 3, 1, 2).float() / 255.0 - self.mean) / self.std
                out[k] = self.resnet(x)
        return out


class SpatialEmbedding(nn.Module):
    """One camera's head: map ``[N, C, h, w]`` → ``[N, features]`` (spatial embeddings, Linear, LayerNorm, tanh)."""

    def __init__(self, map_shape: Sequence[int], features: int, num_embeddings: int = 8) -> None:
        super().__init__()
        c, h, w = map_shape
        # Unit-variance features in, weights ~ N(0, 1/(h·w)): each embedding starts as a roughly
        # unit-scale average over the positions, as a LeCun-normal init gives HIL-SERL's kernel.
        self.kernel = nn.Parameter(torch.randn(c, h * w, num_embeddings) / math.sqrt(h * w))
        self.projection = nn.Sequential(nn.Linear(c * num_embeddings, features), nn.LayerNorm(features), nn.Tanh())

    def forward(self, maps: torch.Tensor) -> torch.Tensor:
        """``Σ_p maps[n, c, p] · kernel[c, p, f]`` per channel and embedding, flattened, projected."""
        pooled = torch.einsum("ncp,cpf->ncf", maps.flatten(2), self.kernel)
        return self.projection(pooled.flatten(1))


class SpatialEmbeddingCameras(nn.Module):
    """``{"image.<cam>": [N, C, h, w]}`` → ``[N, cameras · features]`` (one head per camera, sorted keys)."""

    def __init__(self, map_shapes: Mapping[str, Sequence[int]], features: int = 50, num_embeddings: int = 8) -> None:
        super().__init__()
        self.keys = sorted(map_shapes)
        self.cameras = nn.ModuleDict({k.replace(".", "_"): SpatialEmbedding(map_shapes[k], features, num_embeddings)
                                      for k in self.keys})
        self.out_dim = features * len(self.keys)

    def forward(self, maps: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Pool and project every camera's map and concatenate."""
        return torch.cat([self.cameras[k.replace(".", "_")](maps[k]) for k in self.keys], dim=-1)
