"""Offline-to-online on ``mujoco/pick_cube``: from scratch vs RLPD vs Cal-QL vs WSRL vs JSRL (issue 24).

The data: ``--demos`` scripted demonstrations (:class:`ScriptedPickDemonstrator`, no noise) plus ``--noisy``
episodes of the same demonstrator with action noise σ = ``--noise`` (a suboptimal policy: near-misses, drops),
recorded once into one episode store. Then, per seed, each method trains online to ``--threshold`` success or
``--budget`` env steps, with the task's SAC preset and exactly the settings a user types:

- ``scratch``: SAC, no data;
- ``rlpd``: the data in the demo buffer, half of every batch (``loop.demos_path``, ``algo.demo_ratio=0.5``);
- ``calql``: ``--offline`` Cal-QL pre-training, then online with the data kept in the demo buffer;
- ``wsrl``: ``--offline`` Cal-QL pre-training, then online without the data after ``--warmup`` steps of the
  pre-trained policy (``offline.keep_data=false``, ``algo.learning_starts``);
- ``jsrl``: as ``calql``, with the pre-trained policy as the guide (``jsrl.guide=offline``) for the first
  ``--guide-horizon`` steps, handing over earlier as the learner succeeds;
- ``jsrl_scripted``: JSRL with the task's scripted controller as the guide (``jsrl.guide=scripted``), no data;
- ``iql``: ``--offline`` IQL pre-training (``--algo iql``, expectile ``--expectile``), then IQL online with the data
  kept in the demo buffer;
- ``wsrl_iql`` / ``jsrl_iql``: WSRL and JSRL as above from IQL's offline phase, IQL online.

Measured per run: env steps and online wall-clock to the first evaluation at or above the threshold, and the
offline phase's own wall-clock; the evaluation curve; **the dip**: the policy's success at step 0 (after the
offline phase) and the lowest success over the first ``--dip-steps`` online env steps. Printed: each method's
steps and wall time as a ratio of ``scratch``'s in the same seed.

    MUJOCO_GL=egl python benchmarks/offline_online.py                        # 1 seed, every method
    python benchmarks/offline_online.py --seeds 3 --methods scratch calql wsrl
    python benchmarks/offline_online.py --task mujoco/reach --budget 40000  # a quicker, easier check

Results: ``benchmarks/results/offline_online.json`` and ``offline_online.png``.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.runner import train

OUT = Path(__file__).parent / "results"
METHODS = ("scratch", "rlpd", "calql", "wsrl", "jsrl", "iql", "wsrl_iql", "jsrl_iql", "jsrl_scripted")


def record_data(task: str, out: Path, demos: int, noisy: int, noise: float, seed: int) -> dict[str, Any]:
    """The demonstrations and the noisy episodes, in one episode store at ``out``.

    Recorded under the task settings the runs train with (its SAC preset: on pick_cube 5 cm per unit of action
    and 50-step episodes, not the task's defaults of 3 cm and 80), so that an action in the data means the same
    move online; the store says which (``source.task_config``), and a run under other settings warns.
    """
    from robot_rl.data.provenance import task_settings
    from robot_rl.data.recorder import StoreSink, record_episodes
    from robot_rl.data.store import EpisodeStore

    cfg = resolve_train_config(task=task).task
    env = cfg.make("cpu", seed, num_envs=16)
    demonstrator = scripted_demonstrator(task, cfg.action_scale)
    store = EpisodeStore.create(out, env.spec, fps=20.0, task=task, source={"task_config": task_settings(cfg)})
    good = record_episodes(env, demonstrator(0.0, seed), StoreSink(store), demos, seed=seed, deterministic=False,
                           task=task)
    bad = None if noisy == 0 else record_episodes(env, demonstrator(noise, seed + 1), StoreSink(store), noisy,
                                                   seed=seed + 1, deterministic=False, task=task)
    env.close()
    return {"demos": demos, "demo_successes": good.successes, "noisy": noisy, "noise": noise,
            "noisy_successes": bad.successes if bad else 0, "frames": good.frames + (bad.frames if bad else 0)}


def scripted_demonstrator(task: str, action_scale: float) -> Any:
    """``make(noise, seed)`` of the task's scripted demonstrator, for ``action_scale`` metres per unit of action."""
    if task == "mujoco/pick_cube":
        from robot_rl.sims.mujoco.pick_expert import ScriptedPickDemonstrator

        return lambda noise, seed: ScriptedPickDemonstrator(action_scale, noise=noise, seed=seed)
    if task == "mujoco/reach":
        from robot_rl.sims.mujoco.shifted import ScriptedReachDemonstrator

        return lambda noise, seed: ScriptedReachDemonstrator(action_scale, noise=noise, seed=seed)
    raise SystemExit(f"no scripted demonstrator for {task}: use mujoco/pick_cube or mujoco/reach")


def method_overrides(method: str, data: Path, a: argparse.Namespace) -> list[str]:
    """The ``key=value`` settings of one method, as on the command line."""
    offline = [f"offline.data={data}", f"offline.updates={a.offline_updates}", f"algo.cql_alpha={a.cql_alpha}",
               f"algo.cql_samples={a.cql_samples}", f"algo.calql={str(a.cql_alpha > 0).lower()}"]
    return {
        "scratch": [],
        "rlpd": [f"loop.demos_path={data}", "algo.demo_ratio=0.5"],
        "calql": [*offline, "algo.demo_ratio=0.5"],
        "wsrl": [*offline, "offline.keep_data=false", "algo.demo_ratio=0.0", f"algo.learning_starts={a.warmup}"],
        "jsrl": [*offline, "algo.demo_ratio=0.5", "jsrl.guide=offline", f"jsrl.horizon={a.guide_horizon}"],
        # No data at all: the task's scripted controller guides (what JSRL needs is a guide, not a dataset).
        "jsrl_scripted": ["jsrl.guide=scripted", f"jsrl.horizon={a.guide_horizon}"],
        # IQL has no preset of its own on these tasks: it gets SAC's (the same task settings, γ, n-step, LayerNorm).
        "iql": ["algo.type=iql", *sac_preset(a.task), *offline[:2], "algo.demo_ratio=0.5",
                f"algo.expectile={a.expectile}"],
        # WSRL and JSRL from IQL's offline policy (IQL online): Cal-QL's offline actor has not picked on this data.
        "wsrl_iql": ["algo.type=iql", *sac_preset(a.task), *offline[:2], "offline.keep_data=false",
                     "algo.demo_ratio=0.0", f"algo.learning_starts={a.warmup}", f"algo.expectile={a.expectile}"],
        "jsrl_iql": ["algo.type=iql", *sac_preset(a.task), *offline[:2], "algo.demo_ratio=0.5",
                     f"algo.expectile={a.expectile}", "jsrl.guide=offline", f"jsrl.horizon={a.guide_horizon}"],
    }[method]


def sac_preset(task: str) -> list[str]:
    """The task's SAC preset as ``key=value`` settings (but ``loop.*``: the evaluation is this script's)."""
    from robot_rl.core.config import TASKS

    preset = TASKS.resolve(task)[0].presets.get("sac", {})
    return [f"{k}={v}" for k, v in preset.items() if not k.startswith("loop.")]


def run_one(method: str, seed: int, data: Path, root: Path, a: argparse.Namespace) -> dict[str, Any]:
    """Train one method from ``data``; its evaluation curve and the time to the threshold."""
    name = f"{method}-s{seed}"
    cfg = resolve_train_config(task=a.task, overrides=[
        f"run.seed={seed}", f"run.root={root}", f"run.name={name}", "run.progress=false",
        *([f"run.torch_threads={a.threads}"] if a.threads else []),
        f"loop.total_env_steps={a.budget}", f"loop.success_threshold={a.threshold}",
        f"loop.eval_every_env_steps={a.eval_every}", f"loop.eval_episodes={a.eval_episodes}",
        *method_overrides(method, data, a), *a.set])
    t0 = time.monotonic()
    result = train(cfg)
    wall = time.monotonic() - t0
    with open(root / name / "eval.csv") as f:
        evals = [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(f)]
    first = next((e for e in evals if e["success_rate"] >= a.threshold), None)
    early = [e["success_rate"] for e in evals if 0 < e["env_steps"] <= a.dip_steps]
    out = {"reached": result.reached_threshold, "wall_s": wall, "offline_s": wall - result.wall_s,
           "env_steps": result.env_steps,
           "steps_to_threshold": first["env_steps"] if first else None,
           "wall_to_threshold": first["wall_s"] if first else None,
           "start_success": evals[0]["success_rate"] if evals else None,
           "dip_min_success": min(early) if early else None,
           "evals": [{k: e[k] for k in ("env_steps", "wall_s", "success_rate", "mean_return")} for e in evals]}
    curve = root / name / "offline_curve.json"
    if curve.exists():  # the offline phase's own learning curve: critic loss, mean Q, held-out TD error
        out["offline_curve"] = json.loads(curve.read_text())
    print(f"  {name}: reached {out['reached']} at {out['steps_to_threshold']} env steps, wall {wall:.0f}s; "
          f"success at step 0 {out['start_success']}, lowest in the first {a.dip_steps} steps "
          f"{out['dip_min_success']}", flush=True)
    for point in out.get("offline_curve", []):
        keys = ("update", "critic_loss", "q_mean", "heldout_td")
        print("    offline " + "  ".join(f"{k} {point[k]:.4g}" for k in keys if k in point), flush=True)
    return out


def summarise(results: dict[int, dict[str, dict[str, Any]]]) -> list[str]:
    """Per seed, each method's steps and wall-clock to the threshold as a ratio of scratch's."""
    lines = []
    for seed, runs in results.items():
        ref = runs.get("scratch")
        for method, r in runs.items():
            steps, wall = r["steps_to_threshold"], r["wall_to_threshold"]
            line = f"seed {seed} {method}: " + (f"{steps:.0f} env steps, {wall:.0f}s online (offline phase "
                                                f"{r['offline_s']:.0f}s)" if steps is not None
                                                else f"not reached in {r['env_steps']} steps")
            if ref is not None and method != "scratch" and steps is not None and ref["steps_to_threshold"]:
                line += (f" ({steps / ref['steps_to_threshold']:.2f}x scratch's steps, "
                         f"{wall / ref['wall_to_threshold']:.2f}x its wall-clock)")
            line += f"; dip: {r['start_success']} at the switch, lowest {r['dip_min_success']}"
            lines.append(line)
    return lines


def plot(results: dict[int, dict[str, dict[str, Any]]], path: Path, task: str, threshold: float) -> None:
    """Evaluation success against env steps, one colour per method, every seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for runs in results.values():
        for i, (method, r) in enumerate(runs.items()):
            labels = ax.get_legend_handles_labels()[1]
            ax.plot([e["env_steps"] / 1e3 for e in r["evals"]], [e["success_rate"] for e in r["evals"]], "o-",
                    ms=3, color=f"C{METHODS.index(method) if method in METHODS else i}", alpha=0.8,
                    label=None if method in labels else method)
    ax.axhline(threshold, color="grey", ls="--", lw=1)
    ax.set_xlabel("online env steps (thousands)")
    ax.set_ylabel("eval success")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{task}: offline-to-online schemes (the dip is the drop right after step 0)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write(out_dir: Path, a: dict[str, Any], data_info: dict[str, Any],
          results: dict[int, dict[str, dict[str, Any]]]) -> None:
    """``offline_online.json`` and its plot in ``out_dir``."""
    (out_dir / "offline_online.json").write_text(json.dumps(
        {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
         "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}",
         "args": a, "data": data_info, "results": results, "summary": summarise(results)}, indent=1, default=str))
    plot(results, out_dir / "offline_online.png", a["task"], a["threshold"])


def merge(paths: list[Path], out_dir: Path) -> None:
    """One result file from several (methods or seeds run in separate processes on the same data)."""
    parts = [json.loads(p.read_text()) for p in paths]
    results: dict[int, dict[str, dict[str, Any]]] = {}
    for part in parts:
        for seed, runs in part["results"].items():
            results.setdefault(int(seed), {}).update(runs)
    for runs in results.values():  # scratch first: the ratios are to it
        order = sorted(runs, key=lambda m: METHODS.index(m) if m in METHODS else len(METHODS))
        runs_sorted = {m: runs[m] for m in order}
        runs.clear()
        runs.update(runs_sorted)
    write(out_dir, parts[0]["args"] | {"merged_from": [str(p) for p in paths]}, parts[0]["data"], results)
    print("\n".join(summarise(results)))


def main() -> None:
    """Record the data, run every method for every seed, write the JSON and the plot."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="mujoco/pick_cube")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--demos", type=int, default=50)
    p.add_argument("--noisy", type=int, default=200)
    p.add_argument("--noise", type=float, default=1.0, help="action noise of the suboptimal episodes")
    p.add_argument("--offline-updates", type=int, default=20_000)
    p.add_argument("--cql-alpha", type=float, default=1.0,
                   help="calql/wsrl/jsrl: the conservative term's weight offline (0: plain SAC on the data)")
    p.add_argument("--cql-samples", type=int, default=10, help="calql/wsrl/jsrl: sampled actions per state in it")
    p.add_argument("--warmup", type=int, default=5_000, help="WSRL: env steps of the pre-trained policy first")
    p.add_argument("--expectile", type=float, default=0.9, help="IQL: the value's expectile")
    p.add_argument("--guide-horizon", type=int, default=50, help="JSRL: guide steps at the start")
    p.add_argument("--budget", type=int, default=150_000, help="online env steps per run at most")
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--eval-every", type=int, default=2_500)
    p.add_argument("--eval-episodes", type=int, default=50)
    p.add_argument("--dip-steps", type=int, default=20_000, help="the window after the switch the dip is read in")
    p.add_argument("--threads", type=int, default=0, help="torch threads per run (0: the run's default)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="more settings for every run, e.g. Cal-QL's reference ones: algo.actor_bc_updates=2000 "
                        "algo.backup_entropy=false algo.init_temperature=0.01 (docs/offline-to-online.md)")
    p.add_argument("--out-dir", type=Path, default=OUT)
    p.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                   help="only merge these result files (methods run in separate processes) into --out-dir")
    a = p.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    if a.merge:
        merge(a.merge, a.out_dir)
        return
    results: dict[int, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data_info = record_data(a.task, root / "data", a.demos, a.noisy, a.noise, seed=12345)
        print(f"data: {data_info}", flush=True)
        for seed in range(a.first_seed, a.first_seed + a.seeds):
            results[seed] = {}
            for method in a.methods:
                results[seed][method] = run_one(method, seed, root / "data", root, a)
                write(a.out_dir, vars(a) | {"out_dir": str(a.out_dir)}, data_info, results)
    print("\n".join(summarise(results)))


if __name__ == "__main__":
    main()
