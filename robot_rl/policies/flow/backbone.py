"""Pretrained vision backbones from a local weights file (nothing is downloaded).

:class:`ResNet18` is torchvision's ResNet-18 with the same parameter names (``conv1``, ``bn1``,
``layer1.0.conv1``, …, ``fc``), written out here so torchvision is not needed: a state dict saved from
``torchvision.models.resnet18(...)`` loads into it as is. :class:`ResNetCamera` wraps it as one camera
of :class:`~robot_rl.policies.flow.model.FlowVLAPolicy` (``camera_encoder="resnet18"``).

:func:`load_backbone_weights` loads a state dict file into any backbone module (``FlowVLAConfig.
pretrained_path``): a plain state dict or a checkpoint dict holding one under ``state_dict`` /
``model``; ``module.`` prefixes (DataParallel) are stripped, and the classifier head ``fc.*`` is
ignored. Missing or unexpected keys and shape mismatches are errors that list them.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

#: ImageNet normalisation, what torchvision's pretrained weights expect.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class BackboneWeightsError(ValueError):
    """A pretrained weights file does not fit the backbone (missing/unexpected keys, shapes)."""


class BasicBlock(nn.Module):
    """ResNet basic block (two 3×3 convs), torchvision's parameter names."""

    def __init__(self, inp: int, out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or inp != out:
            self.downsample = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Residual block."""
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + identity)


class ResNet18(nn.Module):
    """ResNet-18 trunk (torchvision layout and names); ``forward`` returns pooled ``[N, 512]`` features."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths = (64, 128, 256, 512)
        inp = 64
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(inp, w, stride), BasicBlock(w, w, 1)))
            inp = w
        self.out_dim = 512

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, 3, H, W]`` normalised images → ``[N, 512]``."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
        return x.mean(dim=(2, 3))


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


def read_state_dict(path: Path | str) -> dict[str, torch.Tensor]:
    """The tensors of a local weights file (``torch.save`` of a state dict or of a checkpoint holding one)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pretrained backbone weights {path} do not exist (nothing is downloaded: save a "
                                f"state dict there, e.g. torch.save(torchvision.models.resnet18(weights=...)"
                                f".state_dict(), '{path}'))")
    raw = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(raw, dict):
        for key in ("state_dict", "model"):
            if key in raw and isinstance(raw[key], dict):
                raw = raw[key]
                break
    if not isinstance(raw, dict) or not all(isinstance(v, torch.Tensor) for v in raw.values()):
        raise BackboneWeightsError(f"{path} holds no state dict of tensors")
    return {k.removeprefix("module."): v for k, v in raw.items()}


def load_backbone_weights(module: nn.Module, path: Path | str, ignore_prefixes: tuple[str, ...] = ("fc.",)) -> None:
    """Load the weights file ``path`` into ``module`` strictly (except ``ignore_prefixes``); errors list the keys."""
    state = {k: v for k, v in read_state_dict(path).items() if not k.startswith(ignore_prefixes)}
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    if missing or unexpected or shapes:
        def show(keys: list[str]) -> str:
            return f"{keys[:5]}{' …' if len(keys) > 5 else ''} ({len(keys)})"

        raise BackboneWeightsError(f"{path} does not fit the {type(module).__name__} backbone: missing "
                                   f"{show(missing)}, unexpected {show(unexpected)}, shape mismatch {show(shapes)}")
    module.load_state_dict(state, strict=True)


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
