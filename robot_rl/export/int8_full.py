"""Full int8 (weights and activations) for the C export: float64 reference, calibration, quantisation parameters.

The scheme is CMSIS-NN's (and TFLite's): weights symmetric int8 with one scale per output channel
(:func:`~robot_rl.export.quantize.quantize_rows`); each activation tensor asymmetric int8,
``real = s·(q − z)``, with ``[lo, hi]`` calibrated as the tensor's min and max over sample observations
(widened to contain 0, so zero padding is exactly ``q = z``): ``s = (hi − lo)/255``,
``z = round(−128 − lo/s)``. A conv or dense layer accumulates ``Σ w_q·(x_q − z_x) + b_q`` in int32
(``b_q = round(b/(s_w·s_x))``) and requantises with ``M = s_w·s_x/s_y`` as a Q31 multiplier and a shift
(``arm_nn_requantize``); a following ReLU is fused as the clamp at ``z_y``. Other activations are 256-entry
int8 → int8 tables. The camera image enters exactly: ``u/255 − 0.5 = (2u − 255)/510``, so the first conv reads
``2u − 255`` at scale ``1/510``. LayerNorm, the spatial softmax, the state normaliser and the output map
run in float on dequantised values (a handful of values each). The last layer's accumulator is
dequantised, not requantised, so the action keeps float resolution.

The error is measured, not bounded: :func:`reference_forward` gives the float64 result, :func:`calibrate`
the ranges, and the export reports ``max |C − torch|`` over the calibration observations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from robot_rl.export.graph import MLPGraph, apply_activation
from robot_rl.export.vision import (
    ActNode,
    CameraBranch,
    Conv2dNode,
    DenseNode,
    FlattenNode,
    LayerNormNode,
    Node,
    PoolNode,
    VisionGraph,
)


def as_vision(graph: MLPGraph) -> VisionGraph:
    """A state-only MLP as a pixel graph without cameras (so one int8 generator serves both)."""
    head = MLPGraph(graph.obs_dim, graph.layers, graph.output, graph.out_a, graph.out_b,
                    action_shape=graph.action_shape)
    return VisionGraph([], graph.obs_dim, head, graph.norm_mean, graph.norm_std, graph.norm_clip)


def _windows(x: np.ndarray, k: tuple[int, int], s: tuple[int, int], p: tuple[int, int], fill: float,
             out_hw: tuple[int, int]) -> np.ndarray:
    """``[N, C, H_out, W_out, kh, kw]`` windows of the padded ``x`` ``[N, C, H, W]``."""
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=fill)
    win = sliding_window_view(xp, k, axis=(2, 3))[:, :, ::s[0], ::s[1]]
    return win[:, :, :out_hw[0], :out_hw[1]]


def node_forward(node: Node, x: np.ndarray) -> np.ndarray:
    """One node in float64 on a batch ``[N, *shape]``."""
    if isinstance(node, Conv2dNode):
        kh, kw = node.weight.shape[2:]
        _, ho, wo = node.out_shape(x.shape[1:])
        win = _windows(x, (kh, kw), node.stride, node.padding, 0.0, (ho, wo))
        # tensordot goes through BLAS (an einsum over the 6-d window view does not).
        out = np.tensordot(win, node.weight.astype(np.float64), axes=([1, 4, 5], [1, 2, 3]))
        return out.transpose(0, 3, 1, 2) + node.bias[:, None, None]
    if isinstance(node, PoolNode):
        _, ho, wo = node.out_shape(x.shape[1:])
        if node.kind == "max":
            return _windows(x, node.kernel, node.stride, node.padding, -np.inf, (ho, wo)).max(axis=(-2, -1))
        total = _windows(x, node.kernel, node.stride, node.padding, 0.0, (ho, wo)).sum(axis=(-2, -1))
        if node.count_include_pad:
            return total / (node.kernel[0] * node.kernel[1])
        ones = np.ones((1, 1, *x.shape[2:]))
        return total / _windows(ones, node.kernel, node.stride, node.padding, 0.0, (ho, wo)).sum(axis=(-2, -1))
    if isinstance(node, ActNode):
        return apply_activation(x, node.activation)
    if isinstance(node, FlattenNode):
        return x.reshape(len(x), -1)
    if isinstance(node, DenseNode):
        return x @ node.weight.T.astype(np.float64) + node.bias
    if isinstance(node, LayerNormNode):
        flat = x.reshape(len(x), -1)
        mean, var = flat.mean(axis=1, keepdims=True), flat.var(axis=1, keepdims=True)
        return ((flat - mean) / np.sqrt(var + node.eps) * node.weight + node.bias).reshape(x.shape)
    v = x * node.gain[None, :, None, None]
    p = np.exp(v - v.max(axis=(2, 3), keepdims=True))
    p /= p.sum(axis=(2, 3), keepdims=True)
    return np.concatenate([(p * node.grid_x).sum(axis=(2, 3)), (p * node.grid_y[:, None]).sum(axis=(2, 3))], axis=1)


def camera_forward(cam: CameraBranch, images: np.ndarray) -> list[np.ndarray]:
    """Every tensor of one camera, ``[input map, after node 0, …]``, float64, for ``images`` uint8 ``[N, H, W, C]``."""
    x = (images.astype(np.float64).transpose(0, 3, 1, 2) / 255.0 - cam.mean.astype(np.float64)[:, None, None]) \
        / cam.std.astype(np.float64)[:, None, None]
    tensors = [x]
    for node in cam.nodes:
        tensors.append(node_forward(node, tensors[-1]))
    return tensors


@dataclass
class Trace:
    """The float64 tensors of a forward pass, for calibration and reference."""

    cameras: list[list[np.ndarray]]
    features: np.ndarray
    head_pre: list[np.ndarray] = field(default_factory=list)
    """Each head layer's output before its activation."""
    head_post: list[np.ndarray] = field(default_factory=list)
    action: np.ndarray | None = None


def reference_forward(graph: VisionGraph, images: list[np.ndarray], state: np.ndarray | None) -> Trace:
    """The whole actor in float64: camera tensors, features, head layers and the action ``[N, act_dim]``."""
    cams = [camera_forward(cam, im) for cam, im in zip(graph.cameras, images)]
    parts = [t[-1] for t in cams]
    if graph.state_dim and state is not None:
        s = np.asarray(state, np.float64)
        if graph.norm_mean is not None and graph.norm_std is not None:
            s = np.clip((s - graph.norm_mean) / graph.norm_std, -graph.norm_clip, graph.norm_clip)
        parts.append(s)
    trace = Trace(cams, np.concatenate(parts, axis=1))
    x = trace.features
    for layer in graph.head.layers:
        trace.head_pre.append(x @ layer.weight.T.astype(np.float64) + layer.bias)
        x = apply_activation(trace.head_pre[-1], layer.activation)
        trace.head_post.append(x)
    trace.action = graph.head.output_map(x)
    return trace


def calibrate(graph: VisionGraph, images: list[np.ndarray], state: np.ndarray | None, chunk: int = 64) -> Trace:
    """A :class:`Trace` whose tensors are each one's ``[min, max]`` over all observations (no action).

    Run ``chunk`` observations at a time: the float64 maps of a 64×64 camera take ~1 MB per observation
    and tensor, too much to hold for the export's 2,000 verification observations at once.
    """
    n = len(images[0]) if images else len(state if state is not None else [])
    ranges: Trace | None = None
    for start in range(0, n, chunk):
        rows = slice(start, start + chunk)
        t = reference_forward(graph, [im[rows] for im in images], state[rows] if state is not None else None)
        part = Trace([[_range(x) for x in cam] for cam in t.cameras], _range(t.features),
                     [_range(x) for x in t.head_pre], [_range(x) for x in t.head_post])
        ranges = part if ranges is None else Trace(
            [[_merge(a, b) for a, b in zip(ca, cb)] for ca, cb in zip(ranges.cameras, part.cameras)],
            _merge(ranges.features, part.features), [_merge(a, b) for a, b in zip(ranges.head_pre, part.head_pre)],
            [_merge(a, b) for a, b in zip(ranges.head_post, part.head_post)])
    if ranges is None:
        raise ValueError("calibration needs at least one observation")
    return ranges


def _range(x: np.ndarray) -> np.ndarray:
    return np.array([x.min(), x.max()])


def _merge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([min(a[0], b[0]), max(a[1], b[1])])


@dataclass(frozen=True)
class QParams:
    """``real = scale·(q − zero)``, ``q`` in ``[-128, 127]``."""

    scale: float
    zero: int

    @staticmethod
    def from_range(lo: float, hi: float) -> QParams:
        """Asymmetric parameters for ``[min(lo, 0), max(hi, 0)]`` (0 exactly representable)."""
        lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
        if hi - lo <= 0.0:
            return QParams(1.0, 0)
        scale = float(np.float32((hi - lo) / 255.0))
        return QParams(scale, int(np.clip(round(-128.0 - lo / scale), -128, 127)))

    @staticmethod
    def of(x: np.ndarray) -> QParams:
        """Parameters calibrated on a tensor's observed range."""
        return QParams.from_range(float(x.min()), float(x.max()))

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """``clamp(round(x/s) + z)`` as int."""
        return np.clip(np.floor(x / self.scale + 0.5) + self.zero, -128, 127).astype(np.int64)


def requant_multiplier(m: float) -> tuple[int, int]:
    """``m = mult · 2^(shift − 31)`` with a Q31 ``mult`` in ``[2^30, 2^31)`` (CMSIS-NN's multiplier and shift)."""
    if m <= 0.0:
        return 0, 0
    frac, exp = math.frexp(m)
    mult = round(frac * (1 << 31))
    if mult == 1 << 31:
        mult, exp = mult // 2, exp + 1
    if exp > 30 or exp < -31:
        raise ValueError(f"requantisation multiplier {m:g} out of range")
    return int(mult), int(exp)


def activation_table(name: str, qin: QParams, qout: QParams) -> np.ndarray:
    """The 256-entry int8 table of an activation: entry ``q + 128`` is the output for input ``q``."""
    x = qin.scale * (np.arange(-128, 128, dtype=np.float64) - qin.zero)
    return qout.quantize(apply_activation(x, name))  # type: ignore[arg-type]
