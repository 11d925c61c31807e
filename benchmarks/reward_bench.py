"""Reward-model benchmarks: inference throughput on CPU and the cost inside an actor loop.

    .venv/bin/python benchmarks/reward_bench.py [--quick]

Measures, with one torch thread (the actor's share of a small CPU):

- success-classifier and PRM throughput (frames/s, pairs/s) at batch 1 / 16 / 64 on 64×64 frames;
- the actor loop period of ``reach_pixels`` (64×64, 16 sub-envs, random actions) without a reward
  model, with :class:`RewardWrapper` (one batched forward per step), with the peer design that
  calls the classifier once per sub-env (a per-env loop), and with PRM shaping
  (:class:`ProgressShapingWrapper`), printing the ratios.

Models are untrained (inference cost does not depend on the weights). Writes nothing; the results
are copied into benchmarks/RESULTS_rewards.md.
"""

from __future__ import annotations

import argparse
import time

import torch

from robot_rl.core.env import VecEnv
from robot_rl.rewards.classifier import SuccessClassifier
from robot_rl.rewards.prm import ProcessRewardModel
from robot_rl.rewards.wrapper import ProgressShapingWrapper, RewardWrapper
from robot_rl.sims.reach_pixels import ReachPixelsConfig

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


def main() -> None:
    """Run and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timings (smoke run)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    min_s, steps, rounds = (0.3, 10, 2) if args.quick else (3.0, 50, 9)
    print("| model | batch | items/s (64×64 frames; PRM: frame pairs) | vs batch 1 |\n| --- | --- | --- | --- |")
    single: dict[str, float] = {}
    for model, batch, rate in throughput(min_s):
        single.setdefault(model, rate)
        print(f"| {model} | {batch} | {rate:,.0f} | {rate / single[model]:.2f}× |")
    periods = loop_period(steps, rounds)
    base = periods["env reward"]
    print("\n| actor loop, reach_pixels 64×64, 16 sub-envs | ms per step | vs env reward |\n| --- | --- | --- |")
    for name, p in periods.items():
        print(f"| {name} | {p * 1e3:.2f} | {p / base:.2f}× |")
    batched, per_env = periods["RewardWrapper (batched)"], periods["per-env classifier calls"]
    print(f"\nbatched wrapper adds {(batched - base) * 1e3:.2f} ms/step; per-env calls add "
          f"{(per_env - base) * 1e3:.2f} ms/step ({(per_env - base) / max(batched - base, 1e-9):.1f}× more)")


if __name__ == "__main__":
    main()
