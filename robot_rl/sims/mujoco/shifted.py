"""A "real robot" stand-in for sim–real co-training: ``mujoco/reach`` in a domain-shifted world.

``mujoco/reach_shifted`` is ``mujoco/reach`` with different physics (heavier links, more joint damping,
weaker servos, other friction), other lighting and colours, and a moved camera (:class:`ShiftConfig`).
Its scripted demonstrator (:class:`ScriptedReachDemonstrator`) records the "real" demonstrations
(:func:`record_demos`, into an episode store or a LeRobotDataset v3), and its env plays the real-world
evaluation. On hardware the real demonstrations come from teleoperation (`robot-rl data record`) and
the evaluation is `robot-rl deploy` on the robot; see docs/cotraining.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from robot_rl.core.algorithm import Policy
from robot_rl.core.config import TASKS
from robot_rl.sims.mujoco.tasks import MujocoReachConfig

if TYPE_CHECKING:
    from robot_rl.core.env import VecEnv
    from robot_rl.core.transition import Obs
    from robot_rl.sims.mujoco.env import MujocoVecEnv

#: Where ``goal − grip`` sits in ``mujoco/reach``'s state: 16 arm numbers, then goal (3), then the offset.
REACH_OFFSET = slice(19, 22)


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


class ScriptedReachDemonstrator(Policy):
    """A proportional controller on ``goal − grip`` with optional Gaussian action noise (a teleoperator).

    ``action = clip(gain · (goal − grip) / action_scale + noise, −1, 1)``; works on ``mujoco/reach`` and
    ``mujoco/reach_shifted`` state observations (``ee_delta`` control).
    """

    def __init__(self, action_scale: float = 0.03, gain: float = 0.6, noise: float = 0.0, seed: int = 0) -> None:
        super().__init__()  # a Policy (no weights): it can act wherever a policy does, e.g. as JSRL's guide
        self.action_scale, self.gain, self.noise = action_scale, gain, noise
        self.generator = torch.Generator().manual_seed(seed)

    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Actions ``[N, 3]`` for a batch of reach observations (noise unless ``deterministic``)."""
        state = obs["state"]
        if state.shape[-1] != 25:
            raise ValueError(f"the scripted reach demonstrator reads mujoco/reach state [N, 25], got "
                             f"{list(state.shape)}")
        action = self.gain * state[:, REACH_OFFSET] / self.action_scale
        if self.noise > 0 and not deterministic:
            action = action + self.noise * torch.randn(action.shape, generator=self.generator).to(action.device)
        return action.clamp(-1.0, 1.0), {}


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
