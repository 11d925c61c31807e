"""robot_rl SAC vs Stable-Baselines3 SAC on a gymnasium task, same process, same budget.

Both learners get the same env steps, network sizes, batch size, UTD ratio (1 gradient update per
env step), learning_starts (uniform random actions before it), learning rates, γ, τ and automatic
entropy tuning. Ours steps the env through the ``gym`` task adapter with one sub-env. Only the
training loop is timed (not construction or evaluation); evaluation is 10 deterministic episodes
on fresh envs with fixed seeds, the same function for both. The learners take turns in chunks of
``--chunk`` env steps, so that load from other processes on a shared machine affects all alike.

    .venv/bin/python benchmarks/sac_vs_sb3.py --steps 15000

Variants of ours: ``fp32`` (default config), ``bf16`` (``amp_bf16=True``), ``compile``
(``compile=True``, compilation time included in the wall-clock).

Writes one result file (``--out``; default ``benchmarks/results/sac_vs_sb3/<UTC time>.json``) with every learner's
chunk times; :func:`table` renders benchmarks/RESULTS_sac.md's table from it, :func:`summary` RESULTS.md's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.sac import SACConfig
from robot_rl.sims.gymnasium import GymnasiumTaskConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

NAME = "sac_vs_sb3"


def evaluate(env_id: str, act: Callable[[np.ndarray], np.ndarray], episodes: int, seed: int) -> float:
    """Mean undiscounted return of ``episodes`` deterministic episodes (seeds seed, seed+1, …)."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(act(obs))
            total += float(r)
            done = term or trunc
        returns.append(total)
    env.close()
    return float(np.mean(returns))


class SB3Runner:
    """Stable-Baselines3 SAC, trained in chunks (``learn(..., reset_num_timesteps=False)`` continues)."""

    def __init__(self, args: argparse.Namespace) -> None:
        import gymnasium as gym
        from stable_baselines3 import SAC

        self.args = args
        self.model = SAC("MlpPolicy", gym.make(args.env_id), learning_rate=3e-4, buffer_size=args.steps,
                         learning_starts=args.learning_starts, batch_size=args.batch_size, tau=0.005, gamma=0.99,
                         train_freq=1, gradient_steps=1, ent_coef="auto", policy_kwargs={"net_arch": [256, 256]},
                         seed=args.seed, device=args.device, verbose=0)
        self.first = True

    def train(self, steps: int) -> None:
        self.model.learn(total_timesteps=steps, reset_num_timesteps=self.first)
        self.first = False

    def evaluate(self) -> float:
        return evaluate(self.args.env_id, lambda o: self.model.predict(o, deterministic=True)[0],
                        self.args.eval_episodes, 10_000)


class OursRunner:
    """robot_rl SAC through the gym task adapter, trained in chunks by a minimal synchronous loop."""

    def __init__(self, args: argparse.Namespace, variant: str) -> None:
        torch.manual_seed(args.seed)
        self.args = args
        self.env = GymnasiumTaskConfig(env_id=args.env_id, num_envs=1).make(args.device, args.seed)
        cfg = SACConfig(actor_hidden=(256, 256), critic_hidden=(256, 256), actor_lr=3e-4, critic_lr=3e-4,
                        temperature_lr=3e-4, gamma=0.99, tau=0.005, batch_size=args.batch_size, utd_ratio=1.0,
                        learning_starts=args.learning_starts, buffer_size=args.steps, init_temperature=1.0,
                        amp_bf16=variant == "bf16", compile=variant.startswith("compile"),
                        compile_mode="reduce-overhead" if variant == "compile-graphs" else "default")
        self.algo = cfg.build(self.env.spec, args.device, args.seed)
        self.storage = self.algo.make_storage(1)
        self.policy = self.algo.actor  # the learner's own actor: acting in-process needs no weight copies
        self.obs = self.env.reset(seed=args.seed)
        self.step = 0

    def train(self, steps: int) -> None:
        args, env = self.args, self.env
        low, high = float(env.spec.action.low or -1.0), float(env.spec.action.high or 1.0)
        dev = self.env.device
        no = torch.zeros(1, dtype=torch.bool, device=dev)
        version = torch.zeros(1, dtype=torch.int64, device=dev)
        env_index = torch.zeros(1, dtype=torch.int64, device=dev)
        obs = self.obs
        for step in range(self.step, self.step + steps):
            if step < args.learning_starts:
                action = torch.rand(1, *env.spec.action.shape, device=dev) * (high - low) + low
            else:
                action, _ = self.policy.act(obs)
            res = env.step(action)
            self.storage.add(TransitionBatch(obs=obs, action=action, reward=res.reward, terminated=res.terminated,
                                             truncated=res.truncated, next_obs=res.info["final_obs"],
                                             intervened=no, policy_version=version, env_index=env_index))
            obs = res.obs
            if step + 1 > args.learning_starts:  # SB3's condition: num_timesteps > learning_starts
                self.algo.update(self.storage.sample(args.batch_size))
        self.obs, self.step = obs, self.step + steps

    def evaluate(self) -> float:
        def act(o: np.ndarray) -> np.ndarray:
            obs = {"state": torch.as_tensor(o, dtype=torch.float32, device=self.env.device)[None]}
            a, _ = self.policy.act(obs, deterministic=True)
            return a[0].cpu().numpy()

        return evaluate(self.args.env_id, act, self.args.eval_episodes, 10_000)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=15_000)
    p.add_argument("--env-id", default="Pendulum-v1")
    p.add_argument("--learning-starts", type=int, default=1_000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads for both (1 is robust on a shared machine)")
    p.add_argument("--variants", default="fp32,bf16", help="comma-separated: fp32, bf16, compile, compile-graphs")
    p.add_argument("--skip-sb3", action="store_true")
    p.add_argument("--device", default="cpu", help="torch device for both learners (cpu, cuda)")
    p.add_argument("--chunk", type=int, default=1_000, help="env steps per learner before switching to the next")
    add_out_argument(p, NAME)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    started = dt.datetime.now(dt.UTC)
    print(f"{args.env_id}, {args.steps} steps, learning_starts {args.learning_starts}, batch {args.batch_size}, "
          f"UTD 1, (256, 256), torch {torch.__version__}, {args.threads} threads, device {args.device}, "
          f"{torch.cuda.get_device_name() if args.device.startswith('cuda') else platform.processor() or 'cpu'}")

    names = ([] if args.skip_sb3 else ["sb3"]) + [f"robot_rl {v}" for v in args.variants.split(",")]
    runners: dict[str, SB3Runner | OursRunner] = {
        name: SB3Runner(args) if name == "sb3" else OursRunner(args, name.split()[1]) for name in names}
    # Interleave the learners chunk by chunk so that load from other processes on a shared machine
    # hits all of them alike; only training is timed.
    seconds = dict.fromkeys(names, 0.0)
    chunk_seconds: dict[str, list[float]] = {n: [] for n in names}
    done = 0
    while done < args.steps:
        chunk = min(args.chunk, args.steps - done)
        for name, runner in runners.items():
            t0 = time.perf_counter()
            runner.train(chunk)
            chunk_seconds[name].append(time.perf_counter() - t0)
            seconds[name] += chunk_seconds[name][-1]
        done += chunk
        print(f"  {done} steps: " + ", ".join(f"{n} {seconds[n]:.1f} s" for n in names), flush=True)
    returns = {name: runners[name].evaluate() for name in names}

    # Median over the training chunks (after learning_starts) of sb3's chunk time / ours: robust to a
    # chunk that another process on the machine happened to slow down.
    trained = [i for i in range(len(chunk_seconds[names[0]])) if (i + 1) * args.chunk > args.learning_starts]

    def median_ratio(name: str) -> float | None:
        if args.skip_sb3 or not trained:
            return None
        return float(np.median([chunk_seconds["sb3"][i] / chunk_seconds[name][i] for i in trained]))

    learners = [{"learner": name, "wall_s": seconds[name], "env_steps_per_s": args.steps / seconds[name],
                 "speedup_vs_sb3": None if args.skip_sb3 else seconds["sb3"] / seconds[name],
                 "median_chunk_speedup_vs_sb3": median_ratio(name), "eval_return": returns[name],
                 "chunk_seconds": chunk_seconds[name]} for name in names]
    results = {"env_id": args.env_id, "steps": args.steps, "eval_episodes": args.eval_episodes,
               "device": args.device, "sb3_version": _sb3_version(), "learners": learners}
    path = write_result(args.out or default_path(NAME, started), NAME, args, results, started)
    print()
    print(table([{"results": results}]))
    print(f"result file: {path}")


def _sb3_version() -> str | None:
    try:
        import stable_baselines3
    except ImportError:
        return None
    return str(stable_baselines3.__version__)


def _x(r: float | None) -> str:
    return "–" if r is None else f"{r:.2f}×"


LABELS = {"sb3": "sb3", "robot_rl fp32": "robot_rl fp32 (default config)", "robot_rl bf16": "robot_rl bf16 "
          "(`amp_bf16=true`)", "robot_rl compile": "robot_rl compile (`compile=true`)",
          "robot_rl compile-graphs": "robot_rl compile-graphs (`compile_mode=reduce-overhead`)"}


def table(runs: list[dict[str, Any]]) -> str:
    """RESULTS_sac.md's table: wall-clock, env steps/s, speed-up vs sb3 (total and median chunk), eval return."""
    out = []
    for run in runs:
        res = run["results"]
        rows = [[LABELS.get(r["learner"], r["learner"]), f"{r['wall_s']:.1f}", f"{r['env_steps_per_s']:.0f}",
                 _x(r["speedup_vs_sb3"]), _x(r["median_chunk_speedup_vs_sb3"]), f"{r['eval_return']:.1f}"]
                for r in res["learners"]]
        out.append(markdown_table(["learner", "wall-clock (s)", "env steps/s", "speed-up vs sb3",
                                   "median chunk speed-up", f"eval return ({res['eval_episodes']} ep)"], rows,
                                  "lrrrrr"))
    return "\n\n".join(out)


def summary(runs: list[dict[str, Any]]) -> str:
    """RESULTS.md's short table: wall s, speed-up vs SB3, eval return."""
    out = []
    for run in runs:
        res = run["results"]
        names = {"sb3": f"Stable-Baselines3 {res.get('sb3_version') or ''}".strip(),
                 "robot_rl fp32": "robot_rl, fp32 (default)", "robot_rl bf16": "robot_rl, `algo.amp_bf16=true`"}
        rows = [[names.get(r["learner"], r["learner"]), f"{r['wall_s']:.1f}",
                 _x(r["speedup_vs_sb3"]) if r["learner"] == "sb3" else f"**{_x(r['speedup_vs_sb3'])}**",
                 f"{r['eval_return']:.1f}".replace("-", "−")] for r in res["learners"]]
        out.append(markdown_table(["learner", "wall s", "speed-up vs SB3",
                                   f"eval return ({res['eval_episodes']} episodes)"], rows, "lrrr"))
    return "\n\n".join(out)


if __name__ == "__main__":
    main()
