"""A small convolutional encoder for camera images (DrQ / SAC-AE style) and DrQ's random shift.

Images arrive as the specs store them: uint8 ``[N, H, W, C]``. Each camera has its own conv trunk
(cameras see different things), whose features are concatenated; the observation encoder
(:mod:`robot_rl.policies.modules.obs_encoder`) appends the ``state`` vector.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn


def sample_shifts(n: int, pad: int, device: torch.device | str,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """``[n, 2]`` int64 offsets ``(dy, dx)`` in ``[0, 2·pad]``, one per image (for :func:`random_shift`)."""
    return torch.randint(0, 2 * pad + 1, (n, 2), device=device, generator=generator)


def random_shift(images: torch.Tensor, pad: int = 4, generator: torch.Generator | None = None,
                 shifts: torch.Tensor | None = None) -> torch.Tensor:
    """DrQ augmentation: replicate-pad each image by ``pad`` pixels, then crop ``H×W`` at a random offset.

    ``images``: ``[N, H, W, C]`` (any dtype, uint8 stays uint8). ``shifts``: optional ``[N, 2]`` offsets
    ``(dy, dx)`` in ``[0, 2·pad]`` (drawn with ``generator`` when omitted); offset ``pad`` is the identity.

    Cropping a replicate-padded image at ``(dy, dx)`` reads source pixel
    ``(clamp(y + dy − pad, 0, H−1), clamp(x + dx − pad, 0, W−1))``, so the padding never has to be
    materialised: one batched gather does the whole batch, with no per-sample loop and no
    interpolation (integer shifts are exact, unlike DrQ's ``grid_sample`` version).
    """
    if pad == 0:
        return images
    n, h, w, _ = images.shape
    if shifts is None:
        shifts = sample_shifts(n, pad, images.device, generator)
    rows = (torch.arange(h, device=images.device) + shifts[:, :1] - pad).clamp_(0, h - 1)  # [N, H]
    cols = (torch.arange(w, device=images.device) + shifts[:, 1:] - pad).clamp_(0, w - 1)  # [N, W]
    batch = torch.arange(n, device=images.device)[:, None, None]
    return images[batch, rows[:, :, None], cols[:, None, :]]


def _conv_out(size: int, num_layers: int, stride: int = 1) -> int:
    # 3×3 kernels without padding: the first has stride 2, the rest ``stride``.
    size = (size - 3) // 2 + 1
    for _ in range(num_layers - 1):
        size = (size - 3) // stride + 1
    return size


class ConvEncoder(nn.Module):
    """One camera: uint8 ``[N, H, W, C]`` → ``[N, features]``.

    ``num_layers`` 3×3 convolutions of ``channels`` channels (stride 2, then ``stride``) with ReLU, then
    ``Linear → LayerNorm → tanh`` to ``features`` (the SAC-AE / DrQ projection, which keeps the
    critic's input bounded). ``stride=1`` is DrQ's encoder: at 64×64 a 25×25 map reaches the projection, and
    training it is most of a CPU learner's update. ``stride=2`` halves the map at every layer (3×3 at 64×64):
    coarser maps, a SAC update 3.5× faster on one CPU thread (benchmarks/RESULTS_encoders.md).
    """

    def __init__(self, image_shape: Sequence[int], features: int = 50, channels: int = 32,
                 num_layers: int = 4, stride: int = 1) -> None:
        super().__init__()
        if stride < 1:
            raise ValueError(f"conv stride {stride} must be >= 1")
        h, w, c = image_shape
        out_h, out_w = _conv_out(h, num_layers, stride), _conv_out(w, num_layers, stride)
        if out_h <= 0 or out_w <= 0:
            raise ValueError(f"image {h}×{w} is too small for {num_layers} conv layers at stride {stride}: "
                             f"use larger frames, fewer layers or stride 1")
        layers: list[nn.Module] = [nn.Conv2d(c, channels, 3, stride=2), nn.ReLU()]
        for _ in range(num_layers - 1):
            layers += [nn.Conv2d(channels, channels, 3, stride=stride), nn.ReLU()]
        self.convs = nn.Sequential(*layers, nn.Flatten())
        self.projection = nn.Sequential(nn.Linear(channels * out_h * out_w, features), nn.LayerNorm(features),
                                        nn.Tanh())
        self.features = features

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``[N, H, W, C]`` uint8 (or float in 0..255) → ``[N, features]``."""
        # NHWC → NCHW by permute keeps channels-last strides, the layout oneDNN / cuDNN prefer.
        x = images.permute(0, 3, 1, 2).float() / 255.0 - 0.5
        return self.projection(self.convs(x))


class MultiCameraEncoder(nn.Module):
    """Several cameras: ``{"image.<cam>": [N, H, W, C]}`` → ``[N, cameras · features]`` (sorted keys)."""

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], features: int = 50, channels: int = 32,
                 num_layers: int = 4, stride: int = 1) -> None:
        super().__init__()
        self.keys = sorted(image_shapes)
        # ModuleDict names cannot contain "."; "image.front" becomes "image_front".
        self.cameras = nn.ModuleDict({k.replace(".", "_"): ConvEncoder(image_shapes[k], features, channels,
                                                                       num_layers, stride) for k in self.keys})
        self.out_dim = features * len(self.keys)

    def forward(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """Encode every camera and concatenate the features in sorted key order."""
        return torch.cat([self.cameras[k.replace(".", "_")](images[k]) for k in self.keys], dim=-1)
