"""stable-baselines3's PPO on robot_rl's ``reach`` task, through the shipped SB3 adapter (docs/gym-interop.md).

    pip install 'robot-rl[sb3]'
    python examples/sb3_ppo_reach.py                     # ~15 s on one CPU core, success 1.00 at the end
    python examples/sb3_ppo_reach.py --iterations 60 --save ppo_reach.zip

All sub-envs step as one batched torch task (``robot_rl.gym.sb3.make_sb3_vec``); SB3 sees an ordinary
``VecEnv`` with Monitor-style ``episode`` infos, ``terminal_observation`` and ``TimeLimit.truncated``. After
training, the deterministic policy is scored on a fresh env with another seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import tyro
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback

from robot_rl.gym.sb3 import SB3VecEnv, make_sb3_vec


@dataclass
class Args:
    """SB3 PPO on robot_rl's reach."""

    task: str = "reach"
    """robot_rl task id (``robot-rl tasks`` lists them)."""
    num_envs: int = 64
    """Parallel sub-envs (one batched task)."""
    n_steps: int = 64
    """Steps per sub-env per PPO iteration (SB3's ``n_steps``)."""
    iterations: int = 25
    """PPO iterations: collect ``num_envs × n_steps`` steps, then update."""
    seed: int = 0
    """Seed of the task, the policy and SB3."""
    eval_episodes: int = 100
    """Episodes for the final deterministic evaluation."""
    save: Path | None = None
    """Where to save the trained model (``PPO.load`` reads it back); none by default."""


class PrintProgress(BaseCallback):
    """One line per iteration: env steps and the mean return of SB3's last 100 episodes."""

    def _on_rollout_end(self) -> None:
        returns = [e["r"] for e in self.model.ep_info_buffer]
        if returns:
            print(f"steps {self.model.num_timesteps:7d}  mean episode return {np.mean(returns):8.1f}", flush=True)

    def _on_step(self) -> bool:
        return True


def evaluate(model: PPO, env: SB3VecEnv, episodes: int) -> tuple[float, float]:
    """Mean return and success rate of the first ``episodes`` episodes, deterministic actions."""
    returns, successes = [], []
    obs = env.reset()
    while len(returns) < episodes:
        action, _ = model.predict(obs, deterministic=True)
        obs, _, done, infos = env.step(action)
        for i in np.flatnonzero(done):
            returns.append(infos[i]["episode"]["r"])
            successes.append(infos[i].get("is_success", False))
    return float(np.mean(returns[:episodes])), float(np.mean(successes[:episodes]))


def main(args: Args) -> None:
    """Train, print progress, evaluate, optionally save."""
    torch.set_num_threads(1)  # small MLPs: more threads only add overhead
    env = make_sb3_vec(args.task, args.num_envs, seed=args.seed)
    model = PPO("MlpPolicy", env, n_steps=args.n_steps, batch_size=args.num_envs * args.n_steps // 4, n_epochs=5,
                learning_rate=1e-3, seed=args.seed, device="cpu", policy_kwargs={"net_arch": [64, 64]})
    model.learn(args.num_envs * args.n_steps * args.iterations, callback=PrintProgress())
    mean_return, success = evaluate(model, make_sb3_vec(args.task, 20, seed=args.seed + 1), args.eval_episodes)
    print(f"evaluation ({args.eval_episodes} episodes, deterministic): mean return {mean_return:.1f}, "
          f"success {success:.2f}")
    if args.save is not None:
        model.save(args.save)
        print(f"saved {args.save}")


if __name__ == "__main__":
    main(tyro.cli(Args))
