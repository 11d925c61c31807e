"""Fixed point (``q15``) for FPU-less cores: the quantisation plan that :mod:`robot_rl.export.c_fixed` writes as C.

Every tensor is int16 in a power-of-two Q format, ``real = q · 2^−f``, with ``f`` (its *fraction bits*) the largest
in ``[0, 24]`` for which the tensor's calibrated ``max |x|`` still fits ``32767`` (:func:`frac_bits`; Q15 proper
when the range is within ±1). Weights are int16 with their own ``f`` per output row; a conv or dense layer
accumulates ``Σ w_q·x_q + b_q`` in int64 (``b_q`` at the accumulator's scale ``2^−(f_w + f_x)``) and requantises
with a rounding right shift by ``f_w + f_x − f_y`` and int16 saturation; a following ReLU is the saturation's
lower limit. No multiplier other than powers of two, hence no float anywhere in the forward pass:

- **image**: uint8 HWC. A first Conv2d reads ``v = 2u − 255`` (``u/255 − 0.5 = v/510``: the 1/510 is folded into
  its weights, so the image enters exactly); a chain that does not start with a conv (or another normalisation
  than ``u/255 − 0.5``) first maps the image through a 256-entry table into an int16 CHW map;
- **ELU, SiLU, tanh, GELU**: a 513-entry table over the whole int16 input range with linear interpolation
  (:func:`lut_table`); its error, exact output rounding included, is computed by evaluating the C arithmetic on all
  65,536 inputs (:func:`lut_error`): about 1e-4 of the output for tanh at ``f_in = 12``;
- **max/avg pool**: int16, average rounded to nearest; **LayerNorm**: integer mean and variance, integer square
  root, one 64-bit division per element; **spatial softmax**: ``exp`` as ``2^−u`` (a 257-entry Q30 table and a
  shift), sums in int64, the expected coordinates by one 64-bit division per keypoint;
- **state**: int16 in a Q format per element (the header's ``STATE_FRAC_BITS_INIT``); the normaliser
  ``clamp((s − μ)/σ, ±clip)`` is an integer multiply and shift per element; **action**: int16 with
  ``ACTION_FRAC_BITS``; ``tanh·scale + bias`` is the tanh table then an integer multiply-add.

The error bound (:mod:`robot_rl.export.fixed_bound`) propagates these roundings through the layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Union, cast

import numpy as np

from robot_rl.export.graph import Activation, apply_activation
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

Q_MAX = 32767
MAX_FRAC = 24
"""Finest tensor format (``2^−24``); the coarsest is ``f = 0`` (integers up to ±32767)."""
MAX_WEIGHT_FRAC = 30
LUT_SHIFT = 7
"""Activation tables: entry ``k`` holds ``f((128·k − 32768)·2^−f_in)``, 513 entries, interpolated on 7 bits."""
EXP_U_FRAC = 26
"""Spatial softmax: ``u = (max − x)·gain·log2(e)`` in Q26; ``e = 2^−u`` is 0 beyond ``u = 30``."""
EXP_U_MAX = 30


def frac_bits(maxabs: float, lo: int = 0, hi: int = MAX_FRAC) -> int:
    """Largest ``f`` in ``[lo, hi]`` with ``maxabs·2^f ≤ 32767`` (``15`` for a tensor that was always 0)."""
    if not maxabs > 0.0 or not math.isfinite(maxabs):
        return min(max(15, lo), hi)
    return int(min(max(math.floor(math.log2(Q_MAX / maxabs)), lo), hi))


def quantize(x: np.ndarray, f: int | np.ndarray) -> np.ndarray:
    """``clamp(floor(x·2^f + 0.5))`` to int16, as int64 (the C helpers round the same way)."""
    return np.clip(np.floor(np.asarray(x, np.float64) * np.exp2(f) + 0.5), -Q_MAX - 1, Q_MAX).astype(np.int64)


def _maxabs(r: np.ndarray) -> float:
    return float(np.abs(np.asarray(r, np.float64)).max())


# ---- tables ----------------------------------------------------------------------------------------------


def lut_table(activation: Activation, f_in: int, f_out: int) -> np.ndarray:
    """The 513 int16 entries (int64) of ``activation`` from Q``f_in`` to Q``f_out``, saturated."""
    x = (np.arange(513, dtype=np.float64) * (1 << LUT_SHIFT) - 32768.0) * 2.0 ** -f_in
    return quantize(apply_activation(x, activation), f_out)


def lut_apply(table: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The C table lookup on int16 inputs ``q``, bit for bit (arithmetic shifts, as GCC does)."""
    u = np.asarray(q, np.int64) + 32768
    k, r = u >> LUT_SHIFT, u & ((1 << LUT_SHIFT) - 1)
    lo, hi = table[k], table[np.minimum(k + 1, 512)]
    return lo + (((hi - lo) * r + (1 << (LUT_SHIFT - 1))) >> LUT_SHIFT)


def lut_error(activation: Activation, table: np.ndarray, f_in: int, f_out: int) -> float:
    """``max |C table(q) − clamp(f(q·2^−f_in))|`` over all 65,536 int16 inputs, in real units."""
    q = np.arange(-32768, 32768, dtype=np.int64)
    want = np.clip(apply_activation(q * 2.0 ** -f_in, activation), -32768 * 2.0 ** -f_out, Q_MAX * 2.0 ** -f_out)
    return float(np.abs(lut_apply(table, q) * 2.0 ** -f_out - want).max())


def exp2_table() -> np.ndarray:
    """``round(2^30 · 2^(−k/256))`` for ``k = 0 … 256`` (int64): ``2^−r`` on ``[0, 1]`` in Q30."""
    return np.floor(2.0 ** (30.0 - np.arange(257) / 256.0) + 0.5).astype(np.int64)


def exp2_rel_error() -> float:
    """Largest relative error of the C ``2^−r`` (table, 8-bit interpolation, the 10 dropped bits of ``r``)."""
    t = exp2_table()
    top = np.arange(1 << 16, dtype=np.int64)
    k, fr = top >> 8, top & 255
    got = (t[k] + (((t[k + 1] - t[k]) * fr + 128) >> 8)).astype(np.float64)
    lo = 2.0 ** (30.0 - top / 65536.0)  # r's dropped low bits move the true value down to 2^-(top+1)/65536
    hi = 2.0 ** (30.0 - (top + 1) / 65536.0)
    return float(max(np.abs(got / lo - 1.0).max(), np.abs(got / hi - 1.0).max()))


# ---- the plan --------------------------------------------------------------------------------------------


@dataclass
class QLinear:
    """A conv or dense layer: ``y_q = sat(round((Σ w_q·x_q + b_q)·2^−shift))`` with a ReLU as ``lo = 0``."""

    weight: np.ndarray
    """int16 values (int64 array), the float weights' shape."""
    wfrac: np.ndarray
    """``[O]`` fraction bits of each output row."""
    bias: np.ndarray
    """``[O]`` int64 at ``2^−(wfrac + f_in)``."""
    f_in: int
    f_out: int
    relu: bool
    ref_weight: np.ndarray
    """The float weights the int16 ones approximate (times the input scale folded in), float64."""
    ref_bias: np.ndarray

    @property
    def shift(self) -> np.ndarray:
        """``[O]`` right shift from the accumulator to Q``f_out`` (≥ 0)."""
        return self.wfrac + self.f_in - self.f_out

    def real_weight(self) -> np.ndarray:
        """What the int16 weights stand for, float64."""
        return self.weight * np.exp2(-self.wfrac.astype(np.float64)).reshape(-1, *([1] * (self.weight.ndim - 1)))

    def real_bias(self) -> np.ndarray:
        """What the int64 bias stands for, float64."""
        return self.bias * np.exp2(-(self.wfrac + self.f_in).astype(np.float64))


def make_linear(weight: np.ndarray, bias: np.ndarray, f_in: int, out_range: np.ndarray, relu: bool,
                in_scale: float = 1.0) -> QLinear:
    """Quantise ``weight·in_scale`` per output row and choose the output format from its calibrated range."""
    w = np.asarray(weight, np.float64) * in_scale
    rows = w.reshape(len(w), -1)
    wfrac = np.array([frac_bits(_maxabs(r), 0, MAX_WEIGHT_FRAC) for r in rows], np.int64)
    # The output is never finer than the accumulator of the coarsest row (every shift stays >= 0).
    f_out = min(frac_bits(_maxabs(out_range)), int(wfrac.min()) + f_in)
    wq = quantize(rows, wfrac[:, None]).reshape(w.shape)
    bq = np.clip(np.floor(np.asarray(bias, np.float64) * np.exp2(wfrac + f_in) + 0.5), -2.0**62, 2.0**62)
    return QLinear(wq, wfrac, bq.astype(np.int64), f_in, f_out, relu, w, np.asarray(bias, np.float64))


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
    """uint8 HWC → int16 CHW through one 256-entry table per channel (chains not starting with a conv)."""

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
    """Everything the q15 C code computes, in integers (see the module docstring)."""

    graph: VisionGraph
    cameras: list[CameraPlan]
    state: StatePlan | None
    f_feat: int
    head: list[Op]
    """Head tensors: features = 0, layer ``i`` pre-activation ``2i + 1``, post-activation ``2i + 2``."""
    output: OutputPlan
    f_act: int
    notes: list[str] = field(default_factory=list)


# ---- building the plan from calibration ranges ------------------------------------------------------------


def build_plan(graph: VisionGraph, ranges: Trace, state_absmax: np.ndarray | None) -> FixedPlan:
    """The q15 plan of ``graph``, its formats chosen from calibration.

    ``ranges``: :func:`~robot_rl.export.int8_full.calibrate`'s ``[min, max]`` of every tensor; ``state_absmax``:
    ``[D]`` max ``|state|`` per element over the same observations.
    """
    cams = [_camera_plan(cam, ranges.cameras[k]) for k, cam in enumerate(graph.cameras)]
    f_feat = min([frac_bits(_maxabs(ranges.features))] + [c.f_out for c in cams])
    state = None
    if graph.state_dim:
        absmax = np.zeros(graph.state_dim) if state_absmax is None else np.asarray(state_absmax, np.float64)
        state = _state_plan(graph, f_feat, absmax)
    head, f_last = _head_plan(graph, ranges, f_feat)
    output, f_act = _output_plan(graph, ranges, head, f_last)
    return FixedPlan(graph, cams, state, f_feat, head, output, f_act)


def _pixels(cam: CameraBranch) -> PixelsOp:
    u = np.arange(256, dtype=np.float64)
    real = (u[None, :] / 255.0 - cam.mean.astype(np.float64)[:, None]) / cam.std.astype(np.float64)[:, None]
    f = frac_bits(_maxabs(real))
    return PixelsOp(quantize(real, f), f)


def _camera_plan(cam: CameraBranch, ranges: list[np.ndarray]) -> CameraPlan:
    """One camera chain (``ranges[j]``: the input of node ``j``; a fused ReLU skips one index)."""
    nodes, ops = cam.nodes, cast(list[Op], [])
    fused_image = bool(nodes) and isinstance(nodes[0], Conv2dNode) and bool(np.all(cam.mean == 0.5)) \
        and bool(np.all(cam.std == 1.0))
    f: int | None = None
    if not fused_image:
        pixels = _pixels(cam)
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
                            1.0 / 510.0 if f is None else 1.0)
            ops.append(ConvOp(node, q, f is None, j, dst))
            f = q.f_out
        elif f is None:  # unreachable: without a fused first conv the chain starts with the pixel table
            raise AssertionError("q15 camera chain without an input format")
        elif isinstance(node, DenseNode):
            q = make_linear(node.weight, node.bias, f, ranges[dst], relu)
            ops.append(DenseOp(q, j, dst))
            f = q.f_out
        elif isinstance(node, PoolNode):
            ops.append(PoolOp(node, f, j, dst))
        elif isinstance(node, ActNode) and node.activation != "identity":
            op = ReluOp(f, j, dst) if node.activation == "relu" else make_lut(node.activation, f, ranges[dst], j, dst)
            ops.append(op)
            f = op.f if isinstance(op, ReluOp) else op.f_out
        elif isinstance(node, LayerNormNode):
            norm = make_layernorm(node, f, ranges[dst], int(np.prod(cam.shapes()[j])), j, dst)
            ops.append(norm)
            f = norm.f_out
        elif isinstance(node, SpatialSoftmaxNode):
            keypoints = make_keypoints(node, f, ranges[dst], j, dst)
            ops.append(keypoints)
            f = keypoints.f_out
        elif not isinstance(node, (FlattenNode, ActNode)):
            raise TypeError(f"no q15 code for node {node!r}")
        j = dst
    assert f is not None
    return CameraPlan(cam, ops, f)


def make_lut(activation: Activation, f_in: int, out_range: np.ndarray, src: int, dst: int) -> LutOp:
    """The table op of ``activation`` from Q``f_in`` to the format of its calibrated output range."""
    f_out = frac_bits(_maxabs(out_range))
    table = lut_table(activation, f_in, f_out)
    return LutOp(activation, table, f_in, f_out, lut_error(activation, table, f_in, f_out), src, dst)


def make_layernorm(node: LayerNormNode, f_in: int, out_range: np.ndarray, length: int, src: int,
                   dst: int) -> LayerNormOp:
    """Integer LayerNorm over ``length`` values (≤ 32,768, so every 64-bit intermediate fits)."""
    if length > 32768:
        raise ValueError(f"the q15 variant cannot take a LayerNorm over {length} values (at most 32,768: its sums "
                         "of squares must fit 64 bits); use float32 or int8_full")
    f_out = frac_bits(_maxabs(out_range))
    g = np.asarray(node.weight, np.float64)
    limit = min(2.0**30, 2.0**61 / (length * 2.0**16))  # |len·x_i − Σx| ≤ len·2^16, times G stays below 2^61
    peak = _maxabs(g) * 2.0**f_out
    k = int(min(max(math.floor(math.log2(limit / peak)), 0), 40)) if peak > 0 else 0
    gamma = np.floor(g * 2.0 ** (f_out + k) + 0.5).astype(np.int64)
    beta = np.clip(np.floor(np.asarray(node.bias, np.float64) * 2.0**f_out + 0.5), -(2.0**31), 2.0**31 - 1)
    eps = int(min(math.floor(node.eps * length**2 * 4.0**f_in + 0.5), 2**62))
    return LayerNormOp(node, gamma, k, beta.astype(np.int64), eps, f_in, f_out, src, dst)


def make_keypoints(node: SpatialSoftmaxNode, f_in: int, out_range: np.ndarray, src: int, dst: int) -> KeypointsOp:
    """Spatial softmax in integers; the keypoints' format is at most Q15 (the expectation is computed in Q15)."""
    g = np.asarray(node.gain, np.float64) * math.log2(math.e) * 2.0 ** (EXP_U_FRAC - f_in)
    gain = np.clip(np.floor(g + 0.5), 0, 2**31 - 1).astype(np.int64)
    reach = (EXP_U_MAX << EXP_U_FRAC) - 1
    cut = np.where(gain > 0, np.minimum(reach // np.maximum(gain, 1), 65535), 65535).astype(np.int64)
    gx, gy = (np.floor(np.asarray(v, np.float64) * 32768.0 + 0.5).astype(np.int64) for v in (node.grid_x, node.grid_y))
    return KeypointsOp(node, gain, cut, gx, gy, f_in, min(15, frac_bits(_maxabs(out_range))), src, dst)


def _state_plan(graph: VisionGraph, f_feat: int, absmax: np.ndarray) -> StatePlan:
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
    clip_q = Q_MAX if not math.isfinite(clip) else int(min(Q_MAX, math.floor(clip * 2.0**f_feat + 0.5)))
    return StatePlan(frac, mu, mult, shift, clip_q)


def state_fixed(plan: StatePlan, state: np.ndarray) -> np.ndarray:
    """The C state path bit for bit: ``[N, D]`` raw float state → the normalised int16 values (int64)."""
    s = quantize(state, plan.frac[None, :])
    v = (s - plan.mu) * plan.mult
    v = np.where(plan.shift > 0, (v + (1 << np.maximum(plan.shift - 1, 0))) >> plan.shift, v)
    return np.clip(v, -plan.clip, plan.clip)


def _head_plan(graph: VisionGraph, ranges: Trace, f_feat: int) -> tuple[list[Op], int]:
    ops: list[Op] = []
    f = f_feat
    layers = graph.head.layers
    for i, layer in enumerate(layers[:-1]):
        relu = layer.activation == "relu"
        q = make_linear(layer.weight, layer.bias, f, ranges.head_post[i] if relu else ranges.head_pre[i], relu)
        ops.append(DenseOp(q, 2 * i, 2 * i + (2 if relu else 1)))
        f = q.f_out
        if layer.activation not in ("relu", "identity"):
            lut = make_lut(layer.activation, f, ranges.head_post[i], 2 * i + 1, 2 * i + 2)
            ops.append(lut)
            f = lut.f_out
    return ops, f


def _output_plan(graph: VisionGraph, ranges: Trace, head: list[Op], f_in: int) -> tuple[OutputPlan, int]:
    """The last layer (appended to ``head``) and the output map; returns the plan and the action's format."""
    out, last, i = graph.head, graph.head.layers[-1], len(graph.head.layers) - 1
    pre = ranges.head_pre[-1]
    if out.output == "tanh_scale":
        q = make_linear(last.weight, last.bias, f_in, pre, False)
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
    q = make_linear(last.weight, last.bias, f_in, np.array([-peak, peak]), False)
    head.append(DenseOp(q, 2 * i, 2 * i + 1))
    if out.output == "identity":
        return OutputPlan("identity", q.f_out), q.f_out
    lo = np.where(np.isfinite(out.out_a), quantize(np.nan_to_num(out.out_a, neginf=-1e9), q.f_out), -Q_MAX - 1)
    hi = np.where(np.isfinite(out.out_b), quantize(np.nan_to_num(out.out_b, posinf=1e9), q.f_out), Q_MAX)
    return OutputPlan("clamp", q.f_out, lo=lo.astype(np.int64), hi=hi.astype(np.int64)), q.f_out
