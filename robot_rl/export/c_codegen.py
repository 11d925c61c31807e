"""C99 source for an :class:`~robot_rl.export.graph.MLPGraph`: one header, one source file.

What the generated code promises (checked by the tests and the export command):

- ``void <name>_forward(const float *obs, float *action)``, ``obs`` ``[<NAME>_OBS_DIM]`` raw (not
  normalised) observations, ``action`` ``[<NAME>_ACTION_DIM]`` in the action bounds;
- weights are ``static const`` arrays, so the linker puts them in flash (``.rodata``);
- no ``malloc``; the activations ping-pong between two static buffers of the widest layer (``.bss``),
  so the function is not re-entrant: call it from one context at a time (a control loop);
- no header beyond ``<math.h>`` (``expf``, ``expm1f``, ``tanhf``, ``erff``, ``fminf``, ``fmaxf``).

Variants: ``float32`` (max abs error vs torch ≤ 1e-5) and ``int8``: each output row ``o`` of a weight
matrix is stored as ``round(W[o,:] / s_o)`` with ``s_o = max|W[o,:]| / 127``, and the row's float
accumulator is multiplied by ``s_o`` (activations stay float). Its error bound is
:func:`robot_rl.export.quantize.int8_error_bound`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.export.graph import DenseLayer, MLPGraph
from robot_rl.export.quantize import quantize_rows

Variant = Literal["float32", "int8", "int8_full", "q15", "q7"]
VARIANTS: tuple[Variant, ...] = ("float32", "int8")
"""What ``robot-rl export`` writes by default; ``int8_full`` (:mod:`robot_rl.export.c_int8`), ``q15`` and ``q7``
(:mod:`robot_rl.export.c_fixed`) are on request."""
_CTYPE_BYTES = {"signed char": 1, "int8_t": 1, "int16_t": 2, "int32_t": 4, "int64_t": 8, "float": 4, "int": 4}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

_ACT_C = {
    "relu": "v > 0.0f ? v : 0.0f",
    "elu": "v > 0.0f ? v : expm1f(v)",
    "tanh": "tanhf(v)",
    "silu": "v / (1.0f + expf(-v))",
    "gelu": "0.5f * v * (1.0f + erff(v * 0.70710678118654752f))",
}


@dataclass
class CSources:
    """The generated pair: ``<name>.h`` and ``<name>.c``."""

    name: str
    variant: Variant
    header: str
    source: str
    weight_bytes: int
    """Bytes of constant data (weights, biases, scales, normaliser, output map)."""
    workspace_bytes: int
    """Bytes of the static activation buffers."""


def check_name(name: str) -> str:
    """``name`` if it is a valid C identifier prefix, else a ValueError saying why."""
    if not _IDENT.match(name):
        raise ConfigError(f"policy name {name!r} must be a C identifier (letters, digits, _; not starting "
                          "with a digit)")
    return name


def _f(x: float) -> str:
    """A float32 literal that round-trips exactly (9 significant digits)."""
    if math.isinf(x):
        return "INFINITY" if x > 0 else "-INFINITY"
    s = f"{float(np.float32(x)):.9g}"
    if "e" not in s and "." not in s and "n" not in s:
        s += ".0"
    return s + "f"


def _array(ctype: str, name: str, values: np.ndarray, fmt: str = "float", per_line: int = 8) -> str:
    flat = values.reshape(-1)
    items = [_f(v) for v in flat.tolist()] if fmt == "float" else [str(int(v)) for v in flat.tolist()]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    body = ",\n    ".join(lines)
    return f"static const {ctype} {name}[{flat.size}] = {{\n    {body}\n}};\n"


class _ConstData:
    """The ``static const`` arrays in the order they are emitted, and their size in bytes."""

    def __init__(self) -> None:
        self.arrays: list[str] = []
        self.nbytes = 0

    def emit(self, ctype: str, sym: str, values: np.ndarray, fmt: str = "float") -> None:
        self.arrays.append(_array(ctype, sym, values, fmt))
        self.nbytes += values.size * _CTYPE_BYTES[ctype]


def _emit_layer(data: _ConstData, name: str, i: int, layer: DenseLayer, variant: Variant) -> list[str]:
    """Emit layer ``i``'s weights (and int8 scales) and bias; return its lines of ``<name>_forward``."""
    n_out, n_in = layer.weight.shape
    src, dst = f"{name}_buf[{i % 2}]", f"{name}_buf[{(i + 1) % 2}]"
    if variant == "float32":
        data.emit("float", f"{name}_w{i}", layer.weight)
        calls = [f"    {name}_dense({name}_w{i}, {name}_b{i}, {src}, {dst}, {n_in}, {n_out});"]
    else:
        q, scale = quantize_rows(layer.weight)
        data.emit("signed char", f"{name}_w{i}", q, fmt="int")
        data.emit("float", f"{name}_s{i}", scale)
        calls = [f"    {name}_dense_q8({name}_w{i}, {name}_s{i}, {name}_b{i}, {src}, {dst}, {n_in}, {n_out});"]
    data.emit("float", f"{name}_b{i}", layer.bias)
    if layer.activation != "identity":
        calls.append(f"    {name}_{layer.activation}({dst}, {n_out});")
    return calls


def _emit_constants(graph: MLPGraph, name: str, variant: Variant) -> tuple[_ConstData, list[str]]:
    """Every constant array (normaliser, layers, output map) and the layer calls of ``<name>_forward``."""
    data = _ConstData()
    if graph.norm_mean is not None and graph.norm_std is not None:
        data.emit("float", f"{name}_norm_mean", graph.norm_mean)
        data.emit("float", f"{name}_norm_std", graph.norm_std)
    calls: list[str] = []
    for i, layer in enumerate(graph.layers):
        calls += _emit_layer(data, name, i, layer, variant)
    if graph.output != "identity":
        data.emit("float", f"{name}_out_a", graph.out_a)
        data.emit("float", f"{name}_out_b", graph.out_b)
    return data, calls


def _about(graph: MLPGraph, variant: Variant, const_bytes: int, workspace: int) -> str:
    """The comment lines, shared by header and source, that describe the network and its memory."""
    dims = " -> ".join(f"{w}" + (f" ({layer.activation})" if layer.activation != "identity" else "")
                       for w, layer in zip(graph.widths[1:], graph.layers))
    out_desc = {"tanh_scale": "tanh(y) * out_a + out_b (SAC's squashed mean scaled to the bounds)",
                "clamp": "clamp(y, out_a, out_b) (PPO's mean clamped to the bounds)",
                "identity": "y (unbounded action)"}[graph.output]
    norm_desc = (f"clamp((obs - mean) / std, +-{graph.norm_clip:g})" if graph.norm_mean is not None
                 else "none (raw observations)")
    return (f" * Variant: {variant}. Layers: {graph.obs_dim} -> {dims}.\n"
            f" * Observation normalisation: {norm_desc}.\n"
            f" * Output: {out_desc}.\n"
            f" * Constant data (flash): {const_bytes} bytes; static workspace (RAM): {workspace} bytes.\n")


def _header(graph: MLPGraph, name: str, preamble: str, const_bytes: int, workspace: int) -> str:
    """``<name>.h``: the dimensions, sizes and the ``<name>_forward`` prototype."""
    up = name.upper()
    return f"""/* {name}.h: deterministic policy generated by `robot-rl export`. Do not edit.
{preamble} *
 * {name}_forward is not re-entrant (static workspace): call it from one context at a time.
 */
#ifndef {up}_H_
#define {up}_H_

#ifdef __cplusplus
extern "C" {{
#endif

#define {up}_OBS_DIM {graph.obs_dim}
#define {up}_ACTION_DIM {graph.act_dim}
#define {up}_WORKSPACE_BYTES {workspace}
#define {up}_CONST_BYTES {const_bytes}

/* obs: {graph.obs_dim} raw observation values; action: {graph.act_dim} outputs, written in place. */
void {name}_forward(const float *obs, float *action);

#ifdef __cplusplus
}}
#endif

#endif /* {up}_H_ */
"""


def _dense_helper(name: str, variant: Variant) -> str:
    """The dense-layer function: float32 weights, or int8 rows with a float scale per row."""
    if variant == "float32":
        return f"""static void {name}_dense(const float *w, const float *b, const float *x, float *y, int n_in,
                        int n_out)
{{
    int o, i;
    for (o = 0; o < n_out; ++o) {{
        const float *row = w + (long)o * n_in;
        float acc = 0.0f;
        for (i = 0; i < n_in; ++i) {{
            acc += row[i] * x[i];
        }}
        y[o] = acc + b[o];
    }}
}}
"""
    return f"""/* Per-row scale: y[o] = s[o] * sum_i q[o][i] * x[i] + b[o]. */
static void {name}_dense_q8(const signed char *w, const float *s, const float *b, const float *x, float *y,
                           int n_in, int n_out)
{{
    int o, i;
    for (o = 0; o < n_out; ++o) {{
        const signed char *row = w + (long)o * n_in;
        float acc = 0.0f;
        for (i = 0; i < n_in; ++i) {{
            acc += (float)row[i] * x[i];
        }}
        y[o] = acc * s[o] + b[o];
    }}
}}
"""


def _activation_helper(name: str, act: str) -> str:
    """The in-place activation function ``<name>_<act>(x, n)``."""
    return f"""static void {name}_{act}(float *x, int n)
{{
    int i;
    for (i = 0; i < n; ++i) {{
        const float v = x[i];
        x[i] = {_ACT_C[act]};
    }}
}}
"""


def _prologue(graph: MLPGraph, name: str) -> str:
    """``<name>_forward``'s first loop: the (normalised, clipped) observation into buffer 0."""
    up = name.upper()
    if graph.norm_mean is not None:
        clip = _f(graph.norm_clip)
        return f"""    for (i = 0; i < {up}_OBS_DIM; ++i) {{
        const float z = (obs[i] - {name}_norm_mean[i]) / {name}_norm_std[i];
        {name}_buf[0][i] = fminf(fmaxf(z, -{clip}), {clip});
    }}"""
    return f"""    for (i = 0; i < {up}_OBS_DIM; ++i) {{
        {name}_buf[0][i] = obs[i];
    }}"""


def _output_expr(graph: MLPGraph, name: str) -> str:
    """The C expression of ``action[i]`` from the last layer's buffer (the output map)."""
    out_buf = f"{name}_buf[{len(graph.layers) % 2}]"
    return {"tanh_scale": f"tanhf({out_buf}[i]) * {name}_out_a[i] + {name}_out_b[i]",
            "clamp": f"fminf(fmaxf({out_buf}[i], {name}_out_a[i]), {name}_out_b[i])",
            "identity": f"{out_buf}[i]"}[graph.output]


def _source(graph: MLPGraph, name: str, variant: Variant, preamble: str, data: _ConstData,
            calls: list[str]) -> str:
    """``<name>.c``: constant arrays, the static workspace, the helpers and ``<name>_forward``."""
    up = name.upper()
    helpers = [_dense_helper(name, variant)]
    helpers += [_activation_helper(name, act)
                for act in sorted({layer.activation for layer in graph.layers} - {"identity"})]
    return f"""/* {name}.c: deterministic policy generated by `robot-rl export`. Do not edit.
{preamble} */
#include "{name}.h"

#include <math.h>

#define {up}_MAX_WIDTH {max(graph.widths)}

{"".join(data.arrays)}
/* Activations ping-pong between the two rows; no heap, no large stack frame. */
static float {name}_buf[2][{up}_MAX_WIDTH];

{"".join(h + chr(10) for h in helpers)}void {name}_forward(const float *obs, float *action)
{{
    int i;
{_prologue(graph, name)}
{chr(10).join(calls)}
    for (i = 0; i < {up}_ACTION_DIM; ++i) {{
        action[i] = {_output_expr(graph, name)};
    }}
}}
"""


def generate_c(graph: MLPGraph, name: str, variant: Variant = "float32", origin: str = "") -> CSources:
    """The C99 header/source pair for ``graph`` with symbols prefixed by ``name``."""
    check_name(name)
    if variant not in VARIANTS:
        raise ConfigError(f"unknown C variant {variant!r}; valid: {', '.join(VARIANTS)}")
    data, calls = _emit_constants(graph, name, variant)
    workspace = 2 * max(graph.widths) * 4
    origin_line = f" * Source: {origin}\n" if origin else ""
    preamble = origin_line + _about(graph, variant, data.nbytes, workspace)
    header = _header(graph, name, preamble, data.nbytes, workspace)
    source = _source(graph, name, variant, preamble, data, calls)
    return CSources(name, variant, header, source, data.nbytes, workspace)


def used_kernels(table: dict[str, str], name: str, body: str) -> str:
    """The kernels of ``table`` (in dependency order) that ``body`` calls, and those they call.

    Each kernel is a format string over ``{n}`` (the policy's name); an unused static function would fail
    ``-Werror``, so only what is called is emitted.
    """
    text, used = body, []
    for key in reversed(list(table)):
        if f"{name}_{key}(" in text:
            code = table[key].format(n=name)
            used.append(code)
            text += code
    return "\n".join(reversed(used))
