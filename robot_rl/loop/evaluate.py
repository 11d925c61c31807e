"""Evaluation: run a policy deterministically for a fixed number of whole episodes."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from robot_rl.core.algorithm import Policy
from robot_rl.core.config import ConfigError
from robot_rl.core.env import VecEnv
from robot_rl.core.transition import finite_obs_rows


@dataclass
class EvalResult:
    """Aggregates over ``episodes`` finished episodes."""

    episodes: int
    success_rate: float
    mean_return: float
    mean_length: float
    nonfinite_episodes: int = 0

    def as_dict(self) -> dict[str, float]:
        """For logs and summaries."""
        return {"episodes": self.episodes, "success_rate": self.success_rate,
                "mean_return": self.mean_return, "mean_length": self.mean_length,
                "nonfinite_episodes": self.nonfinite_episodes}


@torch.no_grad()
def evaluate(policy: Policy, env: VecEnv, episodes: int, seed: int = 12345, deterministic: bool = True,
             frames: list[torch.Tensor] | None = None) -> EvalResult:
    """Run each sub-env for whole episodes until ``episodes`` have finished.

    Every sub-env contributes its first ``ceil(episodes / num_envs)`` episodes, and only the first
    ``episodes`` finished ones count, so short (failing or succeeding) episodes are not over-sampled.
    If ``frames`` is given, ``env.render()`` frames of sub-env 0 are appended to it. An episode in
    which the env produced NaN/inf is counted as a failure (and in ``nonfinite_episodes``); its
    sub-env gets zero actions until the episode ends.
    """
    if episodes < 1:
        raise ConfigError("episodes must be >= 1")
    n = env.num_envs
    per_env = -(-episodes // n)
    obs = env.reset(seed=seed)
    counts = torch.zeros(n, dtype=torch.long, device=env.device)
    returns: list[float] = []
    lengths: list[float] = []
    successes: list[float] = []
    max_steps = per_env * env.max_episode_steps + 1
    poisoned = ~finite_obs_rows(obs, n)
    nonfinite = 0
    for _ in range(max_steps):
        if frames is not None:
            frame = env.render()
            if frame is not None:
                frames.append(frame.cpu())
        safe = {k: torch.nan_to_num(v, 0.0, 0.0, 0.0) if v.is_floating_point() else v for k, v in obs.items()}
        action, _ = policy.act(safe, deterministic=deterministic)
        action = torch.where(poisoned.reshape(-1, *[1] * (action.dim() - 1)), torch.zeros_like(action), action)
        result = env.step(action)
        done = result.terminated | result.truncated
        poisoned |= ~torch.isfinite(result.reward)
        take = done & (counts < per_env)
        if bool(take.any()):
            idx = take.nonzero().flatten()
            bad = poisoned[idx]
            nonfinite += int(bad.sum())
            returns += torch.where(bad, torch.zeros_like(result.info["episode_return"][idx]),
                                   result.info["episode_return"][idx]).tolist()
            lengths += result.info["episode_length"][idx].float().tolist()
            successes += (result.info["success"][idx] & ~bad).float().tolist()
        counts += done.long()
        obs = result.obs
        poisoned = (poisoned & ~done) | ~finite_obs_rows(obs, n)
        if len(returns) >= episodes:
            break
    if len(returns) < episodes:
        raise RuntimeError(f"evaluation finished only {len(returns)} of {episodes} episodes; "
                           "does the env truncate at max_episode_steps?")
    k = episodes
    return EvalResult(episodes=k, success_rate=sum(successes[:k]) / k, mean_return=sum(returns[:k]) / k,
                      mean_length=sum(lengths[:k]) / k, nonfinite_episodes=nonfinite)

