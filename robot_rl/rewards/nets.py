"""Image encoders of the reward models: a small CNN per camera (or shared), or a pretrained ResNet trunk.

:class:`CameraEncoder` is the default (a :class:`SmallCNN` per camera); :class:`TrunkCameraEncoder` runs
one pretrained ResNet-10/18 trunk (:mod:`robot_rl.policies.modules.pretrained`, frozen by default) for
every camera and a trainable spatial-embedding head per camera, for real camera images where the small
CNN does not tell success from near-success. Both map ``{"image.<cam>": [N, H, W, C]}`` to
``[N, cameras · features]`` in sorted key order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from robot_rl.core.config import ConfigError
from robot_rl.policies.modules.pretrained import CameraTrunk, SpatialEmbeddingCameras


class SmallCNN(nn.Module):
    """uint8 ``[N, H, W, C]`` → ``[N, features]``: stride-2 3×3 convolutions, then a linear projection.

    Stride 2 at every layer keeps it cheap enough to run inside a control loop (a 64×64 frame
    costs about 2 MFLOP per layer), and flattening rather than pooling keeps where things are.
    """

    def __init__(self, image_shape: Sequence[int], features: int = 64, channels: int = 16, layers: int = 3) -> None:
        super().__init__()
        h, w, c = image_shape
        mods: list[nn.Module] = []
        ch = c
        for i in range(layers):
            out = channels * min(2, i + 1)
            mods += [nn.Conv2d(ch, out, 3, stride=2, padding=1), nn.ReLU()]
            ch = out
            h, w = (h + 1) // 2, (w + 1) // 2
        self.convs = nn.Sequential(*mods, nn.Flatten())
        self.projection = nn.Sequential(nn.Linear(ch * h * w, features), nn.LayerNorm(features), nn.ReLU())
        self.features = features

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``[N, H, W, C]`` uint8 → ``[N, features]``."""
        x = images.permute(0, 3, 1, 2).float() / 255.0 - 0.5
        return self.projection(self.convs(x))


class CameraEncoder(nn.Module):
    """``{"image.<cam>": [N, H, W, C]}`` → ``[N, cameras · features]`` in sorted key order.

    ``shared=True`` uses one CNN for every camera (cameras must then have the same shape).
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], features: int = 64, channels: int = 16,
                 layers: int = 3, shared: bool = False) -> None:
        super().__init__()
        self.keys = sorted(image_shapes)
        self.shapes = {k: tuple(int(x) for x in image_shapes[k]) for k in self.keys}
        if shared and len(set(self.shapes.values())) > 1:
            raise ConfigError(f"shared=True needs cameras of one shape, got {self.shapes}")
        self.shared, self.features, self.channels, self.layers = shared, features, channels, layers
        names = ["shared"] if shared else [k.replace(".", "_") for k in self.keys]
        first = self.shapes[self.keys[0]]
        self.cnns = nn.ModuleDict({n: SmallCNN(first if shared else self.shapes[k], features, channels, layers)
                                   for n, k in zip(names, self.keys, strict=False)})
        self.out_dim = features * len(self.keys)

    def check(self, images: Mapping[str, torch.Tensor]) -> None:
        """Raise ``ValueError`` naming the camera whose frames are missing or have the wrong shape."""
        check_frames(self.shapes, images)

    def forward(self, images: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Encode every camera (``[N, H, W, C]`` each) and concatenate."""
        return torch.cat([self.cnns["shared" if self.shared else k.replace(".", "_")](images[k])
                          for k in self.keys], dim=-1)

    def load_backbone(self, path: Path | str, freeze: bool = False) -> int:
        """Load pretrained CNN weights from a local file; returns the tensors loaded.

        The file holds a state dict (``torch.save(module.state_dict())``, read with
        ``weights_only=True``) of a :class:`SmallCNN` or a :class:`CameraEncoder` of the same
        architecture, e.g. the encoder of an earlier reward model for a related task. A SmallCNN's
        weights go into every camera's CNN. Shapes must match; ``freeze`` stops them training.
        """
        state = torch.load(Path(path), map_location="cpu", weights_only=True)
        if not isinstance(state, dict):
            raise ConfigError(f"{path}: expected a state dict of tensors")
        state = {k.removeprefix("encoder."): v for k, v in state.items()}
        loaded = 0
        for name, cnn in self.cnns.items():
            own = cnn.state_dict()
            sub = {k.split(".", 2)[2]: v for k, v in state.items() if k.startswith(f"cnns.{name}.")} or \
                {k: v for k, v in state.items() if k in own}
            bad = [k for k, v in sub.items() if k in own and own[k].shape != v.shape]
            if bad or not sub:
                raise ConfigError(f"{path}: no matching weights for camera CNN {name!r}"
                                  + (f" (shape mismatch in {bad[:3]})" if bad else ""))
            cnn.load_state_dict(sub, strict=True)
            loaded += len(sub)
            if freeze:
                for p in cnn.parameters():
                    p.requires_grad_(False)
        return loaded


class TrunkCameraEncoder(nn.Module):
    """``{"image.<cam>": [N, H, W, 3]}`` → ``[N, cameras · features]``: one ResNet trunk, a head per camera.

    ``arch``: ``resnet10`` or ``resnet18`` (torchvision's layout); ``freeze`` keeps the trunk's weights fixed
    (its BatchNorm statistics stay fixed either way). The trunk is already shared by every camera, so
    there is no ``shared`` choice; ``channels`` is 0 (the trunk's widths are fixed).
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], arch: str, features: int = 64,
                 freeze: bool = True, num_embeddings: int = 8) -> None:
        super().__init__()
        self.keys = sorted(image_shapes)
        self.shapes = {k: tuple(int(x) for x in image_shapes[k]) for k in self.keys}
        self.trunk = CameraTrunk(arch, self.shapes, freeze)
        self.heads = SpatialEmbeddingCameras(self.trunk.map_shapes, features, num_embeddings)
        self.arch, self.features, self.shared, self.channels = arch, features, False, 0
        self.out_dim = self.heads.out_dim

    def check(self, images: Mapping[str, torch.Tensor]) -> None:
        """Raise ``ValueError`` naming the camera whose frames are missing or have the wrong shape."""
        check_frames(self.shapes, images)

    def forward(self, images: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Run the trunk on every camera, then each camera's head; concatenate."""
        return self.heads(self.trunk(images))

    def load_backbone(self, path: Path | str, freeze: bool = True) -> int:
        """Load the trunk's weights from a local torchvision-layout ResNet file; returns the tensors loaded."""
        self.trunk.load(path)
        self.trunk.freeze(freeze)
        return len(self.trunk.resnet.state_dict())


def check_frames(shapes: Mapping[str, tuple[int, ...]], images: Mapping[str, torch.Tensor]) -> None:
    """Raise ``ValueError`` naming the camera whose frames are missing or are not ``shapes[camera]``."""
    for k, shape in shapes.items():
        if k not in images:
            raise ConfigError(f"the reward model needs camera {k!r}; got {sorted(images)}")
        got = tuple(images[k].shape[-3:])
        if got != shape:
            raise ConfigError(f"{k}: frames are {list(got)} (H, W, C), the reward model was trained on {list(shape)}")


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """DrQ-style augmentation: pad by replication and crop back at a random offset per frame."""
    from robot_rl.policies.modules.cnn import random_shift as shift

    return shift(images, pad=pad, generator=generator)
