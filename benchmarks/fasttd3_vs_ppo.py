"""FastTD3 against our PPO and our SAC: env steps and training wall time to the success threshold.

For each task (default ``reach``, ``push``, ``mujoco/reach``) each learner trains in this process with a
synchronous loop (act → env step → store → the updates owed), evaluated with deterministic actions every
``--eval-every`` env steps (SAC: ``--sac-eval-every``) on its own evaluation env (100 episodes by default).
Only collection and updates are timed; evaluation is not. A learner stops at the first evaluation at or above
``--threshold`` success, or when its training time passes ``--budget-s`` or its env steps ``--max-env-steps``
(then it "did not reach").

- FastTD3: ``--num-envs`` sub-envs (1024), the ``fasttd3`` config defaults plus the task's value support from
  ``SUPPORT`` below (C51 atoms must cover the task's returns) and ``--fast`` overrides (FastSAC, with
  ``--learners ... fastsac``, the same);
- PPO: the same ``--num-envs``, the ``ppo`` config with the task's ``ppo`` preset (what ``robot-rl train --algo ppo``
  runs), one update per full rollout;
- SAC: ``--sac-envs`` sub-envs (32, the ``robot-rl train`` default), the ``sac`` config with the task's ``sac`` preset.

The learners take turns, one evaluation interval each, so that load from other processes falls on all alike.
Printed: per learner, env steps and training seconds to the threshold; per task, the ratios PPO/FastTD3 and
SAC/FastTD3 (above 1: FastTD3 needed less).

    .venv/bin/python benchmarks/fasttd3_vs_ppo.py --tasks reach --num-envs 1024 --budget-s 150

Writes one result file (``--out``; default ``benchmarks/results/fasttd3_vs_ppo/<UTC time>.json``, rewritten after
each task) with every learner's eval curve; :func:`table` and :func:`ratio_table` render it.

On a GPU (benchmarks/device/fastsac_gpu.sh): ``--device cuda --task-overrides task.backend=mjx --num-envs 4096``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import robot_rl.policies.fastsac  # registers fastsac
import robot_rl.policies.td3  # registers fasttd3
import robot_rl.sims  # noqa: F401 - registers the built-in tasks
from robot_rl.core.algorithm import OffPolicyAlgorithm, OnPolicyAlgorithm, OnPolicyStorage, Policy, ReplayStorage
from robot_rl.core.env import VecEnv
from robot_rl.core.transition import TransitionBatch
from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.evaluate import evaluate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

NAME = "fasttd3_vs_ppo"

#: FastTD3's atoms per task: (v_min, v_max) around the discounted returns its dense/sparse rewards give.
SUPPORT = {"reach": (-300.0, 20.0), "push": (-1.0, 2.0), "mujoco/reach": (-300.0, 20.0)}


@dataclasses.dataclass
class Contender:
    """One learner on one task: ``collect(k)`` trains for about ``k`` env steps; ``policy`` acts for evaluation."""

    name: str
    collect: Callable[[int], None]
    policy: Policy
    eval_env: VecEnv
    env_steps: int = 0
    train_s: float = 0.0
    updates: int = 0
    hit: tuple[int, float] | None = None  # (env steps, train s) at the threshold
    curve: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    done: bool = False


def _step(env: VecEnv, policy: Policy, obs: dict[str, torch.Tensor]) -> tuple[TransitionBatch, dict]:
    n = env.num_envs
    action, extras = policy.act(obs)
    res = env.step(action)
    done = (res.terminated | res.truncated)[:, None]
    final = res.info.get("final_obs", res.obs)
    next_obs = {k: torch.where(done.reshape(-1, *([1] * (v.dim() - 1))), final[k], v) for k, v in res.obs.items()}
    dev = res.reward.device
    batch = TransitionBatch(obs, action, res.reward.float(), res.terminated, res.truncated, next_obs,
                            torch.zeros(n, dtype=torch.bool, device=dev), torch.zeros(n, dtype=torch.int64, device=dev),
                            torch.arange(n, device=dev), extras)
    return batch, res.obs


def make_contender(name: str, algo_name: str, task: str, num_envs: int, args: argparse.Namespace) -> Contender:
    overrides = [f"task.num_envs={num_envs}", *args.task_overrides]
    if algo_name in ("fasttd3", "fastsac"):
        lo, hi = args.support or SUPPORT.get(task, (-300.0, 20.0))
        overrides += [f"algo.v_min={lo}", f"algo.v_max={hi}", *args.fast]
    cfg = resolve_train_config(task=task, algo=algo_name, overrides=overrides)
    env = cfg.task.make(args.device, args.seed)
    eval_env = cfg.task.make(args.device, args.seed + 1, num_envs=min(args.eval_episodes, 100))
    algo = cfg.algo.build(env.spec, args.device, args.seed)
    storage = algo.make_storage(env.num_envs)
    policy = algo.make_policy()
    state = {"obs": env.reset(seed=args.seed), "owed": 0.0}
    c = Contender(name, lambda k: None, policy, eval_env)

    def collect_off_policy(steps: int) -> None:
        assert isinstance(algo, OffPolicyAlgorithm) and isinstance(storage, ReplayStorage)
        for _ in range(max(1, steps // env.num_envs)):
            with torch.no_grad():
                batch, state["obs"] = _step(env, policy, state["obs"])
            storage.add(batch)
            c.env_steps += env.num_envs
            if len(storage) >= algo.learning_starts:
                state["owed"] += algo.utd_ratio * env.num_envs
                while state["owed"] >= 1.0:
                    algo.update(storage.sample(algo.batch_size))
                    state["owed"] -= 1.0
                    c.updates += 1
                policy.load_actor_weights(algo.actor_weights())

    def collect_on_policy(steps: int) -> None:
        assert isinstance(algo, OnPolicyAlgorithm) and isinstance(storage, OnPolicyStorage)
        for _ in range(max(1, steps // (env.num_envs * algo.rollout_length))):
            with torch.no_grad():
                while not storage.is_full():
                    batch, state["obs"] = _step(env, policy, state["obs"])
                    storage.add(batch)
                    c.env_steps += env.num_envs
            algo.update(storage)
            c.updates += 1
            policy.load_actor_weights(algo.actor_weights())

    c.collect = collect_on_policy if isinstance(algo, OnPolicyAlgorithm) else collect_off_policy
    return c


def drive(contenders: list[Contender], args: argparse.Namespace) -> None:
    """Training chunks in turns (who goes first alternates), each followed by an untimed evaluation."""
    turn = 0
    while active := [c for c in contenders if not c.done]:
        for c in (active if turn % 2 == 0 else active[::-1]):
            t0 = time.perf_counter()
            c.collect(args.sac_eval_every if c.name == "sac" else args.eval_every)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()  # kernels still queued belong to this learner's training time
            c.train_s += time.perf_counter() - t0
            success = evaluate(c.policy, c.eval_env, args.eval_episodes, seed=args.seed + 7).success_rate
            c.curve.append((c.env_steps, success))
            print(f"  {c.name:8s} {c.env_steps:>10,} steps  {c.train_s:7.1f} s  {c.updates:>7,} updates  "
                  f"eval success {success:.2f}", flush=True)
            if success >= args.threshold:
                c.hit, c.done = (c.env_steps, c.train_s), True
            elif c.train_s >= args.budget_s or c.env_steps >= args.max_env_steps:
                c.done = True
        turn += 1


def ratio(other: tuple[int, float] | None, td3: tuple[int, float] | None, i: int) -> str:
    if td3 is None or other is None:
        return "n/a (" + ("FastTD3" if td3 is None else "the other") + " did not reach)"
    return f"{other[i] / td3[i]:.2f}"


def record(c: Contender, num_envs: int) -> dict[str, Any]:
    """One learner on one task, as the result file keeps it."""
    return {"learner": c.name, "num_envs": num_envs, "reached": c.hit is not None,
            "hit_env_steps": c.hit[0] if c.hit else None, "hit_train_s": c.hit[1] if c.hit else None,
            "env_steps": c.env_steps, "train_s": c.train_s, "updates": c.updates,
            "best_success": max((s for _, s in c.curve), default=None),
            "curve": {"env_steps": [k for k, _ in c.curve], "success": [s for _, s in c.curve]}}


def ratios(learners: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Each other learner over FastTD3, env steps and training time to the threshold (None: one did not reach)."""
    by = {r["learner"]: r for r in learners}
    td3 = by.get("fasttd3")
    out: dict[str, dict[str, float | None]] = {}
    for name, r in by.items():
        if name == "fasttd3" or td3 is None:
            continue
        both = r["reached"] and td3["reached"]
        out[f"{name}/fasttd3"] = {"env_steps": r["hit_env_steps"] / td3["hit_env_steps"] if both else None,
                                  "train_s": r["hit_train_s"] / td3["hit_train_s"] if both else None}
    return out


NAMES = {"fasttd3": "FastTD3", "fastsac": "FastSAC", "ppo": "PPO", "sac": "SAC"}


def _steps_secs(r: dict[str, Any]) -> tuple[str, str]:
    if r["reached"]:
        return f"{r['hit_env_steps']:,}", f"{r['hit_train_s']:.1f}"
    return f"> {r['env_steps']:,}", f"> {r['train_s']:.1f}"


def table(runs: list[dict[str, Any]]) -> str:
    """Per task and learner: reached, env steps and training s to the threshold (``> N``: the budget, not reached),
    updates, best eval success."""
    rows = []
    for run in runs:
        res = run["results"]
        for task in res["tasks"]:
            for r in task["learners"]:
                steps, secs = _steps_secs(r)
                rows.append([f"`{task['task']}`", str(res["seed"]), f"{NAMES.get(r['learner'], r['learner'])} "
                             f"({r['num_envs']:,} envs)", "yes" if r["reached"] else "no", steps, secs,
                             f"{r['updates']:,}", f"{r['best_success']:.2f}"])
    return markdown_table(["task", "seed", "learner", "reached", "env steps to threshold", "training s",
                           "updates", "best eval success"], rows, "lrlcrrrr")


def ratio_table(runs: list[dict[str, Any]]) -> str:
    """Per task: each learner over FastTD3 in env steps and training time to the threshold (above 1: FastTD3
    needed less)."""
    rows = []
    for run in runs:
        res = run["results"]
        for task in res["tasks"]:
            for pair, r in task["ratios"].items():
                a, b = pair.split("/")
                rows.append([f"`{task['task']}`", str(res["seed"]), f"{NAMES.get(a, a)} / {NAMES.get(b, b)}",
                             "n/a" if r["env_steps"] is None else f"{r['env_steps']:.2f}",
                             "n/a" if r["train_s"] is None else f"**{r['train_s']:.2f}**"])
    return markdown_table(["task", "seed", "ratio", "env steps", "training time"], rows, "lrlrr")


def report(task: str, learners: list[dict[str, Any]]) -> None:
    print(f"\n### {task}\n\n| learner | reached | env steps | train s | updates | best eval success |")
    print("|---|:---:|---:|---:|---:|---:|")
    for r in learners:
        steps, secs = _steps_secs(r)
        print(f"| {r['learner']} | {'yes' if r['reached'] else 'no'} | {steps} | {secs} | {r['updates']:,} | "
              f"{r['best_success']:.2f} |")
    by = {r["learner"]: ((r["hit_env_steps"], r["hit_train_s"]) if r["reached"] else None) for r in learners}
    td3 = by.get("fasttd3")
    for other in ("fastsac", "ppo", "sac"):
        if other in by and "fasttd3" in by:
            print(f"\n{other}/fasttd3: env steps {ratio(by[other], td3, 0)}, wall time {ratio(by[other], td3, 1)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["reach", "push", "mujoco/reach"])
    p.add_argument("--learners", nargs="+", default=["fasttd3", "ppo", "sac"],
                   choices=["fasttd3", "fastsac", "ppo", "sac"])
    p.add_argument("--num-envs", type=int, default=1024, help="sub-envs of FastTD3 and PPO")
    p.add_argument("--sac-envs", type=int, default=32, help="sub-envs of SAC")
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--eval-every", type=int, default=50_000, help="env steps between evaluations (FastTD3, PPO)")
    p.add_argument("--sac-eval-every", type=int, default=10_000, help="env steps between SAC's evaluations")
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--budget-s", type=float, default=300.0, help="training seconds per learner and task")
    p.add_argument("--max-env-steps", type=int, default=20_000_000)
    p.add_argument("--fast", nargs="*", default=[],
                   help="extra overrides for FastTD3 and FastSAC, e.g. algo.batch_size=8192")
    p.add_argument("--task-overrides", nargs="*", default=[],
                   help="task settings for every learner, e.g. task.dense=true (push's shaped reward)")
    p.add_argument("--support", type=float, nargs=2, default=None, metavar=("V_MIN", "V_MAX"),
                   help="the C51 value support of FastTD3/FastSAC (default: SUPPORT's entry for the task)")
    p.add_argument("--device", default="cpu", help="torch device of envs, learners and replay (e.g. cuda)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    add_out_argument(p, NAME)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    started = dt.datetime.now(dt.UTC)
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
          f"torch {torch.__version__}; threshold {args.threshold}, budget {args.budget_s:.0f} s per learner")
    results: dict[str, Any] = {"seed": args.seed, "threshold": args.threshold, "device": args.device,
                               "torch_threads": torch.get_num_threads(), "tasks": []}
    path = args.out or default_path(NAME, started)
    for task in args.tasks:
        print(f"\n== {task}")
        envs = {"fasttd3": args.num_envs, "fastsac": args.num_envs, "ppo": args.num_envs, "sac": args.sac_envs}
        contenders = [make_contender(name, name, task, envs[name], args) for name in args.learners]
        drive(contenders, args)
        learners = [record(c, envs[c.name]) for c in contenders]
        results["tasks"].append({"task": task, "learners": learners, "ratios": ratios(learners)})
        report(task, learners)
        # After every task: a later task that fails keeps the finished ones.
        write_result(path, NAME, args, results, started)
    print(f"result file: {path}")


if __name__ == "__main__":
    main()
