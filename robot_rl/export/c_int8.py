"""C99 source of the full-int8 variant (``int8_full``): int8 weights and activations, int32 accumulators.

The quantisation is :mod:`robot_rl.export.int8_full`'s. The entry point is the size-checked one of
:mod:`robot_rl.export.c_vision` for pixel and state-only actors alike (a state-only MLP has no camera
arguments): ``int <name>_forward([images…,] const float *state, size_t state_len, float *action,
size_t action_len)``. Activations ping-pong between two ``signed char`` buffers; the features and the
last layer's output are float (``<NAME>_WORKSPACE_BYTES`` counts all of it). Maps are HWC
(:mod:`robot_rl.export.c_hwc`): the first conv reads the uint8 image in place as ``2u − 255``.
"""

from __future__ import annotations

import numpy as np

from robot_rl.export.c_codegen import CSources, _ConstData, _f, check_name, used_kernels
from robot_rl.export.c_hwc import conv_kernel, gather_line, hwc_order, pool_geometry, pool_kernel, softmax_kernel
from robot_rl.export.c_vision import _checks, _header, _signature, _state_lines
from robot_rl.export.int8_full import QParams, Trace, activation_table, requant_multiplier
from robot_rl.export.quantize import quantize_rows
from robot_rl.export.vision import (
    ActNode,
    CameraBranch,
    Conv2dNode,
    DenseNode,
    LayerNormNode,
    Node,
    PoolNode,
    SpatialSoftmaxNode,
    VisionGraph,
)

_REQUANT = """/* round(acc * mult * 2^(shift - 31)), mult a Q31 value in [2^30, 2^31) (CMSIS-NN's requantisation). */
static int {n}_requant(int acc, int mult, int shift)
{{
    const int total = 31 - shift;
    return (int)(((long long)acc * mult + (1LL << (total - 1))) >> total);
}}
"""

_SAT = """static signed char {n}_sat(int v, int lo)
{{
    return (signed char)(v < lo ? lo : (v > 127 ? 127 : v));
}}
"""

_QUANT = """/* Clamped in float first: a value far outside the calibrated range must not overflow the int conversion. */
static signed char {n}_quant(float v, float s, int z)
{{
    float r = floorf(v / s + 0.5f) + (float)z;
    r = r < -128.0f ? -128.0f : (r > 127.0f ? 127.0f : r);
    return (signed char)r;
}}
"""

_CONV = conv_kernel("conv", "int8 in.", ("signed char", "int", "signed char", "signed char"),
                    "const int *mult, const int *shift, int zx, int zy, int lo, ", ("int", "bias[o]"),
                    "acc += *wr++ * ((int)*xr++ - zx);", "{n}_sat({n}_requant(acc, mult[o], shift[o]) + zy, lo)",
                    long="long")

_CONV_IMG = conv_kernel("conv_img", "The first conv: the uint8 image, read exactly as 2u - 255 (scale 1/510).",
                        ("signed char", "int", "unsigned char", "signed char"),
                        "const int *mult, const int *shift, int zy, int lo, ", ("int", "bias[o]"),
                        "acc += *wr++ * (2 * (int)*xr++ - 255);",
                        "{n}_sat({n}_requant(acc, mult[o], shift[o]) + zy, lo)", long="long")

_DENSE = """static void {n}_dense(const signed char *w, const int *bias, const int *mult, const int *shift,
                      const signed char *x, signed char *y, int zx, int zy, int lo, int n_in, int n_out)
{{
    int o, i;
    for (o = 0; o < n_out; ++o) {{
        const signed char *row = w + (long)o * n_in;
        int acc = bias[o];
        for (i = 0; i < n_in; ++i) acc += row[i] * ((int)x[i] - zx);
        y[o] = {n}_sat({n}_requant(acc, mult[o], shift[o]) + zy, lo);
    }}
}}
"""

_DENSE_OUT = """/* The last layer: the accumulator dequantised to float (scale[o] = s_w[o] * s_x), not requantised. */
static void {n}_dense_out(const signed char *w, const int *bias, const float *scale, const signed char *x, float *y,
                          int zx, int n_in, int n_out)
{{
    int o, i;
    for (o = 0; o < n_out; ++o) {{
        const signed char *row = w + (long)o * n_in;
        int acc = bias[o];
        for (i = 0; i < n_in; ++i) acc += row[i] * ((int)x[i] - zx);
        y[o] = (float)acc * scale[o];
    }}
}}
"""

_LUT = """static void {n}_lut(const signed char *table, signed char *x, int len)
{{
    int i;
    for (i = 0; i < len; ++i) x[i] = table[x[i] + 128];
}}
"""

_POOL = pool_kernel(" (rounded); scale in = out", "signed char", "int zx, ", "int", "-128", "(v - zx)",
                    "(signed char)(kind == 0 ? acc : zx + (acc >= 0 ? (acc + d / 2) / d : -((-acc + d / 2) / d)))",
                    long="long")

_LAYERNORM = """/* In float on the dequantised vector (a few dozen values). */
static void {n}_layernorm(const float *g, const float *b, signed char *x, int len, float eps, float sx, int zx,
                          float sy, int zy)
{{
    int i;
    float mean = 0.0f, var = 0.0f, inv;
    for (i = 0; i < len; ++i) mean += sx * (float)(x[i] - zx);
    mean /= (float)len;
    for (i = 0; i < len; ++i) var += (sx * (float)(x[i] - zx) - mean) * (sx * (float)(x[i] - zx) - mean);
    inv = 1.0f / sqrtf(var / (float)len + eps);
    for (i = 0; i < len; ++i) x[i] = {n}_quant((sx * (float)(x[i] - zx) - mean) * inv * g[i] + b[i], sy, zy);
}}
"""

_SPATIAL_SOFTMAX = softmax_kernel(", in float on dequantised values as the float32 variant", "signed char",
                                  ", float sx, int zx, float sy, int zy", "gain[c] * sx", "(float)zx",
                                  ("{n}_quant(ex, sy, zy)", "{n}_quant(ey, sy, zy)"))


#: In dependency order: a kernel is emitted when the code after it calls it.
_KERNELS = {"requant": _REQUANT, "sat": _SAT, "quant": _QUANT, "conv": _CONV, "conv_img": _CONV_IMG, "dense": _DENSE,
            "dense_out": _DENSE_OUT, "lut": _LUT, "pool": _POOL, "layernorm": _LAYERNORM,
            "spatial_softmax": _SPATIAL_SOFTMAX}


def _kernels(name: str, body: str) -> str:
    """The int8 kernels ``body`` calls, and those they call."""
    return used_kernels(_KERNELS, name, body)


class _Int8Emitter:
    """Emits int8 layers into ping-pong buffers ``<name>_q[2][…]``, tracking the current buffer and its layout.

    ``layout``: the current tensor is a map in HWC order (its ``(C, H, W)``), or a vector (``None``).
    """

    def __init__(self, name: str, data: _ConstData) -> None:
        self.name, self.data = name, data
        self.cur = 0
        self.layout: tuple[int, ...] | None = None
        self.lines: list[str] = []

    def order(self) -> np.ndarray | slice:
        """Where each value of the current tensor sits in torch's order (the permutation of an HWC map)."""
        return slice(None) if self.layout is None else hwc_order(self.layout)

    def swap(self) -> tuple[str, str]:
        src, dst = f"{self.name}_q[{self.cur}]", f"{self.name}_q[{1 - self.cur}]"
        self.cur = 1 - self.cur
        return src, dst

    def weights(self, sym: str, weight: np.ndarray, bias: np.ndarray, qin: QParams, qout: QParams | None) -> None:
        """Per-channel int8 weights, int32 bias and (with ``qout``) the Q31 multipliers and shifts."""
        q, s_w = quantize_rows(weight.reshape(weight.shape[0], -1))
        acc_scale = s_w.astype(np.float64) * qin.scale
        self.data.emit("signed char", f"{sym}_w", q, fmt="int")
        # A near-zero weight row has a tiny scale; its bias must still fit the int32 accumulator with headroom.
        bias_q = np.clip(np.rint(bias / acc_scale), -(2**30), 2**30).astype(np.int64)
        self.data.emit("int", f"{sym}_b", bias_q, fmt="int")
        if qout is None:
            self.data.emit("float", f"{sym}_s", acc_scale.astype(np.float32))
            return
        mult_shift = [requant_multiplier(float(m)) for m in acc_scale / qout.scale]
        self.data.emit("int", f"{sym}_m", np.array([m for m, _ in mult_shift]), fmt="int")
        self.data.emit("int", f"{sym}_sh", np.array([s for _, s in mult_shift]), fmt="int")

    def conv(self, sym: str, node: Conv2dNode, shape: tuple[int, ...], out: tuple[int, ...], qin: QParams | None,
             qout: QParams, relu: bool, image: str | None) -> None:
        """HWC weights ``[o][ky][kx][c]``; the first conv (``image``) reads the uint8 image in place."""
        self.weights(sym, node.weight.transpose(0, 2, 3, 1), node.bias, qin or QParams(1.0 / 510.0, 0), qout)
        lo = qout.zero if relu else -128
        if image is not None:
            fn, args, self.cur = "conv_img", f"{qout.zero}, {lo}, {image}, {self.name}_q[0]", 0
        else:
            src, dst = self.swap()
            fn, args = "conv", f"{qin.zero if qin else 0}, {qout.zero}, {lo}, {src}, {dst}"
        self.layout = out
        self.lines.append(f"    {self.name}_{fn}({sym}_w, {sym}_b, {sym}_m, {sym}_sh, {args}, {shape[0]}, {shape[1]}, "
                          f"{shape[2]}, {out[0]}, {out[1]}, {out[2]}, {node.weight.shape[2]}, {node.weight.shape[3]}, "
                          f"{node.stride[0]}, {node.stride[1]}, {node.padding[0]}, {node.padding[1]});")

    def dense(self, sym: str, weight: np.ndarray, bias: np.ndarray, qin: QParams, qout: QParams, relu: bool) -> None:
        self.weights(sym, weight[:, self.order()], bias, qin, qout)
        self.layout = None
        src, dst = self.swap()
        lo = qout.zero if relu else -128
        self.lines.append(f"    {self.name}_dense({sym}_w, {sym}_b, {sym}_m, {sym}_sh, {src}, {dst}, {qin.zero}, "
                          f"{qout.zero}, {lo}, {weight.shape[1]}, {weight.shape[0]});")

    def table(self, sym: str, activation: str, qin: QParams, qout: QParams, length: int) -> None:
        self.data.emit("signed char", f"{sym}_lut", activation_table(activation, qin, qout), fmt="int")
        self.lines.append(f"    {self.name}_lut({sym}_lut, {self.name}_q[{self.cur}], {length});")

    def pool(self, node: PoolNode, shape: tuple[int, ...], out: tuple[int, ...], q: QParams) -> None:
        """Pooling keeps the scale: max and mean never leave the input's range."""
        src, dst = self.swap()
        self.layout = out
        self.lines.append(f"    {self.name}_pool({src}, {dst}, {q.zero}, {pool_geometry(node, shape, out)});")

    def layernorm(self, sym: str, node: LayerNormNode, length: int, q: QParams, after: QParams) -> None:
        order = self.order()
        self.data.emit("float", f"{sym}_g", node.weight[order])
        self.data.emit("float", f"{sym}_beta", node.bias[order])
        self.lines.append(f"    {self.name}_layernorm({sym}_g, {sym}_beta, {self.name}_q[{self.cur}], {length}, "
                          f"{_f(node.eps)}, {_f(q.scale)}, {q.zero}, {_f(after.scale)}, {after.zero});")

    def keypoints(self, sym: str, node: SpatialSoftmaxNode, shape: tuple[int, ...], q: QParams,
                  after: QParams) -> None:
        for part, values in (("gain", node.gain), ("gx", node.grid_x), ("gy", node.grid_y)):
            self.data.emit("float", f"{sym}_{part}", values)
        src, dst = self.swap()
        self.layout = None
        self.lines.append(f"    {self.name}_spatial_softmax({sym}_gain, {sym}_gx, {sym}_gy, {src}, {dst}, {shape[0]}, "
                          f"{shape[1]}, {shape[2]}, {_f(q.scale)}, {q.zero}, {_f(after.scale)}, {after.zero});")


def _fused_relu(nodes: list[Node], j: int) -> bool:
    nxt = nodes[j + 1] if j + 1 < len(nodes) else None
    return isinstance(nxt, ActNode) and nxt.activation == "relu"


def _camera(em: _Int8Emitter, k: int, cam: CameraBranch, tensors: list[np.ndarray], offset: int) -> None:
    """One camera's int8 chain, its features dequantised into ``feat[offset:]``."""
    if not cam.nodes or not isinstance(cam.nodes[0], Conv2dNode):
        raise ValueError(f"int8_full needs camera {cam.key} to start with a Conv2d")
    if not (np.all(cam.mean == 0.5) and np.all(cam.std == 1.0)):
        raise ValueError("int8_full reads the image exactly only for u/255 - 0.5 (mean 0.5, std 1)")
    n, shapes = em.name, cam.shapes()
    q: QParams | None = None
    j = 0
    while j < len(cam.nodes):
        node, sym, shape = cam.nodes[j], f"{n}_k{k}_{j}", shapes[j]
        relu = _fused_relu(cam.nodes, j) and isinstance(node, (Conv2dNode, DenseNode))
        after = QParams.of(tensors[j + 2 if relu else j + 1])
        if isinstance(node, Conv2dNode):
            em.conv(sym, node, shape, shapes[j + 1], q, after, relu, f"image_{cam.symbol}" if q is None else None)
            q = after
        elif q is None:
            raise ValueError(f"int8_full: camera {cam.key} does not start with a Conv2d")
        elif isinstance(node, DenseNode):
            em.dense(sym, node.weight, node.bias, q, after, relu)
            q = after
        elif isinstance(node, PoolNode):
            em.pool(node, shape, shapes[j + 1], q)
        elif isinstance(node, ActNode):
            em.table(sym, node.activation, q, after, int(np.prod(shape)))
            q = after
        elif isinstance(node, LayerNormNode):
            em.layernorm(sym, node, int(np.prod(shape)), q, after)
            q = after
        elif isinstance(node, SpatialSoftmaxNode):
            em.keypoints(sym, node, shape, q, after)
            q = after
        j += 2 if relu else 1
    assert q is not None
    em.lines.append(gather_line(f"{n}_feat", offset, f"{_f(q.scale)} * (float)({n}_q[{em.cur}][i] - ({q.zero}))",
                                em.layout, cam.out_dim))
    em.layout = None


def _head(em: _Int8Emitter, graph: VisionGraph, trace: Trace) -> None:
    """Features quantised once, then the int8 MLP; the last layer dequantised into ``<name>_out``."""
    n = em.name
    q = QParams.of(trace.features)
    em.lines.append(f"    for (i = 0; i < {graph.feature_dim}; ++i) "
                    f"{n}_q[0][i] = {n}_quant({n}_feat[i], {_f(q.scale)}, {q.zero});")
    em.cur = 0
    layers = graph.head.layers
    for i, layer in enumerate(layers[:-1]):
        relu = layer.activation == "relu"
        q_out = QParams.of(trace.head_post[i] if relu else trace.head_pre[i])
        em.dense(f"{n}_h{i}", layer.weight, layer.bias, q, q_out, relu)
        if layer.activation not in ("relu", "identity"):
            q_post = QParams.of(trace.head_post[i])
            em.table(f"{n}_h{i}", layer.activation, q_out, q_post, layer.weight.shape[0])
            q_out = q_post
        q = q_out
    last = layers[-1]
    sym = f"{n}_h{len(layers) - 1}"
    em.weights(sym, last.weight, last.bias, q, None)
    em.lines.append(f"    {n}_dense_out({sym}_w, {sym}_b, {sym}_s, {n}_q[{em.cur}], {n}_out, {q.zero}, "
                    f"{last.weight.shape[1]}, {last.weight.shape[0]});")


def _output(graph: VisionGraph, name: str, data: _ConstData) -> str:
    head = graph.head
    if head.output != "identity":
        data.emit("float", f"{name}_out_a", head.out_a)
        data.emit("float", f"{name}_out_b", head.out_b)
    return {"tanh_scale": f"tanhf({name}_out[i]) * {name}_out_a[i] + {name}_out_b[i]",
            "clamp": f"fminf(fmaxf({name}_out[i], {name}_out_a[i]), {name}_out_b[i])",
            "identity": f"{name}_out[i]"}[head.output]


def generate_int8_c(graph: VisionGraph, trace: Trace, name: str, origin: str = "") -> CSources:
    """The ``int8_full`` header/source pair, activation scales calibrated on ``trace`` (see the module doc).

    ``trace``: :func:`~robot_rl.export.int8_full.calibrate` (each tensor's ``[min, max]``) or a full
    :func:`~robot_rl.export.int8_full.reference_forward`; only each tensor's min and max are read.
    """
    check_name(name)
    data = _ConstData()
    em = _Int8Emitter(name, data)
    offset = 0
    for k, cam in enumerate(graph.cameras):
        _camera(em, k, cam, trace.cameras[k], offset)
        offset += cam.out_dim
    em.lines += _state_lines(graph, name, data, offset)
    _head(em, graph, trace)
    action = _output(graph, name, data)
    widths = [int(np.prod(s)) for cam in graph.cameras for s in cam.shapes()[1:]] + graph.head.widths
    workspace = 2 * max(widths) + 4 * (graph.feature_dim + graph.act_dim)
    about = ((f" * Source: {origin}\n" if origin else "") +
             f" * Variant: int8_full (int8 weights and activations, int32 accumulation, calibrated scales).\n"
             f" * Constant data (flash): {data.nbytes} bytes; static workspace (RAM): {workspace} bytes.\n")
    up = name.upper()
    source = (f"/* {name}.c: deterministic policy generated by `robot-rl export`. Do not edit.\n{about} */\n"
              f'#include "{name}.h"\n\n#include <math.h>\n\n{"".join(data.arrays)}\n'
              f"static signed char {name}_q[2][{max(widths)}];\nstatic float {name}_feat[{graph.feature_dim}];\n"
              f"static float {name}_out[{graph.act_dim}];\n\n" + _kernels(name, "\n".join(em.lines)) + "\n"
              + f"{_signature(graph, name)}\n{{\n    int i;\n{_checks(graph, name)}" + "\n".join(em.lines) + "\n"
              f"    for (i = 0; i < {up}_ACTION_DIM; ++i) {{\n        action[i] = {action};\n    }}\n"
              f"    return {up}_OK;\n}}\n")
    header = _header(graph, name, about, data.nbytes, workspace)
    return CSources(name, "int8_full", header, source, data.nbytes, workspace)
