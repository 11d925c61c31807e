"""``reach``: a planar two-link arm moves its end-effector onto a random goal (the default task).

Kinematics (joint angles ``q = (q1, q2)``, link lengths ``l1, l2``, base at the origin)::

    elbow = l1 (cos q1, sin q1)
    ee    = elbow + l2 (cos(q1 + q2), sin(q1 + q2))
    J     = [[-l1 sin q1 - l2 sin(q1+q2), -l2 sin(q1+q2)],
             [ l1 cos q1 + l2 cos(q1+q2),  l2 cos(q1+q2)]]

The action ``a ∈ [-1, 1]²`` is a joint velocity command: ``q ← q + action_scale · a`` each step
(``action_scale`` rad per step at most). This first-order model has no momentum to undo, which is
what makes the task learnable by SAC in minutes.

Goals are uniform (by area) in the annulus ``goal_min_radius ≤ |g| ≤ goal_max_radius``, kept off
the singular rims of the workspace, and at least 0.1 m from the start. Reward
``-|goal - ee| + success_bonus · success`` (metres); the episode terminates with success once
``|goal - ee| < success_radius``.

Observation ``state`` (12, float32, about unit range; positions divided by the arm's reach
``l1 + l2``): ``[cos q (2), sin q (2), last action (2), ee xy (2), goal xy (2), goal - ee (2)]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from robot_rl.config import TASKS, TaskConfig
from robot_rl.sims.render2d import Capsule, Disc, Shape
from robot_rl.sims.torch_task import TorchTask
from robot_rl.specs import ArraySpec, EnvSpec


def forward_kinematics(q: torch.Tensor, l1: float, l2: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(elbow, ee)`` positions ``[..., 2]`` for joint angles ``q`` ``[..., 2]``."""
    q1, q12 = q[..., 0], q[..., 0] + q[..., 1]
    elbow = torch.stack([l1 * torch.cos(q1), l1 * torch.sin(q1)], dim=-1)
    ee = elbow + torch.stack([l2 * torch.cos(q12), l2 * torch.sin(q12)], dim=-1)
    return elbow, ee


def jacobian(q: torch.Tensor, l1: float, l2: float) -> torch.Tensor:
    """``d ee / d q``, ``[..., 2, 2]`` (rows x, y; columns q1, q2)."""
    q1, q12 = q[..., 0], q[..., 0] + q[..., 1]
    s1, c1, s12, c12 = torch.sin(q1), torch.cos(q1), torch.sin(q12), torch.cos(q12)
    row_x = torch.stack([-l1 * s1 - l2 * s12, -l2 * s12], dim=-1)
    row_y = torch.stack([l1 * c1 + l2 * c12, l2 * c12], dim=-1)
    return torch.stack([row_x, row_y], dim=-2)


def inverse_kinematics(target: torch.Tensor, l1: float, l2: float, elbow_up: bool = True) -> torch.Tensor:
    """Joint angles ``[..., 2]`` that put the end-effector on reachable ``target`` ``[..., 2]``.

    Law of cosines: ``cos q2 = (|t|² - l1² - l2²) / (2 l1 l2)``;
    ``q1 = atan2(ty, tx) - atan2(l2 sin q2, l1 + l2 cos q2)``.
    """
    x, y = target[..., 0], target[..., 1]
    c2 = ((x * x + y * y - l1 * l1 - l2 * l2) / (2 * l1 * l2)).clamp(-1.0, 1.0)
    q2 = torch.acos(c2) * (1.0 if elbow_up else -1.0)
    q1 = torch.atan2(y, x) - torch.atan2(l2 * torch.sin(q2), l1 + l2 * torch.cos(q2))
    return torch.stack([q1, q2], dim=-1)


@TASKS.register("reach")
@dataclass
class ReachConfig(TaskConfig):
    """Planar two-link arm reaching a random goal; dense reward, terminates on success."""

    presets: ClassVar[dict[str, dict[str, Any]]] = {"ppo": {"task.num_envs": 1024}}

    max_episode_steps: int = 50
    """Steps before an episode is truncated."""
    success_radius: float = 0.02
    """Success (and termination) when the end-effector is this close (m) to the goal."""
    action_scale: float = 0.1
    """Joint angle change (rad) per step for action ±1."""
    success_bonus: float = 1.0
    """Reward added on the step that succeeds."""
    link1: float = 0.5
    """Length (m) of the upper arm."""
    link2: float = 0.5
    """Length (m) of the forearm."""
    goal_min_radius: float = 0.15
    """Goals lie at least this far (m) from the base (keeps them off the folded-arm singularity)."""
    goal_max_radius: float = 0.95
    """Goals lie at most this far (m) from the base (keeps them off the stretched-arm singularity)."""
    control: Literal["joint", "ee"] = "joint"
    """``joint``: actions are joint velocities; ``ee``: end-effector displacements, turned into joint
    velocities by damped least-squares inverse kinematics."""
    ee_step: float = 0.05
    """``ee`` control: end-effector displacement (m) per step for action ±1."""
    start_noise: float = math.pi
    """Start joints are the home pose (0, π/2) plus uniform noise of this half-width (rad)."""
    fine_error: bool = False
    """Append tanh((goal - ee) / 5 cm) to the state, a magnified view of the last centimetres."""

    def validate(self) -> None:
        """Raise ``ValueError`` if the goal annulus is not inside the arm's workspace."""
        inner, outer = abs(self.link1 - self.link2), self.link1 + self.link2
        if not max(inner, 0.1) <= self.goal_min_radius < self.goal_max_radius <= outer:
            raise ValueError(
                f"need {max(inner, 0.1):g} <= goal_min_radius < goal_max_radius <= {outer:g} (the arm's workspace), "
                f"got {self.goal_min_radius:g}, {self.goal_max_radius:g}"
            )

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> ReachTask:
        """Build the batched reach task."""
        return ReachTask(self, num_envs or self.num_envs, device, seed)


class ReachTask(TorchTask):
    """Batched two-link reach; ``q`` ``[N, 2]`` and ``goal`` ``[N, 2]`` may be set directly (tests)."""

    def __init__(
        self, cfg: ReachConfig, num_envs: int, device: torch.device | str, seed: int,
        observation: dict[str, ArraySpec] | None = None,
    ) -> None:
        cfg.validate()
        spec = EnvSpec(
            observation=observation or {"state": ArraySpec((14 if cfg.fine_error else 12,), "float32")},
            action=ArraySpec((2,), "float32", low=-1.0, high=1.0),
            extras={"task": TASKS.name_of(cfg)},
        )
        super().__init__(spec, num_envs, cfg.max_episode_steps, device, seed)
        self.cfg = cfg
        self.reach = cfg.link1 + cfg.link2
        self.render_extent = 1.1 * self.reach
        self.q = torch.zeros(self.num_envs, 2, device=self.device)
        self.goal = torch.zeros(self.num_envs, 2, device=self.device)
        self.last_action = torch.zeros(self.num_envs, 2, device=self.device)
        self._finish_init()

    def end_effector(self) -> torch.Tensor:
        """End-effector positions ``[N, 2]`` (m)."""
        return forward_kinematics(self.q, self.cfg.link1, self.cfg.link2)[1]

    def _reset_envs(self, mask: torch.Tensor) -> None:
        n, cfg = self.num_envs, self.cfg
        home = torch.tensor([0.0, math.pi / 2], device=self.device)
        q = home + self.uniform(-cfg.start_noise, cfg.start_noise, n, 2)
        # Uniform by area: r² uniform between the squared radii.
        r = torch.sqrt(self.uniform(cfg.goal_min_radius**2, cfg.goal_max_radius**2, n))
        phi = self.uniform(-math.pi, math.pi, n)
        goal = torch.stack([r * torch.cos(phi), r * torch.sin(phi)], dim=-1)
        # No episode starts solved: a goal within 0.1 m of the start is mirrored through the base,
        # which keeps it in the annulus and puts it at least 2 · goal_min_radius - 0.1 m away.
        ee = forward_kinematics(q, cfg.link1, cfg.link2)[1]
        near = torch.linalg.vector_norm(goal - ee, dim=-1, keepdim=True) < 0.1
        goal = torch.where(near, -goal, goal)
        m = mask.unsqueeze(-1)
        self.q = torch.where(m, q, self.q)
        self.goal = torch.where(m, goal, self.goal)
        self.last_action = torch.where(m, torch.zeros_like(self.last_action), self.last_action)

    def _apply_action(self, action: torch.Tensor) -> None:
        if self.cfg.control == "ee":
            j = jacobian(self.q, self.cfg.link1, self.cfg.link2)
            dx = (self.cfg.ee_step * action).unsqueeze(-1)
            jt = j.transpose(-1, -2)
            eye = torch.eye(2, device=self.device)
            dq = (jt @ torch.linalg.solve(j @ jt + 0.05**2 * eye, dx)).squeeze(-1)
            self.q = self.q + dq.clamp(-self.cfg.action_scale * 3, self.cfg.action_scale * 3)
        else:
            self.q = self.q + self.cfg.action_scale * action
        self.last_action = action.clone()

    def _reward_and_status(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist = torch.linalg.vector_norm(self.goal - self.end_effector(), dim=-1)
        success = dist < self.cfg.success_radius
        reward = -dist + self.cfg.success_bonus * success.float()
        return reward, success, success

    def _proprioception(self) -> torch.Tensor:
        return torch.cat([torch.cos(self.q), torch.sin(self.q), self.last_action], dim=-1)

    def _observe(self) -> dict[str, torch.Tensor]:
        ee = self.end_effector() / self.reach
        goal = self.goal / self.reach
        parts = [self._proprioception(), ee, goal, goal - ee]
        if self.cfg.fine_error:
            parts.append(torch.tanh((self.goal - self.end_effector()) / 0.05))
        return {"state": torch.cat(parts, dim=-1)}

    def _scene(self, rows: slice) -> list[Shape]:
        elbow, ee = forward_kinematics(self.q[rows], self.cfg.link1, self.cfg.link2)
        base = torch.zeros_like(elbow)
        # The goal is drawn last so the arm never hides it (pixel observations see it only there).
        return [
            Capsule(base, elbow, 0.04, (70, 110, 200)),
            Capsule(elbow, ee, 0.035, (95, 140, 225)),
            Disc(base, 0.06, (40, 40, 40)),
            Disc(ee, 0.03, (220, 70, 60)),
            Disc(self.goal[rows], max(self.cfg.success_radius, 0.04), (60, 170, 75)),
        ]
