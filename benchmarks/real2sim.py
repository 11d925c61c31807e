"""Real2sim (issue 27): train in simulation four ways, score each policy on the "real" arm.

The "real robot" is ``mujoco/reach_shifted`` (bodies 1.6× heavier, 0.7× friction; servo gain ``--gain`` and joint
damping ``--damping`` × nominal, by default 0.35 and 4; :mod:`robot_rl.sims.mujoco.shifted`) with ``--delay`` control
steps of action latency, none of which the simulator (``mujoco/reach``) is told. A noisy scripted teleoperator
logs ``--real-episodes`` episodes of it, as `robot-rl record` logs an arm. Then, for each seed, SAC trains in
simulation for the same env steps:

- **default**: the simulator's nominal parameters;
- **wide DR**: wide domain randomisation of the same parameters and of the delay (``WIDE_DR``);
- **twin**: `robot-rl twin fit` on the logs, then ``twin.file=twin.json`` (ranges fit ± 2 std);
- **twin + co-training**: the same, with RL-Co on the logged episodes (``cotrain.real_dataset``: a stage-1 SFT
  on them and λ·BC on real batches during RL);
- **default + co-training** (the ablation): RL-Co on the logs in the nominal simulator, no twin.

No condition runs an RL episode on the "real" arm. Every policy is scored on the same 100 "real" episodes
(deterministic actions), and on 100 nominal-simulator episodes for reference. Everything goes through the
CLI a user types (`robot-rl twin fit`, `robot-rl train`); scoring loads each run with ``load_policy``.

    MUJOCO_GL=osmesa python benchmarks/real2sim.py --seeds 0 1 2 --steps 15000
    # or seeds in separate processes (the logs and the twin in --work are shared), merged afterwards:
    python benchmarks/real2sim.py --merge OUT_A/real2sim.json OUT_B/real2sim.json --out benchmarks/results

Writes ``--out``/real2sim.json and real2sim.png; runs, logs and the twin go to ``--work``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from robot_rl.core.config import TASKS
from robot_rl.loop.evaluate import evaluate
from robot_rl.policy_io import load_policy
from robot_rl.sims.base import RandomizeConfig
from robot_rl.sims.mujoco.shifted import ScriptedReachDemonstrator, ShiftConfig, record_demos

#: Wide domain randomisation: every fitted parameter over a range that holds the "real" values and more.
WIDE_DR = {"params": {"actuator_gain": {"low": 0.25, "high": 1.5}, "dof_damping": {"low": 0.5, "high": 6.0},
                      "body_mass": {"low": 0.5, "high": 2.0}, "geom_friction": {"low": 0.5, "high": 1.5}},
           "action_delay": [0, 3]}
TWIN_PARAMS = "actuator_gain,dof_damping,body_mass,geom_friction,action_delay"
CONDITIONS = ("default", "wide_dr", "twin", "twin_cotrain", "default_cotrain")


def real_task(delay: int, gain: float = 0.35, damping: float = 4.0, **kw: Any) -> Any:
    """The "real" arm: the shifted reach world, servo gain and joint damping × ``gain``/``damping``, with ``delay``
    steps of action latency."""
    shift = ShiftConfig(actuator_gain_scale=gain, damping_scale=damping)
    return TASKS.get("mujoco/reach_shifted")(randomize=RandomizeConfig(action_delay=(delay, delay)), shift=shift,
                                             **kw)


def log_real(out: Path, episodes: int, delay: int, gain: float, damping: float, seed: int = 1) -> int:
    """Log the teleoperated "real" episodes (whole episodes: success does not end them); returns successes."""
    env = real_task(delay, gain, damping, num_envs=10, terminate_on_success=False).make("cpu", seed)
    try:  # fps: the task's control rate, 1 / (frame_skip 8 × timestep 5 ms)
        return record_demos(env, out, episodes, ScriptedReachDemonstrator(gain=0.3, noise=0.3, seed=seed + 2),
                            seed=seed, task="reach", fps=25.0)
    finally:
        env.close()


def cli(args: list[str], log: Path) -> float:
    """Run ``robot-rl ARGS`` to completion with its output in ``log``; returns the wall time."""
    t0 = time.perf_counter()
    with log.open("w") as f:
        done = subprocess.run([sys.executable, "-m", "robot_rl.cli", *args], stdout=f, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if done.returncode != 0:
        raise SystemExit(f"robot-rl {' '.join(args)} failed (exit {done.returncode}); see {log}")
    return time.perf_counter() - t0


def condition_overrides(name: str, twin: Path, logs: Path) -> list[str]:
    """The `robot-rl train` overrides of one condition."""
    if name == "default":
        return []
    if name == "wide_dr":
        return [f"task.randomize={json.dumps(WIDE_DR)}"]
    if name == "twin":
        return [f"twin.file={twin}"]
    cotrain = [f"cotrain.real_dataset={logs}", "cotrain.sft_steps=1000", "cotrain.weight=0.1"]
    if name == "twin_cotrain":
        return [f"twin.file={twin}", *cotrain]
    if name == "default_cotrain":  # the ablation: what co-training on the logs does without the twin
        return cotrain
    raise ValueError(f"unknown condition {name!r}; choose from {', '.join(CONDITIONS)}")


def score(run: Path, delay: int, gain: float, damping: float, episodes: int) -> dict[str, float]:
    """Success of ``run``'s policy on the "real" arm and in the nominal simulator (same episode seeds)."""
    out: dict[str, float] = {}
    for where, task in (("real", real_task(delay, gain, damping)), ("sim", TASKS.get("mujoco/reach")())):
        env = task.make("cpu", 4242, num_envs=25)
        try:
            policy = load_policy(run, env.spec).policy
            out[where] = float(evaluate(policy, env, episodes, seed=777).success_rate)
        finally:
            env.close()
    return out


def plot(results: list[dict[str, Any]], conditions: list[str], path: Path) -> None:
    """Bars: mean "real" success per condition, each seed a dot, the 90 % goal a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, c in enumerate(conditions):
        vals = [r["real"] for r in results if r["condition"] == c]
        ax.bar(i, sum(vals) / len(vals), color="#4c72b0", alpha=0.7)
        ax.scatter([i] * len(vals), vals, color="black", s=12, zorder=3)
    ax.axhline(0.9, color="#c44e52", ls="--", lw=1, label="goal 90 %")
    ax.set_xticks(range(len(conditions)), [c.replace("_", " +\n").replace("wide +\ndr", "wide DR") for c in conditions])
    ax.set_ylabel('success on the "real" arm')
    ax.set_ylim(0, 1.05)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=CONDITIONS)
    p.add_argument("--steps", type=int, default=10_000, help="env steps of SAC in simulation per run")
    p.add_argument("--delay", type=int, default=2, help="the real arm's hidden action latency (control steps)")
    p.add_argument("--gain", type=float, default=0.35, help="the real arm's servo gain (x nominal)")
    p.add_argument("--damping", type=float, default=4.0, help="the real arm's joint damping (x nominal)")
    p.add_argument("--real-episodes", type=int, default=20)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--threads", type=int, default=1, help="torch threads of every run")
    p.add_argument("--work", type=Path, default=Path("benchmarks/out/real2sim"))
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    p.add_argument("--merge", type=Path, nargs="+", help="merge these real2sim.json files into --out, run nothing")
    args = p.parse_args()
    if args.merge:
        merge(args.merge, args.out)
        return
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    logs, twin = args.work / "real", args.work / "twin.json"
    if not logs.exists():
        ok = log_real(logs, args.real_episodes, args.delay, args.gain, args.damping)
        print(f'logged {args.real_episodes} "real" episodes ({ok} reached the goal) into {logs}', flush=True)
    if not twin.exists():
        s = cli(["twin", "fit", "--episodes", str(logs), "--task", "mujoco/reach", "--params", TWIN_PARAMS,
                 "--out", str(twin)], args.work / "twin_fit.log")
        print(f"twin fitted in {s:.0f} s: {twin}", flush=True)
    fit = json.loads(twin.read_text())
    results: list[dict[str, Any]] = []
    for seed in args.seeds:
        for c in args.conditions:
            name = f"{c}_s{seed}"
            train = ["train", "--task", "mujoco/reach", "--name", name, f"run.root={args.work / 'runs'}",
                     f"run.seed={seed}", f"run.torch_threads={args.threads}", f"loop.total_env_steps={args.steps}",
                     "loop.success_threshold=null", "run.progress=false", *condition_overrides(c, twin, logs)]
            wall = cli(train, args.work / f"{name}.log")
            row = {"condition": c, "seed": seed, "train_s": round(wall, 1),
                   **score(args.work / "runs" / name, args.delay, args.gain, args.damping, args.eval_episodes)}
            results.append(row)
            print(f"{c:>13} seed {seed}: real {row['real']:.2f}  sim {row['sim']:.2f}  ({wall:.0f} s)", flush=True)
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "args": {k: str(v) for k, v in
           vars(args).items()}, "hidden": {"shift": "mujoco/reach_shifted defaults", "actuator_gain_scale": args.gain,
                                              "damping_scale": args.damping, "action_delay": args.delay},
           "twin": {p["key"]: {"value": p["value"], "std": p["std"]} for p in fit["params"]}, "runs": results}
    write(out, args.conditions, args.out)


def write(out: dict[str, Any], conditions: list[str], where: Path) -> None:
    """Print the table (mean and per seed), write real2sim.json and real2sim.png under ``where``."""
    results = out["runs"]
    conditions = [c for c in conditions if any(r["condition"] == c for r in results)]
    base = None
    print(f"\n{'condition':>13} {'real':>6} {'sim':>6} {'× default':>9}  per seed (real)")
    for c in conditions:
        rows = [r for r in results if r["condition"] == c]
        real = sum(r["real"] for r in rows) / len(rows)
        sim = sum(r["sim"] for r in rows) / len(rows)
        base = real if c == "default" else base
        ratio = f"{real / base:9.2f}" if base else f"{'-':>9}"
        print(f"{c:>13} {real:6.2f} {sim:6.2f} {ratio}  {[r['real'] for r in rows]}")
    where.mkdir(parents=True, exist_ok=True)
    (where / "real2sim.json").write_text(json.dumps(out, indent=1))
    plot(results, conditions, where / "real2sim.png")
    print(f"\nwrote {where / 'real2sim.json'} and real2sim.png")


def merge(files: list[Path], where: Path) -> None:
    """One result from the files of runs made in separate processes (same logs and twin, other seeds)."""
    parts = [json.loads(f.read_text()) for f in files]
    out = {**parts[0], "runs": [r for p in parts for r in p["runs"]], "merged_from": [str(f) for f in files]}
    write(out, list(CONDITIONS), where)


def _by_condition(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each condition's runs, in :data:`CONDITIONS`' order and by seed, over every record's runs."""
    runs = [r for rec in records for r in rec["results"]["runs"]]
    return {c: sorted((r for r in runs if r["condition"] == c), key=lambda r: r["seed"])
            for c in CONDITIONS if any(r["condition"] == c for r in runs)}


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def results_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_real2sim.md's table: per condition the mean success on the "real" arm, each seed's, its ratio to
    the default parameters' mean and the mean on the nominal simulator."""
    by = _by_condition(records)
    episodes = records[0]["results"]["args"]["real_episodes"]
    labels = {"default": "default parameters", "wide_dr": "wide DR", "twin": "twin",
              "twin_cotrain": f"twin + co-training ({episodes} logged episodes)",
              "default_cotrain": "default + co-training (ablation: no twin)"}
    seeds = sorted({r["seed"] for rows in by.values() for r in rows})
    base = _mean(by["default"], "real")
    lines = [f"| condition | success on the \"real\" arm (mean) | seeds {', '.join(map(str, seeds))} | × default | "
             "nominal simulator (mean) |", "|---|---:|---|---:|---:|"]
    for c, rows in by.items():
        per_seed = ", ".join(f"{r['real']:.2f}" for r in rows)
        lines.append(f"| {labels[c]} | {_mean(rows, 'real'):.2f} | {per_seed} | {_mean(rows, 'real') / base:.2f} | "
                     f"{_mean(rows, 'sim'):.2f} |")
    return "\n".join(lines)


def docs_table(records: list[dict[str, Any]]) -> str:
    """docs/real2sim.md's table: the mean success on the "real" arm per condition, with the seeds' range for the
    two co-training conditions (the headline and its ablation, close enough that the spread matters)."""
    labels = {"default": "default parameters", "wide_dr": "wide randomisation", "twin": "the twin",
              "twin_cotrain": "the twin + co-training on the logs",
              "default_cotrain": "its ablation: default parameters + co-training on the logs, no twin"}
    lines = ["| trained with | success on the \"real\" arm |", "| --- | ---: |"]
    for c, rows in _by_condition(records).items():
        cell = f"{_mean(rows, 'real'):.2f}"
        if c.endswith("_cotrain"):
            real = [r["real"] for r in rows]
            cell += f" ({min(real):.2f}–{max(real):.2f})"
        lines.append(f"| {labels[c]} | {cell} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
