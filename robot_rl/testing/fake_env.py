"""A small, fully specified VecEnv for tests: checks every action's shape, can inject NaN.

Dynamics: ``state ← state + 0.1·action`` (first ``min(state_dim, action_dim)`` dims), reward
``−‖state‖``, success when ``‖state‖ < 0.1``, truncation after ``episode_length`` steps. Optional
image observations are the state drawn as a bright pixel column, so pixel code paths run too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from robot_rl.core.config import TASKS
from robot_rl.core.env import StepResult, VecEnv, check_action
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.sims.base import SimTaskConfig


class FakeVecEnv(VecEnv):
    """Deterministic toy env following the auto-reset contract of :mod:`robot_rl.core.env`."""

    def __init__(self, num_envs: int = 4, state_dim: int = 3, action_dim: int = 2, episode_length: int = 10,
                 image: bool = False, nan_at_step: int | None = None, nan_env: int = 0,
                 device: torch.device | str = "cpu", seed: int = 0) -> None:
        obs = {"state": ArraySpec((state_dim,), "float32")}
        if image:
            obs["image.front"] = ArraySpec((16, 16, 3), "uint8", 0, 255)
        self.spec = EnvSpec(observation=obs, action=ArraySpec((action_dim,), "float32", -1.0, 1.0))
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.max_episode_steps = episode_length
        self.nan_at_step = nan_at_step
        self.nan_env = nan_env
        self.total_steps = 0
        self._gen = torch.Generator(device=self.device)
        self._gen.manual_seed(seed)
        self._state = torch.zeros(num_envs, state_dim, device=self.device)
        self._t = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self._ret = torch.zeros(num_envs, device=self.device)

    def _obs(self) -> dict[str, torch.Tensor]:
        out = {"state": self._state.clone()}
        if "image.front" in self.spec.observation:
            img = torch.zeros(self.num_envs, 16, 16, 3, dtype=torch.uint8, device=self.device)
            col = ((self._state[:, 0].clamp(-1, 1) + 1) * 7.5).long()
            img[torch.arange(self.num_envs), :, col, :] = 255
            out["image.front"] = img
        return out

    def _reset_rows(self, rows: torch.Tensor) -> None:
        k = int(rows.sum())
        if k:
            self._state[rows] = torch.rand(k, self._state.shape[1], generator=self._gen, device=self.device) * 2 - 1
            self._t[rows] = 0
            self._ret[rows] = 0

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Reset every sub-env."""
        if seed is not None:
            self._gen.manual_seed(seed)
        self._reset_rows(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self._obs()

    def step(self, action: torch.Tensor) -> StepResult:
        """Step all sub-envs (same-step auto-reset)."""
        action = check_action(action, self.spec, self.num_envs)
        k = min(self._state.shape[1], action.shape[1])
        self._state[:, :k] += 0.1 * action[:, :k]
        self._t += 1
        self.total_steps += 1
        dist = self._state.norm(dim=1)
        reward = -dist
        if self.nan_at_step is not None and self.total_steps == self.nan_at_step:
            self._state[self.nan_env] = float("nan")
            reward = reward.clone()
            reward[self.nan_env] = float("nan")
        self._ret += reward
        success = dist < 0.1
        terminated = success.clone()
        truncated = (self._t >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        final_obs = self._obs()
        ep_ret = torch.where(done, self._ret, torch.zeros_like(self._ret))
        ep_len = torch.where(done, self._t, torch.zeros_like(self._t))
        self._reset_rows(done)
        return StepResult(self._obs(), reward, terminated, truncated,
                          {"final_obs": final_obs, "success": success, "episode_return": ep_ret,
                           "episode_length": ep_len})


@TASKS.register("fake")
@dataclass
class FakeTaskConfig(SimTaskConfig):
    """:class:`FakeVecEnv` as a task (registered only once ``robot_rl.testing`` is imported)."""

    num_envs: int = 4
    """Parallel sub-environments."""
    episode_length: int = 10
    """Steps before truncation."""
    image: bool = False
    """Add an ``image.front`` observation."""
    nan_at_step: int | None = None
    """Inject NaN into one sub-env's state and reward at this env step (``null`` = never)."""

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> FakeVecEnv:
        """Build the fake env."""
        return FakeVecEnv(num_envs=num_envs or self.num_envs, episode_length=self.episode_length, image=self.image,
                          nan_at_step=self.nan_at_step, device=device, seed=seed)


def record_random_store(path: Path | str, episodes: int, num_envs: int = 4, episode_length: int = 10,
                        seed: int = 0) -> Path:
    """Record ``episodes`` episodes of random actions in :class:`FakeVecEnv` as an episode store at ``path``.

    Offline data for ``robot-rl train --task fake --offline PATH``.
    """
    from robot_rl.data.recorder import EpisodeRecorder, StoreSink
    from robot_rl.data.store import EpisodeStore

    env = FakeVecEnv(num_envs=num_envs, episode_length=episode_length, seed=seed)
    store = EpisodeStore.create(Path(path), env.spec, fps=10, task="fake")
    rec = EpisodeRecorder(StoreSink(store), env.num_envs, task="fake", max_episodes=episodes)
    rec.reset(env.reset(seed=seed))
    gen = torch.Generator().manual_seed(seed)
    while not rec.full:
        action = torch.rand(num_envs, env.spec.action.shape[0], generator=gen) * 2 - 1
        rec.step(action, env.step(action))
    rec.close()
    return Path(path)
