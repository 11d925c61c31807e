"""Fixed point (``q15``, ``q7``) for FPU-less cores: the quantisation plan :mod:`robot_rl.export.c_fixed` writes.

Every tensor is a signed integer of the variant's :class:`~robot_rl.export.fixed_formats.Width` (int16 for ``q15``,
int8 for ``q7``) in a power-of-two Q format, ``real = q · 2^−f``, with ``f`` (its *fraction bits*) the largest in
``[0, 24]`` for which the tensor's calibrated ``max |x|`` still fits (:func:`frac_bits`: 32767 or 127; Q15 or Q7
proper when the range is within ±1). Weights have the same width and their own ``f`` per output row; a conv or dense
layer accumulates ``Σ w_q·x_q + b_q`` (``b_q`` at the accumulator's scale ``2^−(f_w + f_x)``; int64 for ``q15``,
int32 for ``q7``) and requantises with a rounding right shift by ``f_w + f_x − f_y`` and saturation; a following
ReLU is the saturation's lower limit. No multiplier other than powers of two, hence no float anywhere in the
forward pass:

- **image**: uint8 HWC. A first Conv2d reads ``v = 2u − 255`` (``u/255 − 0.5 = v/510``: the 1/510 is folded into
  its weights, so the image enters exactly); a chain that does not start with a conv (or another normalisation
  than ``u/255 − 0.5``) first maps the image through a 256-entry table per channel into a map;
- **ELU, SiLU, tanh, GELU**: a table over the whole input range (:func:`lut_table`: 513 int16 entries with linear
  interpolation, or 256 int8 entries); its error, exact output rounding included, is computed by evaluating the C
  arithmetic on every input (:func:`lut_error`): about 1e-4 of the output for int16 tanh at ``f_in = 12``;
- **max/avg pool**: in the map's integers, average rounded to nearest; **LayerNorm**: integer mean and variance,
  integer square root, one 64-bit division per element; **spatial softmax**: ``exp`` as ``2^−u`` (a 257-entry Q30
  table and a shift), sums in int64, the expected coordinates by one 64-bit division per keypoint;
- **state**: int16 in a Q format per element (the header's ``STATE_FRAC_BITS_INIT``); the normaliser
  ``clamp((s − μ)/σ, ±clip)`` is an integer multiply and shift per element into the features' format; **action**:
  int16 with ``ACTION_FRAC_BITS``: the last layer writes int16 in both variants, ``tanh·scale + bias`` is the
  int16 tanh table then an integer multiply-add.

``q7`` keeps every int32 sum in range: each row's weight format is lowered until its bias, at the accumulator's
scale, is at most :data:`ACC32_BIAS` and its shift at most :data:`ACC32_MAX_SHIFT`, and a layer whose products
could add up to more than :data:`ACC32_SUM` is refused. The error bound (:mod:`robot_rl.export.fixed_bound`)
propagates these roundings through the layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Union, cast

import numpy as np

from robot_rl.export.fixed_formats import (
    EXP_U_FRAC,
    EXP_U_MAX,
    MAX_WEIGHT_FRAC,
    Q15,
    Q_MAX,
    Width,
    frac_bits,
    lut_error,
    lut_table,
    quantize,
)

# Callers (the tests, the bound) have imported the formats and tables from here since q15 was written.
from robot_rl.export.fixed_formats import exp2_rel_error as exp2_rel_error
from robot_rl.export.fixed_formats import exp2_table as exp2_table
from robot_rl.export.fixed_formats import lut_apply as lut_apply
from robot_rl.export.graph import Activation
from robot_rl.export.int8_full import Trace
from robot_rl.export.vision import (
    ActNode,
    CameraBranch,
    Conv2dNode,
    DenseNode,
    FlattenNode,
    LayerNormNode,
    PoolNode,
    SpatialSoftmaxNode,
    VisionGraph,
)

ACC32_BIAS = 1 << 28
"""``q7``: the largest bias (with its format) an int32 accumulator starts at; the products add at most 2^30."""
ACC32_SUM = 1 << 30
ACC32_MAX_SHIFT = 29
"""``q7``: the requantising shift stays below 30, so its rounding constant ``2^(shift − 1)`` is at most 2^28."""


def _maxabs(r: np.ndarray) -> float:
    return float(np.abs(np.asarray(r, np.float64)).max())


# ---- the plan --------------------------------------------------------------------------------------------


@dataclass
class QLinear:
    """A conv or dense layer: ``y_q = sat(round((Σ w_q·x_q + b_q)·2^−shift))`` with a ReLU as ``lo = 0``."""

    weight: np.ndarray
    """Integer values of the variant's width (int64 array), the float weights' shape."""
    wfrac: np.ndarray
    """``[O]`` fraction bits of each output row."""
    bias: np.ndarray
    """``[O]`` int64 at ``2^−(wfrac + f_in)``."""
    f_in: int
    f_out: int
    relu: bool
    ref_weight: np.ndarray
    """The float weights the integer ones approximate (times the input scale folded in), float64."""
    ref_bias: np.ndarray
    qmax: int = Q_MAX
    """Largest output value: the variant's, or 32767 for the layer that writes the int16 action."""

    @property
    def shift(self) -> np.ndarray:
        """``[O]`` right shift from the accumulator to Q``f_out`` (≥ 0)."""
        return self.wfrac + self.f_in - self.f_out

    def real_weight(self) -> np.ndarray:
        """What the integer weights stand for, float64."""
        return self.weight * np.exp2(-self.wfrac.astype(np.float64)).reshape(-1, *([1] * (self.weight.ndim - 1)))

    def real_bias(self) -> np.ndarray:
        """What the integer bias stands for, float64."""
        return self.bias * np.exp2(-(self.wfrac + self.f_in).astype(np.float64))


def make_linear(weight: np.ndarray, bias: np.ndarray, f_in: int, out_range: np.ndarray, relu: bool,
                in_scale: float = 1.0, width: Width = Q15, out_qmax: int | None = None,
                x_max: int | None = None) -> QLinear:
    """Quantise ``weight·in_scale`` per output row and choose the output format from its calibrated range.

    ``out_qmax``: the output's largest value (default ``width``'s); ``x_max``: the largest ``|x_q|`` the layer
    reads (default ``width``'s; 255 for the image's ``2u − 255``), which bounds a 32-bit accumulator's sum.
    """
    w = np.asarray(weight, np.float64) * in_scale
    b = np.asarray(bias, np.float64)
    rows = w.reshape(len(w), -1)
    qmax = width.qmax if out_qmax is None else out_qmax
    wfrac = np.array([frac_bits(_maxabs(r), 0, MAX_WEIGHT_FRAC, width.qmax) for r in rows], np.int64)
    f_cal = frac_bits(_maxabs(out_range), qmax=qmax)
    acc32 = width.acc_bits == 32
    if acc32:
        _check_int32_sum(rows.shape[1], width, x_max if x_max is not None else width.qmax + 1)
        with np.errstate(divide="ignore"):  # a zero bias has all the room (+inf)
            room = np.minimum(np.floor(math.log2(ACC32_BIAS) - np.log2(np.abs(b))), MAX_WEIGHT_FRAC + f_in)
        wfrac = np.minimum(wfrac, (room - f_in).astype(np.int64))
    # The output is never finer than the accumulator of the coarsest row (every shift stays >= 0).
    f_out = min(f_cal, int(wfrac.min()) + f_in)
    if acc32:  # a row lowered here gets a shift of exactly 29: every shift stays in [0, 29], f_out still holds
        wfrac = np.minimum(wfrac, ACC32_MAX_SHIFT + f_out - f_in)
    wq = quantize(rows, wfrac[:, None], width.qmax).reshape(w.shape)
    bq = np.clip(np.floor(b * np.exp2(wfrac + f_in) + 0.5), -2.0**62, 2.0**62)
    return QLinear(wq, wfrac, bq.astype(np.int64), f_in, f_out, relu, w, b, qmax)


def _check_int32_sum(n_in: int, width: Width, x_max: int) -> None:
    if n_in * width.qmax * x_max > ACC32_SUM:
        raise ValueError(f"the {width.variant} variant cannot take a layer with {n_in} inputs per output (its int32 "
                         f"accumulator holds at most {ACC32_SUM // (width.qmax * x_max)}); use q15")


@dataclass
class ConvOp:
    """A Conv2d; ``first``: reads the uint8 image as ``2u − 255`` (``f_in = 0``, 1/510 folded into the weights)."""

    node: Conv2dNode
    q: QLinear
    first: bool
    src: int
    dst: int


@dataclass
class DenseOp:
    """A Linear inside a camera chain or the head."""

    q: QLinear
    src: int
    dst: int


@dataclass
class PixelsOp:
    """uint8 HWC → an HWC map through one 256-entry table per channel (chains not starting with a conv)."""

    table: np.ndarray
    """``[C or 1, 256]``: ``round((u/255 − mean_c)/std_c · 2^f)``."""
    f: int
    src: int = 0
    dst: int = 0


@dataclass
class PoolOp:
    """Max or average pool at the input's format."""

    node: PoolNode
    f: int
    src: int
    dst: int


@dataclass
class ReluOp:
    """A ReLU that could not be fused into the layer before it."""

    f: int
    src: int
    dst: int


@dataclass
class LutOp:
    """ELU, SiLU, tanh or GELU through :func:`lut_table`; ``eps`` = :func:`lut_error`."""

    activation: Activation
    table: np.ndarray
    f_in: int
    f_out: int
    eps: float
    src: int
    dst: int
    width: Width = Q15
    """Of the table and the map it works on (the output's tanh is ``q15``'s in both variants)."""


@dataclass
class LayerNormOp:
    """``y = round(round(D_i·G_i/R)·2^−k) + B_i`` (see :mod:`robot_rl.export.c_fixed_kernels`)."""

    node: LayerNormNode
    gamma: np.ndarray
    """int64 ``round(γ·2^(f_out + k))``."""
    k: int
    beta: np.ndarray
    """int64 ``round(β·2^f_out)``."""
    eps: int
    """``round(eps·len²·2^(2·f_in))``."""
    f_in: int
    f_out: int
    src: int
    dst: int


@dataclass
class KeypointsOp:
    """Spatial softmax: ``gain`` = ``round(g·log2(e)·2^(26 − f_in))``, ``cut`` its reach, grids in Q15."""

    node: SpatialSoftmaxNode
    gain: np.ndarray
    cut: np.ndarray
    grid_x: np.ndarray
    grid_y: np.ndarray
    f_in: int
    f_out: int
    src: int
    dst: int


Op = Union[ConvOp, DenseOp, PixelsOp, PoolOp, ReluOp, LutOp, LayerNormOp, KeypointsOp]


@dataclass
class CameraPlan:
    """One camera's ops; ``src``/``dst`` index the float reference's tensors (input map = 0, node ``j`` → ``j+1``)."""

    branch: CameraBranch
    ops: list[Op]
    f_out: int


@dataclass
class StatePlan:
    """``z_q = clamp(round((s_q − mu_q)·mult·2^−shift), ±clip)`` per element, at the features' format."""

    frac: np.ndarray
    mu: np.ndarray
    mult: np.ndarray
    shift: np.ndarray
    clip: int


@dataclass
class OutputPlan:
    """``tanh_scale``: ``a = sat(round(T(y)·scale_q·2^−(15 + f_scale − f_act)) + bias_q)``; ``clamp``: ``lo``/``hi``."""

    kind: str
    f_in: int
    tanh: LutOp | None = None
    scale: np.ndarray | None = None
    f_scale: int = 0
    bias: np.ndarray | None = None
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None


@dataclass
class FixedPlan:
    """Everything the fixed-point C code computes, in integers (see the module docstring)."""

    graph: VisionGraph
    cameras: list[CameraPlan]
    state: StatePlan | None
    f_feat: int
    head: list[Op]
    """Head tensors: features = 0, layer ``i`` pre-activation ``2i + 1``, post-activation ``2i + 2``."""
    output: OutputPlan
    f_act: int
    notes: list[str] = field(default_factory=list)
    width: Width = Q15


# ---- building the plan from calibration ranges ------------------------------------------------------------


def build_plan(graph: VisionGraph, ranges: Trace, state_absmax: np.ndarray | None,
               width: Width = Q15) -> FixedPlan:
    """The ``q15`` (or, with ``width=Q7``, ``q7``) plan of ``graph``, its formats chosen from calibration.

    ``ranges``: :func:`~robot_rl.export.int8_full.calibrate`'s ``[min, max]`` of every tensor; ``state_absmax``:
    ``[D]`` max ``|state|`` per element over the same observations.
    """
    cams = [_camera_plan(cam, ranges.cameras[k], width) for k, cam in enumerate(graph.cameras)]
    f_feat = min([frac_bits(_maxabs(ranges.features), qmax=width.qmax)] + [c.f_out for c in cams])
    state = None
    if graph.state_dim:
        absmax = np.zeros(graph.state_dim) if state_absmax is None else np.asarray(state_absmax, np.float64)
        state = _state_plan(graph, f_feat, absmax, width.qmax)
    head, f_last = _head_plan(graph, ranges, f_feat, width)
    output, f_act = _output_plan(graph, ranges, head, f_last, width)
    return FixedPlan(graph, cams, state, f_feat, head, output, f_act, width=width)


def _pixels(cam: CameraBranch, width: Width) -> PixelsOp:
    u = np.arange(256, dtype=np.float64)
    real = (u[None, :] / 255.0 - cam.mean.astype(np.float64)[:, None]) / cam.std.astype(np.float64)[:, None]
    f = frac_bits(_maxabs(real), qmax=width.qmax)
    return PixelsOp(quantize(real, f, width.qmax), f)


def _camera_plan(cam: CameraBranch, ranges: list[np.ndarray], width: Width) -> CameraPlan:
    """One camera chain (``ranges[j]``: the input of node ``j``; a fused ReLU skips one index)."""
    nodes, ops = cam.nodes, cast(list[Op], [])
    fused_image = bool(nodes) and isinstance(nodes[0], Conv2dNode) and bool(np.all(cam.mean == 0.5)) \
        and bool(np.all(cam.std == 1.0))
    f: int | None = None
    if not fused_image:
        pixels = _pixels(cam, width)
        ops.append(pixels)
        f = pixels.f
    j = 0
    while j < len(nodes):
        node = nodes[j]
        nxt = nodes[j + 1] if j + 1 < len(nodes) else None
        relu = isinstance(node, (Conv2dNode, DenseNode)) and isinstance(nxt, ActNode) and nxt.activation == "relu"
        dst = j + 2 if relu else j + 1
        if isinstance(node, Conv2dNode):
            q = make_linear(node.weight, node.bias, 0 if f is None else f, ranges[dst], relu,
                            1.0 / 510.0 if f is None else 1.0, width, x_max=255 if f is None else None)
            ops.append(ConvOp(node, q, f is None, j, dst))
            f = q.f_out
        elif f is None:  # unreachable: without a fused first conv the chain starts with the pixel table
            raise AssertionError("fixed-point camera chain without an input format")
        elif isinstance(node, DenseNode):
            q = make_linear(node.weight, node.bias, f, ranges[dst], relu, width=width)
            ops.append(DenseOp(q, j, dst))
            f = q.f_out
        elif isinstance(node, PoolNode):
            ops.append(PoolOp(node, f, j, dst))
        elif isinstance(node, ActNode) and node.activation != "identity":
            op = ReluOp(f, j, dst) if node.activation == "relu" else make_lut(node.activation, f, ranges[dst], j, dst,
                                                                               width)
            ops.append(op)
            f = op.f if isinstance(op, ReluOp) else op.f_out
        elif isinstance(node, LayerNormNode):
            norm = make_layernorm(node, f, ranges[dst], int(np.prod(cam.shapes()[j])), j, dst, width)
            ops.append(norm)
            f = norm.f_out
        elif isinstance(node, SpatialSoftmaxNode):
            keypoints = make_keypoints(node, f, ranges[dst], j, dst, width.qmax)
            ops.append(keypoints)
            f = keypoints.f_out
        elif not isinstance(node, (FlattenNode, ActNode)):
            raise TypeError(f"no {width.variant} code for node {node!r}")
        j = dst
    assert f is not None
    return CameraPlan(cam, ops, f)


def make_lut(activation: Activation, f_in: int, out_range: np.ndarray, src: int, dst: int,
             width: Width = Q15) -> LutOp:
    """The table op of ``activation`` from Q``f_in`` to the format of its calibrated output range."""
    f_out = frac_bits(_maxabs(out_range), qmax=width.qmax)
    table = lut_table(activation, f_in, f_out, width)
    return LutOp(activation, table, f_in, f_out, lut_error(activation, table, f_in, f_out, width), src, dst, width)


def make_layernorm(node: LayerNormNode, f_in: int, out_range: np.ndarray, length: int, src: int,
                   dst: int, width: Width = Q15) -> LayerNormOp:
    """Integer LayerNorm over ``length`` values (≤ 32,768, so every 64-bit intermediate fits)."""
    if length > 32768:
        raise ValueError(f"the {width.variant} variant cannot take a LayerNorm over {length} values (at most 32,768: "
                         "its sums of squares must fit 64 bits); use float32 or int8_full")
    f_out = frac_bits(_maxabs(out_range), qmax=width.qmax)
    g = np.asarray(node.weight, np.float64)
    # |len·x_i − Σx| ≤ len·2^bits, times G stays below 2^61.
    limit = min(2.0**30, 2.0**61 / (length * 2.0**width.bits))
    peak = _maxabs(g) * 2.0**f_out
    k = int(min(max(math.floor(math.log2(limit / peak)), 0), 40)) if peak > 0 else 0
    gamma = np.floor(g * 2.0 ** (f_out + k) + 0.5).astype(np.int64)
    beta = np.clip(np.floor(np.asarray(node.bias, np.float64) * 2.0**f_out + 0.5), -(2.0**31), 2.0**31 - 1)
    eps = int(min(math.floor(node.eps * length**2 * 4.0**f_in + 0.5), 2**62))
    return LayerNormOp(node, gamma, k, beta.astype(np.int64), eps, f_in, f_out, src, dst)


def make_keypoints(node: SpatialSoftmaxNode, f_in: int, out_range: np.ndarray, src: int, dst: int,
                   qmax: int = Q_MAX) -> KeypointsOp:
    """Spatial softmax in integers; the keypoints' format is at most Q15 (the expectation is computed in Q15)."""
    g = np.asarray(node.gain, np.float64) * math.log2(math.e) * 2.0 ** (EXP_U_FRAC - f_in)
    gain = np.clip(np.floor(g + 0.5), 0, 2**31 - 1).astype(np.int64)
    reach = (EXP_U_MAX << EXP_U_FRAC) - 1
    cut = np.where(gain > 0, np.minimum(reach // np.maximum(gain, 1), 65535), 65535).astype(np.int64)
    gx, gy = (np.floor(np.asarray(v, np.float64) * 32768.0 + 0.5).astype(np.int64) for v in (node.grid_x, node.grid_y))
    return KeypointsOp(node, gain, cut, gx, gy, f_in, min(15, frac_bits(_maxabs(out_range), qmax=qmax)), src, dst)


def _state_plan(graph: VisionGraph, f_feat: int, absmax: np.ndarray, qmax: int) -> StatePlan:
    """The state enters as int16 (its own formats) and leaves at the features' format and width (``qmax``)."""
    d = graph.state_dim
    mean = np.zeros(d) if graph.norm_mean is None else graph.norm_mean.astype(np.float64)
    std = np.ones(d) if graph.norm_std is None else graph.norm_std.astype(np.float64)
    clip = graph.norm_clip if graph.norm_mean is not None else math.inf
    if math.isfinite(clip):  # beyond the clip window every value gives the same z: no need to represent it
        absmax = np.minimum(absmax, np.maximum(np.abs(mean - clip * std), np.abs(mean + clip * std)))
    frac = np.array([frac_bits(float(m)) for m in absmax], np.int64)
    mu = np.floor(mean * np.exp2(frac) + 0.5).astype(np.int64)
    m_real = np.exp2((f_feat - frac).astype(np.float64)) / std
    shift = np.clip(29 - np.floor(np.log2(m_real)), 0, 62).astype(np.int64)
    mult = np.clip(np.floor(m_real * np.exp2(shift) + 0.5), 0, 2**31 - 1).astype(np.int64)
    clip_q = qmax if not math.isfinite(clip) else int(min(qmax, math.floor(clip * 2.0**f_feat + 0.5)))
    return StatePlan(frac, mu, mult, shift, clip_q)


def state_fixed(plan: StatePlan, state: np.ndarray) -> np.ndarray:
    """The C state path bit for bit: ``[N, D]`` raw float state → the normalised feature values (int64)."""
    s = quantize(state, plan.frac[None, :])
    v = (s - plan.mu) * plan.mult
    v = np.where(plan.shift > 0, (v + (1 << np.maximum(plan.shift - 1, 0))) >> plan.shift, v)
    return np.clip(v, -plan.clip, plan.clip)


def _head_plan(graph: VisionGraph, ranges: Trace, f_feat: int, width: Width) -> tuple[list[Op], int]:
    ops: list[Op] = []
    f = f_feat
    layers = graph.head.layers
    for i, layer in enumerate(layers[:-1]):
        relu = layer.activation == "relu"
        q = make_linear(layer.weight, layer.bias, f, ranges.head_post[i] if relu else ranges.head_pre[i], relu,
                        width=width)
        ops.append(DenseOp(q, 2 * i, 2 * i + (2 if relu else 1)))
        f = q.f_out
        if layer.activation not in ("relu", "identity"):
            lut = make_lut(layer.activation, f, ranges.head_post[i], 2 * i + 1, 2 * i + 2, width)
            ops.append(lut)
            f = lut.f_out
    return ops, f


def _output_plan(graph: VisionGraph, ranges: Trace, head: list[Op], f_in: int,
                 width: Width) -> tuple[OutputPlan, int]:
    """The last layer (appended to ``head``) and the output map; returns the plan and the action's format.

    The last layer reads ``width``'s features and writes int16 whatever the width, so the action keeps q15's
    resolution: the output map is the same for both variants.
    """
    out, last, i = graph.head, graph.head.layers[-1], len(graph.head.layers) - 1
    pre = ranges.head_pre[-1]
    if out.output == "tanh_scale":
        q = make_linear(last.weight, last.bias, f_in, pre, False, width=width, out_qmax=Q_MAX)
        head.append(DenseOp(q, 2 * i, 2 * i + 1))
        tanh = make_lut("tanh", q.f_out, np.tanh(pre), 2 * i + 1, 2 * i + 2)
        scale, bias = out.out_a.astype(np.float64), out.out_b.astype(np.float64)
        f_scale = frac_bits(_maxabs(scale), 0, 30)
        f_act = frac_bits(float((np.abs(bias) + np.abs(scale)).max()))
        plan = OutputPlan("tanh_scale", q.f_out, tanh, quantize(scale, f_scale), f_scale, quantize(bias, f_act))
        return plan, f_act
    bounds = np.concatenate([out.out_a, out.out_b]).astype(np.float64) if out.output == "clamp" else np.zeros(0)
    finite = bounds[np.isfinite(bounds)]
    peak = _maxabs(finite) if finite.size else 0.0
    if finite.size < bounds.size or out.output == "identity":
        peak = max(peak, _maxabs(pre))
    q = make_linear(last.weight, last.bias, f_in, np.array([-peak, peak]), False, width=width, out_qmax=Q_MAX)
    head.append(DenseOp(q, 2 * i, 2 * i + 1))
    if out.output == "identity":
        return OutputPlan("identity", q.f_out), q.f_out
    lo = np.where(np.isfinite(out.out_a), quantize(np.nan_to_num(out.out_a, neginf=-1e9), q.f_out), -Q_MAX - 1)
    hi = np.where(np.isfinite(out.out_b), quantize(np.nan_to_num(out.out_b, posinf=1e9), q.f_out), Q_MAX)
    return OutputPlan("clamp", q.f_out, lo=lo.astype(np.int64), hi=hi.astype(np.int64)), q.f_out
