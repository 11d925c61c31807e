"""Pretrained vision backbones from a local weights file (nothing is downloaded).

:class:`ResNet18` is :class:`~robot_rl.policies.modules.resnet.ResNet` (torchvision's parameter names, written
out so torchvision is not needed: a state dict saved from ``torchvision.models.resnet18(...)`` loads into it
as is) with global average pooling. :class:`ResNetCamera` wraps it as one camera
of :class:`~robot_rl.policies.flow.model.FlowVLAPolicy` (``camera_encoder="resnet18"``).

:func:`load_backbone_weights` loads a state dict file into any backbone module (``FlowVLAConfig.
pretrained_path``): a plain state dict or a checkpoint dict holding one under ``state_dict`` /
``model``; ``module.`` prefixes (DataParallel) are stripped, and the classifier head ``fc.*`` is
ignored. Missing or unexpected keys and shape mismatches are errors that list them.
"""

from __future__ import annotations

import torch
from torch import nn

from robot_rl.policies.modules.resnet import (
    ARCHS,
    IMAGENET_MEAN,
    IMAGENET_STD,
    BackboneWeightsError,
    BasicBlock,
    ResNet,
    load_backbone_weights,
    read_state_dict,
)

__all__ = ["BackboneWeightsError", "BasicBlock", "ResNet18", "ResNetCamera", "ResNetCameras", "load_backbone_weights",
           "read_state_dict"]


class ResNet18(ResNet):
    """ResNet-18 trunk (torchvision layout and names); ``forward`` returns pooled ``[N, 512]`` features."""

    def __init__(self) -> None:
        super().__init__(ARCHS["resnet18"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, 3, H, W]`` normalised images → ``[N, 512]`` (global average of the feature map)."""
        return super().forward(x).mean(dim=(2, 3))


class ResNetCamera(nn.Module):
    """One camera, uint8 ``[N, H, W, 3]`` → ``[N, features]``: ImageNet normalisation, ResNet-18, Linear."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, image_shape: tuple[int, ...], features: int) -> None:
        super().__init__()
        if image_shape[-1] != 3:
            raise ValueError(f"the resnet18 camera encoder needs RGB images [H, W, 3], got {list(image_shape)}")
        self.backbone = ResNet18()
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)
        self.projection = nn.Sequential(nn.Linear(self.backbone.out_dim, features), nn.GELU())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``[N, H, W, 3]`` → ``[N, features]``."""
        x = (images.permute(0, 3, 1, 2).float() / 255.0 - self.mean) / self.std
        return self.projection(self.backbone(x))


class ResNetCameras(nn.Module):
    """Several cameras with a :class:`ResNetCamera` each → concatenated features (sorted keys)."""

    def __init__(self, image_shapes: dict[str, tuple[int, ...]], features: int) -> None:
        super().__init__()
        self.keys = sorted(image_shapes)
        self.cameras = nn.ModuleDict({k.replace(".", "_"): ResNetCamera(image_shapes[k], features) for k in self.keys})
        self.out_dim = features * len(self.keys)

    def forward(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """Encode every camera and concatenate."""
        return torch.cat([self.cameras[k.replace(".", "_")](images[k]) for k in self.keys], dim=-1)
