"""Crash-safe replay in a few lines: write transitions, "crash", reopen, sample n-step returns.

    .venv/bin/python examples/replay_on_disk.py [DIR]

The buffer appends every ``segment_transitions`` rows to checksummed segment files; reopening the
directory (as `robot-rl train --resume` does) brings back every committed row. Damage to a segment
is cut off and reported, never loaded.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.replay.segments import open_buffer

SPEC = EnvSpec(observation={"state": ArraySpec((3,)), "image.wrist": ArraySpec((64, 64, 3), "uint8")},
               action=ArraySpec((2,), "float32", -1.0, 1.0))


def step(t: int, num_envs: int = 4, episode_length: int = 25) -> TransitionBatch:
    """One vectorised step of a toy env whose state is the step counter (obs of t+1 = next_obs of t)."""
    def obs(k: int) -> dict[str, torch.Tensor]:
        return {"state": torch.full((num_envs, 3), float(k % episode_length)),
                "image.wrist": torch.full((num_envs, 64, 64, 3), k % 255, dtype=torch.uint8)}

    done = torch.full((num_envs,), (t + 1) % episode_length == 0)
    return TransitionBatch(obs=obs(t), action=torch.zeros(num_envs, 2), reward=torch.ones(num_envs), terminated=done,
                           truncated=torch.zeros(num_envs, dtype=torch.bool), next_obs=obs(t + 1),
                           intervened=torch.zeros(num_envs, dtype=torch.bool),
                           policy_version=torch.zeros(num_envs, dtype=torch.int64), env_index=torch.arange(num_envs))


def main(directory: Path) -> None:
    buf = ReplayBuffer(SPEC, capacity=5_000, n_step=3, gamma=0.9)
    print(open_buffer(buf, directory, segment_transitions=200).summary())
    start = buf.transitions_written // 4
    for t in range(start, start + 300):
        buf.add(step(t))
    print(f"added 1200 rows; durable watermark {buf.watermark} (rows, slots) before the final flush")
    buf.flush()
    print(f"{buf.slots_written / buf.transitions_written:.3f} observation slots per transition "
          "(1 + 1/episode length: next_obs is stored once, by index)")
    del buf  # a crash: nothing in memory survives

    again = ReplayBuffer(SPEC, capacity=5_000, n_step=3, gamma=0.9)
    print(open_buffer(again, directory, segment_transitions=200).summary())
    s = again.sample(4, generator=torch.Generator().manual_seed(0))
    print("3-step returns", s.reward.tolist(), "bootstrap discounts", s.extras["discount"].tolist())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "replay")
