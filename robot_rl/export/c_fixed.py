"""C99 source of the fixed-point variants (``q15``: int16 weights and maps; ``q7``: int8), no float in the forward pass.

The arithmetic is :mod:`robot_rl.export.fixed`'s plan; the kernels are :mod:`robot_rl.export.c_fixed_kernels`'.
Both variants have the size-checked entry point of :mod:`robot_rl.export.c_vision` with int16 state and action::

    int <name>_forward(const unsigned char *image_<cam>, size_t image_<cam>_bytes,   (one pair per camera)
                       const int16_t *state, size_t state_len,                        (when there is a state)
                       int16_t *action, size_t action_len);

``state[i] = round(x_i · 2^STATE_FRAC_BITS[i])`` (the header's ``<NAME>_STATE_FRAC_BITS_INIT``, one per element),
``action[i] = q_i · 2^−<NAME>_ACTION_FRAC_BITS``. Two helpers convert from and to float for callers that have
floats; they are the only float code in the file, separate functions that ``<name>_forward`` never calls (an
FPU-less build that passes int16 in and out links no soft-float routine)::

    void <name>_state_to_<variant>(const float *state, int16_t *q);
    void <name>_action_from_<variant>(const int16_t *q, float *action);

Headers: ``<stddef.h>`` and ``<stdint.h>`` only (no ``<math.h>``). Memory: weights ``static const`` (flash);
maps ping-pong between two buffers of the largest map, plus the features, in the variant's width (and, for
``q7``, the last layer's int16 output): ``<NAME>_WORKSPACE_BYTES``. Maps are HWC (:mod:`robot_rl.export.c_hwc`):
conv weights are written ``[o][ky][kx][c]``, and a Dense or LayerNorm that follows a flattened map gets its columns
(γ, β) permuted from torch's CHW order; a camera whose features are a flattened map is put back into CHW order when
its features are gathered.
"""

from __future__ import annotations

import numpy as np

from robot_rl.export.c_codegen import CSources, Variant, _ConstData, _f, check_name
from robot_rl.export.c_fixed_kernels import kernels, sat_names
from robot_rl.export.c_hwc import hwc_order, pool_geometry
from robot_rl.export.c_vision import _checks, _header, _signature
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
    exp2_table,
)
from robot_rl.export.fixed_formats import Q15, Width


class _FixedEmitter:
    """Emits ops into ping-pong buffers ``<name>_q[2][…]``, tracking which one holds the current tensor.

    ``layout``: the current tensor is a map in HWC order (its ``(C, H, W)``), or a vector in natural order (``None``).
    """

    def __init__(self, name: str, data: _ConstData, width: Width) -> None:
        self.name, self.data, self.width = name, data, width
        self.cur = 0
        self.layout: tuple[int, ...] | None = None
        self.lines: list[str] = []
        self.tables: set[str] = set()

    def swap(self) -> tuple[str, str]:
        src, dst = f"{self.name}_q[{self.cur}]", f"{self.name}_q[{1 - self.cur}]"
        self.cur = 1 - self.cur
        return src, dst

    def linear(self, sym: str, q: QLinear, weight: np.ndarray) -> None:
        """Weights, the bias plus the rounding constant of the shift (at the accumulator's width), the shifts."""
        self.data.emit(self.width.ctype, f"{sym}_w", weight, fmt="int")
        rounding = np.where(q.shift > 0, np.left_shift(1, np.maximum(q.shift - 1, 0)), 0)
        bias = q.bias + rounding
        if self.width.acc_bits == 32:  # make_linear's formats keep it in range; a failure here is a bug there
            assert np.abs(bias).max(initial=0) < 2**31, "q7 bias out of the int32 range"
        self.data.emit(self.width.acc_ctype, f"{sym}_b", bias, fmt="int")
        self.data.emit("int8_t", f"{sym}_sh", q.shift, fmt="int")

    def lut(self, op: LutOp, buf: str, length: int) -> None:
        bits = op.width.bits
        sym = f"{self.name}_t{'' if bits == 16 else bits}_{op.activation}_{op.f_in}_{op.f_out}"
        if sym not in self.tables:  # one table per (activation, formats), shared by the layers that use it
            self.tables.add(sym)
            self.data.emit(op.width.ctype, sym, op.table, fmt="int")
        self.lines.append(f"    {self.name}_{'lut' if bits == 16 else f'lut{bits}'}({sym}, {buf}, {length});")

    def dense(self, sym: str, op: DenseOp, src: str, dst: str) -> None:
        """A Linear; one whose output is wider than the maps (the last layer of ``q7``) is ``dense_out``."""
        q = op.q
        self.linear(sym, q, q.weight if self.layout is None else q.weight[:, hwc_order(self.layout)])
        self.layout = None
        fn = "dense" if q.qmax == self.width.qmax else "dense_out"
        self.lines.append(f"    {self.name}_{fn}({sym}_w, {sym}_b, {sym}_sh, {src}, {dst}, "
                          f"{0 if q.relu else -q.qmax - 1}, {q.weight.shape[1]}, {q.weight.shape[0]});")

    def camera_op(self, sym: str, op: Op, shapes: list[tuple[int, ...]], image: str) -> None:
        """One camera op (``shapes``: the float graph's tensor shapes, indexed like ``op.src``/``op.dst``)."""
        n = self.name
        if isinstance(op, PixelsOp):
            self.data.emit(self.width.ctype, f"{sym}_px", op.table, fmt="int")
            c, h, w = shapes[0]
            self.lines.append(f"    {n}_pixels({image}, {sym}_px, {int(op.table.shape[0] > 1)}, {n}_q[0], {h * w}, "
                              f"{c});")
            self.cur, self.layout = 0, shapes[0]
        elif isinstance(op, ConvOp):
            self.linear(sym, op.q, op.q.weight.transpose(0, 2, 3, 1))
            src, dst = (image, f"{n}_q[0]") if op.first else self.swap()
            self.cur = 0 if op.first else self.cur
            i, o, node = shapes[op.src], shapes[op.dst], op.node
            self.layout = o
            self.lines.append(f"    {n}_{'conv_img' if op.first else 'conv'}({sym}_w, {sym}_b, {sym}_sh, "
                              f"{0 if op.q.relu else -op.q.qmax - 1}, {src}, {dst}, {i[0]}, {i[1]}, {i[2]}, {o[0]}, "
                              f"{o[1]}, {o[2]}, {node.weight.shape[2]}, {node.weight.shape[3]}, {node.stride[0]}, "
                              f"{node.stride[1]}, {node.padding[0]}, {node.padding[1]});")
        elif isinstance(op, DenseOp):
            self.dense(sym, op, *self.swap())
        elif isinstance(op, PoolOp):
            src, dst = self.swap()
            i, o, p = shapes[op.src], shapes[op.dst], op.node
            self.layout = o
            self.lines.append(f"    {n}_pool({src}, {dst}, {pool_geometry(p, i, o)});")
        elif isinstance(op, ReluOp):
            self.lines.append(f"    {n}_relu({n}_q[{self.cur}], {int(np.prod(shapes[op.src]))});")
        elif isinstance(op, LutOp):
            self.lut(op, f"{n}_q[{self.cur}]", int(np.prod(shapes[op.src])))
        elif isinstance(op, LayerNormOp):
            order = slice(None) if self.layout is None else hwc_order(self.layout)
            self.data.emit("int32_t", f"{sym}_g", op.gamma[order], fmt="int")
            self.data.emit("int32_t", f"{sym}_beta", op.beta[order], fmt="int")
            self.lines.append(f"    {n}_layernorm({sym}_g, {sym}_beta, {n}_q[{self.cur}], "
                              f"{int(np.prod(shapes[op.src]))}, {op.eps}, {op.k});")
        else:
            self.keypoints(sym, op, shapes[op.src])

    def keypoints(self, sym: str, op: KeypointsOp, shape: tuple[int, ...]) -> None:
        n = self.name
        if f"{n}_exp2" not in self.tables:
            self.tables.add(f"{n}_exp2")
            self.data.emit("int32_t", f"{n}_exp2", exp2_table(), fmt="int")
        for part, values in (("gain", op.gain), ("cut", op.cut), ("gx", op.grid_x), ("gy", op.grid_y)):
            self.data.emit("int32_t", f"{sym}_{part}", values, fmt="int")
        src, dst = self.swap()
        self.layout = None
        self.lines.append(f"    {n}_keypoints({sym}_gain, {sym}_cut, {n}_exp2, {sym}_gx, {sym}_gy, {src}, {dst}, "
                          f"{shape[0]}, {shape[1]}, {shape[2]}, {15 - op.f_out});")


def _camera(em: _FixedEmitter, k: int, cam: CameraPlan, f_feat: int, offset: int) -> None:
    shapes = cam.branch.shapes()
    for j, op in enumerate(cam.ops):
        em.camera_op(f"{em.name}_k{k}_{j}", op, shapes, f"image_{cam.branch.symbol}")
    ch, pixels = (em.layout[0], em.layout[1] * em.layout[2]) if em.layout else (1, cam.branch.out_dim)
    em.lines.append(f"    {em.name}_rescale({em.name}_q[{em.cur}], {em.name}_feat + {offset}, {ch}, {pixels}, "
                    f"{cam.f_out - f_feat});")
    em.layout = None


def _state(em: _FixedEmitter, plan: FixedPlan, offset: int) -> None:
    st, n = plan.state, em.name
    if st is None:
        return
    em.data.emit("int32_t", f"{n}_mu", np.clip(st.mu, -(2**31) + 1, 2**31 - 1), fmt="int")
    em.data.emit("int32_t", f"{n}_mult", st.mult, fmt="int")
    em.data.emit("int8_t", f"{n}_mshift", st.shift, fmt="int")
    em.lines.append(f"    {n}_state(state, {n}_mu, {n}_mult, {n}_mshift, {n}_feat + {offset}, {len(st.frac)}, "
                    f"{st.clip});")


def _head_and_output(em: _FixedEmitter, plan: FixedPlan) -> str:
    """The head's layers; returns the expression of ``action[i]``."""
    n = em.name
    widths = plan.graph.head.widths
    src = f"{n}_feat"
    em.cur = 1
    for j, op in enumerate(plan.head):
        if isinstance(op, DenseOp):
            _, dst = em.swap()
            if op.q.qmax != plan.width.qmax:  # q7's last layer: int16 out, into its own buffer
                dst = f"{n}_out"
            em.dense(f"{n}_h{j}", op, src, dst)
            src = dst
        elif isinstance(op, LutOp):
            em.lut(op, src, widths[(op.src + 1) // 2])
    out = plan.output
    if out.kind == "tanh_scale":
        assert out.tanh is not None and out.scale is not None and out.bias is not None
        em.lut(out.tanh, src, plan.graph.act_dim)
        em.data.emit("int16_t", f"{n}_out_s", out.scale, fmt="int")
        em.data.emit("int16_t", f"{n}_out_b", out.bias, fmt="int")
        shift = out.tanh.f_out + out.f_scale - plan.f_act
        sat16 = sat_names(plan.width)[1]
        return f"{n}_{sat16}({n}_shr((int32_t){src}[i] * {n}_out_s[i], {shift}) + {n}_out_b[i], -32768)"
    if out.kind == "clamp":
        assert out.lo is not None and out.hi is not None
        em.data.emit("int16_t", f"{n}_out_lo", out.lo, fmt="int")
        em.data.emit("int16_t", f"{n}_out_hi", out.hi, fmt="int")
        return (f"{src}[i] < {n}_out_lo[i] ? {n}_out_lo[i] : ({src}[i] > {n}_out_hi[i] ? {n}_out_hi[i] : "
                f"{src}[i])")
    return f"{src}[i]"


def _helpers(plan: FixedPlan, name: str) -> str:
    """The float conversion helpers (the only float code; ``<name>_forward`` does not call them)."""
    up, v = name.upper(), plan.width.variant
    out = (f"/* Boundary helpers, the only float code in this file (<name>_forward never calls them):\n"
           f"   action[i] = q[i] / 2^{plan.f_act}. */\n"
           f"void {name}_action_from_{v}(const int16_t *q, float *action)\n{{\n    int i;\n"
           f"    for (i = 0; i < {up}_ACTION_DIM; ++i) action[i] = (float)q[i] * {_f(2.0 ** -plan.f_act)};\n}}\n")
    if plan.state is None:
        return out
    scales = ", ".join(_f(2.0 ** int(f)) for f in plan.state.frac)
    return out + f"""
/* state[i] -> round(state[i] * 2^frac[i]), saturated to int16 (NaN -> 0). */
void {name}_state_to_{v}(const float *state, int16_t *q)
{{
    static const float scale[{up}_STATE_DIM] = {{{scales}}};
    int i;
    for (i = 0; i < {up}_STATE_DIM; ++i) {{
        float v = state[i] * scale[i] + 0.5f;
        int32_t t;
        v = v != v ? 0.5f : (v < -32768.0f ? -32768.0f : (v > 32767.0f ? 32767.0f : v));
        t = (int32_t)v;
        q[i] = (int16_t)((float)t > v ? t - 1 : t);
    }}
}}
"""


def _decls(plan: FixedPlan, name: str) -> tuple[str, str]:
    """Header defines and prototypes beyond the shared ones."""
    up, v = name.upper(), plan.width.variant
    defines = f"#define {up}_{v.upper()} 1\n#define {up}_ACTION_FRAC_BITS {plan.f_act}\n"
    protos = f"void {name}_action_from_{v}(const int16_t *q, float *action);\n"
    if plan.state is not None:
        defines += f"#define {up}_STATE_FRAC_BITS_INIT {{{', '.join(str(int(f)) for f in plan.state.frac)}}}\n"
        protos += f"void {name}_state_to_{v}(const float *state, int16_t *q);\n"
    return defines, protos


_ABOUT = {"q15": " * Variant: q15 (int16 weights and activations in power-of-two Q formats, int64 accumulation,\n"
                 " * saturation; no float in the forward pass).\n",
          "q7": " * Variant: q7 (int8 weights and activations in power-of-two Q formats, int32 accumulation,\n"
                " * saturation; int16 state and action; no float in the forward pass).\n"}


def generate_fixed_c(plan: FixedPlan, name: str, origin: str = "") -> CSources:
    """The ``q15`` or ``q7`` header/source pair of ``plan`` (:func:`robot_rl.export.fixed.build_plan`)."""
    check_name(name)
    graph, data, width = plan.graph, _ConstData(), plan.width
    em = _FixedEmitter(name, data, width)
    offset = 0
    for k, cam in enumerate(plan.cameras):
        _camera(em, k, cam, plan.f_feat, offset)
        offset += cam.branch.out_dim
    _state(em, plan, offset)
    action = _head_and_output(em, plan)
    widths = [int(np.prod(s)) for cam in plan.cameras for s in cam.branch.shapes()[0 if isinstance(
        cam.ops[0], PixelsOp) else 1:]] + graph.head.widths
    size = width.bits // 8
    out_buf = width.bits != 16  # q7's last layer writes int16
    workspace = size * (2 * max(widths) + graph.feature_dim) + (2 * graph.act_dim if out_buf else 0)
    about = ((f" * Source: {origin}\n" if origin else "") + _ABOUT[width.variant] +
             f" * Constant data (flash): {data.nbytes} bytes; static workspace (RAM): {workspace} bytes.\n")
    up, t = name.upper(), width.ctype
    body = "\n".join(em.lines)
    source = (f"/* {name}.c: deterministic policy generated by `robot-rl export`. Do not edit.\n{about} */\n"
              f'#include "{name}.h"\n\n{"".join(data.arrays)}\n'
              f"static {t} {name}_q[2][{max(widths)}];\nstatic {t} {name}_feat[{graph.feature_dim}];\n"
              + (f"static int16_t {name}_out[{graph.act_dim}];\n" if out_buf else "") + "\n"
              + kernels(name, body + action, width) + "\n"
              + f"{_signature(graph, name, 'int16_t')}\n{{\n    int i;\n{_checks(graph, name)}{body}\n"
              f"    for (i = 0; i < {up}_ACTION_DIM; ++i) {{\n        action[i] = {action};\n    }}\n"
              f"    return {up}_OK;\n}}\n\n" + _helpers(plan, name))
    defines, protos = _decls(plan, name)
    header = _header(graph, name, about, data.nbytes, workspace, io_type="int16_t", extra_defines=defines,
                     extra_protos=protos)
    variant: Variant = "q15" if width.bits == 16 else "q7"
    return CSources(name, variant, header, source, data.nbytes, workspace)


def generate_q15_c(plan: FixedPlan, name: str, origin: str = "") -> CSources:
    """:func:`generate_fixed_c` under its name from when q15 was the only fixed-point variant."""
    if plan.width != Q15:
        raise ValueError(f"generate_q15_c takes a q15 plan, not {plan.width.variant}: use generate_fixed_c")
    return generate_fixed_c(plan, name, origin)
