"""Isaac Gym tasks through its tensor API, as a :class:`~robot_rl.core.env.VecEnv` (registered as ``isaacgym``).

Task ids: ``isaacgym/cartpole`` (built in), ``isaacgym/<path>.urdf`` (any arm: reach random joint
targets, see :class:`JointTargetTask`) or ``isaacgym/package.module:TaskClass`` (your subclass of
:class:`IsaacGymTask`). All of them run ``num_envs`` copies of one asset in one sim and touch state
only through the tensor API, with no per-env Python loop in ``step``::

    dof_state = gymtorch.wrap_tensor(gym.acquire_dof_state_tensor(sim))    # [N * D, 2], once
    gym.set_dof_actuation_force_tensor(sim, gymtorch.unwrap_tensor(forces))  # or ..._position_target_...
    for _ in range(decimation): gym.simulate(sim); gym.fetch_results(sim, True)
    gym.refresh_dof_state_tensor(sim)                                       # dof_state now current
    gym.set_dof_state_tensor_indexed(sim, ..., actor_ids, n)                # reset finished envs

Same-step auto-reset: finished envs get new DOF states written into the buffer and sent with
``set_dof_state_tensor_indexed`` inside ``step``; the returned observation is already the new
episode's (PhysX applies the state on the next ``simulate``). The sim lives on the env's device:
``cuda:k`` turns on the GPU pipeline (``use_gpu_pipeline``, tensors stay on the GPU), ``cpu`` uses the
CPU pipeline. Typed against ``isaacgym-stubs`` (:class:`GymApi`); tested against :mod:`robot_rl.testing.fake_isaacgym`
(``api: robot_rl.testing.fake_isaacgym``). Running it on the real Isaac Gym: docs/sims-isaacgym.md.

Parameters for domain randomisation (``get_params``/``set_params``, robot_rl/sims/randomize.py):
``dof_damping``, ``dof_stiffness``, ``dof_friction`` ``[N, D]`` (actor DOF properties),
``body_mass`` ``[N, bodies]`` (rigid body properties), ``geom_friction`` ``[N, shapes]`` (rigid shape
properties) and ``actuator_gain`` ``[N, A]`` (scales the action). Property changes go through the
per-actor property calls, for the envs whose values changed only (at episode starts).

This module holds the task config and resolves task ids; the adapter that every task shares is
robot_rl/sims/isaacgym_env.py, the built-in tasks robot_rl/sims/isaacgym_tasks.py.
"""

from __future__ import annotations

import importlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch

from robot_rl.core.config import TASKS, ConfigError
from robot_rl.sims.base import SimTaskConfig
from robot_rl.sims.isaacgym_env import GymApi, IsaacGymTask
from robot_rl.sims.isaacgym_tasks import CARTPOLE_URDF, CartpoleTask, JointTargetTask

__all__ = ["CARTPOLE_URDF", "CartpoleTask", "GymApi", "IsaacGymTask", "IsaacGymTaskConfig", "JointTargetTask"]


@TASKS.register("isaacgym")
@dataclass
class IsaacGymTaskConfig(SimTaskConfig):
    """An Isaac Gym task (cartpole, any URDF arm, or your task class), batched on one sim via the tensor API."""

    extra: ClassVar[str | None] = "isaacgym"

    num_envs: int = 512
    """Envs in the sim."""
    env_id: str = "cartpole"
    """``cartpole``, a URDF/MJCF file (reach random joint targets), or ``package.module:TaskClass``."""
    control: Literal["effort", "position"] | None = None
    """``effort``: actions are DOF forces/torques; ``position``: PD targets across each joint's range
    (null: the task's default, effort for cartpole, position for URDF arms)."""
    max_effort: float = 20.0
    """Effort control: force (N) or torque (Nm) for action ±1 (before ``actuator_gain``)."""
    pd_stiffness: float = 50.0
    """Position control: drive stiffness of the actuated DOFs."""
    pd_damping: float = 5.0
    """Position control: drive damping of the actuated DOFs."""
    max_episode_steps: int = 250
    """Steps before an episode is truncated."""
    success_tolerance: float = 0.1
    """Joint-target tasks: success (and termination) when every DOF is this close (rad or m)."""
    dt: float = 1.0 / 60.0
    """Physics step (s)."""
    substeps: int = 2
    """Solver substeps per physics step."""
    decimation: int = 2
    """Physics steps per env step (the action is held)."""
    env_spacing: float = 2.0
    """Half-width (m) of each env's cell in the sim's grid."""
    asset_root: str = ""
    """Folder that relative asset paths (and a task class's ``asset_file``) are resolved against."""
    task_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for a user task class."""
    api: str = "isaacgym"
    """Module that provides ``gymapi`` and ``gymtorch`` (tests: ``robot_rl.testing.fake_isaacgym``)."""

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> IsaacGymTask:
        """Build the sim and its envs on ``device`` (the GPU pipeline on ``cuda``)."""
        n = num_envs if num_envs is not None else self.num_envs
        cls, root, file = _task_from_id(self)
        kwargs = dict(self.task_kwargs) if ":" in self.env_id else {}
        return cls(self, n, device, seed, asset=(root, file), **kwargs)


def _task_from_id(cfg: IsaacGymTaskConfig) -> tuple[type[IsaacGymTask], str, str]:
    """``(task class, asset root, asset file)`` named by ``cfg.env_id``."""
    env_id = cfg.env_id
    if env_id == "cartpole":
        root = Path(tempfile.mkdtemp(prefix="robot_rl_cartpole_"))
        (root / "cartpole.urdf").write_text(CARTPOLE_URDF)
        return CartpoleTask, str(root), "cartpole.urdf"
    if ":" in env_id:
        module, _, name = env_id.partition(":")
        cls = getattr(importlib.import_module(module), name, None)
        if not (isinstance(cls, type) and issubclass(cls, IsaacGymTask)):
            raise ConfigError(f"isaacgym/{env_id}: {name!r} in {module} is not a subclass of IsaacGymTask")
        if not cls.asset_file:
            raise ConfigError(f"{cls.__name__} sets no asset_file (a URDF/MJCF path, relative to task.asset_root)")
        return cls, cfg.asset_root or ".", cls.asset_file
    if env_id.endswith((".urdf", ".xml")):
        path = Path(cfg.asset_root or ".") / env_id
        if not path.is_file():
            raise FileNotFoundError(f"isaacgym/{env_id}: asset file {path} does not exist")
        return JointTargetTask, str(path.parent), path.name
    raise ConfigError(f"isaacgym task id {env_id!r}: use 'cartpole', a .urdf/.xml asset path, or "
                      "'package.module:TaskClass'")
