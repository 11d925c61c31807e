"""SAC on the MuJoCo arm tasks (state observations): wall-clock and env steps to 90 % success.

    .venv/bin/python benchmarks/mujoco_train.py --tasks mujoco/reach mujoco/pick_cube --budget 200000

Each task runs ``robot-rl train --task T`` with the task's SAC preset (through
``resolve_train_config`` + ``train``, exactly what the CLI does), stopping at >= 90 % success over
the evaluation episodes or at ``--budget`` env steps. The peer in the same run is the built-in
planar ``reach`` task with its defaults, the toolkit's reference for "trains fast"; the ratio printed
is each task's wall-clock over that reference's.
"""

import argparse
import platform
import tempfile
import time

import torch

from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.runner import train


def run(task: str, seed: int, budget: int, root: str) -> tuple[bool, float, int, int, float]:
    """Train one task; ``(reached, wall_s, env_steps, updates, last eval success)``."""
    cfg = resolve_train_config(task=task, overrides=[
        f"run.seed={seed}", f"run.root={root}", f"run.name={task.replace('/', '_')}-s{seed}", "run.progress=false",
        f"loop.total_env_steps={budget}"])
    t0 = time.monotonic()
    result = train(cfg)
    wall = time.monotonic() - t0
    ev = result.last_eval
    return result.reached_threshold, wall, result.env_steps, result.updates, ev.success_rate if ev else float("nan")


def main() -> None:
    """Run the tasks and the reference, print a table with ratios."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["mujoco/reach", "mujoco/pick_cube"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=200_000, help="env steps per task at most")
    ap.add_argument("--reference", default="reach", help="peer task run in the same process ('' to skip)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for task in ([args.reference] if args.reference else []) + args.tasks:
            rows.append((task, *run(task, args.seed, args.budget, root)))
    print(f"\nmachine: {platform.processor() or platform.machine()}, torch {torch.__version__}, seed {args.seed}")
    ref = rows[0][2] if args.reference else float("nan")
    print(f"{'task':<20} {'reached 90%':>11} {'wall s':>8} {'env steps':>10} {'updates':>8} {'success':>8} "
          f"{'wall / ref':>10}")
    for task, reached, wall, steps, updates, success in rows:
        print(f"{task:<20} {reached!s:>11} {wall:8.1f} {steps:10d} {updates:8d} {success:8.0%} {wall / ref:10.2f}")


if __name__ == "__main__":
    main()
