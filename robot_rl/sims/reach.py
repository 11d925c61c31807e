"""``reach``: a planar two-link arm moves its end-effector onto a random goal (the default task).

Kinematics (joint angles ``q = (q1, q2)``, link lengths ``l1, l2``, base at the origin)::

    elbow = l1 (cos q1, sin q1)
    ee    = elbow + l2 (cos(q1 + q2), sin(q1 + q2))
    J     = [[-l1 sin q1 - l2 sin(q1+q2), -l2 sin(q1+q2)],
             [ l1 cos q1 + l2 cos(q1+q2),  l2 cos(q1+q2)]]

Control (``control``), with ``a ∈ [-1, 1]²``:

- ``ee`` (default): ``a`` is an end-effector displacement ``dx = action_scale · a`` (m), turned into
  joint velocities by damped least squares, ``dq = Jᵀ (J Jᵀ + λ² I)⁻¹ dx`` with ``λ = 0.05``,
  clipped to ``±3 joint_step`` per joint;
- ``joint``: ``a`` is a joint velocity command, ``dq = joint_step · a`` (rad).

Either way ``q ← q + dq``: a first-order model with no momentum to undo. Why ``ee`` is the default:
with it the best action is nearly a linear function of the goal offset, and SAC reached 90–100 %
success within 5–10k env steps in our trials; with joint control it must first learn the inverse
Jacobian over the whole joint torus, and was still below 20 % after 12k steps.

Goals are uniform (by area) in the annulus ``goal_min_radius ≤ |g| ≤ goal_max_radius``, kept off
the singular rims of the workspace, and at least 0.1 m from the start. The episode terminates with
success once ``d = |goal − ee| < success_radius``. Reward per step::

    r = -d / distance_unit - step_cost + success_bonus · success

The step cost makes finishing now worth more than finishing a step later; without it a policy can
hover a few centimetres short of the goal, where waiting one step costs almost nothing.

Observation ``state`` (12, float32, about unit range; positions divided by the reach ``l1 + l2``)::

    [cos q (2), sin q (2), ee xy (2), goal xy (2), goal − ee (2), tanh((goal − ee) / 5 cm) (2)]

The last pair magnifies the final centimetres, which the 2 cm success radius is about. The previous
action is left out: with velocity control it carries no state, and a deterministic policy fed its
own outputs can settle into a fixed point (zero action) short of the goal.

Parameters for domain randomisation (``get_params``/``set_params``, per world; see
robot_rl/sims/randomize.py): ``link_length`` ``[N, 2]`` (m), ``action_scale`` ``[N]`` (m per unit
``ee`` action) and ``joint_step`` ``[N]`` (rad per unit ``joint`` action, and the IK step clip).
Observations stay normalised by the nominal reach ``link1 + link2``. Goals are drawn for the nominal
arm, so link lengths scaled below 1 can make the outermost goals unreachable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from robot_rl.core.config import TASKS, ConfigError
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.sims.base import SimTaskConfig
from robot_rl.sims.render2d import Capsule, Disc, Shape
from robot_rl.sims.torch_task import TorchTask

#: Length (m) over which the magnified offset ``tanh((goal − ee) / FINE_SCALE)`` saturates.
FINE_SCALE = 0.05


def forward_kinematics(
    q: torch.Tensor, l1: float | torch.Tensor, l2: float | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(elbow, ee)`` positions ``[..., 2]`` for joint angles ``q`` ``[..., 2]`` (lengths: floats or ``[...]``)."""
    q1, q12 = q[..., 0], q[..., 0] + q[..., 1]
    elbow = torch.stack([l1 * torch.cos(q1), l1 * torch.sin(q1)], dim=-1)
    ee = elbow + torch.stack([l2 * torch.cos(q12), l2 * torch.sin(q12)], dim=-1)
    return elbow, ee


def jacobian(q: torch.Tensor, l1: float | torch.Tensor, l2: float | torch.Tensor) -> torch.Tensor:
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
class ReachConfig(SimTaskConfig):
    """Planar two-link arm reaching a random goal; dense reward, terminates on success."""

    #: The fastest settings to ≥ 90 % success in every seed of benchmarks/presets.py (RESULTS.md, "Presets"): the
    #: update is nearly all of a run's wall-clock on a CPU, and reach needs neither SAC's nor PPO's default widths;
    #: PPO at 128 envs needs a fifth of the env steps it needs at 1,024, in more but cheaper iterations, and SAC
    #: at one update per four env steps twice the env steps of one per step, in about half the wall-clock.
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "sac": {"algo.actor_hidden": [64, 64], "algo.critic_hidden": [64, 64], "algo.batch_size": 128,
                "algo.utd_ratio": 0.25, "algo.learning_starts": 500, "loop.eval_every_env_steps": 1000},
        "ppo": {"task.num_envs": 128, "algo.actor_hidden": [64, 64], "algo.critic_hidden": [64, 64]},
    }

    max_episode_steps: int = 50
    """Steps before an episode is truncated."""
    success_radius: float = 0.02
    """Success (and termination) when the end-effector is this close (m) to the goal."""
    control: Literal["ee", "joint"] = "ee"
    """``ee``: actions move the end-effector (inverse kinematics in the env); ``joint``: actions are
    joint velocities."""
    action_scale: float = 0.05
    """``ee`` control: end-effector displacement (m) per step and axis for action ±1."""
    joint_step: float = 0.1
    """``joint`` control: joint angle change (rad) per step for action ±1 (``ee``: IK steps are
    clipped to 3× this per joint)."""
    distance_unit: float = 0.1
    """The distance term of the reward is ``-distance / distance_unit`` (m)."""
    step_cost: float = 2.0
    """Reward subtracted on every step (rewards finishing sooner)."""
    success_bonus: float = 10.0
    """Reward added on the step that succeeds."""
    start_noise: float = math.pi
    """Start joints: home pose (0, π/2) plus uniform noise of this half-width (rad); π = any pose."""
    link1: float = 0.5
    """Length (m) of the upper arm."""
    link2: float = 0.5
    """Length (m) of the forearm."""
    goal_min_radius: float = 0.15
    """Goals lie at least this far (m) from the base (keeps them off the folded-arm singularity)."""
    goal_max_radius: float = 0.95
    """Goals lie at most this far (m) from the base (keeps them off the stretched-arm singularity)."""

    def validate(self) -> None:
        """Raise ``ValueError`` if the goal annulus is not inside the arm's workspace."""
        inner, outer = abs(self.link1 - self.link2), self.link1 + self.link2
        if not max(inner, 0.1) <= self.goal_min_radius < self.goal_max_radius <= outer:
            raise ConfigError(
                f"need {max(inner, 0.1):g} <= goal_min_radius < goal_max_radius <= {outer:g} (the arm's "
                f"workspace), got {self.goal_min_radius:g}, {self.goal_max_radius:g}"
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
            observation=observation or {"state": ArraySpec((12,), "float32")},
            action=ArraySpec((2,), "float32", low=-1.0, high=1.0),
            extras={"task": TASKS.name_of(cfg)},
        )
        super().__init__(spec, num_envs, cfg.max_episode_steps, device, seed)
        self.cfg = cfg
        self.reach = cfg.link1 + cfg.link2
        self.render_extent = 1.1 * self.reach
        self.q = torch.zeros(self.num_envs, 2, device=self.device)
        n = self.num_envs
        self.link_length = torch.tensor([[cfg.link1, cfg.link2]], device=self.device).repeat(n, 1)
        self.action_scale = torch.full((n,), cfg.action_scale, device=self.device)
        self.joint_step = torch.full((n,), cfg.joint_step, device=self.device)
        self.goal = torch.zeros(self.num_envs, 2, device=self.device)
        self._finish_init()

    def end_effector(self) -> torch.Tensor:
        """End-effector positions ``[N, 2]`` (m)."""
        return forward_kinematics(self.q, *self._links())[1]

    def _links(self, rows: slice = slice(None)) -> tuple[torch.Tensor, torch.Tensor]:
        return self.link_length[rows, 0], self.link_length[rows, 1]

    #: The randomisable parameters: name → (attribute, shape after the world axis).
    PARAMS: ClassVar[dict[str, tuple[str, tuple[int, ...]]]] = {
        "link_length": ("link_length", (2,)), "action_scale": ("action_scale", ()), "joint_step": ("joint_step", ()),
    }

    def get_params(self) -> dict[str, torch.Tensor]:
        """Current per-world parameters (copies): ``link_length`` [N, 2], ``action_scale`` [N], ``joint_step`` [N]."""
        return {name: getattr(self, attr).clone() for name, (attr, _) in self.PARAMS.items()}

    def set_params(self, name: str, values: torch.Tensor) -> None:
        """Set parameter ``name`` for all worlds (``values`` ``[N, ...]``); it takes effect from the next step."""
        if name not in self.PARAMS:
            raise KeyError(f"reach has no parameter {name!r}; parameters: {', '.join(self.PARAMS)}")
        attr, shape = self.PARAMS[name]
        values = torch.as_tensor(values, dtype=torch.float32, device=self.device)
        if tuple(values.shape) != (self.num_envs, *shape):
            raise ValueError(f"{name}: expected shape {[self.num_envs, *shape]}, got {list(values.shape)}")
        if not bool(torch.isfinite(values).all() and (values > 0).all()):
            raise ValueError(f"{name}: values must be finite and positive")
        setattr(self, attr, values.clone())

    def observe(self) -> dict[str, torch.Tensor]:
        """The current observation of every world (the randomisation wrapper refreshes new episodes with it)."""
        return self._observe()

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
        ee = forward_kinematics(q, *self._links())[1]
        near = torch.linalg.vector_norm(goal - ee, dim=-1, keepdim=True) < 0.1
        goal = torch.where(near, -goal, goal)
        m = mask.unsqueeze(-1)
        self.q = torch.where(m, q, self.q)
        self.goal = torch.where(m, goal, self.goal)

    def _apply_action(self, action: torch.Tensor) -> None:
        cfg = self.cfg
        if cfg.control == "joint":
            self.q = self.q + self.joint_step.unsqueeze(-1) * action
            return
        # Damped least squares: dq = Jᵀ M⁻¹ dx with M = J Jᵀ + λ² I = [[a, b], [b, c]], inverted in
        # closed form (M⁻¹ = [[c, -b], [-b, a]] / (ac - b²)); λ keeps dq finite at singular poses.
        j = jacobian(self.q, *self._links())
        dx = self.action_scale.unsqueeze(-1) * action
        m = j @ j.transpose(-1, -2)
        a, b, c = m[:, 0, 0] + 0.05**2, m[:, 0, 1], m[:, 1, 1] + 0.05**2
        det = a * c - b * b
        y = torch.stack([c * dx[:, 0] - b * dx[:, 1], a * dx[:, 1] - b * dx[:, 0]], dim=-1) / det.unsqueeze(-1)
        dq = (j.transpose(-1, -2) @ y.unsqueeze(-1)).squeeze(-1)
        limit = 3 * self.joint_step.unsqueeze(-1)
        self.q = self.q + torch.minimum(torch.maximum(dq, -limit), limit)

    def _reward_and_status(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        dist = torch.linalg.vector_norm(self.goal - self.end_effector(), dim=-1)
        success = dist < cfg.success_radius
        reward = -dist / cfg.distance_unit - cfg.step_cost + cfg.success_bonus * success.float()
        return reward, success, success

    def _proprioception(self) -> torch.Tensor:
        return torch.cat([torch.cos(self.q), torch.sin(self.q)], dim=-1)

    def _observe(self) -> dict[str, torch.Tensor]:
        ee, goal = self.end_effector(), self.goal
        offset = goal - ee
        fine = torch.tanh(offset / FINE_SCALE)
        return {"state": torch.cat([self._proprioception(), ee / self.reach, goal / self.reach,
                                    offset / self.reach, fine], dim=-1)}

    def _scene(self, rows: slice) -> list[Shape]:
        elbow, ee = forward_kinematics(self.q[rows], *self._links(rows))
        base = torch.zeros_like(elbow)
        # The goal is drawn last so the arm never hides it (pixel observations see it only there).
        return [
            Capsule(base, elbow, 0.04, (70, 110, 200)),
            Capsule(elbow, ee, 0.035, (95, 140, 225)),
            Disc(base, 0.06, (40, 40, 40)),
            Disc(ee, 0.03, (220, 70, 60)),
            Disc(self.goal[rows], max(self.cfg.success_radius, 0.04), (60, 170, 75)),
        ]
