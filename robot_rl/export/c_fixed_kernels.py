"""The C kernels of the fixed-point variants (:mod:`robot_rl.export.c_fixed`): integer arithmetic only.

One set of templates serves ``q15`` and ``q7``: :func:`kernel_table` fills in the
:class:`~robot_rl.export.fixed_formats.Width`'s element type (int16 or int8), accumulator (int64 or int32) and
saturation limits. Maps are HWC (:mod:`robot_rl.export.c_hwc`). The last layer of a ``q7`` plan reads int8 and
writes int16 (``dense_out``, saturated by ``sat16``), and its output map is ``q15``'s (the int16 ``lut``).

Each kernel is a ``static`` function template (``{n}`` = the policy name); :func:`kernels` emits the ones a
forward pass calls, and those they call. Types come from ``<stdint.h>``; nothing here uses float, ``<math.h>`` or
the heap. On ARMv6-M (Cortex-M0/M0+, no divide instruction, no 64-bit multiply) GCC turns the 64-bit shifts,
the 32×32→64 products of the keypoints and the divisions into libgcc's integer helpers (``__aeabi_lasr``,
``__aeabi_lmul``, ``__aeabi_idiv``, ``__aeabi_ldivmod``); the multiply-accumulate of conv and dense layers is a
32-bit product added to the accumulator (64-bit for ``q15``, 32-bit for ``q7``).
"""

from __future__ import annotations

from robot_rl.export.c_codegen import used_kernels
from robot_rl.export.c_hwc import conv_kernel, fill, pool_kernel
from robot_rl.export.fixed_formats import Width

_SAT = """/* Saturation to @t@ with a lower limit (the type's lowest, or 0 for a fused ReLU). */
static @t@ {n}_@fn@(@arg@ v, int32_t lo)
{{
    return (@t@)(v < lo ? lo : (v > @qmax@ ? @qmax@ : v));
}}
"""

SHR = """/* round(v / 2^s), s >= 0, halves up (arithmetic shift). */
static int64_t {n}_shr(int64_t v, int s)
{{
    return s > 0 ? (v + ((int64_t)1 << (s - 1))) >> s : v;
}}
"""

RDIV = """/* round(num / den) for den > 0, halves away from zero. */
static int64_t {n}_rdiv(int64_t num, int64_t den)
{{
    return num >= 0 ? (num + den / 2) / den : -((-num + den / 2) / den);
}}
"""

_DENSE = """/* bias includes the rounding constant 2^(shift - 1). */
static void {n}_@fn@(const @t@ *w, const @acc@ *bias, const int8_t *shift, const @t@ *x, @yt@ *y,
    int32_t lo, int n_in, int n_out)
{{
    int o, i;
    for (o = 0; o < n_out; ++o) {{
        const @t@ *row = w + (int32_t)o * n_in;
        @acc@ acc = bias[o];
        for (i = 0; i < n_in; ++i) acc += (int32_t)row[i] * x[i];
        y[o] = {n}_@sat@(acc >> shift[o], lo);
    }}
}}
"""

LUT = """/* Activation table: x + 32768 = 128 k + r, y = t[k] + round((t[k+1] - t[k]) r / 128) (513 entries). */
static void {n}_lut(const int16_t *t, int16_t *x, int len)
{{
    int i;
    for (i = 0; i < len; ++i) {{
        const int32_t u = (int32_t)x[i] + 32768, k = u >> 7, r = u & 127;
        x[i] = (int16_t)(t[k] + ((((int32_t)t[k + 1] - t[k]) * r + 64) >> 7));
    }}
}}
"""

LUT8 = """/* Activation table: one entry per int8 input. */
static void {n}_lut8(const int8_t *t, int8_t *x, int len)
{{
    int i;
    for (i = 0; i < len; ++i) x[i] = t[x[i] + 128];
}}
"""

_RELU = """static void {n}_relu(@t@ *x, int len)
{{
    int i;
    for (i = 0; i < len; ++i) x[i] = x[i] < 0 ? 0 : x[i];
}}
"""

_PIXELS = """/* uint8 HWC -> @t@ HWC through a 256-entry table per channel (one table when per_channel is 0). */
static void {n}_pixels(const unsigned char *img, const @t@ *table, int per_channel, @t@ *y, int32_t pixels, int ch)
{{
    int32_t p;
    int c;
    for (p = 0; p < pixels; ++p) {{
        for (c = 0; c < ch; ++c) y[p * ch + c] = table[(per_channel ? 256 * c : 0) + img[p * ch + c]];
    }}
}}
"""

_RESCALE = """/* A camera's features into the features' format, y = sat(round(x / 2^s)), and from HWC into torch's
   CHW order (a vector is ch = 1). */
static void {n}_rescale(const @t@ *x, @t@ *y, int ch, int32_t pixels, int s)
{{
    int32_t p;
    int c;
    for (p = 0; p < pixels; ++p) {{
        for (c = 0; c < ch; ++c) y[c * pixels + p] = {n}_sat({n}_shr(x[p * ch + c], s), @lowest@);
    }}
}}
"""

_STATE = """/* The observation normaliser: z = clamp(round((s - mu) mult / 2^shift), -clip, clip), from the int16 state
   into the features' format. */
static void {n}_state(const int16_t *s, const int32_t *mu, const int32_t *mult, const int8_t *shift, @t@ *z,
    int len, int32_t clip)
{{
    int i;
    for (i = 0; i < len; ++i) {{
        const int64_t v = {n}_shr((int64_t)((int32_t)s[i] - mu[i]) * mult[i], shift[i]);
        z[i] = (@t@)(v < -clip ? -clip : (v > clip ? clip : v));
    }}
}}
"""

ISQRT = """/* floor(sqrt(v)), bit by bit. */
static uint32_t {n}_isqrt(uint64_t v)
{{
    uint64_t r = 0, bit = (uint64_t)1 << 62;
    while (bit > v) bit >>= 2;
    while (bit != 0) {{
        if (v >= r + bit) {{
            v -= r + bit;
            r = (r >> 1) + bit;
        }} else {{
            r >>= 1;
        }}
        bit >>= 2;
    }}
    return (uint32_t)r;
}}
"""

_LAYERNORM = """/* LayerNorm in integers: D_i = len x_i - sum x, R = isqrt(len sum x^2 - (sum x)^2 + eps)
   (= len sd 2^f_in), y_i = round(round(D_i g_i / R) / 2^k) + b_i. */
static void {n}_layernorm(const int32_t *g, const int32_t *b, @t@ *x, int len, int64_t eps, int k)
{{
    int i;
    int64_t s1 = 0, s2 = 0, r;
    for (i = 0; i < len; ++i) {{
        s1 += x[i];
        s2 += (int32_t)x[i] * x[i];
    }}
    r = (int64_t){n}_isqrt((uint64_t)((int64_t)len * s2 - s1 * s1 + eps));
    r = r > 0 ? r : 1;
    for (i = 0; i < len; ++i) {{
        const int64_t d = (int64_t)len * x[i] - s1;
        x[i] = {n}_sat({n}_shr({n}_rdiv(d * g[i], r), k) + b[i], @lowest@);
    }}
}}
"""

_KEYPOINTS = """/* Spatial softmax (HWC map in) per channel c: u = (max - x) gain[c] (Q26, log2 units), e = 2^-u in Q30
   (table t of 2^-r on [0, 1] interpolated on 8 bits, the integer part of u a shift; 0 beyond cut[c]);
   keypoint = sum(e grid) / sum(e) in Q15 (grids in Q15), then rounded to the output format (>> s). */
static void {n}_keypoints(const int32_t *gain, const int32_t *cut, const int32_t *t, const int32_t *gx,
    const int32_t *gy, const @t@ *x, @t@ *y, int ch, int h, int w, int s)
{{
    int c, i, j;
    for (c = 0; c < ch; ++c) {{
        const @t@ *xc = x + c;
        int32_t peak = @lowest@;
        int64_t se = 0, sx = 0, sy = 0;
        for (i = 0; i < h * w; ++i) peak = xc[(int32_t)i * ch] > peak ? xc[(int32_t)i * ch] : peak;
        for (i = 0; i < h; ++i) {{
            for (j = 0; j < w; ++j) {{
                const int32_t d = peak - xc[((int32_t)i * w + j) * ch];
                int32_t u, k, fr, e;
                if (d > cut[c]) continue;
                u = d * gain[c];
                k = (u >> 18) & 255;
                fr = (u >> 10) & 255;
                e = (t[k] + (((t[k + 1] - t[k]) * fr + 128) >> 8)) >> (u >> 26);
                se += e;
                sx += (int64_t)e * gx[j];
                sy += (int64_t)e * gy[i];
            }}
        }}
        y[c] = {n}_sat({n}_shr({n}_rdiv(sx, se), s), @lowest@);
        y[ch + c] = {n}_sat({n}_shr({n}_rdiv(sy, se), s), @lowest@);
    }}
}}
"""


def sat_names(width: Width) -> tuple[str, str]:
    """The saturating functions of an accumulator and of an int16 output (``sat`` both, for ``q15``)."""
    return ("sat", "sat") if width.bits == 16 else ("sat_acc", "sat16")


def kernel_table(width: Width) -> dict[str, str]:
    """Every kernel of ``width``'s variant, in dependency order (a kernel is emitted when later code calls it)."""
    t, acc, lowest = width.ctype, width.acc_ctype, str(-width.qmax - 1)
    sat_acc, sat16 = sat_names(width)
    table = {"sat": fill(_SAT, t=t, fn="sat", arg="int64_t", qmax=str(width.qmax))}
    if width.bits != 16:
        table["sat_acc"] = fill(_SAT, t=t, fn="sat_acc", arg=acc, qmax=str(width.qmax))
        table["sat16"] = fill(_SAT, t="int16_t", fn="sat16", arg="int64_t", qmax="32767")
    shift_lo = "const int8_t *shift, int32_t lo, "
    table |= {
        "shr": SHR, "rdiv": RDIV, "isqrt": ISQRT,
        "conv": conv_kernel("conv", f"{t} in.", (t, acc, t, t), shift_lo, (acc, "bias[o]"),
                            "acc += (int32_t)*wr++ * *xr++;", f"{{n}}_{sat_acc}(acc >> shift[o], lo)"),
        "conv_img": conv_kernel("conv_img", "The first conv: the uint8 image, read exactly as 2u - 255.",
                                (t, acc, "unsigned char", t), shift_lo, (acc, "bias[o]"),
                                "acc += (int32_t)*wr++ * (2 * (int32_t)*xr++ - 255);",
                                f"{{n}}_{sat_acc}(acc >> shift[o], lo)"),
        "dense": fill(_DENSE, fn="dense", t=t, acc=acc, yt=t, sat=sat_acc),
    }
    if width.bits != 16:
        table["dense_out"] = fill(_DENSE, fn="dense_out", t=t, acc=acc, yt="int16_t", sat=sat16)
        table["lut8"] = LUT8
    table |= {
        "lut": LUT, "relu": fill(_RELU, t=t),
        "pool": pool_kernel(" (averages rounded to nearest)", t, "", "int32_t", lowest, "v",
                            f"({t})(kind == 0 ? acc : (acc >= 0 ? (acc + d / 2) / d : -((-acc + d / 2) / d)))"),
        "pixels": fill(_PIXELS, t=t), "rescale": fill(_RESCALE, t=t, lowest=lowest), "state": fill(_STATE, t=t),
        "layernorm": fill(_LAYERNORM, t=t, lowest=lowest), "keypoints": fill(_KEYPOINTS, t=t, lowest=lowest),
    }
    return table


def kernels(name: str, body: str, width: Width) -> str:
    """The kernels of ``width``'s variant that ``body`` calls, and those they call."""
    return used_kernels(kernel_table(width), name, body)
