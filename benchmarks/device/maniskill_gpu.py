"""ManiSkill3 on the GPU machine: PickCube-v1 steps/s on ``physx_cuda`` (raw vs adapter) and PPO time to success.

Run through ``benchmarks/device/maniskill_gpu.sh`` (which installs the carried wheels and the Vulkan
loader first). Phases, each also runnable alone:

    python3 benchmarks/device/maniskill_gpu.py steps  --num-envs 64 1024 4096
    python3 benchmarks/device/maniskill_gpu.py ppo    --wall-s 230
    python3 benchmarks/device/maniskill_gpu.py ppo    --smoke     # a few CPU steps: checks the wiring here

``steps`` reuses ``benchmarks/maniskill_steps.py``: the same envs stepped by ManiSkill's own loop and
through ``ManiSkillVecEnv``, alternating, median of the rounds; the ratio is the adapter's cost.
``ppo`` trains robot-rl's PPO (``--task maniskill/PickCube-v1 --algo ppo`` plus the overrides below,
ManiSkill's own PPO baseline settings where ours has the same knob) until an evaluation reaches the
success threshold or ``--wall-s`` passes (then it stops like Ctrl-C: checkpoint and final evaluation).
Each phase prints one ``SUMMARY`` line.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

#: robot-rl PPO on PickCube-v1 state. ManiSkill's baseline (examples/baselines/ppo) uses 50-step
#: rollouts, gamma 0.8, lambda 0.9, 8 epochs of 32 minibatches, lr 3e-4 and no entropy bonus.
PPO_OVERRIDES = [
    "task.num_envs=1024", "algo.rollout_length=50", "algo.gamma=0.8", "algo.lam=0.9", "algo.num_epochs=8",
    "algo.num_minibatches=32", "algo.lr=3e-4", "algo.entropy_coef=0.0", "algo.init_noise_std=0.6",
    "algo.schedule=fixed", "loop.total_env_steps=100_000_000", "loop.success_threshold=0.9",
    "loop.eval_every_env_steps=512_000", "loop.eval_episodes=256", "loop.checkpoint_every_s=600",
    "run.progress=false",
]
SMOKE_OVERRIDES = ["task.num_envs=2", "algo.rollout_length=4", "algo.num_minibatches=2", "algo.num_epochs=1",
                   "loop.total_env_steps=16", "loop.eval_every_env_steps=8", "loop.eval_episodes=2",
                   "run.device=cpu", "task.max_episode_steps=6"]


def phase_steps(args: argparse.Namespace) -> None:
    """Raw ManiSkill vs adapter steps/s at each ``num_envs``."""
    from maniskill_steps import measure

    from robot_rl.sims.maniskill import ManiSkillTaskConfig

    rows = []
    print("| num_envs | build s | raw ManiSkill env-steps/s | adapter env-steps/s | adapter/raw |")
    print("|---|---|---|---|---|")
    for n in args.num_envs:
        try:
            r = measure(ManiSkillTaskConfig(num_envs=n), args.device, args.steps, args.rounds)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:  # keep the sizes that fit
            print(f"| {n} | failed: {str(e).splitlines()[0][:120]} | | | |", flush=True)
            continue
        ratio = r["adapter"] / r["raw"]
        rows.append(f"{n}: {r['raw']:.0f} raw / {r['adapter']:.0f} adapter ({ratio:.3f})")
        print(f"| {n} | {r['build_s']:.1f} | {r['raw']:.0f} | {r['adapter']:.0f} | {ratio:.3f} |", flush=True)
        torch.cuda.empty_cache()
    backend = "physx_cuda" if torch.device(args.device).type == "cuda" else "physx_cpu"
    print(f"SUMMARY steps/s PickCube-v1 {backend}: " + "; ".join(rows))


def phase_ppo(args: argparse.Namespace) -> None:
    """PPO on PickCube-v1 until success or the wall-clock limit; time to the first successful eval."""
    from robot_rl.loop.config import resolve_train_config
    from robot_rl.loop.runner import train
    from robot_rl.runlog import RunLog

    overrides = list(PPO_OVERRIDES)
    if args.smoke:
        overrides += SMOKE_OVERRIDES
    overrides += [f"run.root={args.root}", f"run.name=ppo-pickcube-{int(time.time())}", *args.override]
    cfg = resolve_train_config("maniskill/PickCube-v1", "ppo", overrides=overrides)
    print(f"task {cfg.task}\nalgo {cfg.algo}", flush=True)

    def stop(*_: Any) -> None:  # the runner handles Ctrl-C: checkpoint, final eval, summary
        raise KeyboardInterrupt

    signal.signal(signal.SIGALRM, stop)
    signal.alarm(int(args.wall_s))
    t0 = time.monotonic()
    result = train(cfg)
    signal.alarm(0)
    total = time.monotonic() - t0
    evals = RunLog(result.run_dir).read_eval()
    first = next((e for e in evals if e["success_rate"] >= (cfg.loop.success_threshold or 1.0)), None)
    best = max(evals, key=lambda e: e["success_rate"]) if evals else None
    for e in evals:
        print(f"eval {int(e['env_steps']):>10,} steps {e['wall_s']:7.1f}s  success {e['success_rate']:.2f}  "
              f"return {e['mean_return']:.2f}")
    sps = result.env_steps / max(result.wall_s, 1e-9)
    reached = (f"reached {first['success_rate']:.0%} at {first['wall_s']:.0f}s training "
               f"({int(first['env_steps']):,} env steps)" if first else
               f"did not reach {cfg.loop.success_threshold:.0%} in {result.wall_s:.0f}s "
               f"(best {best['success_rate']:.0%} at {best['wall_s']:.0f}s)" if best else "no evaluation")
    print(f"SUMMARY ppo PickCube-v1 num_envs={cfg.task.num_envs}: {reached}; {result.env_steps:,} env steps at "
          f"{sps:,.0f} steps/s incl. updates and evals; {total:.0f}s with env builds; stop: {result.stop_reason}")


def main() -> int:
    """Parse the phase and run it."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="phase", required=True)
    s = sub.add_parser("steps")
    s.add_argument("--device", default="cuda")
    s.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024, 4096])
    s.add_argument("--steps", type=int, default=50)
    s.add_argument("--rounds", type=int, default=2)
    t = sub.add_parser("ppo")
    t.add_argument("--wall-s", type=float, default=230)
    t.add_argument("--root", default=tempfile.gettempdir())
    t.add_argument("--smoke", action="store_true")
    t.add_argument("--override", nargs="*", default=[], help="more dotted overrides (algo.lr=1e-4 ...)")
    args = p.parse_args()
    torch.set_float32_matmul_precision("high")
    phase_steps(args) if args.phase == "steps" else phase_ppo(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
