"""The robot asks for help vs an operator always watching, on the SimulatedArm pick (issue 23's benchmark).

For each seed, from the same scripted demonstrations, HIL-SERL runs under five kinds of supervision by the
scripted person (:class:`~robot_rl.hardware.sim_pick.PickIntervener`):

- ``watching``: HIL-SERL today, the person watches every step and takes over when the policy stalls;
- ``gated 0.05 / 0.1 / 0.2``: the person helps only when the robot asks (``help.enabled``, ``help.budget``);
- ``none``: nobody helps.

Measured per run: the policy alone (deterministic, nobody helping) every ``--eval-every-steps`` against training
env steps and wall-clock; the operator's **attention steps** (watching: every training step, since the person
must watch to decide; gated: the steps under an open request, including the takeovers that answer it; none:
0); the steps the person acted, the takeovers. Printed: each gated run's final success and attention as ratios
of the watching run's (goal: the same success with <= 30 % of the attention).

    MUJOCO_GL=osmesa python benchmarks/ask_for_help.py                       # 1 seed, 3 min each at 4x
    MUJOCO_GL=osmesa python benchmarks/ask_for_help.py --seeds 3 --minutes 5
    MUJOCO_GL=osmesa python benchmarks/ask_for_help.py --first-seed 12 --out-dir benchmarks/results/ask_for_help_s12

Results: benchmarks/results/ask_for_help.json and ask_for_help.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from hil_learn import SUPERVISION, LearnBenchConfig, learn_config, record_demos, run_learning

OUT = Path(__file__).parent / "results"


def episode_attention(episode: dict[str, Any], supervision: str) -> int:
    """Steps of one episode that took the operator's attention: all of them when watching, none with nobody, and
    those under a request or with the person acting when gated (``supervision`` may be a run name, gated 0.1)."""
    return {"watching": episode["steps"], "none": 0}.get(supervision, episode["attention_steps"])


def attention(run: dict[str, Any], supervision: str) -> dict[str, int]:
    """The operator's cost of one run: attention steps, steps acted, takeovers, requests."""
    eps = run["episodes"]
    steps = sum(e["steps"] for e in eps)
    acted = sum(e["intervened_steps"] for e in eps)
    watched = sum(episode_attention(e, supervision) for e in eps)
    return {"train_steps": steps, "attention_steps": watched, "acted_steps": acted,
            "takeovers": sum(e["interventions"] for e in eps), "requests": sum(e["help_requests"] for e in eps)}


def run_seed(b: LearnBenchConfig, budgets: list[float], minutes: float,
             only: tuple[str, ...] = SUPERVISION) -> dict[str, Any]:
    """Every supervision in ``only`` for one seed, from the same demos (the same for any ``only``)."""
    cfg = learn_config(b)
    demos = record_demos(cfg, b.demos)
    plan = [("watching", "watching", 0.0), *((f"gated {x:g}", "gated", x) for x in budgets), ("none", "none", 0.0)]
    plan = [step for step in plan if step[1] in only]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, supervision, budget in plan:
            run_dir = Path(tmp) / name.replace(" ", "_")
            run = run_learning(cfg, b, demos, supervision, minutes, run_dir, budget=budget or 0.1)
            cost = attention(run, supervision)
            final = run["evals"][-1]["success"]
            print(f"  seed {b.seed} {name}: policy alone {final:.0%} at the end; attention {cost['attention_steps']} "
                  f"of {cost['train_steps']} steps, acted {cost['acted_steps']}, {cost['takeovers']} takeovers, "
                  f"{cost['requests']} requests", flush=True)
            # Per episode only what the tables and the plot read: the file stays small enough to keep in the repo.
            keep = ("episode", "env_steps", "wall_s", "success", "steps", "intervened_steps", "interventions",
                    "help_requests", "attention_steps")
            episodes = [{k: e[k] for k in keep} for e in run["episodes"]]
            out[name] = {"evals": run["evals"], "episodes": episodes, "cost": cost, "final": final}
    return out


def summarise(results: dict[int, dict[str, Any]]) -> list[str]:
    """Per seed, each gated run against the watching one: success and attention ratios."""
    lines = []
    for seed, runs in results.items():
        if "watching" not in runs:
            lines.append(f"seed {seed}: no watching run here (--only); compare with that seed's earlier run")
            continue
        ref = runs["watching"]
        for name, run in runs.items():
            if not name.startswith("gated"):
                continue
            att = run["cost"]["attention_steps"] / max(ref["cost"]["attention_steps"], 1)
            ok = run["final"] >= ref["final"] and att <= 0.3
            lines.append(f"seed {seed} {name}: success {run['final']:.0%} vs watching {ref['final']:.0%}; attention "
                         f"{att:.2f}x of watching (goal <= 0.30x at the same success): {'met' if ok else 'NOT met'}")
    return lines


def supervision_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_ask_for_help.md's table: per supervision and seed (over every result file), the policy alone at the
    end, its first evaluation at 90 % or more, and what it cost the operator."""
    seeds = {seed: runs for rec in records for seed, runs in rec["results"]["results"].items()}
    names = list(dict.fromkeys(name for runs in seeds.values() for name in runs))
    lines = ["| supervision | seed | policy alone at the end | first eval ≥ 90 % (env steps / training min) | "
             "attention steps (share) | steps the person acted | takeovers | requests |", "|" + "---|" * 8]
    for name in names:
        label = {"watching": "watching (HIL-SERL)", "none": "none"}.get(name, name.replace("gated ", "gated, budget "))
        for i, (seed, runs) in enumerate((s, r) for s, r in seeds.items() if name in r):
            run, cost = runs[name], runs[name]["cost"]
            first = next((e for e in run["evals"] if e["success"] >= 0.9), None)
            reached = f"{first['env_steps']} / {first['train_wall_s'] / 60:.2f}" if first else "not reached"
            share = f" ({100 * cost['attention_steps'] / cost['train_steps']:.{0 if name == 'watching' else 1}f} %)"
            attention_cell = f"{cost['attention_steps']}{share if cost['attention_steps'] else ''}"
            requests = "–" if name == "watching" else str(cost["requests"])
            first_cell = f"| {label} |" if i == 0 else "| |"
            lines.append(f"{first_cell} {seed} | {run['final']:.0%} | {reached} | {attention_cell} | "
                         f"{cost['acted_steps']} | {cost['takeovers']} | {requests} |".replace("%", " %", 1))
    return "\n".join(lines)


def _merged(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{seed: {supervision: run}}`` over the result files (a later file adds runs to a seed: ``--only gated``)."""
    seeds: dict[str, dict[str, Any]] = {}
    for rec in records:
        for seed, runs in rec["results"]["results"].items():
            seeds.setdefault(seed, {}).update(runs)
    return seeds


def _supervisions(seeds: dict[str, dict[str, Any]]) -> list[str]:
    """Watching first, the gated runs by budget, nobody last."""
    names = {name for runs in seeds.values() for name in runs}
    gated = sorted((n for n in names if n.startswith("gated")), key=lambda n: float(n.split()[1]))
    return [n for n in ("watching", *gated, "none") if n in names]


def _vs_watching(runs: dict[str, Any], name: str) -> float:
    return runs[name]["cost"]["attention_steps"] / max(runs["watching"]["cost"]["attention_steps"], 1)


def so101_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_ask_for_help.md's ``sim_so101`` table: per supervision and seed, the policy alone at the end and at
    its best, every evaluation, and the operator's cost against the watching run of the same seed."""
    seeds = _merged(records)
    lines = ["| supervision | seed | policy alone at the end | best | evals | attention steps (share) | "
             "attention vs watching | steps the person acted | takeovers | requests |", "|" + "---|" * 10]
    for name in _supervisions(seeds):
        label = {"watching": "watching (HIL-SERL)", "none": "none"}.get(name, name.replace("gated ", "gated, budget "))
        for i, (seed, runs) in enumerate((s, r) for s, r in seeds.items() if name in r):
            run, cost = runs[name], runs[name]["cost"]
            evals = ", ".join(f"{100 * e['success']:.0f}" for e in run["evals"]) + " %"
            share = f" ({100 * cost['attention_steps'] / cost['train_steps']:.{0 if name == 'watching' else 1}f} %)"
            att = f"{cost['attention_steps']}{share if cost['attention_steps'] else ''}"
            ratio = f"{_vs_watching(runs, name):.2f}×" if cost["attention_steps"] else "0"
            best = max(e["success"] for e in run["evals"])
            lines.append(f"| {label if i == 0 else ''} | {seed} | {100 * run['final']:.0f} % | {100 * best:.0f} % | "
                         f"{evals} | {att} | {ratio} | {cost['acted_steps']} | {cost['takeovers']} | "
                         f"{'–' if name == 'watching' else cost['requests']} |")
    return "\n".join(lines)


def shortfall_table(records: list[dict[str, Any]]) -> str:
    """The gated runs whose final success fell below the watching run's of the same seed."""
    seeds = _merged(records)
    lines = ["| budget | seed | final success | watching |", "|---|---|---|---|"]
    for name in [n for n in _supervisions(seeds) if n.startswith("gated")]:
        for seed, runs in seeds.items():
            if name in runs and runs[name]["final"] < runs["watching"]["final"]:
                lines.append(f"| {name.split()[1]} | {seed} | {100 * runs[name]['final']:.0f} % | "
                             f"{100 * runs['watching']['final']:.0f} % |")
    return "\n".join(lines)


def mean_table(records: list[dict[str, Any]]) -> str:
    """Per supervision, the mean final success and attention against watching over the seeds."""
    seeds = _merged(records)
    lines = ["| supervision | mean final success | attention vs watching |", "|---|---|---|"]
    for name in _supervisions(seeds):
        runs = [r for r in seeds.values() if name in r]
        final = sum(r[name]["final"] for r in runs) / len(runs)
        ratio = sum(_vs_watching(r, name) for r in runs) / len(runs)
        lines.append(f"| {name} | {100 * final:.0f} % | {'0' if name == 'none' else f'{ratio:.2f}×'} |")
    return "\n".join(lines)


def plot(results: dict[int, dict[str, Any]], path: Path, time_scale: float) -> None:
    """Policy-alone success against training wall-clock, and cumulative attention, per supervision."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a0, a1) = plt.subplots(1, 2, figsize=(12, 4.2))
    colors: dict[str, str] = {}
    for runs in results.values():
        for name, run in runs.items():
            c = colors.setdefault(name, f"C{len(colors)}")
            label = name if name not in a0.get_legend_handles_labels()[1] else None
            a0.plot([e["train_wall_s"] / 60 for e in run["evals"]], [e["success"] for e in run["evals"]], "o-",
                    color=c, label=label, alpha=0.8)
            total, xs, ys = 0, [], []
            for e in run["episodes"]:
                total += episode_attention(e, name)
                xs.append(e["env_steps"] / 1e3)
                ys.append(total)
            a1.plot(xs, ys, color=c, label=label)
    a0.set_xlabel(f"training wall-clock (min, simulator at {time_scale:g}x)")
    a0.set_ylabel("success, policy alone")
    a0.set_ylim(-0.02, 1.02)
    a1.set_xlabel("training env steps (thousands)")
    a1.set_ylabel("operator attention (steps, cumulative)")
    for ax in (a0, a1):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("SimulatedArm pick: the robot asks for help (gated) vs an operator always watching")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--first-seed", type=int, default=11, help="seeds run are first-seed, first-seed + 1, ...")
    p.add_argument("--minutes", type=float, default=3.0, help="training wall-clock per run")
    p.add_argument("--time-scale", type=float, default=4.0, help="simulated seconds per wall-clock second")
    p.add_argument("--budgets", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    p.add_argument("--eval-every-steps", type=int, default=500)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--out-dir", type=Path, default=OUT)
    p.add_argument("--robot", default="sim_arm", choices=["sim_arm", "sim_so101_state"],
                   help="sim_so101_state: the simulated SO-101, the cube's position in the state, no camera")
    p.add_argument("--episode-steps", type=int, default=40, help="steps before an episode is cut")
    p.add_argument("--reward", default="dense", choices=["dense", "sparse"],
                   help="sparse: 1 on success, as a perfect success classifier gives")
    p.add_argument("--only", nargs="+", choices=SUPERVISION, default=list(SUPERVISION),
                   help="run only these supervisions (e.g. more budgets for a seed already run: --only gated)")
    a = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    torch.set_num_threads(1)
    t0 = time.monotonic()
    results: dict[int, dict[str, Any]] = {}
    base = LearnBenchConfig(time_scale=a.time_scale, eval_every_steps=a.eval_every_steps,
                            eval_episodes=a.eval_episodes, robot=a.robot, episode_steps=a.episode_steps,
                            reward=a.reward)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    for seed in range(a.seeds):
        b = dataclasses.replace(base, seed=a.first_seed + seed)
        runs = len(a.budgets) * ("gated" in a.only) + len(set(a.only) - {"gated"})
        print(f"seed {b.seed}: {runs} runs of {a.minutes:g} min at {a.time_scale:g}x", flush=True)
        results[b.seed] = run_seed(b, a.budgets, a.minutes, tuple(a.only))
        lines = summarise(results)
        (a.out_dir / "ask_for_help.json").write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "args": vars(a) | {"out_dir": str(a.out_dir)},
             "results": results, "summary": lines}, separators=(",", ":"), default=str))
        plot(results, a.out_dir / "ask_for_help.png", a.time_scale)
    print("\n".join(summarise(results)))
    print(f"done in {(time.monotonic() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
