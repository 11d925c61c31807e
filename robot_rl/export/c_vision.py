"""C99 source for a :class:`~robot_rl.export.vision.VisionGraph` (a pixel actor): one header, one source file.

The entry point checks every size before touching a byte, so a camera of the wrong resolution or a state
of the wrong length is an error code, never a read past the end of a buffer::

    int <name>_forward(const unsigned char *image_<cam>, size_t image_<cam>_bytes,   (one pair per camera)
                       const float *state, size_t state_len,                          (when there is a state)
                       float *action, size_t action_len);

returns ``<NAME>_OK`` (0), ``<NAME>_ERR_SIZE`` (−1: a length differs from ``<NAME>_IMAGE_<CAM>_BYTES`` =
H·W·C, ``<NAME>_STATE_DIM`` or ``<NAME>_ACTION_DIM``) or ``<NAME>_ERR_NULL`` (−2). Images are uint8 HWC
(row-major, channels interleaved) as cameras deliver them; the state is raw (the code normalises it).

Memory: weights are ``static const`` (flash); activations ping-pong between two static buffers of the
largest map (float32), plus one buffer for the concatenated features: ``<NAME>_WORKSPACE_BYTES``
in all (``.bss``). Not re-entrant, like the MLP code. Headers: ``<stddef.h>`` (``size_t``) and
``<math.h>``. This module writes float32; the full-int8 variant with the same entry point is
:mod:`robot_rl.export.c_int8`'s.

Maps are HWC (:mod:`robot_rl.export.c_hwc`): a chain that starts with a conv on ``u/255 − 0.5`` (the DrQ and
keypoint encoders) reads the uint8 image in place as ``2u − 255``, the 1/510 folded into its weights, as int8_full
and q15 do, so the largest buffer is the largest map after the image; another chain first normalises the image into
an HWC float map.
"""

from __future__ import annotations

import numpy as np

from robot_rl.export.c_codegen import (
    CSources,
    Variant,
    _activation_helper,
    _ConstData,
    _dense_helper,
    _emit_constants,
    _f,
    _output_expr,
    check_name,
)
from robot_rl.export.c_hwc import conv_kernel, gather_line, hwc_order, pool_geometry, pool_kernel, softmax_kernel
from robot_rl.export.vision import (
    ActNode,
    CameraBranch,
    Conv2dNode,
    DenseNode,
    FlattenNode,
    LayerNormNode,
    Node,
    PoolNode,
    Shape,
    SpatialSoftmaxNode,
    VisionGraph,
)

_CONV = conv_kernel("conv", "float32.", ("float", "float", "float", "float"), "", ("float", "0.0f"),
                    "acc += *wr++ * *xr++;", "acc + bias[o]", long="long")

# u/255 - 0.5 = (2u - 255)/510, the 1/510 folded into the weights: the image is read in place, each tap an exact
# integer converted to float, and no float copy of the image is made.
_CONV_IMG = conv_kernel("conv_img", "The first conv: the uint8 image, read as 2u - 255 (w holds w/510).",
                        ("float", "float", "unsigned char", "float"), "", ("float", "0.0f"),
                        "acc += *wr++ * (float)(2 * (int)*xr++ - 255);", "acc + bias[o]", long="long")

_POOL = pool_kernel(" (max pads with -inf)", "float", "", "float", "-INFINITY", "v",
                    "kind == 0 ? acc : acc / (float)d", long="long")

_LAYERNORM = """static void {n}_layernorm(const float *g, const float *b, float *x, int len, float eps)
{{
    int i;
    float mean = 0.0f, var = 0.0f, inv;
    for (i = 0; i < len; ++i) mean += x[i];
    mean /= (float)len;
    for (i = 0; i < len; ++i) var += (x[i] - mean) * (x[i] - mean);
    inv = 1.0f / sqrtf(var / (float)len + eps);
    for (i = 0; i < len; ++i) x[i] = (x[i] - mean) * inv * g[i] + b[i];
}}
"""

_SPATIAL_SOFTMAX = softmax_kernel("", "float", "", "gain[c]", "0.0f", ("ex", "ey"))

_PIXELS = """/* uint8 HWC -> float HWC, (u / 255 - mean[c]) / std[c] as the torch encoder computes it (for a chain that
   does not start with a conv). */
static void {n}_pixels(const unsigned char *img, const float *mean, const float *std, int per_channel, float *y,
                       long pixels, int ch)
{{
    long p;
    int c;
    for (p = 0; p < pixels; ++p) {{
        for (c = 0; c < ch; ++c) {{
            y[p * ch + c] = ((float)img[p * ch + c] / 255.0f - mean[per_channel ? c : 0]) / std[per_channel ? c : 0];
        }}
    }}
}}
"""


class _Chain:
    """Emits one camera's nodes, tracking which ping-pong buffer holds the current tensor and its layout.

    ``layout``: the current tensor is a map in HWC order (its ``(C, H, W)``), or a vector (``None``).
    """

    def __init__(self, name: str, data: _ConstData, prefix: str, image: str) -> None:
        self.name, self.data, self.prefix, self.image = name, data, prefix, image
        self.cur = 0
        self.layout: Shape | None = None
        self.lines: list[str] = []
        self.helpers: set[str] = set()

    def _bufs(self) -> tuple[str, str]:
        src, dst = f"{self.name}_buf[{self.cur}]", f"{self.name}_buf[{1 - self.cur}]"
        self.cur = 1 - self.cur
        return src, dst

    def conv(self, sym: str, node: Conv2dNode, shape: Shape, out: Shape, image: bool) -> None:
        """HWC weights ``[o][ky][kx][c]``; ``image``: the conv reads the uint8 image itself (weights divided by 510)."""
        weight = node.weight.transpose(0, 2, 3, 1).astype(np.float64) / (510.0 if image else 1.0)
        self.data.emit("float", f"{sym}_w", weight)
        self.data.emit("float", f"{sym}_b", node.bias)
        if image:
            src, dst, self.cur, fn = self.image, f"{self.name}_buf[0]", 0, "conv_img"
        else:
            (src, dst), fn = self._bufs(), "conv"
        kh, kw = node.weight.shape[2:]
        self.layout = out
        self.lines.append(f"    {self.name}_{fn}({sym}_w, {sym}_b, {src}, {dst}, {shape[0]}, {shape[1]}, "
                          f"{shape[2]}, {out[0]}, {out[1]}, {out[2]}, {kh}, {kw}, {node.stride[0]}, "
                          f"{node.stride[1]}, {node.padding[0]}, {node.padding[1]});")
        self.helpers.add(fn)

    def emit(self, j: int, node: Node, shape: Shape, out: Shape) -> None:
        n, sym = self.name, f"{self.prefix}{j}"
        order = slice(None) if self.layout is None else hwc_order(self.layout)
        if isinstance(node, Conv2dNode):
            self.conv(sym, node, shape, out, j == 0 and self.layout is None)
        elif isinstance(node, PoolNode):
            src, dst = self._bufs()
            self.layout = out
            self.lines.append(f"    {n}_pool({src}, {dst}, {pool_geometry(node, shape, out)});")
            self.helpers.add("pool")
        elif isinstance(node, ActNode):
            if node.activation != "identity":
                self.lines.append(f"    {n}_{node.activation}({n}_buf[{self.cur}], {int(np.prod(shape))});")
                self.helpers.add(node.activation)
        elif isinstance(node, DenseNode):
            self.data.emit("float", f"{sym}_w", node.weight[:, order])
            self.data.emit("float", f"{sym}_b", node.bias)
            src, dst = self._bufs()
            self.layout = None
            self.lines.append(f"    {n}_dense({sym}_w, {sym}_b, {src}, {dst}, {shape[0]}, {out[0]});")
            self.helpers.add("dense")
        elif isinstance(node, LayerNormNode):
            self.data.emit("float", f"{sym}_g", node.weight[order])
            self.data.emit("float", f"{sym}_b", node.bias[order])
            self.lines.append(f"    {n}_layernorm({sym}_g, {sym}_b, {n}_buf[{self.cur}], {int(np.prod(shape))}, "
                              f"{_f(node.eps)});")
            self.helpers.add("layernorm")
        elif isinstance(node, SpatialSoftmaxNode):
            for part, values in (("gain", node.gain), ("gx", node.grid_x), ("gy", node.grid_y)):
                self.data.emit("float", f"{sym}_{part}", values)
            src, dst = self._bufs()
            self.layout = None
            self.lines.append(f"    {n}_spatial_softmax({sym}_gain, {sym}_gx, {sym}_gy, {src}, {dst}, {shape[0]}, "
                              f"{shape[1]}, {shape[2]});")
            self.helpers.add("spatial_softmax")
        elif not isinstance(node, FlattenNode):
            raise TypeError(f"no C for node {node!r}")


def _helper(name: str, kind: str) -> str:
    fixed = {"conv": _CONV, "conv_img": _CONV_IMG, "pool": _POOL, "layernorm": _LAYERNORM,
             "spatial_softmax": _SPATIAL_SOFTMAX, "pixels": _PIXELS}
    if kind in fixed:
        return fixed[kind].format(n=name)
    if kind == "dense":
        return _dense_helper(name, "float32")
    return _activation_helper(name, kind)


def reads_image_in_place(cam: CameraBranch) -> bool:
    """Whether the chain's first conv reads the uint8 image in place, as ``2u − 255``.

    So it does when the chain starts with a conv and normalises as ``u/255 − 0.5`` (the DrQ and keypoint
    encoders); otherwise the image is first normalised into a float map.
    """
    return bool(cam.nodes) and isinstance(cam.nodes[0], Conv2dNode) and bool(np.all(cam.mean == 0.5)) \
        and bool(np.all(cam.std == 1.0))


def _camera(name: str, data: _ConstData, k: int, cam: CameraBranch, offset: int) -> _Chain:
    """Emit camera ``k``'s constants; its lines run the chain and copy the features to ``feat[offset:]``.

    See :func:`reads_image_in_place`; another chain first normalises the image into an HWC float map.
    """
    chain = _Chain(name, data, f"{name}_k{k}_", f"image_{cam.symbol}")
    h, w, c = cam.image_shape
    if not reads_image_in_place(cam):
        data.emit("float", f"{name}_k{k}_mean", cam.mean)
        data.emit("float", f"{name}_k{k}_std", cam.std)
        chain.lines.append(f"    {name}_pixels(image_{cam.symbol}, {name}_k{k}_mean, {name}_k{k}_std, "
                           f"{int(cam.mean.size > 1)}, {name}_buf[0], {h * w}, {c});")
        chain.helpers.add("pixels")
        chain.layout = (c, h, w)
    shapes = cam.shapes()
    for j, node in enumerate(cam.nodes):
        chain.emit(j, node, shapes[j], shapes[j + 1])
    chain.lines.append(gather_line(f"{name}_feat", offset, f"{name}_buf[{chain.cur}][i]", chain.layout, cam.out_dim))
    return chain


def _signature(graph: VisionGraph, name: str, io_type: str = "float") -> str:
    """The entry point's prototype; ``io_type``: the state and action element type (``int16_t`` for q15)."""
    args = [f"const unsigned char *image_{cam.symbol}, size_t image_{cam.symbol}_bytes" for cam in graph.cameras]
    if graph.state_dim:
        args.append(f"const {io_type} *state, size_t state_len")
    args.append(f"{io_type} *action, size_t action_len")
    return f"int {name}_forward({', '.join(args)})"


def _checks(graph: VisionGraph, name: str) -> str:
    up = name.upper()
    ptrs = [f"image_{cam.symbol}" for cam in graph.cameras] + (["state"] if graph.state_dim else []) + ["action"]
    sizes = [f"image_{c.symbol}_bytes != {up}_IMAGE_{c.symbol.upper()}_BYTES" for c in graph.cameras]
    sizes += ([f"state_len != {up}_STATE_DIM"] if graph.state_dim else []) + [f"action_len != {up}_ACTION_DIM"]
    return (f"    if ({' || '.join(f'{p} == NULL' for p in ptrs)}) return {up}_ERR_NULL;\n"
            f"    if ({' || '.join(sizes)}) return {up}_ERR_SIZE;\n")


def _state_lines(graph: VisionGraph, name: str, data: _ConstData, offset: int) -> list[str]:
    if not graph.state_dim:
        return []
    dst = f"{name}_feat[{offset} + i]"
    if graph.norm_mean is None or graph.norm_std is None:
        return [f"    for (i = 0; i < {graph.state_dim}; ++i) {dst} = state[i];"]
    data.emit("float", f"{name}_norm_mean", graph.norm_mean)
    data.emit("float", f"{name}_norm_std", graph.norm_std)
    clip = _f(graph.norm_clip)
    return [f"    for (i = 0; i < {graph.state_dim}; ++i) {{",
            f"        const float z = (state[i] - {name}_norm_mean[i]) / {name}_norm_std[i];",
            f"        {dst} = fminf(fmaxf(z, -{clip}), {clip});", "    }"]


def _max_width(graph: VisionGraph) -> int:
    """The largest map or vector of a chain (the image counts only when it is converted to a float map)."""
    widths = [int(np.prod(s)) for cam in graph.cameras for s in cam.shapes()[1 if reads_image_in_place(cam) else 0:]]
    return max(widths + graph.head.widths)


def _header(graph: VisionGraph, name: str, about: str, const_bytes: int, workspace: int, io_type: str = "float",
            extra_defines: str = "", extra_protos: str = "") -> str:
    """``<name>.h`` of the size-checked entry point.

    ``<NAME>_CAMERA<k>_BYTES`` is camera ``k``'s bytes, for code (the firmware example) that does not know its name.
    """
    up = name.upper()
    cams = "".join(f"#define {up}_IMAGE_{c.symbol.upper()}_HEIGHT {c.image_shape[0]}\n"
                   f"#define {up}_IMAGE_{c.symbol.upper()}_WIDTH {c.image_shape[1]}\n"
                   f"#define {up}_IMAGE_{c.symbol.upper()}_CHANNELS {c.image_shape[2]}\n"
                   f"#define {up}_IMAGE_{c.symbol.upper()}_BYTES {int(np.prod(c.image_shape))}\n"
                   f"#define {up}_CAMERA{k}_BYTES {int(np.prod(c.image_shape))}\n"
                   for k, c in enumerate(graph.cameras))
    cams += f"#define {up}_NUM_CAMERAS {len(graph.cameras)}\n"
    includes = "#include <stddef.h>\n" + ("#include <stdint.h>\n" if io_type != "float" else "")
    return f"""/* {name}.h: deterministic policy generated by `robot-rl export`. Do not edit.
{about} *
 * {name}_forward is not re-entrant (static workspace): call it from one context at a time.
 */
#ifndef {up}_H_
#define {up}_H_

{includes}
#ifdef __cplusplus
extern "C" {{
#endif

{cams}#define {up}_STATE_DIM {graph.state_dim}
#define {up}_ACTION_DIM {graph.act_dim}
#define {up}_WORKSPACE_BYTES {workspace}
#define {up}_CONST_BYTES {const_bytes}
#define {up}_OK 0
#define {up}_ERR_SIZE (-1)
#define {up}_ERR_NULL (-2)
{extra_defines}
/* Images uint8 HWC; sizes in bytes (images) and elements (state, action). Returns {up}_OK, or {up}_ERR_SIZE /
   {up}_ERR_NULL without touching action. */
{_signature(graph, name, io_type)};
{extra_protos}
#ifdef __cplusplus
}}
#endif

#endif /* {up}_H_ */
"""


def _about(graph: VisionGraph, origin: str, const_bytes: int, workspace: int) -> str:
    cams = "; ".join(f"{c.key} {'x'.join(map(str, c.image_shape))} -> {c.out_dim} features" for c in graph.cameras)
    head = " -> ".join(str(w) for w in graph.head.widths)
    return ((f" * Source: {origin}\n" if origin else "") +
            f" * Variant: float32. Cameras: {cams}; state {graph.state_dim}; head {head} ({graph.head.output}).\n"
            f" * Constant data (flash): {const_bytes} bytes; static workspace (RAM): {workspace} bytes.\n")


def generate_vision_c(graph: VisionGraph, name: str, variant: Variant = "float32", origin: str = "") -> CSources:
    """The C99 header/source pair for a pixel actor, symbols prefixed by ``name`` (float32 only)."""
    check_name(name)
    if variant != "float32":
        raise ValueError(f"the C generator for pixel policies writes float32 only, not {variant!r}")
    data = _ConstData()
    body: list[str] = []
    helpers: set[str] = set()
    offset = 0
    for k, cam in enumerate(graph.cameras):
        chain = _camera(name, data, k, cam, offset)
        body += chain.lines
        helpers |= chain.helpers
        offset += cam.out_dim
    body += _state_lines(graph, name, data, offset)
    body.append(f"    for (i = 0; i < {graph.feature_dim}; ++i) {name}_buf[0][i] = {name}_feat[i];")
    head_data, head_calls = _emit_constants(graph.head, name, "float32")
    data.arrays += head_data.arrays
    data.nbytes += head_data.nbytes
    helpers.add("dense")
    helpers |= {layer.activation for layer in graph.head.layers} - {"identity"}
    width = _max_width(graph)
    workspace = (2 * width + graph.feature_dim) * 4
    about = _about(graph, origin, data.nbytes, workspace)
    up = name.upper()
    source = (f"/* {name}.c: deterministic pixel policy generated by `robot-rl export`. Do not edit.\n{about} */\n"
              f'#include "{name}.h"\n\n#include <math.h>\n\n{"".join(data.arrays)}\n'
              f"/* Maps ping-pong between the two rows (HWC float32); the features are gathered in feat. */\n"
              f"static float {name}_buf[2][{width}];\nstatic float {name}_feat[{graph.feature_dim}];\n\n"
              + "".join(_helper(name, h) + "\n" for h in sorted(helpers))
              + f"{_signature(graph, name)}\n{{\n    int i;\n{_checks(graph, name)}"
              + "\n".join(body + head_calls) + "\n"
              f"    for (i = 0; i < {up}_ACTION_DIM; ++i) {{\n        action[i] = {_output_expr(graph.head, name)};\n"
              f"    }}\n    return {up}_OK;\n}}\n")
    return CSources(name, "float32", _header(graph, name, about, data.nbytes, workspace), source, data.nbytes,
                    workspace)


def size_main(graph: VisionGraph, name: str, io_type: str = "float") -> str:
    """A minimal ``main`` that calls ``<name>_forward`` on volatile buffers (for Cortex-M size builds)."""
    up = name.upper()
    decls = "".join(f"volatile unsigned char {name}_img_{c.symbol}[{up}_IMAGE_{c.symbol.upper()}_BYTES];\n"
                    for c in graph.cameras)
    args = [f"(const unsigned char *){name}_img_{c.symbol}, {up}_IMAGE_{c.symbol.upper()}_BYTES"
            for c in graph.cameras]
    if graph.state_dim:
        decls += f"volatile {io_type} {name}_state[{up}_STATE_DIM];\n"
        args.append(f"(const {io_type} *){name}_state, {up}_STATE_DIM")
    decls += f"volatile {io_type} {name}_action[{up}_ACTION_DIM];\n"
    args.append(f"({io_type} *){name}_action, {up}_ACTION_DIM")
    return (f'#include "{name}.h"\n{decls}int main(void)\n{{\n#ifdef WITH_POLICY\n'
            f"    return {name}_forward({', '.join(args)});\n#else\n    return 0;\n#endif\n}}\n")
