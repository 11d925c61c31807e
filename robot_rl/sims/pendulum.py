"""``pendulum``: swing a torque-limited pendulum up and hold it (gymnasium ``Pendulum-v1`` dynamics).

θ = 0 is upright. With g = 10, m = l = 1 and dt = 0.05 (gymnasium's constants):

    θ̈ = 3g/(2l) sin θ + 3/(m l²) u,        u = max_torque · a,  a ∈ [-1, 1]
    θ̇' = clip(θ̇ + θ̈ dt, -8, 8),            θ' = θ + θ̇' dt          (semi-implicit Euler)
    r  = -(norm(θ)² + 0.1 θ̇² + 0.001 u²)    on the state *before* the step, as gymnasium does.

Observation ``state`` = ``[cos θ, sin θ, θ̇]`` (unscaled, as in gymnasium, so returns compare with
published Pendulum-v1 numbers). Episodes only end by truncation; success = ``|θ| < 0.3`` and
``|θ̇| < 1`` at that last step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from robot_rl.core.config import TASKS
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.sims.base import SimTaskConfig
from robot_rl.sims.render2d import Capsule, Disc, Shape
from robot_rl.sims.torch_task import TorchTask

GRAVITY = 10.0
MASS = 1.0
LENGTH = 1.0
DT = 0.05
MAX_SPEED = 8.0


def angle_normalize(x: torch.Tensor) -> torch.Tensor:
    """Wrap angles to ``[-π, π)``."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


@TASKS.register("pendulum")
@dataclass
class PendulumConfig(SimTaskConfig):
    """Torque-limited pendulum swing-up (gymnasium Pendulum-v1 dynamics, batched in torch)."""

    #: The fastest setting to ≥ 90 % in every seed of benchmarks/presets.py (RESULTS.md, "Presets"): PPO's
    #: [256, 256, 256] networks made the update most of a run's wall-clock, and 256 envs need fewer env steps than 512.
    presets: ClassVar[dict[str, dict[str, Any]]] = {"ppo": {
        "task.num_envs": 256, "algo.actor_hidden": [64, 64], "algo.critic_hidden": [64, 64]}}

    max_episode_steps: int = 200
    """Steps per episode (every episode is truncated here)."""
    max_torque: float = 2.0
    """Torque (N·m) applied for action 1."""
    success_angle: float = 0.3
    """Success needs |θ| below this (rad) at the last step."""
    success_speed: float = 1.0
    """Success needs |θ̇| below this (rad/s) at the last step."""

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> PendulumTask:
        """Build the batched pendulum."""
        return PendulumTask(self, num_envs or self.num_envs, device, seed)


class PendulumTask(TorchTask):
    """Batched pendulum; state tensors ``theta`` and ``theta_dot`` ``[N]`` may be set by tests."""

    render_extent = 1.3

    def __init__(self, cfg: PendulumConfig, num_envs: int, device: torch.device | str, seed: int) -> None:
        spec = EnvSpec(
            observation={"state": ArraySpec((3,), "float32")},
            action=ArraySpec((1,), "float32", low=-1.0, high=1.0),
            extras={"task": "pendulum"},
        )
        super().__init__(spec, num_envs, cfg.max_episode_steps, device, seed)
        self.cfg = cfg
        self.theta = torch.zeros(self.num_envs, device=self.device)
        self.theta_dot = torch.zeros(self.num_envs, device=self.device)
        self._cost = torch.zeros(self.num_envs, device=self.device)
        self._finish_init()

    def _reset_envs(self, mask: torch.Tensor) -> None:
        theta = self.uniform(-math.pi, math.pi, self.num_envs)
        theta_dot = self.uniform(-1.0, 1.0, self.num_envs)
        self.theta = torch.where(mask, theta, self.theta)
        self.theta_dot = torch.where(mask, theta_dot, self.theta_dot)

    def _apply_action(self, action: torch.Tensor) -> None:
        u = action[:, 0] * self.cfg.max_torque
        th, thdot = self.theta, self.theta_dot
        self._cost = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        acc = 3 * GRAVITY / (2 * LENGTH) * torch.sin(th) + 3.0 / (MASS * LENGTH**2) * u
        self.theta_dot = (thdot + acc * DT).clamp(-MAX_SPEED, MAX_SPEED)
        self.theta = th + self.theta_dot * DT

    def _reward_and_status(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        success = (angle_normalize(self.theta).abs() < self.cfg.success_angle) & (
            self.theta_dot.abs() < self.cfg.success_speed
        )
        return -self._cost, torch.zeros_like(success), success

    def _observe(self) -> dict[str, torch.Tensor]:
        state = torch.stack([torch.cos(self.theta), torch.sin(self.theta), self.theta_dot], dim=-1)
        return {"state": state}

    def _scene(self, rows: slice) -> list[Shape]:
        th = self.theta[rows]
        pivot = torch.zeros(th.shape[0], 2, device=self.device)
        # θ = 0 points up; positive θ turns the rod counter-clockwise (gymnasium's drawing).
        tip = torch.stack([-torch.sin(th), torch.cos(th)], dim=-1) * LENGTH
        return [
            Capsule(pivot, tip, 0.06, (204, 77, 77)),
            Disc(pivot, 0.05, (40, 40, 40)),
        ]
