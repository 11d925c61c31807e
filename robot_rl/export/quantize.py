"""int8 weights with one scale per output channel, and the error bound that comes with them.

Quantisation: ``s_o = max_i |W[o,i]| / 127`` and ``q[o,i] = round(W[o,i] / s_o)`` (``s_o = 1`` for an
all-zero row), so ``|W[o,i] − s_o·q[o,i]| ≤ s_o/2``. Activations stay float32.

Bound (:func:`int8_error_bound`). Let ``x`` be a layer's exact input, ``x̃ = x + δ`` the quantised
network's, with ``|δ| ≤ e`` elementwise, and ``W̃ = s·q``. Then per output
``|Wx − W̃x̃| ≤ |W − W̃|·|x| + |W̃|·|δ| ≤ (s_o/2)·‖x‖₁ + (|W̃|·e)_o``.
Activations are Lipschitz (ReLU, ELU(α=1), tanh: 1; SiLU 1.0998; GELU 1.1289), so the bound after the
activation is that constant times the bound before; tanh·scale multiplies by ``|scale|`` and a clamp by
1 (and neither output can move by more than its range). The bound is rigorous in real arithmetic, not
a first-order estimate; float32 rounding adds the float32 variant's 1e-5 on top.
"""

from __future__ import annotations

import numpy as np

from robot_rl.export.graph import LIPSCHITZ, MLPGraph, apply_activation


def quantize_rows(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(q int8 [out, in], scale float32 [out])`` with ``weight ≈ scale[:, None] · q``."""
    w = np.asarray(weight, dtype=np.float32)
    peak = np.abs(w).max(axis=1)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def int8_error_bound(graph: MLPGraph, obs: np.ndarray) -> np.ndarray:
    """Per-observation, per-action bound ``[N, act_dim]`` on ``|action_int8 − action_float|`` (real arithmetic)."""
    x = graph.normalize(np.asarray(obs, dtype=np.float64))
    err = np.zeros_like(x)
    for layer in graph.layers:
        q, scale = quantize_rows(layer.weight)
        w_q = q.astype(np.float64) * scale[:, None].astype(np.float64)
        pre = x @ layer.weight.T.astype(np.float64) + layer.bias
        err = 0.5 * np.abs(x).sum(axis=1, keepdims=True) * scale.astype(np.float64) + err @ np.abs(w_q).T
        err = LIPSCHITZ[layer.activation] * err
        x = apply_activation(pre, layer.activation)
    if graph.output == "tanh_scale":
        scale = np.abs(graph.out_a.astype(np.float64))
        err = np.minimum(err * scale, 2.0 * scale)
    elif graph.output == "clamp":
        err = np.minimum(err, graph.out_b.astype(np.float64) - graph.out_a.astype(np.float64))
    return err
