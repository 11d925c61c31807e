"""Our PPO against rsl_rl's PPO (``rsl-rl-lib``) on the built-in ``reach`` task, in one process.

Both learners get the same task (same seeds, same number of sub-envs), the same network sizes,
rollout length, epochs, minibatches and PPO hyper-parameters; each keeps its own defaults where the
libraries differ in kind (our policy learns log σ, rsl_rl's σ; our time-outs bootstrap from the final
observation, rsl_rl's from V(s_t)). Each runs the same number of iterations (collect
``rollout_length`` steps of every sub-env, then update); only collection and update are timed. The
two take turns in chunks of ``--eval-every`` iterations (who goes first alternates), so that load
from other processes on a shared machine falls on both alike. After each chunk (untimed) both are
evaluated with deterministic actions by :func:`robot_rl.loop.evaluate.evaluate` on an identical
evaluation env.

Reported, as means over ``--seeds``: training env-steps per second (wall clock and process CPU
time), and the training time and env steps until the first evaluation at or above ``--threshold``
success (``n/a`` if some seed never got there), with ratios ours/rsl_rl (throughput: higher is
better; time and steps to threshold: lower is better).

Writes one result file (``--out``; default ``benchmarks/results/ppo_vs_rsl_rl/<UTC time>.json``) with every seed's
eval curve; :func:`report` renders benchmarks/RESULTS_ppo.md's body from it, :func:`summary` RESULTS.md's table,
and ``--results`` writes the rendered report to a file as well.

Our side runs the same synchronous collect → update cycle as rsl_rl's ``OnPolicyRunner.learn``
(policy.act → env.step → storage.add, then ``update`` and a weight copy to the acting policy), so
the comparison is between the algorithms and their storage, not between process layouts.

    .venv/bin/python benchmarks/ppo_vs_rsl_rl.py --results benchmarks/RESULTS_ppo.md
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import robot_rl.sims  # noqa: F401 - registers the built-in tasks
from robot_rl.core.algorithm import Policy
from robot_rl.core.config import TASKS
from robot_rl.core.env import VecEnv
from robot_rl.core.transition import TransitionBatch
from robot_rl.loop.evaluate import evaluate
from robot_rl.policies.ppo import PPOConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, write_result

NAME = "ppo_vs_rsl_rl"

# --------------------------------------------------------------------------------------------
# rsl_rl side
# --------------------------------------------------------------------------------------------


def rsl_train_cfg(cfg: PPOConfig) -> dict[str, Any]:
    """rsl_rl's runner config carrying the same hyper-parameters as ``cfg``."""
    return {
        "num_steps_per_env": cfg.rollout_length,
        "save_interval": 10**9,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": {
            "class_name": "PPO", "num_learning_epochs": cfg.num_epochs, "num_mini_batches": cfg.num_minibatches,
            "clip_param": cfg.clip, "gamma": cfg.gamma, "lam": cfg.lam, "value_loss_coef": cfg.value_coef,
            "entropy_coef": cfg.entropy_coef, "learning_rate": cfg.lr, "max_grad_norm": cfg.max_grad_norm,
            "use_clipped_value_loss": cfg.use_clipped_value_loss, "schedule": cfg.schedule,
            "desired_kl": cfg.desired_kl,
            "normalize_advantage_per_mini_batch": cfg.normalize_advantage_per_minibatch,
        },
        "actor": {
            "class_name": "MLPModel", "hidden_dims": list(cfg.actor_hidden), "activation": cfg.activation,
            "obs_normalization": cfg.normalize_obs,
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": cfg.init_noise_std},
        },
        "critic": {"class_name": "MLPModel", "hidden_dims": list(cfg.critic_hidden),
                   "activation": cfg.activation, "obs_normalization": cfg.normalize_obs},
    }


class RslPolicy(Policy):
    """rsl_rl's inference policy behind our :class:`Policy` interface (for the shared evaluation)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def act(self, obs: dict[str, torch.Tensor], deterministic: bool = False) -> tuple[torch.Tensor, dict]:
        from tensordict import TensorDict

        td = TensorDict({"policy": obs["state"]}, batch_size=[obs["state"].shape[0]])
        return self.model(td).clamp(-1.0, 1.0), {}


def setup_rsl(cfg: PPOConfig, args: argparse.Namespace) -> Contender:
    import contextlib
    import io

    from rsl_rl.runners import OnPolicyRunner

    from robot_rl.gym.rsl_rl import RslRlVecEnv

    task = TASKS.get(args.task)(num_envs=args.num_envs)
    # The shipped adapter (rsl_rl bootstraps time-outs with γ·V(s_t): it never sees the final observation).
    # No log_dir here, so its per-episode log extras would be dropped: log_episodes=False skips them.
    env = RslRlVecEnv(task.make("cpu", args.seed), seed=args.seed, log_episodes=False)
    torch.manual_seed(args.seed)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints both models
        runner = OnPolicyRunner(env, rsl_train_cfg(cfg), log_dir=None, device="cpu")
    return Contender("rsl_rl", runner.learn, lambda: RslPolicy(runner.get_inference_policy()),
                     task.make("cpu", args.seed + 1, num_envs=args.eval_envs))


# --------------------------------------------------------------------------------------------
# our side
# --------------------------------------------------------------------------------------------


def setup_ours(cfg: PPOConfig, args: argparse.Namespace) -> Contender:
    task = TASKS.get(args.task)(num_envs=args.num_envs)
    env = task.make("cpu", args.seed)
    algo = cfg.build(env.spec, "cpu", args.seed)
    policy = algo.make_policy()
    storage = algo.make_storage(env.num_envs)
    n = env.num_envs
    state = {"obs": env.reset(seed=args.seed)}
    no = torch.zeros(n, dtype=torch.bool)
    version = torch.zeros(n, dtype=torch.long)
    env_index = torch.arange(n)

    def train_chunk(iterations: int) -> None:
        obs = state["obs"]
        for _ in range(iterations):
            with torch.no_grad():
                for _ in range(cfg.rollout_length):
                    action, extras = policy.act(obs)
                    res = env.step(action)
                    done = (res.terminated | res.truncated).unsqueeze(-1)
                    next_obs = {k: torch.where(done, res.info["final_obs"][k], v) for k, v in res.obs.items()}
                    storage.add(TransitionBatch(obs, action, res.reward, res.terminated, res.truncated,
                                                next_obs, no, version, env_index, extras))
                    obs = res.obs
            algo.update(storage)
            policy.load_actor_weights(algo.actor_weights())
        state["obs"] = obs

    return Contender("ours", train_chunk, lambda: policy, task.make("cpu", args.seed + 1, num_envs=args.eval_envs))


# --------------------------------------------------------------------------------------------
# shared driver
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Contender:
    """One learner: ``train(k)`` runs ``k`` iterations, ``eval_policy()`` the current deterministic policy."""

    name: str
    train: Callable[[int], Any]
    eval_policy: Callable[[], Policy]
    eval_env: VecEnv
    iterations: int = 0
    train_s: float = 0.0
    cpu_s: float = 0.0
    hit: dict[str, float] | None = None
    curve: list[tuple[int, float]] = dataclasses.field(default_factory=list)


def drive(contenders: list[Contender], cfg: PPOConfig, args: argparse.Namespace, seed: int) -> None:
    """Timed training chunks in turns, each followed by an untimed evaluation.

    Wall time is what a user waits; process CPU time is robust to other jobs on a shared machine
    (with one torch thread it is the work done, not the time spent waiting for a core).
    """
    steps_per_iteration = cfg.rollout_length * args.num_envs
    chunk_no = 0
    while True:
        active = [c for c in contenders if c.iterations < args.iterations
                  and not (args.stop_at_threshold and c.hit is not None)]
        if not active:
            return
        if chunk_no % 2:
            active.reverse()
        chunk_no += 1
        for c in active:
            k = min(args.eval_every, args.iterations - c.iterations)
            wall, cpu = time.perf_counter(), time.process_time()
            c.train(k)
            c.train_s += time.perf_counter() - wall
            c.cpu_s += time.process_time() - cpu
            c.iterations += k
            success = evaluate(c.eval_policy(), c.eval_env, args.eval_episodes, seed=seed + 7).success_rate
            c.curve.append((c.iterations, success))
            print(f"  seed {seed} {c.name:7s} it {c.iterations:4d}  wall {c.train_s:6.1f}s  cpu {c.cpu_s:6.1f}s"
                  f"  eval success {success:.2f}", flush=True)
            if c.hit is None and success >= args.threshold:
                c.hit = {"wall_s": c.train_s, "cpu_s": c.cpu_s, "steps": c.iterations * steps_per_iteration}


def mean(xs: list[float | None]) -> float | None:
    return None if not xs or any(x is None for x in xs) else sum(x for x in xs if x is not None) / len(xs)


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def seed_record(c: Contender) -> dict[str, Any]:
    """One learner on one seed, as the result file keeps it: totals, the threshold hit, the eval curve."""
    return {"iterations": c.iterations, "train_s": c.train_s, "cpu_s": c.cpu_s, "hit": c.hit,
            "curve": {"iteration": [it for it, _ in c.curve], "success": [s for _, s in c.curve]}}


def aggregate(seeds: dict[str, dict[str, Any]], name: str, steps_per_iteration: int) -> dict[str, float | None]:
    """Means over seeds of one learner (throughput: total steps over total time)."""
    cs = [s[name] for s in seeds.values()]
    steps = sum(c["iterations"] for c in cs) * steps_per_iteration
    return {
        "wall_sps": steps / sum(c["train_s"] for c in cs), "cpu_sps": steps / sum(c["cpu_s"] for c in cs),
        "hit_wall": mean([c["hit"]["wall_s"] if c["hit"] else None for c in cs]),
        "hit_cpu": mean([c["hit"]["cpu_s"] if c["hit"] else None for c in cs]),
        "hit_steps": mean([c["hit"]["steps"] if c["hit"] else None for c in cs]),
        "final": mean([c["curve"]["success"][-1] for c in cs]),
    }


ROWS = [
    ("training env-steps/s, wall clock (higher is better)", "wall_sps", ",.0f"),
    ("training env-steps/s, process CPU time (higher is better)", "cpu_sps", ",.0f"),
    ("time to threshold, wall s (lower is better)", "hit_wall", ".1f"),
    ("time to threshold, CPU s (lower is better)", "hit_cpu", ".1f"),
    ("env steps to threshold (lower is better)", "hit_steps", ",.0f"),
    ("final eval success", "final", ".2f"),
]


def table(runs: list[dict[str, Any]]) -> str:
    """Markdown table of the aggregates over seeds, with ours/rsl_rl ratios (one table per run)."""
    out = []
    for run in runs:
        o, r = run["results"]["aggregate"]["ours"], run["results"]["aggregate"]["rsl_rl"]
        lines = ["| metric (mean over seeds) | ours | rsl_rl | ours/rsl_rl |", "|---|---:|---:|---:|"]
        lines += [f"| {label} | {fmt(o[k], spec)} | {fmt(r[k], spec)} | {ratio(o[k], r[k])} |"
                  for label, k, spec in ROWS]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def summary(runs: list[dict[str, Any]]) -> str:
    """RESULTS.md's short table: each ratio oriented so that above 1 favours ours."""
    out = []
    for run in runs:
        res = run["results"]
        o, r = res["aggregate"]["ours"], res["aggregate"]["rsl_rl"]
        n = len(res["seeds"])
        lines = [f"| metric (mean over {n} seeds) | ours | rsl_rl {res['rsl_rl_version']} | ratio |",
                 "|---|---:|---:|---:|",
                 f"| training env-steps/s (collection + update) | {fmt(o['wall_sps'], ',.0f')} | "
                 f"{fmt(r['wall_sps'], ',.0f')} | **{ratio(o['wall_sps'], r['wall_sps'])}** (ours/rsl_rl) |",
                 f"| wall s to ≥ {res['config']['threshold']} eval success | {fmt(o['hit_wall'], '.1f')} | "
                 f"{fmt(r['hit_wall'], '.1f')} | **{ratio(r['hit_wall'], o['hit_wall'])}** (rsl_rl/ours) |",
                 f"| env steps to ≥ {res['config']['threshold']} eval success | {fmt(o['hit_steps'], ',.0f')} | "
                 f"{fmt(r['hit_steps'], ',.0f')} | {ratio(r['hit_steps'], o['hit_steps'])} (rsl_rl/ours) |",
                 f"| final eval success | {fmt(o['final'], '.2f')} | {fmt(r['final'], '.2f')} | "
                 f"{ratio(o['final'], r['final'])} |"]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def details(runs: list[dict[str, Any]]) -> str:
    """One line per learner and seed: iterations, time, the threshold hit and the eval curve."""
    out = []
    for run in runs:
        seeds = run["results"]["seeds"]
        for name in ("ours", "rsl_rl"):
            for seed, both in seeds.items():
                c = both[name]
                hit = (f"threshold at {c['hit']['steps']:,.0f} steps, {c['hit']['wall_s']:.1f} s wall / "
                       f"{c['hit']['cpu_s']:.1f} s CPU" if c["hit"] else "threshold not reached")
                curve = ", ".join(f"{it}:{s:.2f}" for it, s in zip(c["curve"]["iteration"], c["curve"]["success"]))
                out.append(f"- {name}, seed {seed}: {c['iterations']} iterations in {c['train_s']:.1f} s wall / "
                           f"{c['cpu_s']:.1f} s CPU; {hit}. Eval success by iteration: {curve}")
    return "\n".join(out)


def setup_text(runs: list[dict[str, Any]]) -> str:
    """The run's settings, machine and command, as a paragraph per run."""
    out = []
    for run in runs:
        c, m = run["results"]["config"], run.get("machine", {})
        load = m.get("load_average")
        out.append(
            f"Date {run.get('date', '?')[:16].replace('T', ' ')} UTC, commit {run.get('commit', '?')}. Machine: "
            f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, GPU {m.get('gpu') or 'none'}, load average "
            f"{', '.join(map(str, load)) if load else '?'} at the end of the run (torch {m.get('torch', '?')}, "
            f"rsl-rl-lib {run['results']['rsl_rl_version']}, Python {m.get('python', '?')}).\n\n"
            f"Task `{c['task']}`, {c['num_envs']} sub-envs, actor/critic {c['hidden']} {c['activation']}, "
            f"rollout {c['rollout_length']}, {c['num_epochs']} epochs × {c['num_minibatches']} minibatches, "
            f"lr {c['lr']} ({c['schedule']}, desired KL {c['desired_kl']}), entropy {c['entropy_coef']}, "
            f"clip {c['clip']}, obs normalisation {c['normalize_obs']}, {c['threads']} torch thread(s), "
            f"seeds {[int(s) for s in run['results']['seeds']]}. Budget {c['iterations']} iterations per learner "
            f"and seed; deterministic evaluation on {c['eval_episodes']} episodes every {c['eval_every']} iterations "
            f"(untimed); threshold: eval success ≥ {c['threshold']}.\n\n"
            f"Command: `{run.get('command', '?')}`")
    return "\n\n".join(out)


def report(runs: list[dict[str, Any]]) -> str:
    """RESULTS_ppo.md's body: setup, the aggregate table and the per-seed lines."""
    return setup_text(runs) + "\n\n" + table(runs) + "\n\n" + details(runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="reach")
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--iterations", type=int, default=40, help="iteration budget per learner and seed")
    p.add_argument("--eval-every", type=int, default=2, help="iterations between evaluations")
    p.add_argument("--eval-envs", type=int, default=100)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--threshold", type=float, default=0.9, help="eval success that counts as solved")
    p.add_argument("--stop-at-threshold", action="store_true", help="stop a learner once it is solved")
    p.add_argument("--hidden", default="128,128", help="hidden widths of actor and critic")
    p.add_argument("--seeds", default="0,1", help="comma-separated seeds")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (both learners)")
    p.add_argument("--results", type=Path, default=None,
                   help="also write the markdown report (rendered from the result file) here")
    add_out_argument(p, NAME)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    started = dt.datetime.now(dt.UTC)
    hidden = tuple(int(h) for h in args.hidden.split(","))
    seeds = [int(x) for x in args.seeds.split(",")]
    cfg = dataclasses.replace(PPOConfig(), actor_hidden=hidden, critic_hidden=hidden)
    print(f"task={args.task} num_envs={args.num_envs} hidden={hidden} rollout={cfg.rollout_length} "
          f"epochs={cfg.num_epochs} minibatches={cfg.num_minibatches} threads={args.threads} seeds={seeds}")
    import rsl_rl

    per_seed: dict[str, dict[str, Any]] = {}
    for seed in seeds:
        args.seed = seed
        pair = [setup_ours(cfg, args), setup_rsl(cfg, args)]
        drive(pair, cfg, args, seed)
        per_seed[str(seed)] = {c.name: seed_record(c) for c in pair}
    del args.seed
    steps_per_iteration = cfg.rollout_length * args.num_envs
    agg = {name: aggregate(per_seed, name, steps_per_iteration) for name in ("ours", "rsl_rl")}
    results = {
        "rsl_rl_version": getattr(rsl_rl, "__version__", None) or _dist_version("rsl-rl-lib"),
        "config": {"task": args.task, "num_envs": args.num_envs, "hidden": list(hidden), "activation": cfg.activation,
                   "rollout_length": cfg.rollout_length, "num_epochs": cfg.num_epochs,
                   "num_minibatches": cfg.num_minibatches, "lr": cfg.lr, "schedule": cfg.schedule,
                   "desired_kl": cfg.desired_kl, "entropy_coef": cfg.entropy_coef, "clip": cfg.clip,
                   "normalize_obs": cfg.normalize_obs, "threads": args.threads, "iterations": args.iterations,
                   "eval_every": args.eval_every, "eval_episodes": args.eval_episodes, "threshold": args.threshold},
        "steps_per_iteration": steps_per_iteration, "seeds": per_seed, "aggregate": agg,
        "ours_over_rsl_rl": {k: (agg["ours"][k] / agg["rsl_rl"][k]  # type: ignore[operator]
                                 if agg["ours"][k] is not None and agg["rsl_rl"][k] else None) for k in agg["ours"]},
    }
    path = write_result(args.out or default_path(NAME, started), NAME, args, results, started)
    print(table([{"results": results}]))
    print(f"result file: {path}")
    if args.results is not None:
        from result_file import read_result

        args.results.write_text("# PPO: ours vs rsl_rl\n\n" + report([read_result(path)]) + "\n")


def _dist_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
