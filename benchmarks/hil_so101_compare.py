"""Camera-only HIL-SERL on sim_so101, with the scripted person and without: policy-alone success of every seed.

Reads the printed logs of ``hil_bench.py --only learn --robot sim_so101`` runs (one per seed and arm; a log is
what every run leaves, even one whose JSON was lost) and draws the policy-alone success against training
wall-clock minutes and env steps, one line per run, with the goal (90 %) marked. Prints, for each run, when the
policy alone first reached the goal and its mean success after that.

    python benchmarks/hil_so101_compare.py \\
        --with benchmarks/results/hil_so101_cameras/log_s1[123].txt \\
        --without benchmarks/results/hil_so101_cameras/without/log_s1[12].txt

Writes ``benchmarks/results/hil_so101_cameras/with_without.png`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "results" / "hil_so101_cameras"
GOAL = 0.9
LINE = re.compile(r"\[(with intervener|without)\] (\d+) env steps, ([\d.]+) min, (\d+) updates, v\d+: "
                  r"policy alone (\d+)%")


def read_log(path: Path) -> dict[str, Any]:
    """The evaluations a log printed: env steps, minutes, updates and success, in order."""
    points = [m.groups() for m in map(LINE.search, path.read_text(errors="replace").splitlines()) if m]
    if not points:
        raise SystemExit(f"{path}: no '[...] N env steps, M min, U updates, vK: policy alone P%' lines")
    seed = re.search(r"s(\d+)", path.stem)
    return {"log": str(path), "arm": points[0][0], "seed": int(seed.group(1)) if seed else None,
            "env_steps": [int(p[1]) for p in points], "minutes": [float(p[2]) for p in points],
            "updates": [int(p[3]) for p in points], "success": [int(p[4]) / 100 for p in points]}


def summary(run: dict[str, Any]) -> dict[str, Any]:
    """First evaluation at the goal, and the mean success from then on."""
    hit = next((i for i, s in enumerate(run["success"]) if s >= GOAL), None)
    after = run["success"][hit:] if hit is not None else []
    return {"first_goal_min": run["minutes"][hit] if hit is not None else None,
            "first_goal_env_steps": run["env_steps"][hit] if hit is not None else None,
            "mean_success_after": sum(after) / len(after) if after else None,
            "last_min": run["minutes"][-1], "last_success": run["success"][-1]}


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Two panels: success against minutes and against env steps; with the person solid, without dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, key, label in ((axes[0], "minutes", "training wall-clock (min, real time)"),
                           (axes[1], "env_steps", "env steps")):
        for run in runs:
            style = "-" if run["arm"] == "with intervener" else "--"
            color = f"C{(run['seed'] or 0) % 10}"
            ax.plot(run[key], [100 * s for s in run["success"]], style, marker="o", ms=3, color=color,
                    label=f"{run['arm']}, seed {run['seed']}")
        ax.axhline(100 * GOAL, color="grey", lw=1, ls=":")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("policy alone, % of 10 episodes")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("sim_so101 pick from the front and wrist cameras, 20 demos: with the scripted person and without")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    """Read the logs, print the summary, write the plot and the JSON."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--with", dest="with_logs", type=Path, nargs="+", required=True, help="logs of runs with the person")
    p.add_argument("--without", type=Path, nargs="+", required=True, help="logs of runs without")
    p.add_argument("--out", type=Path, default=OUT / "with_without.png")
    a = p.parse_args()
    runs = [read_log(f) for f in [*a.with_logs, *a.without]]
    for run in runs:
        run["summary"] = summary(run)
        s = run["summary"]
        first = (f"first >= {GOAL:.0%} at {s['first_goal_min']} min ({s['first_goal_env_steps']:,} env steps), "
                 f"mean {s['mean_success_after']:.0%} after" if s["first_goal_min"] is not None else "goal not reached")
        print(f"{run['arm']:>15}, seed {run['seed']}: {first}; last {s['last_success']:.0%} at {s['last_min']} min")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    plot(runs, a.out)
    a.out.with_suffix(".json").write_text(json.dumps({"goal": GOAL, "runs": runs}, indent=1))
    print(f"written {a.out} and {a.out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
