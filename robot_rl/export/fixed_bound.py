"""A rigorous per-observation bound on ``|action_fixed − action_exact|`` (``q15``, ``q7``), layer by layer.

Let ``x`` be a layer's exact (float64) input, ``x̂`` the C code's, ``|x̂ − x| ≤ e`` elementwise. With ``W̃``, ``b̃``
what the integer weights and bias stand for (exactly known numbers), ``M = qmax·2^−f`` the format's largest
value (``qmax`` = 32767 or 127) and ``(t)₊ = max(t, 0)``:

- **conv, dense**: ``e' = |W̃|·e + |(W̃ − W)·x| + |b̃ − b| + ½·2^−f_out + (|y| − M)₊`` (the rounding shift,
  then saturation, which is 1-Lipschitz; a fused ReLU is the saturation's lower limit, ``y`` is then
  ``relu(y)``). The first conv reads the image exactly (``e = 0``); a pixel table adds its exact rounding;
- **activation table**: ``e' = L·e + ε + (|f(x)| − M)₊`` with ``L`` the activation's Lipschitz constant and ``ε``
  the table's error evaluated on every input; **ReLU**: ``e' = e``; **max pool**: the window's largest ``e``;
  **average pool**: the window's mean ``e`` + ½ LSB;
- **LayerNorm** (``s = sqrt(var + eps)``, ``n = (x − mean)/s``, ``E = max e``): ``|Δn| ≤ E·(2 + |n|)/(s − E)``
  (the mean moves by at most ``E``, ``s`` by at most ``E``), plus the integer square root's relative ``2/R``, then
  ``|γ̃|·Δn + |n|·|γ̃ − γ| + |β̃ − β|`` and the roundings;
- **spatial softmax**: each pixel's weight moves by at most a factor ``e^{±δ}`` with ``δ = g·E`` plus the kernel's
  ``exp`` error (its gain rounding and its table's relative error, evaluated exhaustively), and by an additive
  ``≤ 2^−30`` per pixel (shift floor, cut-off), so the keypoint moves by at most
  ``R·(e^{2δ} − 1 + n·2^−29) + max|ĝ − g| + roundings``, ``R`` half the grid's range;
- **state**: computed exactly (the C integer arithmetic emulated in numpy); **output**: ``tanh`` through its table,
  then ``|S̃|·e_t + |t|·|S̃ − scale| + |B̃ − bias|`` + rounding; a clamp adds nothing but the rounding of its bounds.
  Either is capped at what the output map allows whatever the input (``|S̃| + |scale| + …``; a two-sided clamp's
  interval).

It is rigorous in real arithmetic and the export enforces it (``err ≤ bound + 1e-5`` against float32 torch). It is
a worst case (every rounding aligned, each layer's ``|W̃|`` amplifying it): about 1–30 % tight on MLP actors, but
through a stack of convolutions it grows by each layer's ``‖W‖₁`` and then reaches the cap (the 4-conv DrQ encoder),
where only the measured error is informative.
"""

from __future__ import annotations

import math

import numpy as np

from robot_rl.export.fixed import (
    CameraPlan,
    ConvOp,
    DenseOp,
    FixedPlan,
    KeypointsOp,
    LayerNormOp,
    LutOp,
    Op,
    PixelsOp,
    PoolOp,
    QLinear,
    ReluOp,
    state_fixed,
)
from robot_rl.export.fixed_formats import Q_MAX, exp2_rel_error
from robot_rl.export.graph import LIPSCHITZ
from robot_rl.export.int8_full import Trace, node_forward, reference_forward
from robot_rl.export.vision import Conv2dNode

HUGE = 1e150
"""Stands for an unbounded error: finite, so that a zero weight times it is 0, not NaN (the output cap trims it)."""


def _sat(y: np.ndarray, f: int, qmax: int = Q_MAX) -> np.ndarray:
    """``(|y| − qmax·2^−f)₊``: what saturating the exact value ``y`` can add."""
    return np.maximum(np.abs(y) - qmax * 2.0**-f, 0.0)


def _per_channel(v: np.ndarray, ndim: int) -> np.ndarray:
    return v.reshape(1, -1, *([1] * (ndim - 2)))


def _linear(q: QLinear, x: np.ndarray, e: np.ndarray, conv: Conv2dNode | None) -> np.ndarray:
    """``|W̃|·e + |(W̃ − W)·x| + |b̃ − b| + rounding`` (no saturation term) for a dense layer or a conv."""
    w_q = q.real_weight()
    dw = w_q - q.ref_weight
    if conv is None:
        out = np.abs(x @ dw.T) + (e @ np.abs(w_q).T if e.any() else 0.0)
    else:
        zeros = np.zeros(len(w_q))
        out = np.abs(node_forward(Conv2dNode(dw, zeros, conv.stride, conv.padding), x))
        if e.any():
            out = out + node_forward(Conv2dNode(np.abs(w_q), zeros, conv.stride, conv.padding), e)
    fixed = np.abs(q.real_bias() - q.ref_bias) + np.where(q.shift > 0, 0.5 * 2.0**-q.f_out, 0.0)
    return out + _per_channel(fixed, out.ndim)


def _layernorm(op: LayerNormOp, x: np.ndarray, e: np.ndarray, y: np.ndarray, qmax: int) -> np.ndarray:
    n_el = x[0].size
    flat = x.reshape(len(x), -1)
    big_e = e.reshape(len(e), -1).max(axis=1, keepdims=True)
    s = np.sqrt(flat.var(axis=1, keepdims=True) + op.node.eps)
    n = (flat - flat.mean(axis=1, keepdims=True)) / s
    with np.errstate(divide="ignore", invalid="ignore"):
        dn = np.where(s > big_e, big_e * (2.0 + np.abs(n)) / (s - big_e), np.inf)
        r_lo = n_el * (s - big_e) * 2.0**op.f_in - 1.0
        dn = np.minimum(dn + np.where(r_lo > 2.0, (np.abs(n) + dn) * 2.0 / r_lo, np.inf), HUGE)
    g_q = op.gamma * 2.0 ** -(op.f_out + op.k)
    g = np.asarray(op.node.weight, np.float64)
    rounding = 0.5 * 2.0 ** -(op.f_out + op.k) + (0.5 * 2.0**-op.f_out if op.k > 0 else 0.0)
    out = (np.abs(g_q) * dn + np.abs(n) * np.abs(g_q - g) + np.abs(op.beta * 2.0**-op.f_out - op.node.bias)
           + rounding)
    return out.reshape(x.shape) + _sat(y, op.f_out, qmax)


def _keypoints(op: KeypointsOp, x: np.ndarray, e: np.ndarray, y: np.ndarray, qmax: int) -> np.ndarray:
    c, h, w = x.shape[1:]
    big_e = e.reshape(len(e), c, -1).max(axis=2)  # [N, C]
    g = np.asarray(op.node.gain, np.float64)
    du = op.cut * np.abs(op.gain * 2.0**-26 - g * math.log2(math.e) * 2.0**-op.f_in)  # log2 units
    rho = exp2_rel_error()
    delta = g * big_e + math.log(2.0) * du + rho / (1.0 - rho)
    spread = np.minimum(np.expm1(np.minimum(2.0 * delta, 700.0)), HUGE) + h * w * 2.0**-29
    out = []
    for grid, q in ((op.node.grid_x, op.grid_x), (op.node.grid_y, op.grid_y)):
        grid = np.asarray(grid, np.float64)
        half = (grid.max() - grid.min()) / 2.0
        out.append(spread * half + np.abs(q * 2.0**-15 - grid).max())
    rounding = 0.5 * 2.0**-15 + (0.5 * 2.0**-op.f_out if op.f_out < 15 else 0.0)
    return np.concatenate(out, axis=1) + rounding + _sat(y, op.f_out, qmax)


def _step(op: Op, t: list[np.ndarray], e: np.ndarray, images: np.ndarray | None, qmax: int) -> np.ndarray:
    """The error after ``op`` given the error ``e`` of its input ``t[op.src]`` (``t``: exact tensors).

    ``qmax``: the map's largest value (conv, dense and table ops carry their own, the last layer's int16).
    """
    x, y, e = t[op.src], t[op.dst], np.minimum(e, HUGE)
    if isinstance(op, PixelsOp):
        assert images is not None
        u = images.transpose(0, 3, 1, 2).astype(np.int64)
        table = op.table if len(op.table) > 1 else np.broadcast_to(op.table, (u.shape[1], 256))
        got = np.stack([table[c][u[:, c]] for c in range(u.shape[1])], axis=1) * 2.0**-op.f
        return np.abs(got - x)
    if isinstance(op, ConvOp):
        if op.first:
            assert images is not None
            v = 2.0 * images.transpose(0, 3, 1, 2).astype(np.float64) - 255.0
            lin = _linear(op.q, v, np.zeros_like(v), op.node)
        else:
            lin = _linear(op.q, x, e, op.node)
        # A fused ReLU: |clip(v, 0, M) − relu(y)| ≤ |v − y| + (relu(y) − M)₊.
        return lin + _sat(y, op.q.f_out, op.q.qmax)
    if isinstance(op, DenseOp):
        lin = _linear(op.q, x.reshape(len(x), -1), e.reshape(len(e), -1), None)
        return lin + _sat(y.reshape(len(y), -1), op.q.f_out, op.q.qmax)
    if isinstance(op, PoolOp):
        if op.node.kind == "max":
            return node_forward(op.node, e)
        return node_forward(op.node, e) + 0.5 * 2.0**-op.f
    if isinstance(op, ReluOp):
        return e
    if isinstance(op, LutOp):
        return LIPSCHITZ[op.activation] * e + op.eps + _sat(y, op.f_out, op.width.qmax)
    if isinstance(op, LayerNormOp):
        return _layernorm(op, x, e, y, qmax)
    assert isinstance(op, KeypointsOp)
    return _keypoints(op, x, e, y, qmax)


def _camera(cam: CameraPlan, tensors: list[np.ndarray], images: np.ndarray, qmax: int) -> np.ndarray:
    """``[N, out_dim]``: the error of one camera's features, in its own format."""
    e = np.zeros_like(tensors[0])
    for op in cam.ops:
        e = _step(op, tensors, e, images, qmax)
    return e.reshape(len(e), -1)


def _output(plan: FixedPlan, head: list[np.ndarray], e: np.ndarray) -> np.ndarray:
    out, graph = plan.output, plan.graph.head
    y = head[-1]
    if out.kind == "tanh_scale":
        assert out.tanh is not None and out.scale is not None and out.bias is not None
        t = np.tanh(y)
        e_t = e + out.tanh.eps + _sat(t, out.tanh.f_out)
        scale, bias = graph.out_a.astype(np.float64), graph.out_b.astype(np.float64)
        s_q, b_q = out.scale * 2.0**-out.f_scale, out.bias * 2.0**-plan.f_act
        shift = out.tanh.f_out + out.f_scale - plan.f_act
        a = t * scale + bias
        bound = (np.abs(s_q) * e_t + np.abs(t) * np.abs(s_q - scale) + np.abs(b_q - bias)
                 + (0.5 * 2.0**-plan.f_act if shift > 0 else 0.0) + _sat(a, plan.f_act))
        # Whatever happened upstream, |t_q| ≤ 1: the C action lies within |S̃| (+ rounding) of B̃, the exact one
        # within |scale| of bias.
        return np.minimum(bound, np.abs(s_q) + np.abs(scale) + np.abs(b_q - bias) + 2.0**-plan.f_act)
    if out.kind == "clamp":
        assert out.lo is not None and out.hi is not None
        lo, hi = graph.out_a.astype(np.float64), graph.out_b.astype(np.float64)
        with np.errstate(invalid="ignore"):
            d_lo = np.where(np.isfinite(lo), np.abs(out.lo * 2.0**-plan.f_act - lo), 0.0)
            d_hi = np.where(np.isfinite(hi), np.abs(out.hi * 2.0**-plan.f_act - hi), 0.0)
        bound = np.maximum(np.maximum(e, d_lo), d_hi) + _sat(np.clip(y, lo, hi), plan.f_act)
        # Both actions lie in their (rounded) bounds when both are finite.
        q_lo, q_hi = out.lo * 2.0**-plan.f_act, out.hi * 2.0**-plan.f_act
        with np.errstate(invalid="ignore"):
            cap = np.where(np.isfinite(lo) & np.isfinite(hi), np.maximum(q_hi - lo, hi - q_lo), np.inf)
        return np.minimum(bound, cap)
    return e + _sat(y, plan.f_act)


def _chunk_bound(plan: FixedPlan, trace: Trace, images: list[np.ndarray], state: np.ndarray | None) -> np.ndarray:
    parts, qmax = [], plan.width.qmax
    for cam, tensors, im in zip(plan.cameras, trace.cameras, images):
        e = _camera(cam, tensors, im, qmax)
        feat = tensors[-1].reshape(len(e), -1)
        parts.append(e + (0.5 * 2.0**-plan.f_feat if cam.f_out > plan.f_feat else 0.0)
                     + _sat(feat, plan.f_feat, qmax))
    if plan.state is not None and state is not None:
        z = trace.features[:, trace.features.shape[1] - len(plan.state.frac):]
        parts.append(np.abs(state_fixed(plan.state, state) * 2.0**-plan.f_feat - z))
    e = np.concatenate(parts, axis=1)
    head = [trace.features]
    for pre, post in zip(trace.head_pre, trace.head_post):
        head += [pre, post]
    last = plan.head[-1]
    for op in plan.head[:-1]:
        e = _step(op, head, e, None, qmax)
    if plan.output.kind == "tanh_scale":
        e = _step(last, head, e, None, qmax)
    else:  # the last layer writes the action: its saturation is the output map's (after the clamp)
        assert isinstance(last, DenseOp)
        e = _linear(last.q, head[last.src], e, None)
    # The last layer's exact output is head_pre[-1] (its activation is the identity, the output map follows).
    return _output(plan, head[:-1], e)


def fixed_error_bound(plan: FixedPlan, images: list[np.ndarray], state: np.ndarray | None,
                      chunk: int = 64) -> np.ndarray:
    """``[N, act_dim]`` bound on ``|C − exact|`` of a q15 or q7 plan, per observation and action (module doc)."""
    n = len(images[0]) if images else len(state if state is not None else [])
    out = []
    for start in range(0, n, chunk):
        rows = slice(start, start + chunk)
        ims = [im[rows] for im in images]
        st = state[rows] if state is not None else None
        out.append(_chunk_bound(plan, reference_forward(plan.graph, ims, st), ims, st))
    return np.concatenate(out)


def q15_error_bound(plan: FixedPlan, images: list[np.ndarray], state: np.ndarray | None,
                    chunk: int = 64) -> np.ndarray:
    """:func:`fixed_error_bound` under the name it had when q15 was the only fixed-point variant."""
    return fixed_error_bound(plan, images, state, chunk)
