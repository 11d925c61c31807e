"""The tables of RESULTS_offline_online.md, rebuilt from ``offline_online.py``'s, ``calql_calibration.py``'s and
``calql_update_cost.py``'s result files (those scripts import torch at module level; ``report.py`` imports this
module instead, the standard library only). The summary table of every seed is ``offline_online_summary.py``'s.

An ``offline_online.py`` file holds ``results[seed][method]``: the online env steps to the threshold
(``steps_to_threshold``, None when not reached), the success at the switch and the lowest in the first
``dip_steps``, the wall times and every evaluation.

A render module, not a benchmark: it reads result files (``benchmarks/results/**/*.json``) and writes none.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from result_file import markdown_table, pct

Record = dict[str, Any]


def _n(x: float) -> str:
    return f"{math.floor(x + 0.5):,}"


def _neg(x: float, digits: int = 1) -> str:
    """A signed figure with a true minus sign (the pages' style), ``+`` for a positive one."""
    text = f"{x:+.{digits}f}"
    return text.replace("-", "−") if x < 0 else text


def _runs(records: list[Record]) -> dict[tuple[int, str], dict[str, Any]]:
    """``(seed, method) -> run`` over the files, later files winning."""
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for rec in records:
        for seed, runs in rec["results"]["results"].items():
            for method, run in runs.items():
                out[(int(seed), method)] = dict(run, budget=rec["results"]["args"].get("budget"))
    return out


def _steps(run: dict[str, Any]) -> str:
    """Env steps to the threshold, or how far the run got without it."""
    if run["steps_to_threshold"] is not None:
        return _n(run["steps_to_threshold"])
    best = max(e["success_rate"] for e in run["evals"])
    return f"not reached in {_n(run['env_steps'])} (best {pct(best)})"


_RECIPE = {"demos_bc2000_only": "nothing (the warm-up alone)",
           "demos_bc2000_then_q_entropy_backup": "2,000 Cal-QL updates, SAC's defaults",
           "demos_bc2000_then_q_alpha1": "the same, `backup_entropy=false`",
           "demos_recipe": "the same and `init_temperature=0.01`",
           "mix_bc2000_only": "nothing (the warm-up alone), `backup_entropy=false init_temperature=0.01`",
           "mix_recipe": "4,000 Cal-QL updates, `backup_entropy=false init_temperature=0.01`"}


def recipe_table(records: list[Record]) -> str:
    """Cal-QL's offline phase with the clone warm-up, on the demos alone and on the mixture: the calibration on the
    terminated rows at the end, and the policy alone."""
    rows = []
    for rec in records:
        r = rec["results"]
        run = next(iter(r["runs"].values()))
        end = run["curve"][-1]
        d = r["data"]
        noisy = f" + {d['noisy']} noisy episodes" if d["noisy"] else ""
        data = f"{d['demos']} demos{noisy} ({d['frames']:,} rows)"
        alone = pct(run["success"]) + ("" if run["success"] else f" (return {_neg(run['mean_return'], 0)})")
        rows.append([data, _RECIPE[Path(str(rec["benchmark"])).stem], _neg(end["terminated_q_data_minus_mc"]),
                     _neg(end["terminated_q_pi_minus_mc"]), alone])
    return markdown_table(["data", "Cal-QL α 1, 2,000 warm-up updates, then",
                           "Q(s, a_data) − G at the end (terminated rows)", "Q(s, π(s)) − G", "policy alone"], rows,
                          "llrrr")


def online_switch_table(records: list[Record]) -> str:
    """The policy alone after the switch to online, per online phase (files: the plain switch, then the one that
    keeps Cal-QL's term)."""
    labels = ["plain SAC, the demos kept (the default)",
              "Cal-QL's term kept online (`offline.conservative_online=true`)"]
    curves = [next(iter(rec["results"]["results"]["0"].values()))["evals"] for rec in records]
    steps = sorted({e["env_steps"] for c in curves for e in c if e["env_steps"] > 0})
    rows = []
    for label, curve in zip(labels, curves, strict=True):
        at = {e["env_steps"]: e["success_rate"] for e in curve}
        rows.append([label, pct(at[0.0]), *(pct(at[s]) if s in at else "–" for s in steps)])
    return markdown_table(["online phase", "at the switch", *(_n(s) for s in steps[:-1]), f"{_n(steps[-1])} env steps"],
                          rows, "l" + "r" * (len(steps) + 1))


def iql_table(records: list[Record]) -> str:
    """IQL, WSRL and JSRL from IQL's offline phase (the first file), with RLPD and SAC from scratch for reference
    (the other files, on the same data)."""
    iql = _runs(records[:1])
    ref = _runs(records[1:])
    rows = []
    for (seed, method), run in sorted(iql.items(), key=lambda kv: (["iql", "wsrl_iql", "jsrl_iql"].index(kv[0][1]),
                                                                   kv[0][0])):
        name = {"iql": "IQL → IQL online, data kept", "wsrl_iql": "WSRL from IQL (no data online, 5,000 warm-up steps)",
                "jsrl_iql": "JSRL guided by IQL's offline policy"}[method]
        steps = _steps(run)
        if run["steps_to_threshold"] is None:
            online = [e["success_rate"] for e in run["evals"][1:]]
            steps = (f"not reached: {pct(min(online))}–{pct(max(online))} to {_n(run['env_steps'])}, "
                     f"{pct(online[-1])} at the end")
        rows.append([f"{name} (seed {seed})", pct(run["start_success"]), steps, pct(run["dip_min_success"])])
    rlpd = [ref[k] for k in sorted(ref) if k[1] == "rlpd"]
    rows.append([f"for reference: RLPD, seeds {min(k[0] for k in ref if k[1] == 'rlpd')}–"
                 f"{max(k[0] for k in ref if k[1] == 'rlpd')}", "–", " / ".join(_steps(r) for r in rlpd), "–"])
    rows += [[f"for reference: SAC from scratch, seed {seed}", "–", _steps(run), "–"]
             for (seed, method), run in sorted(ref.items()) if method == "scratch"]
    return markdown_table(["method", "offline policy alone", "online env steps to 80 %",
                           "lowest success in the first 20k online steps"], rows, "lrrr")


def first_seed_table(records: list[Record]) -> str:
    """Seed 0 on the first data: every method against SAC from scratch in env steps and online wall-clock."""
    runs = _runs(records)
    scratch = runs[(0, "scratch")]
    names = {"scratch": "SAC from scratch", "rlpd": "RLPD (demo buffer, 50 %)",
             "calql": "Cal-QL → online (data kept)", "wsrl": "WSRL (5,000 warm-up steps, then no data)"}
    rows = []
    for method, name in names.items():
        run = runs[(0, method)]
        reached = run["steps_to_threshold"] is not None
        offline = method in ("calql", "wsrl")
        rows.append([name, _steps(run),
                     f"{run['steps_to_threshold'] / scratch['steps_to_threshold']:.2f}" if reached else "–",
                     f"{_n(run['wall_to_threshold'])} s" if reached else f"– ({_n(run['wall_s'])} s in all)",
                     f"{run['wall_to_threshold'] / scratch['wall_to_threshold']:.2f}" if reached else "–",
                     f"{_n(run['offline_s'])} s" if offline else "–",
                     f"{run['start_success']:.2f}" if offline else "–", f"{run['dip_min_success']:.2f}"])
    return markdown_table(["method", "env steps to 80 %", "× scratch", "online wall-clock", "× scratch",
                           "offline phase", "success after the offline phase", "lowest in the first 20k steps"],
                          rows, "lrrrrrrr")


def jsrl_table(records: list[Record]) -> str:
    """JSRL with the scripted guide and RLPD, three seeds, against SAC from scratch's seed 0 (files: the JSRL merge,
    RLPD's seed 0, scratch's seed 0)."""
    runs = _runs(records)
    scratch = runs[(0, "scratch")]["steps_to_threshold"]
    rows = []
    for method, name in (("jsrl_scripted", "JSRL, scripted guide, no data: env steps to 80 %"),
                         ("rlpd", "RLPD (the data in the demo buffer, 50 %)")):
        seeds = [runs[(s, method)] for s in (0, 1, 2)]
        ratios = [r["steps_to_threshold"] / scratch for r in seeds]
        rows.append([name, *(f"{_steps(r)} ({_n(r['wall_to_threshold'])} s)" for r in seeds),
                     f"{min(ratios):.2f}–{max(ratios):.2f}"])
    return markdown_table(["method", "seed 0", "seed 1", "seed 2", f"× scratch's {_n(scratch)} (seed 0)"], rows,
                          "lrrrr")


_CALIBRATION = {"1:calql": "Cal-QL, α 1 (the benchmark's)", "0.1:calql": "Cal-QL, α 0.1",
                "1:cql": "CQL, α 1 (no clamp)", "0:sac": "SAC on the data (α 0)"}


def calibration_table(records: list[Record]) -> str:
    """The offline phase alone per variant: held-out TD error raw and relative to |Q|, mean Q and the calibration on
    the terminated rows at the end, the policy alone and the wall time."""
    runs = records[0]["results"]["runs"]
    rows = []
    for key, name in _CALIBRATION.items():
        r = runs[key]
        first, end = r["curve"][0], r["curve"][-1]
        rows.append([name, f"{first['heldout_td']:.2f} → {end['heldout_td']:.1f}",
                     f"{first['relative_heldout_td']:.3f} → {end['relative_heldout_td']:.3f}", _neg(end["q_mean"]),
                     _neg(end["terminated_q_data_minus_mc"]), _neg(end["terminated_q_pi_minus_mc"]), pct(r["success"]),
                     f"{_n(r['wall_s'])} s"])
    updates = [int(runs["1:calql"]["curve"][0]["update"]), int(runs["1:calql"]["curve"][-1]["update"])]
    span = f"{updates[0]:,} → {updates[1]:,}"
    return markdown_table(["variant", f"held-out TD at {span}", f"RMS TD / \\|Q\\| at {span}",
                           f"mean Q at {updates[1]:,}", "Q(s, a_data) − G", "Q(s, π(s)) − G", "policy alone after",
                           "wall"], rows, "lrrrrrrr")


_COST = {"sac": "SAC (the default online)", "cql": "CQL (`cql_alpha=1`, 10 samples)", "calql": "Cal-QL (10 samples)",
         "calql-4-samples": "Cal-QL, `algo.cql_samples=4`"}


def update_cost_table(records: list[Record]) -> str:
    """One update's time and matmul FLOPs per variant, against SAC's."""
    rows = [[_COST[k], f"{r['ms']:.1f}", f"{r['time_x_sac']:.2f}", f"{r['gflop']:.3f}", f"{r['flops_x_sac']:.2f}",
             f"{r['gflop'] / r['ms'] * 1000:.1f}"] for k, r in records[0]["results"]["rows"].items()]
    return markdown_table(["update", "ms", "× SAC", "matmul GFLOP", "× SAC", "GFLOP/s"], rows, "lrrrrr")
