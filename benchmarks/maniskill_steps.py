"""ManiSkill3 env steps/s: ManiSkill's own stepping loop vs the same envs through ``ManiSkillVecEnv``.

Both loops step the *same* env objects with the same pre-drawn actions and reset finished scenes
the same step (raw: ``env.reset(options={"env_idx": rows})``, as ManiSkill's vector wrapper does), so
the ratio isolates the adapter: action check/clamp, observation conversion, final_obs, episode stats.
Rounds alternate raw/adapter so that load from other jobs hits both alike; the median is reported.

    python benchmarks/maniskill_steps.py                       # CPU: 1 and 8 envs state, 1 env RGB
    python benchmarks/maniskill_steps.py --device cuda --num-envs 64 1024 4096 --no-rgb   # GPU

Target: adapter overhead <= 10% (ratio >= 0.90). Writes one result file (``--out``; default
``benchmarks/results/maniskill_steps/<UTC time>.json``); :func:`table` renders it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

if TYPE_CHECKING:
    from robot_rl.sims.maniskill import ManiSkillTaskConfig, ManiSkillVecEnv

NAME = "maniskill_steps"
TARGET = 0.90


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def raw_steps(env: ManiSkillVecEnv, actions: torch.Tensor) -> float:
    """ManiSkill stepped directly (its tensors, its auto-reset of finished rows); seconds."""
    a_all = actions.to(env.sim_device)
    sizes = [e.unwrapped.num_envs for e in env.envs]
    _sync(env.sim_device)
    t0 = time.perf_counter()
    for a in a_all:
        start = 0
        for e, n in zip(env.envs, sizes, strict=True):
            _, _, te, tr, _ = e.step(a[start:start + n] if len(env.envs) > 1 else a)
            start += n
            done = te | tr
            if bool(done.any()):
                e.reset(options={"env_idx": done.nonzero().flatten()})
    _sync(env.sim_device)
    return time.perf_counter() - t0


def adapter_steps(env: ManiSkillVecEnv, actions: torch.Tensor) -> float:
    """The same envs through the adapter; seconds."""
    a_all = actions.to(env.device)
    _sync(env.device)
    t0 = time.perf_counter()
    for a in a_all:
        env.step(a)
    _sync(env.device)
    return time.perf_counter() - t0


def measure(cfg: ManiSkillTaskConfig, device: str, steps: int, rounds: int) -> dict[str, float]:
    """Median env-steps/s (steps × num_envs / s) of both loops and the build time."""
    t0 = time.perf_counter()
    env = cfg.make(device, seed=0)
    build_s = time.perf_counter() - t0
    env.reset(seed=0)
    gen = torch.Generator().manual_seed(0)
    actions = torch.rand(steps, env.num_envs, *env.spec.action.shape, generator=gen) * 2 - 1
    adapter_steps(env, actions[: max(steps // 10, 2)])  # warm-up (first render, CUDA graphs, caches)
    raw, ours = [], []
    for i in range(rounds):  # alternate which loop goes first, so neither always runs on warm caches
        first, second = (raw_steps, adapter_steps) if i % 2 == 0 else (adapter_steps, raw_steps)
        t_first, t_second = first(env, actions), second(env, actions)
        t_raw, t_ours = (t_first, t_second) if i % 2 == 0 else (t_second, t_first)
        raw.append(steps * env.num_envs / t_raw)
        ours.append(steps * env.num_envs / t_ours)
    env.close()
    return {"raw": statistics.median(raw), "adapter": statistics.median(ours), "build_s": build_s}


def table(runs: list[dict[str, Any]]) -> str:
    """| obs | num_envs | build s | raw ManiSkill steps/s | adapter steps/s | adapter/raw | overhead |, per run."""
    rows = [[r["obs"], str(r["num_envs"]), f"{r['build_s']:.1f}", f"{r['raw']:.1f}", f"{r['adapter']:.1f}",
             f"{r['adapter_over_raw']:.3f}", f"{(1 - r['adapter_over_raw']) * 100:+.1f}%"]
            for run in runs for r in run["results"]["rows"]]
    return markdown_table(["obs", "num_envs", "build s", "raw ManiSkill steps/s", "adapter steps/s", "adapter/raw",
                           "overhead"], rows)


def main() -> int:
    """Run the sweep, write the result file, print a Markdown table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--env-id", default="PickCube-v1")
    p.add_argument("--num-envs", type=int, nargs="+", default=[1, 8])
    p.add_argument("--steps", type=int, default=200, help="steps per round and loop")
    p.add_argument("--rgb-steps", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-rgb", action="store_true", help="skip the 1-env RGB case")
    add_out_argument(p, NAME)
    args = p.parse_args()
    from robot_rl.sims.maniskill import ManiSkillTaskConfig

    torch.set_num_threads(1)
    started = dt.datetime.now(dt.UTC)
    cases = [("state", n, args.steps) for n in args.num_envs]
    if not args.no_rgb:
        cases.append(("rgb", 1, args.rgb_steps))
    print(f"{args.env_id}, device {args.device}, {args.rounds} alternating rounds, median env-steps/s")
    print("| obs | num_envs | build s | raw ManiSkill steps/s | adapter steps/s | adapter/raw | overhead |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for obs, n, steps in cases:
        cfg = ManiSkillTaskConfig(env_id=args.env_id, num_envs=n, obs=obs,  # type: ignore[arg-type]
                                  image_size=128 if obs == "rgb" else None)
        r = measure(cfg, args.device, steps, args.rounds)
        ratio = r["adapter"] / r["raw"]
        rows.append({"obs": obs, "num_envs": n, "steps": steps, **r, "adapter_over_raw": ratio})
        print(f"| {obs} | {n} | {r['build_s']:.1f} | {r['raw']:.1f} | {r['adapter']:.1f} | {ratio:.3f} | "
              f"{(1 - ratio) * 100:+.1f}% |", flush=True)
    worst = min((r["adapter_over_raw"] for r in rows), default=1.0)
    print(f"worst adapter/raw ratio {worst:.3f} (target >= {TARGET:.2f}): {'PASS' if worst >= TARGET else 'FAIL'}")
    results = {"env_id": args.env_id, "device": args.device, "rows": rows, "worst_adapter_over_raw": worst,
               "target": TARGET, "met": worst >= TARGET}
    print(f"result file: {write_result(args.out or default_path(NAME, started), NAME, args, results, started)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
