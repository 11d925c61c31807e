"""Flow-Noise PPO on a LeRobot SmolVLA: fine-tune the VLA's action expert with chunk-level PPO.

    # your fine-tuned SmolVLA (a directory from lerobot's save_pretrained), on a GPU:
    python examples/flow_ppo_lerobot.py --checkpoint /path/to/smolvla_ckpt --task lang_reach --device cuda
    # a dry run with a tiny random SmolVLA built offline (CPU, under a minute):
    python examples/flow_ppo_lerobot.py --env-steps 64

The VLM stays frozen and the action expert, the per-step noise σ and a critic on the VLM's prefix
features train (``--unfreeze`` trains the whole VLA). Needs lerobot with its smolvla extra and
torchvision beside it; see docs/flow-vla-lerobot.md.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.runner import train


def main() -> None:
    """Build or take a SmolVLA checkpoint, then run flow_ppo on the task with it."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="LeRobot SmolVLA directory (default: build a tiny one)")
    p.add_argument("--task", default="lang_reach", help="task id the VLA acts in (chunk actions)")
    p.add_argument("--chunk-horizon", type=int, default=8, help="actions of each chunk the env executes")
    p.add_argument("--instruction", default=None, help="instruction text, for tasks without an instruction table")
    p.add_argument("--unfreeze", action="store_true", help="train the whole VLA, not only the action expert")
    p.add_argument("--env-steps", type=int, default=64)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="flow_ppo_lerobot-"))
    ckpt = args.checkpoint
    if ckpt is None:
        from robot_rl.testing.tiny_smolvla import build_tiny_smolvla

        ckpt = build_tiny_smolvla(out / "tiny_smolvla", {"top": (48, 48)}, state_dim=6, action_dim=2, chunk_size=8,
                                  words="reach the red green blue target".split())
        print(f"built a tiny random SmolVLA in {ckpt} (a stand-in for a fine-tuned checkpoint)")
    overrides = [f"algo.init_from={ckpt}", f"task.chunk_horizon={args.chunk_horizon}", "task.num_envs=4",
                 "algo.rollout_length=4", "algo.num_minibatches=2", f"algo.freeze_encoder={not args.unfreeze}",
                 f"loop.total_env_steps={args.env_steps}", f"loop.eval_every_env_steps={args.env_steps}",
                 "loop.eval_episodes=8", "loop.eval_num_envs=4", f"run.device={args.device}", f"run.root={out}",
                 "run.name=flow_ppo"]
    if args.instruction:
        overrides.append(f"algo.instruction={args.instruction}")
    result = train(resolve_train_config(args.task, "flow_ppo", overrides=overrides))
    print(f"Flow-Noise PPO: {result.updates} updates, last evaluation {result.last_eval}; run in {result.run_dir}")


if __name__ == "__main__":
    main()
