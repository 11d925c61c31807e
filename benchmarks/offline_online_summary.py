"""Every seed of every offline-to-online scheme on ``mujoco/pick_cube``, from the result files of many runs.

``offline_online.py`` runs one set of methods and seeds per process; the seeds of one scheme end up in several
files, some from different data (the 50 demos alone, or with the 200 noisy episodes). This script reads them,
names each scheme by its method and its data (``calql · demos only``), and writes:

- a markdown table: per scheme and seed, online env steps to the threshold (the first evaluation at or above it;
  for a run that starts above it, also the first one after its lowest point: the recovery from the dip), the
  success at the switch and the lowest in the first ``dip_steps``; the median and its ratio to scratch's median,
  both of the steps to a success that holds (a run that starts above the threshold and dips below it counts its
  recovery; one that never reached it counts its budget, and the median is then marked ``≥``);
- ``offline_online_seeds.png``: steps to the threshold, every seed, and the dip;
- ``offline_online_seeds.json``: the table's numbers.

    python benchmarks/offline_online_summary.py A/offline_online.json B/offline_online.json:rlpd,jsrl_scripted \\
        --out-dir benchmarks/results/offline_online_seeds

``PATH:m1,m2`` takes only those methods from a file (e.g. the scratch run of a file whose other runs used data
recorded under the wrong settings); ``PATH:m1=LABEL`` also names the scheme (runs with other settings, ``--set``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def scheme_name(method: str, args: dict[str, Any]) -> str:
    """The method, and the data when it is not the benchmark's mixture (the demos alone)."""
    uses_data = method not in ("scratch", "jsrl_scripted")
    return f"{method} · demos only" if uses_data and args.get("noisy", 200) == 0 else method


def recovery(evals: list[dict[str, float]], threshold: float, dip_steps: float) -> float | None:
    """Env steps of the first evaluation at or above ``threshold`` after the lowest one in the first ``dip_steps``."""
    early = [e for e in evals if 0 < e["env_steps"] <= dip_steps]
    if not early:
        return None
    low = min(early, key=lambda e: e["success_rate"])
    later = [e for e in evals if e["env_steps"] > low["env_steps"] and e["success_rate"] >= threshold]
    return later[0]["env_steps"] if later else None


def collect(specs: list[str]) -> tuple[dict[str, dict[int, dict[str, Any]]], float, float]:
    """``{scheme: {seed: run}}`` from ``PATH[:methods]`` specs; later files win for the same scheme and seed."""
    schemes: dict[str, dict[int, dict[str, Any]]] = {}
    threshold = dip_steps = 0.0
    for spec in specs:
        path, _, picks = spec.partition(":")
        labels = dict(p.partition("=")[::2] for p in picks.split(",")) if picks else {}
        data = json.loads(Path(path).read_text())
        args = data["args"]
        threshold, dip_steps = float(args.get("threshold", 0.8)), float(args.get("dip_steps", 20000))
        for seed, runs in data["results"].items():
            for method, run in runs.items():
                if labels and method not in labels:
                    continue
                run = dict(run, budget=args.get("budget"), source=path,
                           recovered=recovery(run["evals"], threshold, dip_steps))
                name = labels.get(method) or scheme_name(method, args)
                schemes.setdefault(name, {})[int(seed)] = run
    return schemes, threshold, dip_steps


def _steps(run: dict[str, Any]) -> str:
    s = run["steps_to_threshold"]
    return f"{s:,.0f}" if s is not None else f"not reached in {run['env_steps']:,}"


def table(schemes: dict[str, dict[int, dict[str, Any]]], threshold: float, dip_steps: float) -> list[str]:
    """The markdown table (one row per scheme)."""
    seeds = sorted({s for runs in schemes.values() for s in runs})
    ref = _median(schemes.get("scratch", {}), threshold)
    head = (f"| scheme | {' | '.join(f'seed {s}' for s in seeds)} | median | × scratch | online wall s (median) | "
            f"offline phase s (median) | success at the switch | lowest in the first {dip_steps / 1e3:.0f}k |")
    lines = [head, "|---|" + "---:|" * (len(seeds) + 6)]
    for name, runs in schemes.items():
        cells = []
        for s in seeds:
            run = runs.get(s)
            if run is None:
                cells.append("–")
                continue
            cell = _steps(run)
            if run["start_success"] is not None and run["start_success"] >= threshold:
                back = run["recovered"]
                cell += f" (back ≥ {threshold:.0%} at {back:,.0f})" if back is not None else " (not back)"
            cells.append(cell)
        med = _median(runs, threshold)
        ratio = f"{'≥ ' if not med[1] else ''}{med[0] / ref[0]:.2f}" if med is not None and ref else "–"
        start = " / ".join(f"{runs[s]['start_success']:.2f}" if s in runs else "–" for s in seeds)
        low = " / ".join(f"{runs[s]['dip_min_success']:.2f}" if s in runs and runs[s]['dip_min_success'] is not None
                         else "–" for s in seeds)
        med_cell = f"{'≥ ' if not med[1] else ''}{med[0]:,.0f}" if med is not None else "–"
        walls = [w for w in (effective_wall(r, threshold) for r in runs.values()) if w is not None]
        wall = f"{statistics.median(walls):,.0f} ({len(walls)} reached)" if walls else "–"
        offline = statistics.median(r["offline_s"] for r in runs.values())
        lines.append(f"| {name} | {' | '.join(cells)} | {med_cell} | {ratio} | {wall} | {offline:,.0f} | "
                     f"{start} | {low} |")
    return lines


def effective_steps(run: dict[str, Any], threshold: float) -> tuple[float, bool]:
    """``(env steps, reached)`` to a success that holds: for a run that starts at or above the threshold and then
    dips below it, the recovery; a run that never got there counts as its env steps (a lower bound)."""
    if run["start_success"] is not None and run["start_success"] >= threshold:
        dipped = run["dip_min_success"] is not None and run["dip_min_success"] < threshold
        steps = run["recovered"] if dipped else 0.0
    else:
        steps = run["steps_to_threshold"]
    return (float(steps), True) if steps is not None else (float(run["env_steps"]), False)


def effective_wall(run: dict[str, Any], threshold: float) -> float | None:
    """Online wall-clock seconds at :func:`effective_steps` (None when not reached)."""
    steps, reached = effective_steps(run, threshold)
    if not reached:
        return None
    return next((e["wall_s"] for e in run["evals"] if e["env_steps"] == steps), None)


def _median(runs: dict[int, dict[str, Any]], threshold: float) -> tuple[float, bool] | None:
    """Median of :func:`effective_steps`, and whether it is exact (False: a lower bound, from a run not reached)."""
    vals = sorted(effective_steps(r, threshold) for r in runs.values())
    if not vals:
        return None
    med = statistics.median(v for v, _ in vals)
    return med, all(ok for v, ok in vals if v >= med)


#: docs/offline-to-online.md's names of the schemes, in its order, and whether each starts online from an offline
#: policy (whose success at the switch, and dip after it, the table gives).
DOCS_SCHEMES = {"scratch": ("SAC from scratch", False), "rlpd": ("RLPD", False),
                "jsrl_scripted": ("JSRL, the scripted controller as guide", False),
                "iql": ("IQL → online, data kept", True), "wsrl_iql": ("WSRL from IQL, no data online", True),
                "calql · clone warm-up": ("Cal-QL → online, clone warm-up only", True),
                "calql · authors' settings": ("Cal-QL → online, the authors' settings", True),
                "jsrl_iql": ("JSRL, IQL's offline policy as guide", True),
                "calql · demos only · authors' settings": ("Cal-QL, **demos only**, the authors' settings", True)}


def _pct_span(values: list[float]) -> str:
    lo, hi = f"{100 * min(values):.0f}", f"{100 * max(values):.0f}"
    return f"{lo} %" if lo == hi else f"{lo}–{hi} %"


def docs_table(records: list[dict[str, Any]]) -> str:
    """docs/offline-to-online.md's summary from ``offline_online_seeds.json`` (this script's output): per scheme, each
    seed's online env steps to a success that holds, their median and its ratio to scratch's, and the offline
    policy's success at the switch and its lowest in the first ``dip_steps`` online."""
    data = records[0]["results"]
    threshold, schemes = data["threshold"], data["schemes"]
    ref = _median(schemes["scratch"], threshold)
    assert ref is not None
    lines = [f"| scheme | seeds {' / '.join(sorted(next(iter(schemes.values()))))} | median | × scratch | "
             f"policy-alone success at the switch → lowest in the first {data['dip_steps'] / 1e3:.0f}k env steps |",
             "|---|---|---:|---:|---|"]
    for key, (label, offline) in DOCS_SCHEMES.items():
        runs = schemes[key]
        steps = {seed: effective_steps(r, threshold) for seed, r in sorted(runs.items())}
        missed = [seed for seed, (_, reached) in steps.items() if not reached]
        if len(missed) == len(steps):
            budget = max(r["env_steps"] for r in runs.values())
            seeds = "all three" if len(missed) == 3 else f"seeds {', '.join(missed)}"
            cell = f"not reached in {budget:,} ({seeds})"
        else:
            cell = " / ".join(f"{v:,.0f}" if ok else "not reached" for v, ok in steps.values())
        med = _median(runs, threshold)
        assert med is not None
        at_least = "" if med[1] else "≥ "
        starts = [r["start_success"] for r in runs.values()]
        lows = [r["dip_min_success"] for r in runs.values()]
        if not offline:
            dip = "–"
        elif max(starts) == 0 and max(lows) == 0:
            dip = "0 %"
        elif all(low >= start for low, start in zip(lows, starts)):
            dip = f"{_pct_span(starts)} → never below the start"
        else:
            dip = f"{_pct_span(starts)} → {_pct_span(lows)}"
        lines.append(f"| {label} | {cell} | {at_least}{med[0]:,.0f} | {at_least}{med[0] / ref[0]:.2f} | {dip} |")
    return "\n".join(lines)


def plot(schemes: dict[str, dict[int, dict[str, Any]]], threshold: float, dip_steps: float, path: Path) -> None:
    """Left: env steps to the threshold, one dot per seed (× at the budget: not reached). Right: the dip."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(schemes)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 0.55 * len(names) + 1.8), sharey=True)
    for i, name in enumerate(names):
        for run in schemes[name].values():
            steps, reached = effective_steps(run, threshold)
            ax.plot(max(steps, 1000.0) / 1e3, i, "o" if reached else "x", color=f"C{i % 10}", ms=7)
            bx.plot([run["start_success"], run["dip_min_success"]], [i, i], "-", color=f"C{i % 10}", alpha=0.5)
            bx.plot(run["start_success"], i, "|", color=f"C{i % 10}", ms=12)
            bx.plot(run["dip_min_success"], i, "o", color=f"C{i % 10}", ms=5)
        med = _median(schemes[name], threshold)
        if med is not None:
            ax.plot(max(med[0], 1000.0) / 1e3, i, "D", mfc="none", color="black", ms=9)
    ax.set_yticks(range(len(names)), names)
    ax.set_xscale("log")
    ax.set_xlabel(f"online env steps to {threshold:.0%} success that holds (thousands, log)\n"
                  "◇ median; × not reached (at its budget); 1 = from the start")
    bx.set_xlabel(f"policy-alone success: at the switch to online (|)\nand lowest in the first "
                  f"{dip_steps / 1e3:.0f}k online env steps (●)")
    bx.set_xlim(-0.02, 1.02)
    for a in (ax, bx):
        a.grid(alpha=0.3)
    ax.invert_yaxis()
    fig.suptitle("mujoco/pick_cube: offline-to-online schemes, every seed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


#: The page's name for each scheme of ``offline_online_seeds.json``, in the page's order.
PAGE_NAMES = {"scratch": "SAC from scratch", "rlpd": "RLPD (the data, half of every batch)",
              "jsrl_scripted": "JSRL, the scripted controller as guide (no data)",
              "iql": "IQL offline → IQL online, data kept", "wsrl_iql": "WSRL from IQL (no data online)",
              "jsrl_iql": "JSRL, IQL's offline policy as guide",
              "calql · clone warm-up": "Cal-QL → online, the mixture, clone warm-up (`actor_bc_updates=2000`)",
              "calql · authors' settings": "Cal-QL → online, the mixture, the authors' three settings",
              "calql · demos only · authors' settings": "Cal-QL → online, demos only, the authors' three settings"}


def sources(summary: dict[str, Any]) -> list[str]:
    """The run files behind ``offline_online_seeds.json``, in the order they first appear in it (the order a
    ``report.py`` marker lists them after the summary)."""
    seen: list[str] = []
    for runs in summary["schemes"].values():
        for run in runs.values():
            if run["source"] not in seen:
                seen.append(run["source"])
    return seen


def seeds_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_offline_online.md's table: the summary file first (which scheme and seed come from which run file),
    then every run file it names, in :func:`sources`' order; the numbers are read from the run files."""
    summary, *runs_files = records
    names = sources(summary["results"])
    if len(names) != len(runs_files) or any(Path(n).stem != Path(str(r["benchmark"])).stem
                                            for n, r in zip(names, runs_files, strict=False)):
        raise ValueError(f"list the run files after the summary in this order: {' '.join(names)}")
    by_source = dict(zip(names, (r["results"] for r in runs_files), strict=True))
    threshold, dip_steps = float(summary["results"]["threshold"]), float(summary["results"]["dip_steps"])
    schemes: dict[str, dict[int, dict[str, Any]]] = {}
    for name in PAGE_NAMES:
        for seed, kept in summary["results"]["schemes"][name].items():
            data = by_source[kept["source"]]
            run = data["results"][seed][name.split(" · ")[0]]
            schemes.setdefault(PAGE_NAMES[name], {})[int(seed)] = dict(
                run, budget=data["args"].get("budget"), recovered=recovery(run["evals"], threshold, dip_steps))
    schemes = {"scratch": schemes.pop(PAGE_NAMES["scratch"]), **schemes}  # table() takes scratch's median as 1
    lines = table(schemes, threshold, dip_steps)
    return "\n".join(lines).replace("| scratch |", f"| {PAGE_NAMES['scratch']} |", 1)


def main() -> None:
    """Parse the flags, print the table, write the JSON and the plot."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", help="offline_online.py result files, PATH or PATH:method,method")
    p.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "results" / "offline_online_seeds")
    a = p.parse_args()
    schemes, threshold, dip_steps = collect(a.results)
    lines = table(schemes, threshold, dip_steps)
    print("\n".join(lines))
    a.out_dir.mkdir(parents=True, exist_ok=True)
    keep = ("steps_to_threshold", "wall_to_threshold", "recovered", "start_success", "dip_min_success",
            "env_steps", "budget", "offline_s", "source")
    (a.out_dir / "offline_online_seeds.json").write_text(json.dumps(
        {"threshold": threshold, "dip_steps": dip_steps, "table": lines,
         "schemes": {n: {str(s): {k: r[k] for k in keep} for s, r in runs.items()} for n, runs in schemes.items()}},
        indent=1) + "\n")
    plot(schemes, threshold, dip_steps, a.out_dir / "offline_online_seeds.png")
    print(f"wrote {a.out_dir}/offline_online_seeds.json and .png")


if __name__ == "__main__":
    main()
