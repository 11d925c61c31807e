"""How far a policy trained on nominal parameters carries on a "real" arm shifted further (issue 27).

Scores one run's policy (``--run``, e.g. a ``default`` run of ``real2sim.py``) on ``mujoco/reach_shifted`` over a
grid of servo gains, joint damping and action delays, 50 deterministic episodes each. It answers where the
nominal policy stops working, which is where a twin could pay (benchmarks/RESULTS_real2sim.md).

    MUJOCO_GL=egl python benchmarks/real2sim_probe.py --run benchmarks/out/real2sim/runs/default_s0
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch
from real2sim import real_task

from robot_rl.loop.evaluate import evaluate
from robot_rl.policy_io import load_policy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, required=True, help="a run directory (its latest checkpoint acts)")
    p.add_argument("--gains", type=float, nargs="+", default=[0.35, 0.2, 0.12, 0.08], help="actuator_gain_scale")
    p.add_argument("--damping", type=float, nargs="+", default=[4.0, 8.0], help="damping_scale")
    p.add_argument("--delays", type=int, nargs="+", default=[2, 4], help="action delay (control steps)")
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/real2sim_probe.json"))
    args = p.parse_args()
    torch.set_num_threads(1)
    policy = load_policy(args.run).policy
    rows = []
    for gain, damping, delay in itertools.product(args.gains, args.damping, args.delays):
        env = real_task(delay, gain, damping, num_envs=10).make("cpu", 5)
        try:
            r = evaluate(policy, env, args.episodes)
        finally:
            env.close()
        rows.append({"gain": gain, "damping": damping, "delay": delay, "success": r.success_rate,
                     "mean_length": r.mean_length})
        print(f"gain ×{gain:g}, damping ×{damping:g}, delay {delay}: success {r.success_rate:.2f}, "
              f"mean length {r.mean_length:.1f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"run": str(args.run), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
