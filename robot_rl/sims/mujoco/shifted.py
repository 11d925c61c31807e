"""A "real robot" stand-in for sim–real co-training: ``mujoco/reach`` in a domain-shifted world.

``mujoco/reach_shifted`` is ``mujoco/reach`` with different physics (heavier links, more joint damping,
weaker servos, other friction), other lighting and colours, and a moved camera (:class:`ShiftConfig`).
Its scripted demonstrator (:class:`~robot_rl.sims.mujoco.reach_expert.ScriptedReachDemonstrator`) records the
"real" demonstrations (:func:`record_demos`, into an episode store or a LeRobotDataset v3), and its env plays
the real-world evaluation. On hardware the real demonstrations come from teleoperation (`robot-rl data record`)
and the evaluation is `robot-rl deploy` on the robot; see docs/cotraining.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from robot_rl.core.config import TASKS
from robot_rl.sims.mujoco.reach_expert import ScriptedReachDemonstrator  # also imported from here by examples
from robot_rl.sims.mujoco.tasks import MujocoReachConfig

if TYPE_CHECKING:
    from robot_rl.core.env import VecEnv
    from robot_rl.sims.mujoco.env import MujocoVecEnv

@dataclass
class ShiftConfig:
    """How the stand-in "real" world differs from the simulation it is trained in."""

    mass_scale: float = 1.6
    """Every body's mass × this."""
    damping_scale: float = 4.0
    """Every joint's damping × this."""
    actuator_gain_scale: float = 0.35
    """Every position servo's kp × this (weaker servos lag their targets)."""
    friction_scale: float = 0.7
    """Every geom's friction × this."""
    light_scale: float = 0.6
    """Diffuse light × this (darker scene)."""
    color_shift: tuple[float, float, float] = (0.15, -0.1, 0.05)
    """Added to every geom's and material's RGB (clipped to [0, 1])."""
    camera_offset: tuple[float, float, float] = (0.03, -0.04, 0.02)
    """Added to every camera's position (m): a camera mounted slightly elsewhere."""


def apply_shift(env: MujocoVecEnv, shift: ShiftConfig) -> None:
    """Change ``env``'s dynamics in every world and its look (lights, colours, cameras) in place."""
    # The look first: the renderer draws colours and lights from env.model, but each world's camera frame from
    # its own model, which set_params below copies from env.model (changed after the copy, the camera stayed put).
    m = env.model
    m.light_diffuse[:] = np.clip(m.light_diffuse * shift.light_scale, 0.0, 1.0)
    m.geom_rgba[:, :3] = np.clip(m.geom_rgba[:, :3] + np.asarray(shift.color_shift), 0.0, 1.0)
    if m.nmat:
        m.mat_rgba[:, :3] = np.clip(m.mat_rgba[:, :3] + np.asarray(shift.color_shift), 0.0, 1.0)
    m.cam_pos[:] = m.cam_pos + np.asarray(shift.camera_offset)
    params = env.get_params()
    for name, scale in (("body_mass", shift.mass_scale), ("dof_damping", shift.damping_scale),
                        ("actuator_gain", shift.actuator_gain_scale), ("geom_friction", shift.friction_scale)):
        env.set_params(name, params[name] * scale)


@TASKS.register("mujoco/reach_shifted")
@dataclass
class MujocoReachShiftedConfig(MujocoReachConfig):
    """``mujoco/reach`` in a domain-shifted world: the "real robot" of the co-training stand-in.

    Other dynamics, lighting, colours and camera pose; the same observations and actions as ``mujoco/reach``.
    """

    shift: ShiftConfig = field(default_factory=ShiftConfig)
    """How this world differs from ``mujoco/reach``."""

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> MujocoVecEnv:
        """The reach env with :func:`apply_shift` applied (before any randomisation wraps it)."""
        from robot_rl.sims.mujoco.env import MujocoVecEnv

        self.validate()
        env = MujocoVecEnv(self, num_envs or self.num_envs, device, seed)
        apply_shift(env, self.shift)
        return env


def record_demos(env: VecEnv, out: Path | str, episodes: int, demonstrator: ScriptedReachDemonstrator,
                 fmt: Literal["episodes", "lerobot"] = "episodes", seed: int = 0, task: str = "reach",
                 fps: float = 20.0) -> int:
    """Record ``episodes`` demonstrator episodes of ``env`` into ``out``; returns the successful ones.

    ``fmt="episodes"`` writes an episode store; ``"lerobot"`` a LeRobotDataset v3 (needs the datasets extra).
    """
    from robot_rl.data.recorder import StoreSink, record_episodes
    from robot_rl.data.store import EpisodeStore

    if fmt == "lerobot":
        from robot_rl.data.lerobot_io import LeRobotWriter

        sink: StoreSink | LeRobotWriter = LeRobotWriter(out, env.spec, fps, task=task, robot_type=task)
    else:
        sink = StoreSink(EpisodeStore.create(out, env.spec, fps=fps, task=task))
    result = record_episodes(env, demonstrator, sink, episodes, seed=seed, deterministic=False, task=task)
    return result.successes
