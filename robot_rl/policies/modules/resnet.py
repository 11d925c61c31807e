"""ResNet-10/18 trunks in plain torch, with torchvision's parameter names, loaded from a local file.

torchvision is not a dependency and nothing is downloaded: :class:`ResNet` names its parameters as
``torchvision.models.resnet18`` does (``conv1``, ``bn1``, ``layer1.0.conv1``, …, ``layer4.1.bn2``; no
``fc``), so ``torch.save(torchvision.models.resnet18(weights=...).state_dict(), "r18.pt")`` on a machine
that has the weights gives a file :func:`load_backbone` reads as is (timm's ResNets use the same names).
A Hugging Face ``transformers`` ``ResNetModel`` state dict (``embedder.embedder.convolution…``,
``encoder.stages.0.layers.0…``) is renamed to that layout on load. ResNet-10 is ResNet-18 with one basic
block per stage instead of two (HIL-SERL's encoder).

:func:`load_backbone_weights` loads any state dict file into any module strictly (the flow policy's
backbones use it too); its errors list the first missing and unexpected keys and say what kind of file
they look like.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import nn

from robot_rl.core.errors import UserError

#: ImageNet normalisation, what torchvision's pretrained weights expect.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: Basic blocks per stage of each architecture.
ARCHS: dict[str, tuple[int, ...]] = {"resnet10": (1, 1, 1, 1), "resnet18": (2, 2, 2, 2)}


class BackboneWeightsError(ValueError, UserError):
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


class ResNet(nn.Module):
    """ResNet trunk without pooling or classifier: normalised ``[N, 3, H, W]`` → feature map ``[N, 512, h, w]``.

    ``blocks`` basic blocks per stage (``(1, 1, 1, 1)`` = ResNet-10, ``(2, 2, 2, 2)`` = ResNet-18); the map is
    ``H/32 × W/32`` rounded up (stride-2 stem, max-pool, and stages 2–4).
    """

    def __init__(self, blocks: tuple[int, ...] = ARCHS["resnet18"]) -> None:
        super().__init__()
        self.blocks = tuple(blocks)
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inp = 64
        for i, (width, n) in enumerate(zip((64, 128, 256, 512), self.blocks, strict=True)):
            stride = 1 if i == 0 else 2
            layers = [BasicBlock(inp, width, stride)] + [BasicBlock(width, width, 1) for _ in range(n - 1)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*layers))
            inp = width
        self.out_dim = 512
        for m in self.modules():  # torchvision's initialisation, so that a random trunk matches its random ResNet
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    @staticmethod
    def map_size(h: int, w: int) -> tuple[int, int]:
        """Height and width of the feature map of an ``h × w`` image (five stride-2 steps, padded)."""
        for _ in range(5):
            h, w = (h - 1) // 2 + 1, (w - 1) // 2 + 1
        return h, w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, 3, H, W]`` normalised images → ``[N, 512, h, w]``."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
        return x


def build_resnet(arch: str) -> ResNet:
    """A randomly initialised ``resnet10`` or ``resnet18``; another name is a ``ValueError`` listing them."""
    if arch not in ARCHS:
        raise ValueError(f"unknown ResNet architecture {arch!r}; known: {sorted(ARCHS)}")
    return ResNet(ARCHS[arch])


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


_HF_BLOCK = re.compile(r"^encoder\.stages\.(\d+)\.layers\.(\d+)\.(layer\.0|layer\.1|shortcut)\."
                       r"(convolution|normalization)\.(.+)$")
_HF_PARTS = {("layer.0", "convolution"): "conv1", ("layer.0", "normalization"): "bn1",
             ("layer.1", "convolution"): "conv2", ("layer.1", "normalization"): "bn2",
             ("shortcut", "convolution"): "downsample.0", ("shortcut", "normalization"): "downsample.1"}


def torchvision_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with a ``transformers`` ResNet's names renamed to torchvision's (other layouts unchanged)."""
    prefix = "resnet." if "resnet.embedder.embedder.convolution.weight" in state else ""
    if f"{prefix}embedder.embedder.convolution.weight" not in state:
        return state
    out = {}
    for key, value in state.items():
        name = key.removeprefix(prefix)
        if name.startswith("embedder.embedder."):
            rest = name.removeprefix("embedder.embedder.")
            out[rest.replace("convolution.", "conv1.").replace("normalization.", "bn1.")] = value
        elif m := _HF_BLOCK.match(name):
            stage, block, part, kind, leaf = m.groups()
            out[f"layer{int(stage) + 1}.{block}.{_HF_PARTS[part, kind]}.{leaf}"] = value
        else:
            out[key] = value  # the classifier head, kept so that the caller's ignore list drops it
    return out


def _looks_like(keys: list[str]) -> str:
    """A guess at what produced a state dict, for error messages."""
    depth = _blocks_per_stage(keys)
    if depth:
        named = [a for a, b in ARCHS.items() if b == depth]
        return f"a torchvision-layout ResNet with {list(depth)} blocks per stage ({named[0] if named else 'unknown'})"
    for prefix in ("backbone.resnet.", "encoder.", "backbone.", "trunk."):
        if any(k.startswith(prefix + "layer1.0.conv1") for k in keys):
            return f"a whole model's state dict with the trunk under {prefix!r}: save that submodule's state_dict"
    if any(k.startswith("cnns.") or k.startswith("convs.") for k in keys):
        return "a small-CNN encoder (robot_rl's default), not a ResNet"
    return "not a ResNet in torchvision's or transformers' layout"


def _blocks_per_stage(keys: list[str]) -> tuple[int, ...]:
    found: dict[int, set[int]] = {}
    for k in keys:
        if m := re.match(r"^layer(\d)\.(\d+)\.", k):
            found.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    return tuple(len(found[i]) for i in sorted(found)) if sorted(found) == [1, 2, 3, 4] else ()


def load_backbone_weights(module: nn.Module, path: Path | str, ignore_prefixes: tuple[str, ...] = ("fc.",)) -> None:
    """Load the weights file ``path`` into ``module`` strictly (except ``ignore_prefixes``); errors list the keys."""
    _load_into(module, torchvision_names(read_state_dict(path)), path, ignore_prefixes)


def _load_into(module: nn.Module, raw: dict[str, torch.Tensor], path: Path | str,
               ignore_prefixes: tuple[str, ...] = ("fc.",)) -> None:
    # A transformers ResNetForImageClassification carries its head as classifier.*; the trunk needs neither head.
    state = {k: v for k, v in raw.items() if not k.startswith((*ignore_prefixes, "classifier."))}
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    if missing or unexpected or shapes:
        def show(keys: list[str]) -> str:
            return f"{keys[:5]}{' …' if len(keys) > 5 else ''} ({len(keys)})"

        raise BackboneWeightsError(f"{path} does not fit the {type(module).__name__} backbone: missing "
                                   f"{show(missing)}, unexpected {show(unexpected)}, shape mismatch {show(shapes)}; "
                                   f"the file looks like {_looks_like(sorted(state))}")
    module.load_state_dict(state, strict=True)


def load_backbone(path: Path | str, arch: str) -> ResNet:
    """A ``resnet10``/``resnet18`` trunk with the weights of the local file ``path`` (``weights_only`` load).

    ``FileNotFoundError`` for a missing file; :class:`BackboneWeightsError` when the file holds another
    architecture (named: e.g. a ResNet-18 file for ``resnet10``) or keys that are not a ResNet trunk's.
    """
    model = build_resnet(arch)
    state = torchvision_names(read_state_dict(path))
    depth = _blocks_per_stage(list(state))
    if depth and depth != model.blocks:
        other = [a for a, b in ARCHS.items() if b == depth]
        raise BackboneWeightsError(f"{path} holds a ResNet with {list(depth)} blocks per stage"
                                   f"{f' ({other[0]})' if other else ''}, not {arch} ({list(model.blocks)})"
                                   + (f": choose {other[0]}" if other else ""))
    _load_into(model, state, path)
    return model
