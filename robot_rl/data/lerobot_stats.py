"""Feature statistics in LeRobotDataset v3's layout, per episode and for the whole dataset.

Per episode they are the ``stats/<key>/<stat>`` columns of ``meta/episodes``; for the dataset,
``meta/stats.json``.

Each feature gets ``min``, ``max``, ``mean``, ``std``, ``count`` and the quantiles ``q01 q10 q50 q90 q99``:

- numeric features ``[T, *shape]``: reduced over the frames (and every axis but the last), shape
  ``[shape[-1]]``; ``min``/``max`` keep the feature's dtype (bool, int64, float), the rest are float64;
- images ``[T, H, W, C]`` uint8: per channel, scaled to ``[0, 1]``, shape ``[C, 1, 1]``, from at most
  ~100 evenly spaced frames of an episode (more for long ones), frames wider than 300 px strided down
  to ~150 px, as LeRobot samples them. ``count`` is the number of frames the stats come from.

Unlike LeRobot 0.4.4 (histogram quantiles; an image ``std`` of 0 from squaring uint8), quantiles are
exact and everything is computed in float64. Aggregation follows LeRobot's ``aggregate_stats``:
count-weighted means and quantiles, pooled variance, min of mins, max of maxes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)
Stats = dict[str, np.ndarray]


def _sample_indices(n: int) -> np.ndarray:
    """LeRobot's ``sample_indices``: all of up to 100 frames, then ``n ** 0.75`` of them (at most 10,000)."""
    num = n if n < 100 else max(100, min(int(n**0.75), 10_000))
    return np.round(np.linspace(0, n - 1, num)).astype(int)


def _reduce(flat: np.ndarray) -> Stats:
    """Stats over the rows of ``flat`` [N, D] (float64), each of shape [D]."""
    stats: Stats = {"min": flat.min(0), "max": flat.max(0), "mean": flat.mean(0), "std": flat.std(0)}
    for key, q in zip(QUANTILE_KEYS, np.quantile(flat, QUANTILES, axis=0)):
        stats[key] = q
    return stats


def _histogram_stats(flat: np.ndarray) -> Stats:
    """:func:`_reduce` of uint8 ``flat`` [N, C] from 256-bin histograms: the same numbers, no sort."""
    values = np.arange(256, dtype=np.float64)
    out: dict[str, list[float]] = {k: [] for k in ("min", "max", "mean", "std", *QUANTILE_KEYS)}
    n = flat.shape[0]
    for c in range(flat.shape[1]):
        counts = np.bincount(flat[:, c], minlength=256)
        present = np.flatnonzero(counts)
        mean = counts @ values / n
        out["min"].append(float(present[0]))
        out["max"].append(float(present[-1]))
        out["mean"].append(mean)
        out["std"].append(float(np.sqrt(counts @ (values - mean) ** 2 / n)))
        # np.quantile's default (linear): order statistics floor(h) and ceil(h) of h = (n - 1) q, interpolated
        ends = np.cumsum(counts)
        for key, q in zip(QUANTILE_KEYS, QUANTILES):
            h = (n - 1) * q
            lo, hi = np.searchsorted(ends, [np.floor(h), np.ceil(h)], side="right")
            out[key].append(float(lo + (h - np.floor(h)) * (hi - lo)))
    return {k: np.asarray(v) for k, v in out.items()}


def image_stats(frames: np.ndarray) -> Stats:
    """Per-channel stats of ``frames`` [T, H, W, C] uint8, in [0, 1], each of shape [C, 1, 1]."""
    sampled = frames[_sample_indices(len(frames))]
    h, w = sampled.shape[1:3]
    if max(h, w) >= 300:
        step = int(w / 150) if w > h else int(h / 150)
        sampled = sampled[:, ::step, ::step]
    flat = sampled.reshape(-1, sampled.shape[-1])
    raw = _histogram_stats(flat) if flat.dtype == np.uint8 else _reduce(flat.astype(np.float64))
    stats = {k: (v / 255.0).reshape(-1, 1, 1) for k, v in raw.items()}
    stats["count"] = np.array([len(sampled)], dtype=np.int64)
    return stats


def numeric_stats(values: np.ndarray) -> Stats:
    """Stats of ``values`` [T] or [T, *shape], reduced over all axes but the last."""
    flat = values.reshape(len(values), -1) if values.ndim <= 2 else values.reshape(-1, values.shape[-1])
    stats = _reduce(flat.astype(np.float64))
    stats["min"] = flat.min(0)
    stats["max"] = flat.max(0)
    stats["count"] = np.array([len(values)], dtype=np.int64)
    return stats


def episode_stats(columns: dict[str, np.ndarray], features: dict[str, dict[str, Any]]) -> dict[str, Stats]:
    """Stats of every feature of one episode, in ``features`` order (strings are skipped, as LeRobot does)."""
    out: dict[str, Stats] = {}
    for key, ft in features.items():
        if key not in columns or ft["dtype"] == "string":
            continue
        out[key] = image_stats(columns[key]) if ft["dtype"] in ("image", "video") else numeric_stats(columns[key])
    return out


def aggregate(episodes: list[dict[str, Stats]]) -> dict[str, Stats]:
    """Dataset stats from per-episode stats (LeRobot's ``aggregate_stats`` formulas)."""
    keys = list(dict.fromkeys(k for ep in episodes for k in ep))
    out: dict[str, Stats] = {}
    for key in keys:
        parts = [ep[key] for ep in episodes if key in ep]
        counts = np.stack([p["count"] for p in parts]).astype(np.float64)  # [E, 1]
        total = counts.sum(0)
        means = np.stack([p["mean"] for p in parts])
        w = counts.reshape(counts.shape + (1,) * (means.ndim - counts.ndim))
        mean = (means * w).sum(0) / total
        var = ((np.stack([p["std"] for p in parts]) ** 2 + (means - mean) ** 2) * w).sum(0) / total
        agg: Stats = {"min": np.min(np.stack([p["min"] for p in parts]), 0),
                      "max": np.max(np.stack([p["max"] for p in parts]), 0),
                      "mean": mean, "std": np.sqrt(var), "count": total.astype(np.int64)}
        for q in QUANTILE_KEYS:
            agg[q] = (np.stack([p[q] for p in parts]) * w).sum(0) / total
        out[key] = agg
    return out


def to_json(stats: dict[str, Stats]) -> dict[str, dict[str, Any]]:
    """``meta/stats.json`` content: nested lists."""
    return {k: {s: v.tolist() for s, v in st.items()} for k, st in stats.items()}


def flat_columns(stats: dict[str, Stats]) -> dict[str, Any]:
    """``stats/<key>/<stat>`` → list value, one ``meta/episodes`` row's stats columns."""
    return {f"stats/{k}/{s}": v.tolist() for k, st in stats.items() for s, v in st.items()}
