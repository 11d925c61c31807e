"""DSRL on a LeRobot flow VLA (pi0 / pi0.5 / SmolVLA): SAC learns the noise the frozen VLA is fed.

    # your fine-tuned checkpoint (a directory from lerobot's save_pretrained), on a GPU:
    python examples/dsrl_lerobot.py --checkpoint /path/to/smolvla_ckpt --task lang_reach --device cuda
    # a dry run with a tiny random SmolVLA built offline (CPU, a minute):
    python examples/dsrl_lerobot.py --env-steps 256

Needs lerobot with its smolvla (or pi) extra and torchvision beside it; see docs/flow-vla-lerobot.md.
The env must match the checkpoint's features by name (``image.<cam>`` ↔ ``observation.images.<cam>``,
``state`` ↔ ``observation.state``, chunk actions of the checkpoint's action size); a mismatch is
reported with every difference listed.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.runner import train


def main() -> None:
    """Build or take a LeRobot checkpoint, then run SAC on the dsrl task over it."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="LeRobot flow-VLA directory (default: build a tiny one)")
    p.add_argument("--task", default="lang_reach", help="task id the VLA acts in")
    p.add_argument("--instruction", default=None, help="instruction text, for envs without an instruction table")
    p.add_argument("--env-steps", type=int, default=256)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="dsrl_lerobot-"))
    ckpt = args.checkpoint
    if ckpt is None:
        from robot_rl.testing.tiny_smolvla import build_tiny_smolvla

        ckpt = build_tiny_smolvla(out / "tiny_smolvla", {"top": (48, 48)}, state_dim=6, action_dim=2, chunk_size=8,
                                  words="reach the red green blue target".split())
        print(f"built a tiny random SmolVLA in {ckpt} (a stand-in for a fine-tuned checkpoint)")
    overrides = [f"task.init_from={ckpt}", f"task.base_task={args.task}", "task.num_envs=4",
                 f"loop.total_env_steps={args.env_steps}", f"loop.eval_every_env_steps={args.env_steps}",
                 "loop.eval_episodes=8", "loop.eval_num_envs=4", "algo.learning_starts=64", f"run.device={args.device}",
                 f"run.root={out}", "run.name=dsrl"]
    if args.instruction:
        overrides.append(f"task.instruction={args.instruction}")
    result = train(resolve_train_config("dsrl", "sac", overrides=overrides))
    print(f"DSRL: {result.updates} SAC updates, last evaluation {result.last_eval}; run in {result.run_dir}")


if __name__ == "__main__":
    main()
