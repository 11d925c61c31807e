"""``push``: a disc pusher pushes a disc object onto a goal in a walled square arena.

Quasi-static contact, one step::

    p ← clamp(p + action_scale · a)                       pusher, kept inside the walls
    if |o - p| < r_p + r_o:  o ← p + n (r_p + r_o),        n = (o - p) / |o - p|
    o ← clamp(o)                                          object, kept inside the walls
    p ← o - n' (r_p + r_o) where the walls stopped o       so the discs never overlap

The pusher moves less than ``r_p + r_o`` per step, so it cannot tunnel through the object.

Reward is sparse by default: 1 on the step the object centre comes within ``success_radius`` of the
goal, which terminates the episode, else 0. With ``dense`` the reward is shaped:
``success − (|g − o| + 0.5 · max(|o − p| − r_p − r_o, 0)) / arena_half``.

Observation ``state`` (12, float32, positions divided by ``arena_half`` so they lie in [-1, 1]):
``[pusher (2), object (2), goal (2), object − pusher (2), goal − object (2), last action (2)]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from robot_rl.core.config import TASKS, ConfigError
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.sims.base import SimTaskConfig
from robot_rl.sims.render2d import Disc, Shape
from robot_rl.sims.torch_task import TorchTask


@TASKS.register("push")
@dataclass
class PushConfig(SimTaskConfig):
    """Planar disc pushing to a goal; sparse success reward unless ``dense``."""

    presets: ClassVar[dict[str, dict[str, Any]]] = {"ppo": {"task.num_envs": 1024}}

    max_episode_steps: int = 100
    """Steps before an episode is truncated."""
    dense: bool = False
    """Shaped reward (distances) instead of the sparse success reward."""
    success_radius: float = 0.05
    """Success (and termination) when the object centre is this close (m) to the goal."""
    action_scale: float = 0.04
    """Pusher displacement (m) per step for action ±1 on each axis."""
    pusher_radius: float = 0.04
    """Radius (m) of the pusher disc."""
    object_radius: float = 0.06
    """Radius (m) of the pushed disc."""
    arena_half: float = 0.5
    """Half side (m) of the square arena; walls stop both discs."""

    def validate(self) -> None:
        """Raise ``ValueError`` for geometry the reset sampler or contact model cannot handle."""
        contact = self.pusher_radius + self.object_radius
        if self.action_scale >= contact:
            raise ConfigError(f"action_scale {self.action_scale:g} must be < pusher + object radius {contact:g}")
        if contact + 0.05 > 0.6 * self.arena_half or self.success_radius >= 0.3 * self.arena_half:
            raise ConfigError("arena_half is too small for the discs and the success radius")

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> PushTask:
        """Build the batched push task."""
        return PushTask(self, num_envs or self.num_envs, device, seed)


class PushTask(TorchTask):
    """Batched pushing; ``pusher``, ``obj`` and ``goal`` ``[N, 2]`` may be set directly (tests)."""

    def __init__(self, cfg: PushConfig, num_envs: int, device: torch.device | str, seed: int) -> None:
        cfg.validate()
        spec = EnvSpec(
            observation={"state": ArraySpec((12,), "float32")},
            action=ArraySpec((2,), "float32", low=-1.0, high=1.0),
            extras={"task": "push"},
        )
        super().__init__(spec, num_envs, cfg.max_episode_steps, device, seed)
        self.cfg = cfg
        self.render_extent = 1.05 * cfg.arena_half
        zeros = torch.zeros(self.num_envs, 2, device=self.device)
        self.pusher, self.obj, self.goal, self.last_action = zeros, zeros.clone(), zeros.clone(), zeros.clone()
        self._finish_init()

    def _offset(self, origin: torch.Tensor, low: float, high: float, bound: float) -> torch.Tensor:
        """``origin`` plus a random offset of length in ``[low, high)``, mirrored back inside ``±bound``.

        Mirroring a component keeps the distance; it lands inside whenever
        ``|origin| ≤ 0.6 a``, ``high ≤ 0.7 a`` and ``bound ≥ 0.8 a`` hold (``a = arena_half``).
        """
        n = origin.shape[0]
        angle = self.uniform(-math.pi, math.pi, n)
        offset = self.uniform(low, high, n).unsqueeze(-1) * torch.stack([torch.cos(angle), torch.sin(angle)], -1)
        flip = (origin + offset).abs() > bound
        return origin + torch.where(flip, -offset, offset)

    def _reset_envs(self, mask: torch.Tensor) -> None:
        a, n = self.cfg.arena_half, self.num_envs
        obj = self.uniform(-0.6 * a, 0.6 * a, n, 2)
        goal = self._offset(obj, 0.3 * a, 0.7 * a, 0.8 * a)
        contact = self.cfg.pusher_radius + self.cfg.object_radius
        pusher = self._offset(obj, contact + 0.05, 0.6 * a, 0.9 * a)
        m = mask.unsqueeze(-1)
        self.obj = torch.where(m, obj, self.obj)
        self.goal = torch.where(m, goal, self.goal)
        self.pusher = torch.where(m, pusher, self.pusher)
        self.last_action = torch.where(m, torch.zeros_like(self.last_action), self.last_action)

    def _apply_action(self, action: torch.Tensor) -> None:
        cfg = self.cfg
        contact = cfg.pusher_radius + cfg.object_radius
        p_lim, o_lim = cfg.arena_half - cfg.pusher_radius, cfg.arena_half - cfg.object_radius
        pusher = (self.pusher + cfg.action_scale * action).clamp(-p_lim, p_lim)
        delta = self.obj - pusher
        dist = torch.linalg.vector_norm(delta, dim=-1, keepdim=True)
        # A pusher landing exactly on the object's centre pushes it along the commanded motion.
        fallback = torch.where(action.abs().sum(-1, keepdim=True) > 0, action, torch.ones_like(action))
        normal = torch.where(dist > 1e-9, delta / dist.clamp_min(1e-9), fallback / fallback.norm(dim=-1, keepdim=True))
        touching = dist < contact
        obj = torch.where(touching, pusher + normal * contact, self.obj).clamp(-o_lim, o_lim)
        # Where a wall stopped the object, back the pusher off instead, along the new contact normal.
        delta = obj - pusher
        dist = torch.linalg.vector_norm(delta, dim=-1, keepdim=True)
        overlap = dist < contact - 1e-6
        normal = torch.where(dist > 1e-9, delta / dist.clamp_min(1e-9), normal)
        pusher = torch.where(overlap, obj - normal * contact, pusher)
        self.pusher, self.obj = pusher, obj
        self.last_action = action.clone()

    def _reward_and_status(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        to_goal = torch.linalg.vector_norm(self.goal - self.obj, dim=-1)
        success = to_goal < cfg.success_radius
        reward = success.float()
        if cfg.dense:
            gap = torch.linalg.vector_norm(self.obj - self.pusher, dim=-1) - cfg.pusher_radius - cfg.object_radius
            reward = reward - (to_goal + 0.5 * gap.clamp_min(0.0)) / cfg.arena_half
        return reward, success, success

    def _observe(self) -> dict[str, torch.Tensor]:
        a = self.cfg.arena_half
        p, o, g = self.pusher / a, self.obj / a, self.goal / a
        return {"state": torch.cat([p, o, g, o - p, g - o, self.last_action], dim=-1)}

    def _scene(self, rows: slice) -> list[Shape]:
        cfg = self.cfg
        return [
            Disc(self.goal[rows], max(cfg.success_radius, 0.03), (150, 215, 150)),
            Disc(self.obj[rows], cfg.object_radius, (70, 110, 200)),
            Disc(self.pusher[rows], cfg.pusher_radius, (220, 70, 60)),
        ]
