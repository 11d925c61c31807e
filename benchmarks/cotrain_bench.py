"""RL-Co in miniature: real-only SFT vs SFT co-training vs RL-Co, success on the "real" env.

The "real robot" is ``mujoco/reach_shifted`` (heavier links, 4× joint damping, servos at 35 % gain,
other friction); the simulator is ``mujoco/reach``. Demonstrations come from a slow, noisy scripted
teleoperator (:class:`ScriptedReachDemonstrator`), "real" ones recorded in the shifted world, sim ones
in the simulator. Policy class: SAC's tanh-Gaussian MLP on state observations (2×256), the learner
SAC — fast on a 2-core CPU. For each number of real demonstrations and seed:

- **real-only SFT**: stage 1 on the real demos alone;
- **SFT co-training**: stage 1 on real + sim demos (``cotrain.sft_real_fraction``);
- **RL-Co**: the same stage 1, then SAC in the simulator with λ·BC loss on real batches — run through
  the same ``InProcessRunner`` as ``robot-rl train`` with a ``cotrain`` section;
- **RL, λ = 0** (ablation): the same, without the auxiliary loss (plain RL fine-tuning).

Every policy is scored on the same "real" evaluation episodes (deterministic actions). During RL the
supervised loss on 10 held-out real episodes is logged (``<run>/cotrain.csv``): how much of the real
data the policy forgets. Writes a JSON of every number, two PNG plots, and prints ratios.

    .venv/bin/python benchmarks/cotrain_bench.py --seeds 0 1 --rl-steps 4000 --extra-weights 1.0

(results.json and the PNGs go to ``--out``, default benchmarks/out/cotrain/; demos and runs to ``--work``.)
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from robot_rl.config_io import apply_overrides
from robot_rl.core.config import TASKS, ensure_registered
from robot_rl.cotrain.config import CotrainConfig
from robot_rl.cotrain.data import episodes_to_demoset, load_aligned_episodes
from robot_rl.cotrain.sft import warm_start
from robot_rl.data.store import EpisodeStore
from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.evaluate import evaluate
from robot_rl.loop.runner import InProcessRunner
from robot_rl.sims.mujoco.shifted import ScriptedReachDemonstrator, record_demos


def record(args: argparse.Namespace, data: Path) -> dict[str, Any]:
    """Record the real (train + held-out) and sim demonstrations; subsets of the real ones per count."""
    info: dict[str, Any] = {}
    over = {"task.max_episode_steps": args.max_episode_steps}
    real_task = apply_overrides(TASKS.get("mujoco/reach_shifted")(), {k[5:]: v for k, v in over.items()})
    sim_task = apply_overrides(TASKS.get("mujoco/reach")(), {k[5:]: v for k, v in over.items()})
    n_real = max(args.real_demos)
    demo = dict(gain=args.demo_gain, noise=args.demo_noise)
    info["real_success"] = record_demos(real_task.make("cpu", 101, num_envs=25), data / "real_all", n_real,
                                        ScriptedReachDemonstrator(seed=101, **demo), seed=101, task="reach")
    info["heldout_success"] = record_demos(real_task.make("cpu", 202, num_envs=10), data / "real_heldout",
                                           args.heldout_demos, ScriptedReachDemonstrator(seed=202, **demo), seed=202)
    info["sim_success"] = record_demos(sim_task.make("cpu", 303, num_envs=25), data / "sim", args.sim_demos,
                                       ScriptedReachDemonstrator(seed=303, **demo), seed=303)
    src = EpisodeStore(data / "real_all")
    for n in args.real_demos:
        dst = EpisodeStore.create(data / f"real_{n}", src.spec, fps=src.fps, task=src.task)
        for i in range(n):
            dst.append(src.read(i))
    return info


def real_success(policy: Any, real_env: Any, episodes: int) -> float:
    """Deterministic success rate on the "real" env (the same seed for every policy)."""
    return evaluate(policy, real_env, episodes, seed=4242).success_rate


def sft_only(args: argparse.Namespace, data: Path, n: int, seed: int, mix: bool, real_env: Any) -> float:
    """Stage 1 alone (the code the runner runs), scored on the real env."""
    ensure_registered()
    cfg = resolve_train_config("mujoco/reach", "sac", None, [f"task.max_episode_steps={args.max_episode_steps}"])
    spec = real_env.spec
    algo = cfg.algo.build(spec, "cpu", seed)
    real = episodes_to_demoset(load_aligned_episodes(data / f"real_{n}", spec), spec, "cpu")
    sim = episodes_to_demoset(load_aligned_episodes(data / "sim", spec), spec, "cpu") if mix else None
    ct = CotrainConfig(real_dataset=data / f"real_{n}", sft_steps=args.sft_steps,
                       sft_real_fraction=args.real_fraction if mix else 1.0)
    warm_start(algo, real, sim, ct, seed + ct.seed_offset + 1)
    return real_success(algo.actor, real_env, args.eval_episodes)


def rl_run(args: argparse.Namespace, data: Path, runs: Path, n: int, seed: int, weight: float,
           real_env: Any) -> dict[str, Any]:
    """Stage 1 + SAC in the simulator with weight λ, through the runner; scored on the real env."""
    name = f"n{n}-s{seed}-w{weight:g}"
    shutil.rmtree(runs / name, ignore_errors=True)
    cfg = resolve_train_config("mujoco/reach", "sac", None, [
        f"task.max_episode_steps={args.max_episode_steps}", f"run.seed={seed}", f"run.name={name}",
        f"run.root={runs}", "run.progress=false", "loop.success_threshold=null",
        f"loop.total_env_steps={args.rl_steps}", "loop.eval_every_env_steps=2000", "loop.eval_episodes=20",
        "loop.log_every_s=1.0", "loop.checkpoint_every_s=600", "replay.persist=false",
        f"algo.learning_starts={args.learning_starts}",
        f"cotrain.real_dataset={data / f'real_{n}'}", f"cotrain.sim_dataset={data / 'sim'}",
        f"cotrain.heldout_dataset={data / 'real_heldout'}", f"cotrain.sft_steps={args.sft_steps}",
        f"cotrain.sft_real_fraction={args.real_fraction}", f"cotrain.weight={weight}",
        f"cotrain.batch_size={args.aux_batch}"])
    runner = InProcessRunner(cfg)
    ct = runner.extensions.active["cotrain"].cotraining
    start_heldout, start_mse = ct.score(ct.heldout), ct.action_error(ct.heldout)
    t0 = time.monotonic()
    result = runner.train()
    wall = time.monotonic() - t0
    curve = [{k: float(v) if v != "" else None for k, v in row.items()}
             for row in csv.DictReader((runner.run_dir / "cotrain.csv").open())]
    return {"real_success": real_success(runner.algo.actor, real_env, args.eval_episodes),
            "sim_success": result.last_eval.success_rate if result.last_eval else None,
            "heldout_start": start_heldout, "heldout_end": ct.score(ct.heldout),
            "heldout_mse_start": start_mse, "heldout_mse_end": ct.action_error(ct.heldout),
            "updates": result.updates, "wall_s": round(wall, 1), "curve": curve}


def rl_variants(args: argparse.Namespace) -> list[tuple[str, float]]:
    """``(result key, λ)`` of every RL run per demo count and seed."""
    variants = [("rlco", args.weight)] + ([] if args.no_ablation else [("rl_w0", 0.0)])
    return variants + [(f"rlco_w{w:g}", w) for w in args.extra_weights]


def mean(xs: list[float]) -> float:
    """Arithmetic mean."""
    return sum(xs) / len(xs)


def success_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_cotrain.md's table: success on the "real" env per number of real demos, the mean over seeds (each
    seed's in brackets) of every variant, and RL-Co's and λ = 0's ratios to SFT co-training."""
    res = records[0]["results"]
    args = res["args"]
    ablation = not args.get("no_ablation", False)
    cols = [("sft_real", "real-only SFT"), ("sft_cotrain", "SFT co-training"),
            ("rlco", f"RL-Co λ = {args['weight']:g}"),
            *([("rl_w0", "RL, λ = 0 (ablation)")] if ablation else []),
            *((f"rlco_w{w:g}", f"RL-Co λ = {w:g}") for w in args.get("extra_weights", []))]
    ratios = [("rlco", "RL-Co / SFT co-training"), *([("rl_w0", "λ = 0 / SFT co-training")] if ablation else [])]
    lines = ["| real demos | " + " | ".join(label for _, label in cols + ratios) + " |",
             "|" + "---:|" * (1 + len(cols) + len(ratios))]
    for n in args["real_demos"]:
        cells = [f"{100 * mean(res[f'{k}/{n}']):.1f} % ({', '.join(f'{100 * x:.0f}' for x in res[f'{k}/{n}'])})"
                 for k, _ in cols]
        cells += [f"{mean(res[f'{k}/{n}']) / mean(res[f'sft_cotrain/{n}']):.2f}×" for k, _ in ratios]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict[str, Any], args: argparse.Namespace, out: Path) -> None:
    """Success vs number of real demos; held-out real loss during RL."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = args.real_demos
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for key, label in (("sft_real", "real-only SFT"), ("sft_cotrain", "SFT co-training"),
                       ("rl_w0", "RL fine-tune, λ=0"), ("rlco", f"RL-Co (λ={args.weight:g})"),
                       *((f"rlco_w{w:g}", f"RL-Co (λ={w:g})") for w in args.extra_weights)):
        if all(f"{key}/{n}" in results for n in ns):
            ax.plot(ns, [100 * mean(results[f"{key}/{n}"]) for n in ns], "o-", label=label)
    ax.set_xlabel("real demonstrations")
    ax.set_ylabel('success on the "real" env (%)')
    ax.set_xscale("log")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.minorticks_off()
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "cotrain_success.png", dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(2, len(ns), figsize=(4 * len(ns), 6.4), sharex=True, squeeze=False)
    for col, n in enumerate(ns):
        for row, (field, ylabel) in enumerate((("heldout_action_mse", "held-out real action MSE"),
                                               ("heldout_loss", "held-out real BC loss (‖tanh μ − a‖²)"))):
            ax = axes[row][col]
            for key, label, style in (("rlco", f"RL-Co (λ={args.weight:g})", "-"), ("rl_w0", "λ=0", "--"),
                                      *((f"rlco_w{w:g}", f"λ={w:g}", ":") for w in args.extra_weights)):
                run = results["runs"].get(f"{key}/{n}/s{args.seeds[0]}")
                if run:
                    pts = [r for r in run["curve"] if r[field] is not None]
                    ax.plot([r["env_steps"] for r in pts], [r[field] for r in pts], style, marker=".", label=label)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(f"{n} real demos")
            else:
                ax.set_xlabel("env steps of RL (sim)")
            if col == 0:
                ax.set_ylabel(ylabel)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(out / "cotrain_heldout_loss.png", dpi=120)
    plt.close(fig)


def main() -> None:
    """Run the comparison (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("benchmarks/out/cotrain"),
                   help="results.json and the plots")
    p.add_argument("--work", type=Path, default=None,
                   help="demonstration stores and run directories (default: <out>/work)")
    p.add_argument("--real-demos", type=int, nargs="+", default=[5, 20, 50])
    p.add_argument("--sim-demos", type=int, default=200)
    p.add_argument("--heldout-demos", type=int, default=10)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--sft-steps", type=int, default=1000)
    p.add_argument("--real-fraction", type=float, default=0.5)
    p.add_argument("--weight", type=float, default=0.1)
    p.add_argument("--rl-steps", type=int, default=8000)
    p.add_argument("--learning-starts", type=int, default=1000)
    p.add_argument("--aux-batch", type=int, default=256)
    p.add_argument("--max-episode-steps", type=int, default=30)
    p.add_argument("--demo-gain", type=float, default=0.25)
    p.add_argument("--demo-noise", type=float, default=0.3)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--no-ablation", action="store_true", help="skip the λ = 0 RL runs")
    p.add_argument("--extra-weights", type=float, nargs="*", default=[], help="more RL-Co runs with these λ")
    args = p.parse_args()
    torch.set_num_threads(1)
    ensure_registered()
    out: Path = args.out
    work = args.work or out / "work"
    data, runs = work / "data", work / "runs"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    results: dict[str, Any] = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                               "runs": {}}
    results["demos"] = record(args, data)
    real_task = apply_overrides(TASKS.get("mujoco/reach_shifted")(), {"max_episode_steps": args.max_episode_steps})
    real_env = real_task.make("cpu", 4242, num_envs=min(args.eval_episodes, 100))
    results["demonstrator_real_success"] = real_success(
        ScriptedReachDemonstrator(gain=args.demo_gain, noise=args.demo_noise), real_env, args.eval_episodes)
    for n in args.real_demos:
        for seed in args.seeds:
            results.setdefault(f"sft_real/{n}", []).append(sft_only(args, data, n, seed, False, real_env))
            results.setdefault(f"sft_cotrain/{n}", []).append(sft_only(args, data, n, seed, True, real_env))
            for key, w in rl_variants(args):
                run = rl_run(args, data, runs, n, seed, w, real_env)
                results["runs"][f"{key}/{n}/s{seed}"] = run
                results.setdefault(f"{key}/{n}", []).append(run["real_success"])
            line = " | ".join(f"{k} {100 * results[f'{k}/{n}'][-1]:.0f}%" for k in
                              ("sft_real", "sft_cotrain", *(k for k, _ in rl_variants(args))))
            print(f"[{time.monotonic() - t_start:.0f}s] {n} real demos, seed {seed}: {line}", flush=True)
            (out / "results.json").write_text(json.dumps(results, indent=1))  # partial results survive a crash
    results["wall_s"] = round(time.monotonic() - t_start, 1)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, args, out)
    print(f"\ndemonstrator on the real env: {100 * results['demonstrator_real_success']:.0f}%")
    keys = ["sft_real", "sft_cotrain", *(k for k, _ in rl_variants(args))]
    print("real demos | " + " | ".join(keys) + " | rlco / sft_cotrain   (mean success over seeds)")
    for n in args.real_demos:
        r = {k: mean(results[f"{k}/{n}"]) for k in keys}
        ratio = r["rlco"] / r["sft_cotrain"] if r["sft_cotrain"] > 0 else float("inf")
        print(f"{n:>10} | " + " | ".join(f"{100 * r[k]:.1f}%" for k in keys) + f" | {ratio:.2f}×")
    for key, run in results["runs"].items():
        print(f"{key}: held-out real loss {run['heldout_start']:.2f} → {run['heldout_end']:.2f}, action MSE "
              f"{run['heldout_mse_start']:.3f} → {run['heldout_mse_end']:.3f}, "
              f"sim success {run['sim_success']}, {run['updates']} updates, {run['wall_s']} s")
    print(f"total {results['wall_s']:.0f} s; plots in {out}")


if __name__ == "__main__":
    main()
