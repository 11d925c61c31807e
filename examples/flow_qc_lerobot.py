"""Q-chunking over a LeRobot SmolVLA: a chunk critic picks the best of the frozen VLA's N chunks.

    # your fine-tuned SmolVLA (a directory from lerobot's save_pretrained), on a GPU:
    python examples/flow_qc_lerobot.py --checkpoint /path/to/smolvla_ckpt --task lang_reach --device cuda
    # a dry run with a tiny random SmolVLA built offline (CPU, under a minute):
    python examples/flow_qc_lerobot.py --env-steps 64

The VLA stays frozen and proposes ``--samples`` chunks per state; only the critic ensemble trains (on the
chunks' TD targets) and is published to actors. Needs lerobot with its smolvla extra and torchvision beside it;
see docs/flow-vla-lerobot.md.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.runner import train


def main() -> None:
    """Build or take a SmolVLA checkpoint, then run flow_qc on the task over it."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="LeRobot SmolVLA directory (default: build a tiny one)")
    p.add_argument("--task", default="lang_reach", help="task id the VLA acts in (chunk actions)")
    p.add_argument("--chunk-horizon", type=int, default=8, help="actions of each chunk the VLA proposes")
    p.add_argument("--execute", type=int, default=4, help="actions of each chunk executed before replanning")
    p.add_argument("--samples", type=int, default=4, help="VLA chunks per state the critic chooses from")
    p.add_argument("--instruction", default=None, help="instruction text, for tasks without an instruction table")
    p.add_argument("--env-steps", type=int, default=64)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="flow_qc_lerobot-"))
    ckpt = args.checkpoint
    if ckpt is None:
        from robot_rl.testing.tiny_smolvla import build_tiny_smolvla

        ckpt = build_tiny_smolvla(out / "tiny_smolvla", {"top": (48, 48)}, state_dim=6, action_dim=2, chunk_size=8,
                                  words="reach the red green blue target".split())
        print(f"built a tiny random SmolVLA in {ckpt} (a stand-in for a fine-tuned checkpoint)")
    overrides = [f"algo.init_from={ckpt}", f"task.chunk_horizon={args.chunk_horizon}",
                 f"task.execute_steps={args.execute}", f"algo.execute_steps={args.execute}", "task.num_envs=4",
                 f"algo.num_samples={args.samples}", f"algo.target_samples={args.samples}", "algo.batch_size=32",
                 "algo.learning_starts=16", f"loop.total_env_steps={args.env_steps}",
                 f"loop.eval_every_env_steps={args.env_steps}", "loop.eval_episodes=8", "loop.eval_num_envs=4",
                 f"run.device={args.device}", f"run.root={out}", "run.name=flow_qc"]
    if args.instruction:
        overrides.append(f"algo.instruction={args.instruction}")
    result = train(resolve_train_config(args.task, "flow_qc", overrides=overrides))
    print(f"Q-chunking over the VLA: {result.updates} critic updates, last evaluation {result.last_eval}; "
          f"run in {result.run_dir}")


if __name__ == "__main__":
    main()
