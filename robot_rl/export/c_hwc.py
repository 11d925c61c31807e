"""HWC feature maps for every C variant (float32, int8_full, q15, q7): the shared loops and the layout bookkeeping.

A camera delivers its image HWC (channels innermost), so every generated chain keeps its maps HWC: the first conv
reads the uint8 image in place (no CHW copy), and one kernel row of a conv is one contiguous run of ``kw·c_in``
values, so the inner loop is two loads and a multiply-add (CMSIS-NN's layout). Torch's tensors are CHW, so the
generators write conv weights ``[o][ky][kx][c]``, permute the columns of a Linear (and the γ, β of a LayerNorm)
that follows a flattened map with :func:`hwc_order`, and put a camera whose features are a flattened map back into
CHW order when its features are gathered (:func:`gather_line`).

The loops are templates over the element and accumulator types and the per-tap arithmetic (:func:`conv_kernel`,
:func:`pool_kernel`, :func:`softmax_kernel`); each variant fills in its own. ``{n}`` stays in the result (the policy
name, formatted by :func:`~robot_rl.export.c_codegen.used_kernels`).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def hwc_order(shape: tuple[int, ...]) -> np.ndarray:
    """For each position of a ``(C, H, W)`` map stored HWC, its index in torch's CHW order."""
    return np.arange(int(np.prod(shape))).reshape(shape).transpose(1, 2, 0).reshape(-1)


def fill(template: str, **tokens: str) -> str:
    """``template`` with each ``@key@`` replaced (``@`` never appears in C otherwise)."""
    for key, value in tokens.items():
        template = template.replace(f"@{key}@", value)
    if "@" in template:
        raise ValueError(f"unfilled template token in {template[:200]!r}")
    return template


def gather_line(dst: str, offset: int, value: str, layout: tuple[int, ...] | None, length: int) -> str:
    """A loop writing ``dst[offset + k]`` for ``k < length`` from ``value`` (an expression of the HWC index ``i``).

    ``layout``: the ``(C, H, W)`` of a flattened map, whose features go back to torch's CHW order; ``None`` (or a
    single channel or pixel, where both orders agree) for a vector.
    """
    if layout is None or layout[0] == 1 or layout[1] * layout[2] == 1:
        return f"    for (i = 0; i < {length}; ++i) {dst}[{offset} + i] = {value};"
    c, pixels = layout[0], layout[1] * layout[2]
    return f"    for (i = 0; i < {length}; ++i) {dst}[{offset} + (i % {c}) * {pixels} + i / {c}] = {value};"


_CONV = """/* @doc@ HWC in and out, w [c_out][kh][kw][c_in]; zero padding: the window is clipped to the image once
   per output pixel, so each kernel row is one contiguous run of kw*c_in values. */
static void {n}_@fn@(const @wt@ *w, const @bt@ *bias, @params@const @xt@ *x, @yt@ *y,
    int c_in, int h_in, int w_in, int c_out, int h_out, int w_out, int kh, int kw, int sh, int sw, int ph, int pw)
{{
    int o, oy, ox, ky;
    for (oy = 0; oy < h_out; ++oy) {{
        const int iy0 = oy * sh - ph;
        const int ky0 = iy0 < 0 ? -iy0 : 0, ky1 = h_in - iy0 < kh ? h_in - iy0 : kh;
        for (ox = 0; ox < w_out; ++ox) {{
            const int ix0 = ox * sw - pw;
            const int kx0 = ix0 < 0 ? -ix0 : 0, kx1 = w_in - ix0 < kw ? w_in - ix0 : kw;
            const int run = (kx1 - kx0) * c_in;
            for (o = 0; o < c_out; ++o) {{
                const @wt@ *wrow = w + (((@long@)o * kh + ky0) * kw + kx0) * c_in;
                const @xt@ *xrow = x + ((@long@)(iy0 + ky0) * w_in + ix0 + kx0) * c_in;
                @acc@ acc = @acc0@;
                for (ky = ky1 - ky0; ky > 0; --ky) {{
                    const @wt@ *wr = wrow, *end = wrow + run;
                    const @xt@ *xr = xrow;
                    while (wr != end) {{
                        @mac@
                    }}
                    wrow += kw * c_in;
                    xrow += (@long@)w_in * c_in;
                }}
                *y++ = @out@;
            }}
        }}
    }}
}}
"""


def conv_kernel(fn: str, doc: str, types: tuple[str, str, str, str], params: str, acc: tuple[str, str], mac: str,
                out: str, long: str = "int32_t") -> str:
    """A conv (``{n}_<fn>``) over HWC maps.

    ``types``: weight, bias, input and output element types; ``params``: extra parameters before ``x`` (each
    ending in ``", "``); ``acc``: the accumulator's type and initial value; ``mac``: the statement run once per
    tap or pixel (it reads ``*wr++``, ``*xr++``; a per-pixel one loops over the ``c_in`` channels itself); ``out``:
    the output expression of ``acc`` and ``o``; ``long``: the type of index arithmetic.
    """
    wt, bt, xt, yt = types
    return fill(_CONV, doc=doc, fn=fn, wt=wt, bt=bt, xt=xt, yt=yt, params=params, acc=acc[0], acc0=acc[1], mac=mac,
                out=out, long=long)


_POOL = """/* HWC; kind 0: max; 1: average over kh*kw; 2: average over the in-image pixels@doc@. */
static void {n}_pool(const @t@ *x, @t@ *y, @params@int ch, int h_in, int w_in, int h_out, int w_out, int kh, int kw,
    int sh, int sw, int ph, int pw, int kind)
{{
    int c, oy, ox, ky, kx;
    for (oy = 0; oy < h_out; ++oy) {{
        for (ox = 0; ox < w_out; ++ox) {{
            for (c = 0; c < ch; ++c) {{
                const @t@ *xc = x + c;
                @acc@ acc = kind == 0 ? @lowest@ : 0;
                int count = 0, d;
                for (ky = 0; ky < kh; ++ky) {{
                    const int iy = oy * sh - ph + ky;
                    if (iy < 0 || iy >= h_in) continue;
                    for (kx = 0; kx < kw; ++kx) {{
                        const int ix = ox * sw - pw + kx;
                        if (ix < 0 || ix >= w_in) continue;
                        const @t@ v = xc[((@long@)iy * w_in + ix) * ch];
                        acc = kind == 0 ? (v > acc ? v : acc) : acc + @term@;
                        ++count;
                    }}
                }}
                d = kind == 1 ? kh * kw : count;
                *y++ = @out@;
            }}
        }}
    }}
}}
"""


def pool_kernel(doc: str, elem: str, params: str, acc: str, lowest: str, term: str, out: str,
                long: str = "int32_t") -> str:
    """Max or average pooling (``{n}_pool``) over HWC maps.

    ``elem``/``acc``: element and accumulator types; ``lowest``: the max's start (padding never wins); ``term``:
    what an average adds for a value ``v``; ``out``: the result from ``acc``, ``d`` (the divisor) and ``kind``.
    """
    return fill(_POOL, doc=doc, t=elem, params=params, acc=acc, lowest=lowest, term=term, out=out, long=long)


_SOFTMAX = """/* Per channel of an HWC map: p = softmax(g x) over the pixels@doc@;
   y = [sum p gx (ch), sum p gy (ch)]. */
static void {n}_spatial_softmax(const float *gain, const float *gx, const float *gy, const @t@ *x, @t@ *y,
    int ch, int h, int w@params@)
{{
    int c, i, j;
    for (c = 0; c < ch; ++c) {{
        const @t@ *xc = x + c;
        const float g = @g@;
        float peak = -INFINITY, sum = 0.0f, ex = 0.0f, ey = 0.0f;
        for (i = 0; i < h * w; ++i) {{
            const float v = g * ((float)xc[(long)i * ch] - @zx@);
            peak = v > peak ? v : peak;
        }}
        for (i = 0; i < h * w; ++i) sum += expf(g * ((float)xc[(long)i * ch] - @zx@) - peak);
        for (i = 0; i < h; ++i) {{
            for (j = 0; j < w; ++j) {{
                const float p = expf(g * ((float)xc[((long)i * w + j) * ch] - @zx@) - peak) / sum;
                ex += p * gx[j];
                ey += p * gy[i];
            }}
        }}
        y[c] = @yx@;
        y[ch + c] = @yy@;
    }}
}}
"""


def softmax_kernel(doc: str, elem: str, params: str, gain: str, zero: str, out: tuple[str, str]) -> str:
    """The float spatial softmax (``{n}_spatial_softmax``) of float32 and int8_full, over HWC maps.

    ``gain``: ``g`` of channel ``c``; ``zero``: the float subtracted from each element; ``out``: the stored
    ``x`` and ``y`` keypoints from the float ``ex`` and ``ey``.
    """
    return fill(_SOFTMAX, doc=doc, t=elem, params=params, g=gain, zx=zero, yx=out[0], yy=out[1])


def pool_geometry(node: Any, shape: tuple[int, ...], out: tuple[int, ...]) -> str:
    """The pool kernels' shared trailing arguments: input C, H, W, output H, W, kernel, stride, padding, kind.

    kind 0: max; 1: average over the whole window; 2: average over the in-image pixels (``count_include_pad``).
    """
    kind = 0 if node.kind == "max" else (1 if node.count_include_pad else 2)
    return (f"{shape[0]}, {shape[1]}, {shape[2]}, {out[1]}, {out[2]}, {node.kernel[0]}, {node.kernel[1]}, "
            f"{node.stride[0]}, {node.stride[1]}, {node.padding[0]}, {node.padding[1]}, {kind}")
