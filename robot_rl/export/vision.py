"""Pixel actors as camera chains + state + MLP head: what :mod:`robot_rl.export.c_vision` consumes.

A pixel SAC policy (:class:`~robot_rl.policies.sac_networks.SACPolicy` with the DrQ conv encoder) computes

``features = concat(camera_1(image_1), …, camera_k(image_k), norm(state))`` (cameras in sorted key order),
``action = tanh(head(features)[:act_dim]) · scale + bias``,

where each camera takes uint8 ``[H, W, C]`` (HWC, as cameras give it), maps it to float
``(u/255 − mean_c)/std_c`` in CHW order (the DrQ and spatial-softmax encoders use ``mean = 0.5, std = 1``)
and runs a chain of :data:`Node` s. ``norm`` is the state's running normaliser and ``head`` an
:class:`~robot_rl.export.graph.MLPGraph` over the features (which holds the output map).

Nodes are read from the torch modules (:func:`nodes_from_modules`): Conv2d, MaxPool2d, AvgPool2d,
activations, Flatten, Linear, LayerNorm, and the keypoint spatial softmax of
:class:`~robot_rl.policies.flow.model.SpatialSoftmaxCamera`. Anything else raises
:class:`~robot_rl.export.graph.UnsupportedArchitectureError`, whose message lists what is supported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Union

import numpy as np
import torch
from torch import nn

from robot_rl.core.algorithm import MLPActor, MLPActorParts
from robot_rl.core.specs import EnvSpec
from robot_rl.export.graph import (
    _ACT_NAMES,
    Activation,
    MLPGraph,
    UnsupportedArchitectureError,
    _np,
    extract_mlp,
    mlp_from_parts,
)

Shape = tuple[int, ...]
"""``(C, H, W)`` for a feature map, ``(F,)`` for a vector."""


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _map(shape: Shape, what: str) -> tuple[int, int, int]:
    if len(shape) != 3:
        raise UnsupportedArchitectureError(f"a {what} on a {len(shape)}-d tensor (expects a [C, H, W] map)")
    return shape[0], shape[1], shape[2]


def _window_out(size: int, kernel: int, stride: int, pad: int, what: str) -> int:
    out = (size + 2 * pad - kernel) // stride + 1
    if out < 1:
        raise ValueError(f"{what}: kernel {kernel} with padding {pad} does not fit an input of size {size}")
    return out


@dataclass
class Conv2dNode:
    """``y[o] = b[o] + Σ_{c,ky,kx} w[o,c,ky,kx] · x_pad[c, oy·sy + ky, ox·sx + kx]`` (zero padding)."""

    weight: np.ndarray
    """``[O, C, kh, kw]`` float32."""
    bias: np.ndarray
    stride: tuple[int, int]
    padding: tuple[int, int]

    def out_shape(self, shape: Shape) -> Shape:
        """``(O, H_out, W_out)``."""
        c, h, w = _map(shape, "Conv2d")
        o, ci, kh, kw = self.weight.shape
        if ci != c:
            raise ValueError(f"Conv2d expects {ci} input channels, got {c}")
        return (o, _window_out(h, kh, self.stride[0], self.padding[0], "Conv2d"),
                _window_out(w, kw, self.stride[1], self.padding[1], "Conv2d"))


@dataclass
class PoolNode:
    """Max or average over ``kernel`` windows; max pads with −inf, average with zeros."""

    kind: Literal["max", "avg"]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    count_include_pad: bool = True
    """Average only: divide by ``kh·kw`` (torch's default) or by the number of in-image pixels."""

    def out_shape(self, shape: Shape) -> Shape:
        """``(C, H_out, W_out)``."""
        c, h, w = _map(shape, f"{self.kind} pool")
        return (c, _window_out(h, self.kernel[0], self.stride[0], self.padding[0], "pool"),
                _window_out(w, self.kernel[1], self.stride[1], self.padding[1], "pool"))


@dataclass
class ActNode:
    """Elementwise activation, in place."""

    activation: Activation

    def out_shape(self, shape: Shape) -> Shape:
        """Unchanged."""
        return shape


@dataclass
class FlattenNode:
    """``[C, H, W]`` → ``[C·H·W]`` in torch's order (the buffer is CHW already: no work)."""

    def out_shape(self, shape: Shape) -> Shape:
        """``(prod(shape),)``."""
        return (math.prod(shape),)


@dataclass
class DenseNode:
    """``y = W x + b`` on a vector."""

    weight: np.ndarray
    bias: np.ndarray

    def out_shape(self, shape: Shape) -> Shape:
        """``(out,)``."""
        if len(shape) != 1 or shape[0] != self.weight.shape[1]:
            raise UnsupportedArchitectureError(f"a Linear({self.weight.shape[1]}) on a tensor of shape {list(shape)} "
                                               "(put a Flatten before it)")
        return (int(self.weight.shape[0]),)


@dataclass
class LayerNormNode:
    """``(x − mean)/sqrt(var + eps)·γ + β`` over the whole tensor (γ, β flattened in CHW order)."""

    weight: np.ndarray
    bias: np.ndarray
    eps: float

    def out_shape(self, shape: Shape) -> Shape:
        """Unchanged (LayerNorm must normalise over the whole tensor)."""
        if self.weight.size != math.prod(shape):
            raise UnsupportedArchitectureError(f"a LayerNorm over part of a tensor of shape {list(shape)}")
        return shape


@dataclass
class SpatialSoftmaxNode:
    """Keypoints: per channel ``p = softmax(gain_c · x[c])`` over pixels, out ``[Σ p·gx (C), Σ p·gy (C)]``."""

    gain: np.ndarray
    """``[C]``, the inverse temperature (``exp(log_gain)`` as torch computes it)."""
    grid_x: np.ndarray
    """``[W]``: x coordinate of each column."""
    grid_y: np.ndarray
    """``[H]``: y coordinate of each row."""

    def out_shape(self, shape: Shape) -> Shape:
        """``(2C,)``."""
        c, h, w = _map(shape, "spatial softmax")
        if (c, h, w) != (self.gain.size, self.grid_y.size, self.grid_x.size):
            raise ValueError(f"spatial softmax built for {self.gain.size}x{self.grid_y.size}x{self.grid_x.size} "
                             f"maps, got {c}x{h}x{w}")
        return (2 * c,)


Node = Union[Conv2dNode, PoolNode, ActNode, FlattenNode, DenseNode, LayerNormNode, SpatialSoftmaxNode]


@dataclass
class CameraBranch:
    """One camera: uint8 HWC image → ``(u/255 − mean_c)/std_c`` in CHW → ``nodes`` → a feature vector."""

    key: str
    image_shape: tuple[int, int, int]
    """``(H, W, C)`` as the camera gives it."""
    nodes: list[Node]
    mean: np.ndarray = field(default_factory=lambda: np.full(1, 0.5, np.float32))
    """``[C]`` (or ``[1]`` for all channels)."""
    std: np.ndarray = field(default_factory=lambda: np.ones(1, np.float32))

    @property
    def symbol(self) -> str:
        """``image.top`` → ``top``: the C identifier of this camera's parameters."""
        tail = self.key.split(".", 1)[-1]
        return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in tail)

    def shapes(self) -> list[Shape]:
        """The input map ``(C, H, W)`` then the shape after every node."""
        h, w, c = self.image_shape
        shapes: list[Shape] = [(c, h, w)]
        for node in self.nodes:
            shapes.append(node.out_shape(shapes[-1]))
        return shapes

    @property
    def out_dim(self) -> int:
        """Length of the feature vector this camera contributes."""
        last = self.shapes()[-1]
        if len(last) != 1:
            raise UnsupportedArchitectureError(f"camera {self.key} ending in a {list(last)} map (no Flatten)")
        return last[0]


@dataclass
class VisionGraph:
    """A pixel actor (see the module docstring), every parameter a float32 numpy array."""

    cameras: list[CameraBranch]
    state_dim: int
    head: MLPGraph
    """The MLP over the features (``head.obs_dim`` = :attr:`feature_dim`); holds the output map."""
    norm_mean: np.ndarray | None = None
    norm_std: np.ndarray | None = None
    norm_clip: float = math.inf

    @property
    def act_dim(self) -> int:
        """Flat action size."""
        return self.head.act_dim

    @property
    def feature_dim(self) -> int:
        """Camera features plus state."""
        return sum(cam.out_dim for cam in self.cameras) + self.state_dim


def describe_node(node: Node) -> str:
    """A short name: ``conv3x3/2``, ``relu``, ``maxpool2x2``, ``flatten``, ``dense64``, ``layernorm``, ``keypoints``."""
    if isinstance(node, Conv2dNode):
        return f"conv{node.weight.shape[2]}x{node.weight.shape[3]}/{node.stride[0]}:{node.weight.shape[0]}"
    if isinstance(node, PoolNode):
        return f"{node.kind}pool{node.kernel[0]}x{node.kernel[1]}"
    if isinstance(node, ActNode):
        return node.activation
    if isinstance(node, DenseNode):
        return f"dense{node.weight.shape[0]}"
    if isinstance(node, SpatialSoftmaxNode):
        return "keypoints"
    return type(node).__name__.removesuffix("Node").lower()


def _conv(m: nn.Conv2d) -> Conv2dNode:
    if m.groups != 1 or tuple(m.dilation) != (1, 1) or m.padding_mode != "zeros":
        raise UnsupportedArchitectureError(f"a Conv2d with groups={m.groups}, dilation={tuple(m.dilation)}, "
                                           f"padding_mode={m.padding_mode!r}")
    if isinstance(m.padding, str):
        kh, kw = m.kernel_size
        if m.padding == "same" and kh % 2 and kw % 2:  # stride is 1 with 'same' (torch's rule)
            padding = (kh // 2, kw // 2)
        elif m.padding == "valid":
            padding = (0, 0)
        else:
            raise UnsupportedArchitectureError(f"a Conv2d with padding={m.padding!r} and an even kernel")
    else:
        padding = _pair(m.padding)
    bias = m.bias if m.bias is not None else torch.zeros(m.out_channels)
    return Conv2dNode(_np(m.weight), _np(bias), _pair(m.stride), padding)


def _pool(m: nn.MaxPool2d | nn.AvgPool2d) -> PoolNode:
    kernel = _pair(m.kernel_size)
    stride = _pair(m.stride) if m.stride else kernel
    if m.ceil_mode:
        raise UnsupportedArchitectureError(f"a {type(m).__name__} with ceil_mode=True")
    if isinstance(m, nn.MaxPool2d):
        if _pair(m.dilation) != (1, 1) or m.return_indices:
            raise UnsupportedArchitectureError("a MaxPool2d with dilation or return_indices")
        return PoolNode("max", kernel, stride, _pair(m.padding))
    if m.divisor_override is not None:
        raise UnsupportedArchitectureError("an AvgPool2d with divisor_override")
    return PoolNode("avg", kernel, stride, _pair(m.padding), bool(m.count_include_pad))


def _activation(m: nn.Module, where: str) -> ActNode:
    if isinstance(m, nn.ELU) and m.alpha != 1.0:
        raise UnsupportedArchitectureError(f"ELU with alpha={m.alpha} in {where}")
    if isinstance(m, nn.GELU) and m.approximate != "none":
        raise UnsupportedArchitectureError(f"tanh-approximated GELU in {where}")
    return ActNode(_ACT_NAMES[type(m)])


def nodes_from_modules(modules: Iterable[nn.Module], where: str) -> list[Node]:
    """The nodes of a chain of modules (nested ``nn.Sequential`` s are walked); unsupported ones raise."""
    nodes: list[Node] = []
    for m in modules:
        if isinstance(m, nn.Sequential):
            nodes += nodes_from_modules(m.children(), where)
        elif isinstance(m, nn.Conv2d):
            nodes.append(_conv(m))
        elif isinstance(m, (nn.MaxPool2d, nn.AvgPool2d)):
            nodes.append(_pool(m))
        elif type(m) in _ACT_NAMES:
            nodes.append(_activation(m, where))
        elif isinstance(m, nn.Flatten):
            if m.start_dim != 1 or m.end_dim != -1:
                raise UnsupportedArchitectureError(f"a Flatten({m.start_dim}, {m.end_dim}) in {where}")
            nodes.append(FlattenNode())
        elif isinstance(m, nn.Linear):
            bias = m.bias if m.bias is not None else torch.zeros(m.out_features)
            nodes.append(DenseNode(_np(m.weight), _np(bias)))
        elif isinstance(m, nn.LayerNorm):
            n = math.prod(m.normalized_shape)
            w = m.weight if m.weight is not None else torch.ones(n)
            b = m.bias if m.bias is not None else torch.zeros(n)
            nodes.append(LayerNormNode(_np(w).reshape(-1), _np(b).reshape(-1), float(m.eps)))
        elif not isinstance(m, nn.Identity):
            raise UnsupportedArchitectureError(f"a {type(m).__name__} layer in {where}")
    return nodes


def extract_camera(camera: nn.Module, key: str, image_shape: Sequence[int]) -> CameraBranch:
    """One camera encoder as a :class:`CameraBranch` (its image normalisation included).

    The DrQ :class:`~robot_rl.policies.modules.cnn.ConvEncoder` or the keypoint
    :class:`~robot_rl.policies.flow.model.SpatialSoftmaxCamera`; both read ``u/255 − 0.5`` in CHW.
    """
    from robot_rl.policies.flow.model import SpatialSoftmaxCamera
    from robot_rl.policies.modules.cnn import ConvEncoder

    where = f"the {type(camera).__name__} of camera {key}"
    h, w, c = (int(v) for v in image_shape)
    if isinstance(camera, ConvEncoder):
        nodes = nodes_from_modules([camera.convs, camera.projection], where)
    elif isinstance(camera, SpatialSoftmaxCamera):
        ww = int(camera.grid_x.numel() // camera.grid_y.unique().numel())
        keypoints = SpatialSoftmaxNode(_np(camera.log_gain.exp()).reshape(-1), _np(camera.grid_x[:ww]),
                                       _np(camera.grid_y[::ww]))
        nodes = [*nodes_from_modules([camera.convs], where), keypoints,
                 *nodes_from_modules([camera.projection], where)]
    else:
        raise UnsupportedArchitectureError(f"a camera encoder of type {type(camera).__name__} ({key})")
    branch = CameraBranch(key, (h, w, c), nodes)
    branch.out_dim  # noqa: B018 - checks that the shapes chain up now, not at code generation
    return branch


def extract_vision(policy: nn.Module, spec: EnvSpec) -> VisionGraph:
    """A pixel :class:`~robot_rl.policies.sac_networks.SACPolicy` (DrQ conv cameras) as a :class:`VisionGraph`."""
    from robot_rl.policies.modules.cnn import MultiCameraEncoder
    from robot_rl.policies.modules.normalizer import RunningNormalizer
    from robot_rl.policies.sac_networks import SACPolicy

    if not isinstance(policy, SACPolicy):
        raise UnsupportedArchitectureError(f"a pixel actor of type {type(policy).__name__}")
    if policy.backbone is not None:
        raise UnsupportedArchitectureError("a pretrained ResNet camera trunk (BatchNorm, residual blocks)")
    enc = policy.encoder
    if not isinstance(enc.cnn, MultiCameraEncoder):
        raise UnsupportedArchitectureError(f"a camera encoder of type {type(enc.cnn).__name__}")
    cameras = [extract_camera(enc.cnn.cameras[k.replace(".", "_")], k, spec.observation[k].shape)
               for k in enc.cnn.keys]
    # The head is the same MLP the state-only export reads, over the concatenated features.
    head = mlp_from_parts(MLPActorParts(enc.out_dim, None, policy.trunk, policy.act_dim, "tanh_scale",
                                        policy.action_scale, policy.action_bias, tuple(policy.action_shape)),
                          f"the actor MLP of {type(policy).__name__}")
    graph = VisionGraph(cameras, enc.state_dim, head)
    if enc.normalizer is not None:
        if not isinstance(enc.normalizer, RunningNormalizer):
            raise UnsupportedArchitectureError(f"a state normaliser of type {type(enc.normalizer).__name__}")
        graph.norm_mean = _np(enc.normalizer.mean)
        graph.norm_std = _np(torch.sqrt(enc.normalizer.var + enc.normalizer.eps))
        graph.norm_clip = float(enc.normalizer.clip)
    if graph.feature_dim != head.obs_dim:
        raise UnsupportedArchitectureError(f"{graph.feature_dim} features for a head of width {head.obs_dim}")
    return graph


def extract_graph(policy: nn.Module, spec: EnvSpec) -> MLPGraph | VisionGraph:
    """What the C generator takes: an :class:`MLPGraph` for a state-only actor, else a :class:`VisionGraph`."""
    for name, module in policy.named_modules():
        if isinstance(module, (nn.RNNBase, nn.RNNCellBase, nn.MultiheadAttention, nn.TransformerEncoderLayer,
                               nn.TransformerDecoderLayer)):
            kind = "a recurrent" if isinstance(module, (nn.RNNBase, nn.RNNCellBase)) else "an attention"
            raise UnsupportedArchitectureError(f"{kind} layer ({type(module).__name__} at '{name}')")
    if isinstance(policy, MLPActor) and policy.mlp_parts() is not None:
        return extract_mlp(policy)
    return extract_vision(policy, spec)
