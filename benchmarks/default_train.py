"""`robot-rl train` with its defaults: wall-clock to the success threshold against the 5-minute target.

    .venv/bin/python benchmarks/default_train.py --seeds 0 1 2

Each seed runs the exact default config (SAC on reach, stop at ≥90% success over 100 evaluation
episodes) in this process and reports wall-clock, env steps and updates; the ratio is
time / 300 s (≤ 1.0 meets the target). Evaluation time is included, as a user would see it.
"""

import argparse
import platform
import tempfile
import time

import torch

from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.runner import train


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--limit-s", type=float, default=300.0, help="the target wall-clock (s)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for seed in args.seeds:
            cfg = resolve_train_config(overrides=[f"run.seed={seed}", f"run.root={root}", f"run.name=s{seed}",
                                                  "run.progress=false"])
            t0 = time.monotonic()
            result = train(cfg)
            wall = time.monotonic() - t0
            ev = result.last_eval
            rows.append((seed, result.reached_threshold, wall, result.env_steps, result.updates,
                         ev.success_rate if ev else float("nan")))
    print(f"\nmachine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
          f"torch {torch.__version__}")
    print(f"{'seed':>4} {'reached':>7} {'wall s':>8} {'env steps':>10} {'updates':>8} {'success':>8} "
          f"{'wall/limit':>10}")
    for seed, reached, wall, steps, updates, succ in rows:
        print(f"{seed:>4} {reached!s:>7} {wall:>8.1f} {steps:>10,} {updates:>8,} {succ:>8.0%} "
              f"{wall / args.limit_s:>10.2f}")
    walls = sorted(r[2] for r in rows)
    median = walls[len(walls) // 2]
    print(f"median wall-clock {median:.1f}s = {median / args.limit_s:.2f} × the {args.limit_s:.0f}s target; "
          f"reached in {sum(r[1] for r in rows)}/{len(rows)} seeds")


if __name__ == "__main__":
    main()
