"""The deterministic actor as a flat list of dense layers: what the C generator consumes.

A trained policy that describes its deterministic action as an MLP (:class:`~robot_rl.core.algorithm.MLPActor`:
SAC and PPO, whose ``mlp_parts`` say which pieces it is made of) is reduced to an :class:`MLPGraph`:

``state [D]`` → optional normalisation ``clamp((x − μ)/σ, ±clip)`` → dense layers with activations →
output map, which is ``tanh(y)·scale + bias`` for SAC (the tanh-squashed Gaussian mean) or
``clamp(y, low, high)`` for PPO (the clamped Gaussian mean). Only the action rows of the last layer are kept
(SAC's head also predicts log σ, which the deterministic action never uses).

Anything else (a CNN image encoder, recurrent cells, LayerNorm inside the MLP) is not an MLP actor;
:func:`extract_mlp` raises :class:`UnsupportedArchitectureError` naming what is supported. Pixel actors
(camera encoders + this MLP as their head) are :mod:`robot_rl.export.vision`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import nn

from robot_rl.core.algorithm import MLPActor, MLPActorParts
from robot_rl.core.errors import UserError

Activation = Literal["relu", "elu", "tanh", "silu", "gelu", "identity"]
OutputMap = Literal["tanh_scale", "clamp", "identity"]

SUPPORTED_C = ("MLP actors over a flat 'state' observation (SAC or PPO), with optional observation "
               "normalisation and hidden activations relu, elu, tanh, silu or gelu; and pixel SAC actors (uint8 "
               "HWC cameras, plus 'state') whose camera encoders are chains of Conv2d (zero padding, no groups or "
               "dilation), MaxPool2d, AvgPool2d, spatial softmax (keypoints), Flatten, Linear, LayerNorm and those "
               "activations")
_ACT_NAMES: dict[type[nn.Module], Activation] = {nn.ReLU: "relu", nn.ELU: "elu", nn.Tanh: "tanh",
                                                 nn.SiLU: "silu", nn.GELU: "gelu"}


class UnsupportedArchitectureError(ValueError, UserError):
    """The C exporter cannot express this policy; the message names what it supports and suggests ONNX."""

    def __init__(self, found: str) -> None:
        super().__init__(f"the C exporter supports {SUPPORTED_C}; this policy has {found}. "
                         "Export it with --format onnx instead (ONNX takes CNN, mixed image+state and any "
                         "torch-exportable actor).")


@dataclass
class DenseLayer:
    """``y = W x + b`` followed by ``activation``; ``weight`` ``[out, in]`` and ``bias`` ``[out]`` float32."""

    weight: np.ndarray
    bias: np.ndarray
    activation: Activation


@dataclass
class MLPGraph:
    """A deterministic MLP actor, everything as float32 numpy arrays (see the module docstring)."""

    obs_dim: int
    layers: list[DenseLayer]
    output: OutputMap
    out_a: np.ndarray
    """``tanh_scale``: scale; ``clamp``: low (−inf where unbounded); ``identity``: unused."""
    out_b: np.ndarray
    """``tanh_scale``: bias; ``clamp``: high (+inf where unbounded); ``identity``: unused."""
    norm_mean: np.ndarray | None = None
    norm_std: np.ndarray | None = None
    """``sqrt(var + eps)`` as torch computes it in float32."""
    norm_clip: float = math.inf
    action_shape: tuple[int, ...] = field(default_factory=tuple)

    @property
    def act_dim(self) -> int:
        """Flat action size (an action chunk ``[H, A]`` is ``H·A``)."""
        return int(self.layers[-1].weight.shape[0])

    @property
    def widths(self) -> list[int]:
        """Input size then the output size of every layer."""
        return [self.obs_dim] + [int(layer.weight.shape[0]) for layer in self.layers]

    def num_params(self) -> int:
        """Weights and biases of the dense layers."""
        return sum(layer.weight.size + layer.bias.size for layer in self.layers)

    def forward(self, obs: np.ndarray) -> np.ndarray:
        """Reference forward in float64 numpy, ``[N, obs_dim]`` → ``[N, act_dim]`` (for error bounds)."""
        x = self.normalize(np.asarray(obs, dtype=np.float64))
        for layer in self.layers:
            x = apply_activation(x @ layer.weight.T.astype(np.float64) + layer.bias, layer.activation)
        return self.output_map(x)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """The observation normalisation (identity without a normaliser)."""
        if self.norm_mean is None or self.norm_std is None:
            return x
        return np.clip((x - self.norm_mean) / self.norm_std, -self.norm_clip, self.norm_clip)

    def output_map(self, y: np.ndarray) -> np.ndarray:
        """Squash/scale or clamp the last layer's output into the action."""
        if self.output == "tanh_scale":
            return np.tanh(y) * self.out_a + self.out_b
        if self.output == "clamp":
            return np.clip(y, self.out_a, self.out_b)
        return y


def apply_activation(x: np.ndarray, name: Activation) -> np.ndarray:
    """The activation ``name`` on a numpy array (same definitions as torch's modules)."""
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "elu":
        return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))
    if name == "tanh":
        return np.tanh(x)
    if name == "silu":
        return x / (1.0 + np.exp(-x))
    if name == "gelu":
        erf = np.vectorize(math.erf, otypes=[np.float64])
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    return x


#: Lipschitz constant of each activation (bounds how far an input error can grow through it).
LIPSCHITZ: dict[str, float] = {"relu": 1.0, "elu": 1.0, "tanh": 1.0, "silu": 1.0998, "gelu": 1.1289,
                               "identity": 1.0}


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().copy()


def _check_supported_modules(policy: nn.Module) -> None:
    for name, module in policy.named_modules():
        if isinstance(module, (nn.RNNBase, nn.RNNCellBase)):
            raise UnsupportedArchitectureError(f"a recurrent layer ({type(module).__name__} at '{name}')")
        if isinstance(module, nn.modules.conv._ConvNd):
            raise UnsupportedArchitectureError(f"a CNN image encoder ({type(module).__name__} at '{name}')")


def _dense_stack(mlp: nn.Module, where: str) -> list[DenseLayer]:
    """``Linear (act Linear)*`` from an :class:`~robot_rl.policies.modules.mlp.MLP` (an nn.Sequential)."""
    modules = list(mlp.children()) if isinstance(mlp, nn.Sequential) else [mlp]
    layers: list[DenseLayer] = []
    for m in modules:
        if isinstance(m, nn.Linear):
            bias = m.bias if m.bias is not None else torch.zeros(m.out_features)
            layers.append(DenseLayer(_np(m.weight), _np(bias), "identity"))
        elif type(m) in _ACT_NAMES and layers and layers[-1].activation == "identity":
            if isinstance(m, nn.ELU) and m.alpha != 1.0:
                raise UnsupportedArchitectureError(f"ELU with alpha={m.alpha} in {where}")
            if isinstance(m, nn.GELU) and m.approximate != "none":
                raise UnsupportedArchitectureError(f"tanh-approximated GELU in {where}")
            layers[-1].activation = _ACT_NAMES[type(m)]
        else:
            raise UnsupportedArchitectureError(f"a {type(m).__name__} layer in {where}")
    if not layers or layers[-1].activation != "identity":
        raise UnsupportedArchitectureError(f"no linear output layer in {where}")
    return layers


def extract_mlp(policy: nn.Module) -> MLPGraph:
    """Reduce an :class:`~robot_rl.core.algorithm.MLPActor` (SAC, PPO) to an :class:`MLPGraph`.

    The policy's own ``mlp_parts`` say what its deterministic action is made of; anything else (no parts, a
    CNN, a recurrent or a LayerNorm layer) raises :class:`UnsupportedArchitectureError`; pixel actors go through
    :func:`robot_rl.export.vision.extract_graph`.
    """
    _check_supported_modules(policy)
    parts = policy.mlp_parts() if isinstance(policy, MLPActor) else None
    if parts is None:
        raise UnsupportedArchitectureError(f"an actor of type {type(policy).__name__}")
    return mlp_from_parts(parts, f"the actor MLP of {type(policy).__name__}")


def mlp_from_parts(parts: MLPActorParts, where: str) -> MLPGraph:
    """The :class:`MLPGraph` of ``parts`` (also the MLP head of a pixel actor, over its features)."""
    from robot_rl.policies.modules.normalizer import RunningNormalizer

    layers = _dense_stack(parts.mlp, where)
    last = layers[-1]
    # Only the first act_dim rows are the action (SAC's head also predicts log σ, which the mode never uses).
    layers[-1] = DenseLayer(last.weight[:parts.act_dim].copy(), last.bias[:parts.act_dim].copy(), "identity")
    graph = MLPGraph(parts.obs_dim, layers, parts.output, _np(parts.out_a), _np(parts.out_b),
                     action_shape=tuple(parts.action_shape))
    norm = parts.normalizer
    if norm is not None:
        if not isinstance(norm, RunningNormalizer):
            raise UnsupportedArchitectureError(f"an observation normaliser of type {type(norm).__name__}")
        graph.norm_mean = _np(norm.mean)
        # torch evaluates sqrt(var + eps) in float32; the C code divides by exactly these numbers.
        graph.norm_std = _np(torch.sqrt(norm.var + norm.eps))
        graph.norm_clip = float(norm.clip)
    if graph.layers[0].weight.shape[1] != graph.obs_dim:
        raise UnsupportedArchitectureError(f"a first layer of width {graph.layers[0].weight.shape[1]} "
                                           f"for a state of size {graph.obs_dim}")
    return graph
