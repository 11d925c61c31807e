"""Reward-model benchmarks: inference throughput on CPU and the cost inside an actor loop.

    .venv/bin/python benchmarks/reward_bench.py [--quick]

Measures, with one torch thread (the actor's share of a small CPU):

- success-classifier and PRM throughput (frames/s, pairs/s) at batch 1 / 16 / 64 on 64×64 frames;
- the actor loop period of ``reach_pixels`` (64×64, 16 sub-envs, random actions) without a reward
  model, with :class:`RewardWrapper` (one batched forward per step), with the peer design that
  calls the classifier once per sub-env (a per-env loop), and with PRM shaping
  (:class:`ProgressShapingWrapper`), printing the ratios.

Models are untrained (inference cost does not depend on the weights). Writes one result file (``--out``;
default ``benchmarks/results/reward_bench/<UTC time>.json``); :func:`throughput_table` and :func:`loop_table`
render benchmarks/RESULTS_rewards.md's tables from it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

import torch

from robot_rl.core.env import VecEnv
from robot_rl.rewards.classifier import SuccessClassifier
from robot_rl.rewards.prm import ProcessRewardModel
from robot_rl.rewards.wrapper import ProgressShapingWrapper, RewardWrapper
from robot_rl.sims.reach_pixels import ReachPixelsConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

NAME = "reward_bench"
SIZE = 64


def _rate(fn: object, items: int, min_s: float) -> float:
    """Items per second of ``fn()`` over at least ``min_s`` seconds (after one warm-up call)."""
    fn()  # type: ignore[operator]
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_s:
        fn()  # type: ignore[operator]
        n += 1
    return n * items / (time.perf_counter() - t0)


def throughput(min_s: float) -> list[tuple[str, int, float]]:
    """(model, batch, items/s) rows."""
    clf = SuccessClassifier({"image.top": (SIZE, SIZE, 3)}).eval()
    prm = ProcessRewardModel({"image.top": (SIZE, SIZE, 3)}).eval()
    goal = "reach the green target"
    prm.tokenizer.fit([goal])
    rows = []
    for batch in (1, 16, 64):
        x = {"image.top": torch.randint(0, 256, (batch, SIZE, SIZE, 3), dtype=torch.uint8)}
        rows.append(("classifier", batch, _rate(lambda x=x: clf.probability(x), batch, min_s)))
        rows.append(("prm", batch, _rate(lambda x=x: prm(x, x, goal), batch, min_s)))
    return rows


class PerEnvClassifier(RewardWrapper):
    """The peer: the classifier called once per sub-env (batch 1), as a per-robot reward script would."""

    def step(self, action: torch.Tensor):  # type: ignore[no-untyped-def]
        """Step, then score each sub-env's frame separately."""
        res = self.env.step(action)
        seen = res.info["final_obs"]
        fired = torch.cat([self.classifier.predict({k: seen[k][i:i + 1] for k in self.classifier.cameras})
                           for i in range(self.num_envs)])
        return res._replace(reward=torch.where(fired, 0.0, -1.0))


def loop_period(steps: int, rounds: int, num_envs: int = 16) -> dict[str, float]:
    """Seconds per actor step (policy = random actions) for each reward variant.

    The variants run interleaved in ``rounds`` rounds of ``steps`` steps and each reports its
    fastest round: on a machine shared with other jobs, the minimum is the least disturbed figure,
    and interleaving exposes every variant to the same background load.
    """
    clf = SuccessClassifier({"image.top": (SIZE, SIZE, 3)}).eval()
    prm = ProcessRewardModel({"image.top": (SIZE, SIZE, 3)}).eval()
    prm.tokenizer.fit(["reach the green target"])
    envs: dict[str, VecEnv] = {}
    for name in ("env reward", "RewardWrapper (batched)", "per-env classifier calls", "ProgressShapingWrapper (PRM)"):
        env: VecEnv = ReachPixelsConfig(image_size=SIZE).make("cpu", 0, num_envs=num_envs)
        if name.startswith("RewardWrapper"):
            env = RewardWrapper(env, clf)
        elif name.startswith("per-env"):
            env = PerEnvClassifier(env, clf)
        elif name.startswith("Progress"):
            env = ProgressShapingWrapper(env, prm, "reach the green target")
        env.reset(seed=0)
        envs[name] = env
    gen = torch.Generator().manual_seed(0)
    best = dict.fromkeys(envs, float("inf"))
    with torch.no_grad():
        for _ in range(rounds):
            for name, env in envs.items():
                actions = [torch.rand(num_envs, 2, generator=gen) * 2 - 1 for _ in range(steps)]
                t0 = time.perf_counter()
                for a in actions:
                    env.step(a)
                best[name] = min(best[name], (time.perf_counter() - t0) / steps)
    return best


LOOP_LABELS = {"env reward": "env reward", "RewardWrapper (batched)": "RewardWrapper (batched classifier)",
               "per-env classifier calls": "per-env classifier calls (peer design)",
               "ProgressShapingWrapper (PRM)": "ProgressShapingWrapper (PRM shaping)"}


def measure(min_s: float, steps: int, rounds: int, num_envs: int = 16) -> dict[str, Any]:
    """Throughput rows (each rate over at least ``min_s``) and loop periods (``rounds`` of ``steps`` steps of
    ``num_envs`` sub-envs), with the ratios each table prints."""
    rows = []
    single: dict[str, float] = {}
    for model, batch, rate in throughput(min_s):
        single.setdefault(model, rate)
        rows.append({"model": model, "batch": batch, "items_per_s": rate, "vs_batch_1": rate / single[model]})
    periods = loop_period(steps, rounds, num_envs)
    base = periods["env reward"]
    loop = [{"variant": name, "ms_per_step": p * 1e3, "vs_env_reward": p / base} for name, p in periods.items()]
    batched, per_env = periods["RewardWrapper (batched)"], periods["per-env classifier calls"]
    return {"image_size": SIZE, "num_envs": num_envs, "min_s": min_s, "steps": steps, "rounds": rounds,
            "throughput": rows, "loop": loop, "batched_adds_ms": (batched - base) * 1e3,
            "per_env_adds_ms": (per_env - base) * 1e3,
            "per_env_over_batched_added": (per_env - base) / max(batched - base, 1e-9)}


def throughput_table(runs: list[dict[str, Any]]) -> str:
    """| model | batch | items/s | vs batch 1 |, rows ordered by batch as measured."""
    rows = [[r["model"], str(r["batch"]), f"{r['items_per_s']:,.0f}", f"{r['vs_batch_1']:.2f}×"]
            for run in runs for r in run["results"]["throughput"]]
    return markdown_table(["model", "batch", "items/s (64×64 frames; PRM: frame pairs)", "vs batch 1"], rows)


def loop_table(runs: list[dict[str, Any]]) -> str:
    """| actor loop variant | ms per step | vs env reward |, then what the batched and per-env classifier add."""
    out = []
    for run in runs:
        res = run["results"]
        rows = [[LOOP_LABELS.get(r["variant"], r["variant"]), f"{r['ms_per_step']:.2f}", f"{r['vs_env_reward']:.2f}×"]
                for r in res["loop"]]
        out.append(markdown_table([f"actor loop, reach_pixels {res['image_size']}×{res['image_size']}, "
                                   f"{res['num_envs']} sub-envs", "ms per step", "vs env reward"], rows))
        out.append(f"\nThe batched wrapper adds {res['batched_adds_ms']:.2f} ms per step for {res['num_envs']} "
                   f"sub-envs; calling the classifier once per sub-env adds {res['per_env_adds_ms']:.2f} ms, "
                   f"{res['per_env_over_batched_added']:.1f}× more.")
    return "\n".join(out)


def main() -> None:
    """Run, write the result file, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timings (smoke run)")
    add_out_argument(parser, NAME)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = dt.datetime.now(dt.UTC)
    results = measure(*((0.3, 10, 2) if args.quick else (3.0, 50, 9)))
    run = {"results": results}
    print(throughput_table([run]) + "\n\n" + loop_table([run]))
    print(f"result file: {write_result(args.out or default_path(NAME, started), NAME, args, results, started)}")


if __name__ == "__main__":
    main()
