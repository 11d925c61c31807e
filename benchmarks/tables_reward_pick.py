"""The tables of RESULTS_reward_pick.md, rebuilt from ``reward_pick_bench.py``'s JSON files (that script imports torch
and MuJoCo at module level; ``report.py`` imports this module instead, the standard library only).

A run file holds ``results[variant]``: its evaluation curve (``[env steps, success]`` pairs), ``reached_at`` (the
first evaluation at 80 %, None when not reached), how it stopped, and the reward models it used.

A render module, not a benchmark: it reads result files (``benchmarks/results/**/*.json``) and writes none.
"""

from __future__ import annotations

import statistics
from typing import Any

from result_file import markdown_table, pct

Record = dict[str, Any]
LABELS = {"sparse": "(a) sparse reward", "classifier": "(b) image classifier", "prm": "(c) PRM shaping",
          "prm_w3": "(c) PRM shaping, weight 3"}


def _classifier(c: dict[str, Any] | None) -> str:
    if c is None:
        return "–"
    if not c["reached"]:
        return "not reachable"
    return (f"threshold {c['threshold']:.3f}: precision {c['precision']:.3f}, recall {c['recall']:.3f} "
            f"({c['held_out_frames']:,} held-out frames, {c['held_out_success']} successes)")


def _model(rec: Record, kind: str) -> dict[str, Any]:
    """The reward model of kind ``classifier`` or ``prm`` a run file's variants used."""
    res = rec["results"]
    if kind in res:  # a --models-only file
        return dict(res[kind])
    runs = res["results"]
    if kind in runs and kind in runs[kind]["models"]:  # the variant that used it (a rerun may recalibrate it)
        return dict(runs[kind]["models"][kind])
    return next(dict(r["models"][kind]) for r in runs.values() if kind in r["models"])


def models_table(records: list[Record]) -> str:
    """The reward models on front + side (the earlier runs' file, first) and front + side + wrist (the models file,
    then the run file whose classifier was calibrated at 0.90)."""
    side, wrist, wrist90 = records
    fs_clf, fs_prm = _model(side, "classifier"), _model(side, "prm")
    w_clf, w_prm, w90 = _model(wrist, "classifier"), _model(wrist, "prm"), _model(wrist90, "classifier")
    by_target: dict[float, list[dict[str, Any] | None]] = {}
    for i, c in enumerate((fs_clf, w_clf, w90)):
        by_target.setdefault(c["target_precision"], [None, None])[min(i, 1)] = c
    rows = [[f"classifier at target precision {t:.2f}", _classifier(cs[0]), _classifier(cs[1])]
            for t, cs in sorted(by_target.items())]
    rows.append([f"PRM median Spearman ρ ({w_prm['held_out_demos']} held-out demos)",
                 f"{fs_prm['spearman_median']:.2f}", f"{w_prm['spearman_median']:.2f}"])

    def peaks(prm: dict[str, Any]) -> str:
        p = prm.get("progress_by_behaviour")
        return "–" if p is None else " / ".join(f"{p[k]['peak_mean']:.2f}" for k in ("demonstrator", "never_closes",
                                                                                      "random"))
    rows.append(["PRM peak progress: demonstrator / hovering without closing / random", peaks(fs_prm), peaks(w_prm)])
    return markdown_table(["model", "front + side (the earlier runs)", "front + side + wrist"], rows)


def _seed_of(rec: Record) -> int:
    name = str(rec["benchmark"])
    return int(name.split("_s")[1].split("_")[0])


def sac_table(records: list[Record]) -> str:
    """Env steps to 80 % per variant (rows) and seed (one file per seed), the mean and its ratio to sparse's."""
    seeds = [_seed_of(rec) for rec in records]
    variants = list(dict.fromkeys(v for rec in records for v in rec["results"]["results"]))
    order = [v for v in ("sparse", "classifier", "prm_w3", "prm") if v in variants]
    steps = {v: [rec["results"]["results"].get(v) for rec in records] for v in order}
    sparse = [r["reached_at"] for r in steps["sparse"]]
    rows = []
    for v in order:
        runs = steps[v]
        cells = []
        for r in runs:
            if r is None:
                cells.append("–")
            elif r["reached_at"] is not None:
                cells.append(f"{r['reached_at']:,}")
            else:
                cells.append(f"not reached: {pct(r['curve'][-1][1])} at {r['env_steps']:,} ({r['stop']})")
        reached = [None if r is None else r["reached_at"] for r in runs]
        if all(x is not None for x in reached):
            mean = statistics.mean(reached)
            ratio = mean / statistics.mean(sparse)
            per = ", ".join(f"{x / s:.2f}" for x, s in zip(reached, sparse, strict=True))
            rows.append([LABELS[v], *cells, f"{mean:,.0f}", f"{ratio:.2f}" + ("" if v == "sparse" else
                                                                                f" (per seed {per})")])
        else:
            rows.append([LABELS[v] + (", weight 10" if v == "prm" else ""), *cells, "–", "–"])
    return markdown_table(["variant (+ 20 demos in the replay)", *(f"seed {s}" for s in seeds), "mean",
                           "ratio vs sparse (mean)"], rows, "l" + "r" * (len(seeds) + 2))


def runs_table(records: list[Record]) -> str:
    """One command's variants: env steps to 80 %, the ratio to sparse's (a bound where one did not reach it), the
    best evaluation and the last."""
    res = records[0]["results"]["results"]
    sparse = res.get("sparse")
    rows = []
    for v in [v for v in ("sparse", "classifier", "prm") if v in res]:
        r = res[v]
        best = max(r["curve"], key=lambda p: p[1])
        if sparse is None or sparse["reached_at"] is None:
            ratio = "–"
        elif r["reached_at"] is not None:
            ratio = f"{r['reached_at'] / sparse['reached_at']:.2f}"
        else:
            ratio = f"> {r['env_steps'] / sparse['reached_at']:.2f}"
        rows.append([LABELS[v], f"{r['reached_at']:,}" if r["reached_at"] is not None else "not reached", ratio,
                     f"{pct(best[1])} (at {best[0]:,})" if best[1] else "0 %",
                     f"{pct(r['curve'][-1][1])} at {r['curve'][-1][0]:,} ({r['stop']})"])
    return markdown_table(["variant", "80 % at env steps", "ratio vs sparse", "best eval", "last eval"], rows,
                          "lrrrr")
