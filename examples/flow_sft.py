"""Flow-matching VLA on the language task: scripted demos → SFT → RL fine-tuning (Flow-Noise PPO, Hi-ORS, Q-chunking).

    .venv/bin/python examples/flow_sft.py [--demos 200] [--sft-steps 2000] [--rl-iters 10] [--algo hiors]
    .venv/bin/python examples/flow_sft.py --algo flow_qc_fql   # Q-chunking with QC-FQL's one-step policy

1. records scripted-demonstrator episodes of ``lang_reach`` ("reach the red target") into an episode store;
2. trains a FlowVLAPolicy (camera CNN + language encoder + proprioception → action chunks) on them by
   flow matching, evaluating in simulation and writing checkpoints;
3. fine-tunes it in the ordinary training loop: ``flow_ppo`` (with the KL guard to the SFT policy) or
   ``hiors`` (rejection sampling + reward-weighted flow matching, mixing the demos back in), or Q-chunking
   (``flow_qc``: a critic over chunks, best-of-N acting; ``flow_qc_fql``: the same critic, QC-FQL's one-step policy
   acting), both mixing the demos into every batch.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from robot_rl.data.recorder import StoreSink, record_episodes
from robot_rl.data.store import EpisodeStore
from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.runner import train
from robot_rl.policies.flow.model import FlowVLAConfig
from robot_rl.policies.flow.sft import FlowSFTConfig, train_sft
from robot_rl.sims.lang_reach import LangReachConfig, LangReachDemonstrator


def main() -> None:
    """Record, SFT, then RL."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--demos", type=int, default=200)
    p.add_argument("--sft-steps", type=int, default=2000)
    p.add_argument("--rl-iters", type=int, default=10)
    p.add_argument("--algo", choices=["flow_ppo", "hiors", "flow_qc", "flow_qc_fql"], default="flow_ppo")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="flow_sft-"))
    torch.set_num_threads(max(1, torch.get_num_threads()))

    task = LangReachConfig(num_envs=25, image_size=48)
    env = task.make("cpu", 0)
    store = EpisodeStore.create(out / "demos", env.spec, fps=20.0)
    rec = record_episodes(env, LangReachDemonstrator(env), StoreSink(store), args.demos)
    print(f"recorded {rec.episodes} demos ({rec.frames} frames) into {out / 'demos'}")

    policy = FlowVLAConfig(horizon=8, num_steps=10, integrator="euler")
    sft = train_sft(FlowSFTConfig(policy=policy, steps=args.sft_steps, eval_every=args.sft_steps // 2),
                    out / "demos", task, out / "sft")
    for step, stats in sft.evaluations:
        print(f"SFT step {step}: success {stats['success_rate']:.0%}")

    rollout, envs = 4, 32
    algo, extra = args.algo, [f"algo.demos={out / 'demos'}"] if args.algo != "flow_ppo" else []
    if algo.startswith("flow_qc"):  # off-policy: a replay of chunk steps; CPU-sized batches and update ratio
        extra += ["algo.batch_size=128", "algo.target_samples=4", "algo.utd_ratio=0.1", "algo.learning_starts=256",
                  *(["algo.actor=fql"] if algo == "flow_qc_fql" else [])]
        algo = "flow_qc"
    else:
        extra.append(f"algo.rollout_length={rollout}")
    cfg = resolve_train_config("lang_reach", algo, overrides=[*extra,
        "task.image_size=48", f"task.num_envs={envs}", "task.chunk_horizon=8", f"algo.init_from={out / 'sft'}",
        f"loop.total_env_steps={args.rl_iters * rollout * envs}",
        f"loop.eval_every_env_steps={rollout * envs * 5}", "loop.eval_episodes=50", "loop.eval_num_envs=25",
        f"run.root={out}", f"run.name={args.algo}"])
    result = train(cfg)
    print(f"{args.algo}: {result.updates} updates, last evaluation {result.last_eval}; run in {result.run_dir}")


if __name__ == "__main__":
    main()
