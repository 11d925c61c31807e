"""Power-of-two Q formats and activation tables of the fixed-point variants (``q15``, ``q7``).

A value is stored as a signed integer ``q`` of the variant's width, ``real = q·2^−f``. :class:`Width` says what
differs between the variants: ``q15`` stores weights and maps as int16 and accumulates in int64; ``q7`` stores them
as int8 and accumulates in int32 (:mod:`robot_rl.export.fixed` keeps every int32 sum in range). Both take the
state and give the action as int16, so the last layer of a ``q7`` plan writes int16 and its output map is ``q15``'s.

Activation tables cover the whole input range of their width: for int16, 513 entries with linear interpolation on
7 bits (:data:`LUT_SHIFT`); for int8, one entry per input (256, no interpolation). Their error, exact output
rounding included, is computed by running the C arithmetic on every input (:func:`lut_error`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robot_rl.export.graph import Activation, apply_activation

Q_MAX = 32767
MAX_FRAC = 24
"""Finest tensor format (``2^−24``); the coarsest is ``f = 0`` (integers up to the width's largest value)."""
MAX_WEIGHT_FRAC = 30
LUT_SHIFT = 7
"""int16 tables: entry ``k`` holds ``f((128·k − 32768)·2^−f_in)``, 513 entries, interpolated on 7 bits."""
EXP_U_FRAC = 26
"""Spatial softmax: ``u = (max − x)·gain·log2(e)`` in Q26; ``e = 2^−u`` is 0 beyond ``u = 30``."""
EXP_U_MAX = 30


@dataclass(frozen=True)
class Width:
    """The storage of a fixed-point variant's weights and maps."""

    variant: str
    bits: int
    """16 (``q15``) or 8 (``q7``)."""
    acc_bits: int
    """Accumulator of conv and dense layers: 64 (``q15``) or 32 (``q7``)."""
    lut_shift: int
    """Inputs per table entry, as a power of two (0: one entry per input, no interpolation)."""

    @property
    def qmax(self) -> int:
        """Largest stored value (32767 or 127); the smallest is ``−qmax − 1``."""
        return (1 << (self.bits - 1)) - 1

    @property
    def ctype(self) -> str:
        """C type of weights and maps."""
        return f"int{self.bits}_t"

    @property
    def acc_ctype(self) -> str:
        """C type of the accumulator (and of the bias, which starts it)."""
        return f"int{self.acc_bits}_t"


Q15 = Width("q15", 16, 64, LUT_SHIFT)
Q7 = Width("q7", 8, 32, 0)
WIDTHS = {w.variant: w for w in (Q15, Q7)}


def frac_bits(maxabs: float, lo: int = 0, hi: int = MAX_FRAC, qmax: int = Q_MAX) -> int:
    """Largest ``f`` in ``[lo, hi]`` with ``maxabs·2^f ≤ qmax`` (``15``, or ``7`` for int8, for a tensor always 0)."""
    if not maxabs > 0.0 or not math.isfinite(maxabs):
        return min(max(qmax.bit_length(), lo), hi)
    return int(min(max(math.floor(math.log2(qmax / maxabs)), lo), hi))


def quantize(x: np.ndarray, f: int | np.ndarray, qmax: int = Q_MAX) -> np.ndarray:
    """``clamp(floor(x·2^f + 0.5))`` to ``[−qmax − 1, qmax]``, as int64 (the C helpers round the same way)."""
    return np.clip(np.floor(np.asarray(x, np.float64) * np.exp2(f) + 0.5), -qmax - 1, qmax).astype(np.int64)


def lut_table(activation: Activation, f_in: int, f_out: int, width: Width = Q15) -> np.ndarray:
    """The entries (int64) of ``activation`` from Q``f_in`` to Q``f_out`` for ``width``'s inputs, saturated."""
    step = 1 << width.lut_shift
    k = np.arange((1 << (width.bits - width.lut_shift)) + (1 if width.lut_shift else 0), dtype=np.float64)
    x = (k * step - (width.qmax + 1)) * 2.0 ** -f_in
    return quantize(apply_activation(x, activation), f_out, width.qmax)


def lut_apply(table: np.ndarray, q: np.ndarray, width: Width = Q15) -> np.ndarray:
    """The C table lookup on inputs ``q``, bit for bit (arithmetic shifts, as GCC does)."""
    u = np.asarray(q, np.int64) + width.qmax + 1
    s = width.lut_shift
    if not s:
        return table[u]
    k, r = u >> s, u & ((1 << s) - 1)
    lo, hi = table[k], table[np.minimum(k + 1, len(table) - 1)]
    return lo + (((hi - lo) * r + (1 << (s - 1))) >> s)


def lut_error(activation: Activation, table: np.ndarray, f_in: int, f_out: int, width: Width = Q15) -> float:
    """``max |C table(q) − clamp(f(q·2^−f_in))|`` over every input of ``width``, in real units."""
    q = np.arange(-width.qmax - 1, width.qmax + 1, dtype=np.int64)
    lo, hi = (-width.qmax - 1) * 2.0 ** -f_out, width.qmax * 2.0 ** -f_out
    want = np.clip(apply_activation(q * 2.0 ** -f_in, activation), lo, hi)
    return float(np.abs(lut_apply(table, q, width) * 2.0 ** -f_out - want).max())


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
