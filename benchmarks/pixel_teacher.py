"""A trained 64×64 pixel SAC teacher for the export and distillation benchmarks (issue 28).

    python benchmarks/pixel_teacher.py demos runs/reach_pixels_demos --episodes 200     # scripted demos, ~1 min
    robot-rl train --task reach_pixels --algo sac --name pixel_sac_teacher \
        algo.image_channels=8 algo.image_features=32 'algo.actor_hidden=[64,64]' algo.amp_bf16=true \
        algo.batch_size=128 algo.learning_starts=2000 algo.demo_ratio=0.5 \
        loop.demos_path=runs/reach_pixels_demos loop.eval_every_env_steps=10000
    python benchmarks/distill_c_closed_loop.py runs/pixel_sac_teacher --json pixel_sac_c_closed_loop.json

Pixel SAC from scratch learns slowly on two CPU cores (about 13 updates/s here with this small encoder), so the
teacher is trained as HIL-SERL/RLPD train on real arms: SAC with half of every batch drawn from demonstrations.
The demonstrations come from :class:`~robot_rl.sims.reach_pixels_expert.ReachPixelsExpert` (goal from the image,
arm from the joints), with Gaussian noise on its pre-squash action so they cover states off the straight line.
The actor is the export benchmark's ``pixels64`` architecture (8-channel DrQ encoder, 32 features, 64×64 head),
the one that fits 512 KB of flash and runs at ≥ 20 Hz on a 480 MHz Cortex-M7 as q15.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from robot_rl.core.algorithm import Policy
from robot_rl.core.transition import Obs
from robot_rl.data.recorder import StoreSink, record_episodes
from robot_rl.data.store import EpisodeStore
from robot_rl.sims.reach_pixels import ReachPixelsConfig
from robot_rl.sims.reach_pixels_expert import ReachPixelsExpert


class NoisyExpert(Policy):
    """The scripted expert with N(0, σ²) noise on its pre-squash action (seeded, so demos are reproducible)."""

    def __init__(self, cfg: ReachPixelsConfig, sigma: float, seed: int) -> None:
        super().__init__()
        self.expert, self.sigma = ReachPixelsExpert(cfg), sigma
        self.gen = torch.Generator().manual_seed(seed)

    def act(self, obs: Obs, deterministic: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        u = self.expert.pre_squash_action(obs)
        noise = torch.randn(u.shape, generator=self.gen) * self.sigma
        return torch.tanh(u + noise), {}


def record_demos(out: Path, episodes: int, sigma: float, seed: int, image_size: int) -> None:
    """Write ``episodes`` noisy-expert episodes of ``reach_pixels`` into a new episode store at ``out``."""
    cfg = ReachPixelsConfig(image_size=image_size)
    env = cfg.make("cpu", seed, num_envs=min(32, episodes))
    try:
        sink = StoreSink(EpisodeStore.create(out, env.spec, fps=20.0, task="reach_pixels",
                                             source={"policy": f"ReachPixelsExpert + N(0, {sigma}^2) on u"}))
        result = record_episodes(env, NoisyExpert(cfg, sigma, seed), sink, episodes, seed=seed, task="reach_pixels")
    finally:
        env.close()
    print(f"recorded {result.episodes} episodes ({result.frames} frames, {result.successes} successes) into {out}")


def main() -> None:
    """Record the teacher's demonstrations (the training and evaluation commands are in the docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    demos = sub.add_parser("demos", help="record noisy scripted-expert demonstrations of reach_pixels")
    demos.add_argument("out", type=Path)
    demos.add_argument("--episodes", type=int, default=200)
    demos.add_argument("--sigma", type=float, default=0.5, help="noise on the expert's pre-squash action")
    demos.add_argument("--seed", type=int, default=3)
    demos.add_argument("--image-size", type=int, default=64)
    args = ap.parse_args()
    record_demos(args.out, args.episodes, args.sigma, args.seed, args.image_size)


if __name__ == "__main__":
    main()
