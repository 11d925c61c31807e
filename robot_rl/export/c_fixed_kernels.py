"""The C kernels of the ``q15`` variant (:mod:`robot_rl.export.c_fixed`): integer arithmetic only.

Feature maps are HWC (channels innermost, as the camera delivers the image), so one kernel row of a conv is one
contiguous run of ``kw·c_in`` values: the inner loop is two loads and a multiply-add (CMSIS-NN's layout).

Each kernel is a ``static`` function template (``{n}`` = the policy name); :func:`kernels` emits the ones a
forward pass calls, and those they call. Types come from ``<stdint.h>``; nothing here uses float, ``<math.h>`` or
the heap. On ARMv6-M (Cortex-M0/M0+, no divide instruction, no 64-bit multiply) GCC turns the 64-bit shifts,
the 32×32→64 products of the keypoints and the divisions into libgcc's integer helpers (``__aeabi_lasr``,
``__aeabi_lmul``, ``__aeabi_idiv``, ``__aeabi_ldivmod``); the multiply-accumulate of conv and dense layers is a
32-bit product added to the 64-bit accumulator.
"""

from __future__ import annotations

from robot_rl.export.c_codegen import used_kernels

SAT = """/* int16 saturation with a lower limit (-32768, or 0 for a fused ReLU). */
static int16_t {n}_sat(int64_t v, int32_t lo)
{{
    return (int16_t)(v < lo ? lo : (v > 32767 ? 32767 : v));
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

_CONV = """/* {what}; HWC int16 out; w [c_out][kh][kw][c_in] int16 (Q wfrac[o]); int64 accumulator starting at the bias
   (which includes the rounding constant 2^(shift - 1)), then one arithmetic shift; zero padding (the window is
   clipped to the image once per output pixel). */
static void {n}_{fn}(const int16_t *w, const int64_t *bias, const int8_t *shift, const {xtype} *x, int16_t *y,
                     int32_t lo, int c_in, int h_in, int w_in, int c_out, int h_out, int w_out, int kh, int kw,
                     int sh, int sw, int ph, int pw)
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
                const int16_t *wrow = w + (((int32_t)o * kh + ky0) * kw + kx0) * c_in;
                const {xtype} *xrow = x + ((int32_t)(iy0 + ky0) * w_in + ix0 + kx0) * c_in;
                int64_t acc = bias[o];
                for (ky = ky1 - ky0; ky > 0; --ky) {{
                    const int16_t *wr = wrow, *end = wrow + run;
                    const {xtype} *xr = xrow;
                    while (wr != end) {{
                        acc += (int32_t)*wr++ * {read};
                    }}
                    wrow += kw * c_in;
                    xrow += (int32_t)w_in * c_in;
                }}
                *y++ = {n}_sat(acc >> shift[o], lo);
            }}
        }}
    }}
}}
"""
CONV = _CONV.replace("{what}", "HWC int16 in").replace("{fn}", "conv").replace("{xtype}", "int16_t").replace(
    "{read}", "*xr++")
CONV_IMG = _CONV.replace("{what}", "The first conv: the uint8 HWC image, read exactly as 2u - 255").replace(
    "{fn}", "conv_img").replace("{xtype}", "unsigned char").replace("{read}", "(2 * (int32_t)*xr++ - 255)")

DENSE = """/* bias includes the rounding constant 2^(shift - 1). */
static void {n}_dense(const int16_t *w, const int64_t *bias, const int8_t *shift, const int16_t *x, int16_t *y,
                      int32_t lo, int n_in, int n_out)
{{
    int o, i;
    for (o = 0; o < n_out; ++o) {{
        const int16_t *row = w + (int32_t)o * n_in;
        int64_t acc = bias[o];
        for (i = 0; i < n_in; ++i) acc += (int32_t)row[i] * x[i];
        y[o] = {n}_sat(acc >> shift[o], lo);
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

RELU = """static void {n}_relu(int16_t *x, int len)
{{
    int i;
    for (i = 0; i < len; ++i) x[i] = x[i] < 0 ? 0 : x[i];
}}
"""

POOL = """/* HWC; kind 0: max; 1: average over kh*kw; 2: average over the in-image pixels (averages rounded to
   nearest). */
static void {n}_pool(const int16_t *x, int16_t *y, int ch, int h_in, int w_in, int h_out, int w_out, int kh, int kw,
                     int sh, int sw, int ph, int pw, int kind)
{{
    int c, oy, ox, ky, kx;
    for (oy = 0; oy < h_out; ++oy) {{
        for (ox = 0; ox < w_out; ++ox) {{
            for (c = 0; c < ch; ++c) {{
                const int16_t *xc = x + c;
                int32_t acc = kind == 0 ? -32768 : 0, count = 0, d;
                for (ky = 0; ky < kh; ++ky) {{
                    const int iy = oy * sh - ph + ky;
                    if (iy < 0 || iy >= h_in) continue;
                    for (kx = 0; kx < kw; ++kx) {{
                        const int ix = ox * sw - pw + kx;
                        if (ix < 0 || ix >= w_in) continue;
                        const int16_t v = xc[((int32_t)iy * w_in + ix) * ch];
                        acc = kind == 0 ? (v > acc ? v : acc) : acc + v;
                        ++count;
                    }}
                }}
                d = kind == 1 ? kh * kw : count;
                *y++ = (int16_t)(kind == 0 ? acc
                    : (acc >= 0 ? (acc + d / 2) / d : -((-acc + d / 2) / d)));
            }}
        }}
    }}
}}
"""

PIXELS = """/* uint8 HWC -> int16 HWC through a 256-entry table per channel (one table when per_channel is 0). */
static void {n}_pixels(const unsigned char *img, const int16_t *table, int per_channel, int16_t *y, int32_t pixels,
                       int ch)
{{
    int32_t p;
    int c;
    for (p = 0; p < pixels; ++p) {{
        for (c = 0; c < ch; ++c) y[p * ch + c] = table[(per_channel ? 256 * c : 0) + img[p * ch + c]];
    }}
}}
"""

RESCALE = """/* A camera's features into the features' format, y = sat(round(x / 2^s)), and from HWC into torch's
   CHW order (a vector is ch = 1). */
static void {n}_rescale(const int16_t *x, int16_t *y, int ch, int32_t pixels, int s)
{{
    int32_t p;
    int c;
    for (p = 0; p < pixels; ++p) {{
        for (c = 0; c < ch; ++c) y[c * pixels + p] = {n}_sat({n}_shr(x[p * ch + c], s), -32768);
    }}
}}
"""

STATE = """/* The observation normaliser: z = clamp(round((s - mu) mult / 2^shift), -clip, clip), in the features'
   format. */
static void {n}_state(const int16_t *s, const int32_t *mu, const int32_t *mult, const int8_t *shift, int16_t *z,
                      int len, int32_t clip)
{{
    int i;
    for (i = 0; i < len; ++i) {{
        const int64_t v = {n}_shr((int64_t)((int32_t)s[i] - mu[i]) * mult[i], shift[i]);
        z[i] = (int16_t)(v < -clip ? -clip : (v > clip ? clip : v));
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

LAYERNORM = """/* LayerNorm in integers: D_i = len x_i - sum x, R = isqrt(len sum x^2 - (sum x)^2 + eps)
   (= len sd 2^f_in), y_i = round(round(D_i g_i / R) / 2^k) + b_i. */
static void {n}_layernorm(const int32_t *g, const int32_t *b, int16_t *x, int len, int64_t eps, int k)
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
        x[i] = {n}_sat({n}_shr({n}_rdiv(d * g[i], r), k) + b[i], -32768);
    }}
}}
"""

KEYPOINTS = """/* Spatial softmax (HWC map in) per channel c: u = (max - x) gain[c] (Q26, log2 units), e = 2^-u in Q30
   (table t of 2^-r on [0, 1] interpolated on 8 bits, the integer part of u a shift; 0 beyond cut[c]);
   keypoint = sum(e grid) / sum(e) in Q15 (grids in Q15), then rounded to the output format (>> s). */
static void {n}_keypoints(const int32_t *gain, const int32_t *cut, const int32_t *t, const int32_t *gx,
                          const int32_t *gy, const int16_t *x, int16_t *y, int ch, int h, int w, int s)
{{
    int c, i, j;
    for (c = 0; c < ch; ++c) {{
        const int16_t *xc = x + c;
        int32_t peak = -32768;
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
        y[c] = {n}_sat({n}_shr({n}_rdiv(sx, se), s), -32768);
        y[ch + c] = {n}_sat({n}_shr({n}_rdiv(sy, se), s), -32768);
    }}
}}
"""

#: In dependency order: a kernel is emitted when the code after it calls it.
KERNELS = {"sat": SAT, "shr": SHR, "rdiv": RDIV, "isqrt": ISQRT, "conv": CONV, "conv_img": CONV_IMG, "dense": DENSE,
           "lut": LUT, "relu": RELU, "pool": POOL, "pixels": PIXELS, "rescale": RESCALE, "state": STATE,
           "layernorm": LAYERNORM, "keypoints": KEYPOINTS}


def kernels(name: str, body: str) -> str:
    """The q15 kernels ``body`` calls, and those they call."""
    return used_kernels(KERNELS, name, body)
