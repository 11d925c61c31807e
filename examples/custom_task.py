"""Register your own batched task and train SAC on it (no file outside this one changes).

    python examples/custom_task.py
"""

from dataclasses import dataclass

import torch

from robot_rl.core.config import TASKS, TaskConfig
from robot_rl.core.env import StepResult, VecEnv, check_action
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.runner import train


class PointMass(VecEnv):
    """A 1-D point pushed to the origin: obs [x], action [force]; success when |x| < 0.05."""

    def __init__(self, num_envs: int, device, seed: int) -> None:
        self.spec = EnvSpec({"state": ArraySpec((1,))}, ArraySpec((1,), low=-1.0, high=1.0))
        self.num_envs, self.device, self.max_episode_steps = num_envs, torch.device(device), 30
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.x = torch.zeros(num_envs, 1, device=self.device)
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.ret = torch.zeros(num_envs, device=self.device)

    def _reset(self, rows):
        self.x[rows] = torch.rand(int(rows.sum()), 1, generator=self.gen, device=self.device) * 2 - 1
        self.t[rows] = 0
        self.ret[rows] = 0

    def reset(self, seed=None):
        if seed is not None:
            self.gen.manual_seed(seed)
        self._reset(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return {"state": self.x.clone()}

    def step(self, action):
        action = check_action(action, self.spec, self.num_envs)
        self.x += 0.1 * action
        self.t += 1
        reward = -self.x.abs().squeeze(1)
        self.ret += reward
        success = self.x.abs().squeeze(1) < 0.05
        truncated = (self.t >= self.max_episode_steps) & ~success
        done = success | truncated
        info = {"final_obs": {"state": self.x.clone()}, "success": success,
                "episode_return": torch.where(done, self.ret, 0.0), "episode_length": torch.where(done, self.t, 0)}
        self._reset(done)
        return StepResult({"state": self.x.clone()}, reward, success, truncated, info)


@TASKS.register("point_mass")
@dataclass
class PointMassConfig(TaskConfig):
    """A 1-D point to the origin."""

    num_envs: int = 16

    def make(self, device, seed, num_envs=None):
        return PointMass(num_envs or self.num_envs, device, seed)


if __name__ == "__main__":
    cfg = resolve_train_config(task="point_mass", algo="sac", overrides=[
        "algo.learning_starts=500", "loop.eval_every_env_steps=2000", "loop.total_env_steps=40000",
        "run.name=example-point-mass"])
    result = train(cfg)
    print(result.stop_reason, result.last_eval)
