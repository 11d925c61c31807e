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
"""

from __future__ import annotations

import importlib
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

import numpy as np
import torch

from robot_rl.core.config import TASKS
from robot_rl.core.env import StepResult, VecEnv, check_action
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.sims.base import SimTaskConfig
from robot_rl.sims.extras import require


class GymApi(Protocol):
    """The subset of ``isaacgym.gymapi.Gym`` this adapter calls, with the stubs' signatures.

    Written out rather than imported because isaacgym-stubs' ``gymapi.pyi`` does not parse (it
    declares a property named ``lambda``), so mypy cannot read it. Handles (``Sim``, ``Env``,
    ``Asset``, ``Tensor``) are opaque here. The fake (robot_rl/testing/fake_isaacgym.py) is checked
    against this Protocol by mypy, and the stubs' ``Gym`` was checked against it with the one bad line
    renamed (docs/sims-isaacgym.md).
    """

    def create_sim(self, compute_device: int = ..., graphics_device: int = ..., type: Any = ...,  # noqa: D102
                   params: Any = ..., /) -> Any: ...
    def add_ground(self, sim: Any, params: Any, /) -> None: ...  # noqa: D102
    def load_asset(self, sim: Any, rootpath: str, filename: str, options: Any = ..., /) -> Any: ...  # noqa: D102
    def get_asset_dof_count(self, asset: Any, /) -> int: ...  # noqa: D102
    def get_asset_dof_names(self, asset: Any, /) -> list[str]: ...  # noqa: D102
    def get_asset_dof_properties(self, *args: Any, **kwargs: Any) -> Any: ...  # noqa: D102
    def create_env(self, sim: Any, lower: Any, upper: Any, per_row: int, /) -> Any: ...  # noqa: D102
    def create_actor(self, env: Any, asset: Any, pose: Any, name: str = ..., group: int = ..., filter: int = ...,  # noqa: D102
                     segmentationId: int = ..., /) -> int: ...
    def get_actor_dof_properties(self, *args: Any, **kwargs: Any) -> Any: ...  # noqa: D102
    def set_actor_dof_properties(self, env: Any, actor: int, props: Any, /) -> bool: ...  # noqa: D102
    def get_actor_rigid_body_properties(self, env: Any, actor: int, /) -> list[Any]: ...  # noqa: D102
    def set_actor_rigid_body_properties(self, env: Any, actor: int, props: list[Any],  # noqa: D102
                                        recompute_inertia: bool = ..., /) -> bool: ...
    def get_actor_rigid_shape_properties(self, env: Any, actor: int, /) -> list[Any]: ...  # noqa: D102
    def set_actor_rigid_shape_properties(self, env: Any, actor: int, props: list[Any], /) -> bool: ...  # noqa: D102
    def prepare_sim(self, sim: Any, /) -> bool: ...  # noqa: D102
    def acquire_dof_state_tensor(self, sim: Any, /) -> Any: ...  # noqa: D102
    def refresh_dof_state_tensor(self, sim: Any, /) -> bool: ...  # noqa: D102
    def set_dof_actuation_force_tensor(self, sim: Any, forces: Any, /) -> bool: ...  # noqa: D102
    def set_dof_position_target_tensor(self, sim: Any, targets: Any, /) -> bool: ...  # noqa: D102
    def set_dof_state_tensor_indexed(self, sim: Any, state: Any, indices: Any, count: int, /) -> bool: ...  # noqa: D102
    def simulate(self, sim: Any, /) -> None: ...  # noqa: D102
    def fetch_results(self, sim: Any, wait: bool, /) -> None: ...  # noqa: D102
    def destroy_sim(self, sim: Any, /) -> None: ...  # noqa: D102

#: The built-in cart-pole: a cart on a rail (prismatic, x) with a free pole (revolute about y,
#: upright at 0; centre of mass 0.5 m above the hinge).
CARTPOLE_URDF = """<?xml version="1.0"?>
<robot name="cartpole">
  <link name="slider">
    <visual><geometry><box size="8 0.03 0.03"/></geometry></visual>
    <collision><geometry><box size="8 0.03 0.03"/></geometry></collision>
    <inertial><mass value="1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial>
  </link>
  <joint name="slider_to_cart" type="prismatic">
    <parent link="slider"/><child link="cart"/><axis xyz="1 0 0"/><origin xyz="0 0 0"/>
    <limit lower="-4" upper="4" effort="1000" velocity="100"/>
  </joint>
  <link name="cart">
    <visual><geometry><box size="0.5 0.5 0.2"/></geometry></visual>
    <collision><geometry><box size="0.5 0.5 0.2"/></geometry></collision>
    <inertial><mass value="1"/><inertia ixx="0.02" ixy="0" ixz="0" iyy="0.02" iyz="0" izz="0.04"/></inertial>
  </link>
  <joint name="cart_to_pole" type="continuous">
    <parent link="cart"/><child link="pole"/><axis xyz="0 1 0"/><origin xyz="0 0 0"/>
    <limit effort="1000" velocity="100"/>
  </joint>
  <link name="pole">
    <visual><origin xyz="0 0 0.5"/><geometry><box size="0.04 0.04 1.0"/></geometry></visual>
    <collision><origin xyz="0 0 0.5"/><geometry><box size="0.04 0.04 1.0"/></geometry></collision>
    <inertial><origin xyz="0 0 0.5"/><mass value="0.1"/>
      <inertia ixx="0.0083" ixy="0" ixz="0" iyy="0.0083" iyz="0" izz="0.0001"/></inertial>
  </link>
</robot>
"""


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
            raise ValueError(f"isaacgym/{env_id}: {name!r} in {module} is not a subclass of IsaacGymTask")
        if not cls.asset_file:
            raise ValueError(f"{cls.__name__} sets no asset_file (a URDF/MJCF path, relative to task.asset_root)")
        return cls, cfg.asset_root or ".", cls.asset_file
    if env_id.endswith((".urdf", ".xml")):
        path = Path(cfg.asset_root or ".") / env_id
        if not path.is_file():
            raise FileNotFoundError(f"isaacgym/{env_id}: asset file {path} does not exist")
        return JointTargetTask, str(path.parent), path.name
    raise ValueError(f"isaacgym task id {env_id!r}: use 'cartpole', a .urdf/.xml asset path, or "
                     "'package.module:TaskClass'")


def _load_api(module: str) -> tuple[Any, Any]:
    """``(gymapi, gymtorch)`` from ``module`` (``isaacgym``, or a fake exposing both names)."""
    if module != "isaacgym":
        mod = importlib.import_module(module)
        return mod.gymapi, mod.gymtorch
    try:
        require("isaacgym", "isaacgym", "the 'isaacgym' task")
    except ImportError as e:
        if "imported before isaacgym" in str(e.__cause__ or e):
            raise ImportError("Isaac Gym must be imported before torch: start robot-rl as "
                              "`python -c 'import isaacgym, sys; from robot_rl.cli import main; sys.exit(main())' "
                              "train --task isaacgym/...` (docs/sims-isaacgym.md)") from e
        raise
    gymapi = importlib.import_module("isaacgym.gymapi")
    gymtorch = importlib.import_module("isaacgym.gymtorch")
    return gymapi, gymtorch


class IsaacGymTask(VecEnv):
    """``num_envs`` copies of one asset in one Isaac Gym sim, stepped through the tensor API.

    Subclasses set the hooks: :meth:`_configure` (which DOFs the action drives, spec sizes),
    :meth:`_sample_reset`, :meth:`_observe`, :meth:`_reward_and_status`. State tensors
    ``dof_pos``/``dof_vel`` ``[N, D]`` are views of the sim's DOF state buffer.
    """

    #: A user task's asset (URDF/MJCF), relative to ``task.asset_root``.
    asset_file: ClassVar[str] = ""
    #: Control mode when ``task.control`` is null.
    default_control: ClassVar[Literal["effort", "position"]] = "effort"

    def __init__(self, cfg: IsaacGymTaskConfig, num_envs: int, device: torch.device | str, seed: int,
                 asset: tuple[str, str]) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.cfg = cfg
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.max_episode_steps = int(cfg.max_episode_steps)
        self.control = cfg.control or self.default_control
        self.gymapi, self.gymtorch = _load_api(cfg.api)
        gymapi = self.gymapi
        self.gym: GymApi = gymapi.acquire_gym()
        self.sim = self._create_sim()
        self._closed = False
        opts = gymapi.AssetOptions()
        opts.fix_base_link = True
        opts.default_dof_drive_mode = gymapi.DOF_MODE_NONE
        self.asset = self.gym.load_asset(self.sim, asset[0], asset[1], opts)
        self.num_dofs = self.gym.get_asset_dof_count(self.asset)
        self.dof_names = list(self.gym.get_asset_dof_names(self.asset))
        if self.num_dofs < 1:
            raise ValueError(f"asset {asset[1]} has no movable joints")
        props = self.gym.get_asset_dof_properties(self.asset)
        self.actuated = self._configure(props)
        # Fields of a structured array are strided views: copy them into plain arrays first.
        self.dof_lower = torch.tensor(np.array(props["lower"], np.float32), device=self.device)
        self.dof_upper = torch.tensor(np.array(props["upper"], np.float32), device=self.device)
        self.dof_limited = torch.tensor(np.array(props["hasLimits"], bool), device=self.device)
        for k in self.actuated:
            if self.control == "effort":
                props["driveMode"][k] = gymapi.DOF_MODE_EFFORT
                props["stiffness"][k] = 0.0
            else:
                props["driveMode"][k] = gymapi.DOF_MODE_POS
                props["stiffness"][k] = cfg.pd_stiffness
                props["damping"][k] = cfg.pd_damping
        self.envs, self.actors = self._create_envs(props)
        self.gym.prepare_sim(self.sim)
        self.dof_state = self.gymtorch.wrap_tensor(self.gym.acquire_dof_state_tensor(self.sim))
        self.gym.refresh_dof_state_tensor(self.sim)
        state = self.dof_state.view(self.num_envs, self.num_dofs, 2)
        self.dof_pos, self.dof_vel = state[..., 0], state[..., 1]
        self.actor_ids = torch.arange(self.num_envs, dtype=torch.int32, device=self.device)
        self.drive = torch.zeros(self.num_envs, self.num_dofs, dtype=torch.float32, device=self.device)
        self.actuated_index = torch.tensor(self.actuated, dtype=torch.long, device=self.device)
        self.seed = int(seed)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(self.seed)
        self.episode_return = torch.zeros(self.num_envs, device=self.device)
        self.episode_length = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._params = self._read_params()
        # On the env's device once, not per step: with the GPU pipeline that is a host copy a step.
        self._gain = self._params["actuator_gain"].to(self.device)
        self.spec = self._make_spec()

    # ---- construction -------------------------------------------------------------------------

    def _create_sim(self) -> Any:
        gymapi, cfg = self.gymapi, self.cfg
        params = gymapi.SimParams()
        params.dt = cfg.dt
        params.substeps = cfg.substeps
        params.up_axis = gymapi.UP_AXIS_Z
        params.gravity = gymapi.Vec3(0.0, 0.0, -9.81)
        gpu = self.device.type == "cuda"
        params.use_gpu_pipeline = gpu
        params.physx.use_gpu = gpu
        params.physx.num_threads = 1
        compute = self.device.index or 0 if gpu else 0
        sim = self.gym.create_sim(compute, -1, gymapi.SIM_PHYSX, params)  # graphics -1: headless
        if sim is None:
            raise RuntimeError(f"Isaac Gym could not create a PhysX sim on {self.device}")
        plane = gymapi.PlaneParams()
        plane.normal = gymapi.Vec3(0.0, 0.0, 1.0)
        self.gym.add_ground(sim, plane)
        return sim

    def _create_envs(self, props: np.ndarray) -> tuple[list[Any], list[int]]:
        gymapi, s = self.gymapi, self.cfg.env_spacing
        lower, upper = gymapi.Vec3(-s, -s, 0.0), gymapi.Vec3(s, s, s)
        per_row = max(1, int(math.sqrt(self.num_envs)))
        pose = gymapi.Transform()
        pose.p = gymapi.Vec3(0.0, 0.0, 2.0)
        envs, actors = [], []
        for i in range(self.num_envs):
            env = self.gym.create_env(self.sim, lower, upper, per_row)
            actor = self.gym.create_actor(env, self.asset, pose, "robot", i, 1)
            self.gym.set_actor_dof_properties(env, actor, props)
            envs.append(env)
            actors.append(actor)
        return envs, actors

    # ---- hooks --------------------------------------------------------------------------------

    def _configure(self, props: np.ndarray) -> list[int]:
        """The DOFs the action drives (default: all)."""
        return list(range(self.num_dofs))

    def _make_spec(self) -> EnvSpec:
        obs = self._observe()
        return EnvSpec(observation={k: ArraySpec(tuple(v.shape[1:]), "float32") for k, v in obs.items()},
                       action=ArraySpec((len(self.actuated),), "float32", -1.0, 1.0),
                       extras={"task": f"isaacgym/{self.cfg.env_id}", "dof_names": self.dof_names})

    def _sample_reset(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Start ``(dof_pos, dof_vel)`` ``[N, D]`` for every env (kept only where an episode starts)."""
        raise NotImplementedError

    def _observe(self) -> dict[str, torch.Tensor]:
        """A fresh observation dict from the current state."""
        raise NotImplementedError

    def _reward_and_status(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(reward [N], terminated [N], success [N])`` after a step."""
        raise NotImplementedError

    # ---- VecEnv -------------------------------------------------------------------------------

    def rand(self, *shape: int) -> torch.Tensor:
        """Uniform ``[0, 1)`` samples from this env's generator."""
        return torch.rand(*shape, generator=self.generator, device=self.device)

    def _reset(self, done: torch.Tensor) -> None:
        pos, vel = self._sample_reset()
        m = done.unsqueeze(-1)
        self.dof_pos[:] = torch.where(m, pos, self.dof_pos)
        self.dof_vel[:] = torch.where(m, vel, self.dof_vel)
        ids = self.actor_ids[done]
        self.gym.set_dof_state_tensor_indexed(self.sim, self.gymtorch.unwrap_tensor(self.dof_state),
                                              self.gymtorch.unwrap_tensor(ids), int(ids.numel()))

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Reset every env (reseeding with ``seed``); return the first observation."""
        if seed is not None:
            self.generator.manual_seed(int(seed))
        self._reset(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        self.episode_return.zero_()
        self.episode_length.zero_()
        return self._observe()

    def step(self, action: torch.Tensor) -> StepResult:
        """Apply ``action`` ``[N, A]`` for ``decimation`` physics steps; same-step auto-reset."""
        action = check_action(action.to(self.device), self.spec, self.num_envs)
        self._apply_action(action * self._gain)
        for _ in range(self.cfg.decimation):
            self.gym.simulate(self.sim)
            self.gym.fetch_results(self.sim, True)
        self.gym.refresh_dof_state_tensor(self.sim)
        reward, terminated, success = self._reward_and_status()
        self.episode_return += reward
        self.episode_length += 1
        truncated = (self.episode_length >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        final_obs = self._observe()
        zero = torch.zeros_like(self.episode_return)
        info = {"final_obs": final_obs, "success": success,
                "episode_return": torch.where(done, self.episode_return, zero),
                "episode_length": torch.where(done, self.episode_length, torch.zeros_like(self.episode_length))}
        if bool(done.any()):  # the indexed reset needs the ids on the host anyway
            self._reset(done)
            self.episode_return = torch.where(done, zero, self.episode_return)
            self.episode_length = torch.where(done, torch.zeros_like(self.episode_length), self.episode_length)
        return StepResult(self._observe(), reward, terminated, truncated, info)

    def _apply_action(self, action: torch.Tensor) -> None:
        self.drive.zero_()
        if self.control == "effort":
            self.drive[:, self.actuated_index] = self.cfg.max_effort * action
            self.gym.set_dof_actuation_force_tensor(self.sim, self.gymtorch.unwrap_tensor(self.drive))
            return
        lo, hi = self._ranges()
        idx = self.actuated_index
        a = action.clamp(-1.0, 1.0)
        self.drive[:, idx] = lo[idx] + (a + 1.0) * 0.5 * (hi[idx] - lo[idx])
        self.gym.set_dof_position_target_tensor(self.sim, self.gymtorch.unwrap_tensor(self.drive))

    def _ranges(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-DOF ``(low, high)``: the joint limits, or ±π for unlimited joints."""
        lo = torch.where(self.dof_limited, self.dof_lower, torch.full_like(self.dof_lower, -math.pi))
        hi = torch.where(self.dof_limited, self.dof_upper, torch.full_like(self.dof_upper, math.pi))
        return lo, hi

    def close(self) -> None:
        """Destroy the sim (once)."""
        if not self._closed:
            self._closed = True
            self.gym.destroy_sim(self.sim)

    # ---- parameters (domain randomisation) ----------------------------------------------------

    _DOF_FIELDS: ClassVar[dict[str, str]] = {"dof_damping": "damping", "dof_stiffness": "stiffness",
                                             "dof_friction": "friction"}

    def _read_params(self) -> dict[str, torch.Tensor]:
        gym = self.gym
        dof = [gym.get_actor_dof_properties(e, a) for e, a in zip(self.envs, self.actors, strict=True)]
        out = {name: torch.tensor(np.stack([np.array(p[f], np.float32) for p in dof]))
               for name, f in self._DOF_FIELDS.items()}
        out["body_mass"] = torch.tensor([[b.mass for b in gym.get_actor_rigid_body_properties(e, a)]
                                         for e, a in zip(self.envs, self.actors, strict=True)], dtype=torch.float32)
        out["geom_friction"] = torch.tensor(
            [[s.friction for s in gym.get_actor_rigid_shape_properties(e, a)]
             for e, a in zip(self.envs, self.actors, strict=True)], dtype=torch.float32).reshape(self.num_envs, -1)
        out["actuator_gain"] = torch.ones(self.num_envs, len(self.actuated))
        return out

    def get_params(self) -> dict[str, torch.Tensor]:
        """Current per-world parameters on the env's device (see the module docstring)."""
        return {k: v.to(self.device).clone() for k, v in self._params.items()}

    def set_params(self, name: str, values: torch.Tensor) -> None:
        """Set ``name`` for all worlds; only envs whose values changed are written to the sim."""
        if name not in self._params:
            raise KeyError(f"isaacgym task has no parameter {name!r}; parameters: {', '.join(self._params)}")
        old = self._params[name]
        new = torch.as_tensor(values, dtype=torch.float32).detach().cpu()
        if new.shape != old.shape:
            raise ValueError(f"{name}: expected shape {list(old.shape)}, got {list(new.shape)}")
        if not bool(torch.isfinite(new).all() and (new >= 0).all()):
            raise ValueError(f"{name}: values must be finite and >= 0")
        changed = (new != old).reshape(self.num_envs, -1).any(dim=1).nonzero().flatten().tolist()
        gym = self.gym
        for i in changed:
            env, actor = self.envs[i], self.actors[i]
            if name in self._DOF_FIELDS:
                props = gym.get_actor_dof_properties(env, actor)
                props[self._DOF_FIELDS[name]] = new[i].numpy()
                gym.set_actor_dof_properties(env, actor, props)
            elif name == "body_mass":
                bodies = gym.get_actor_rigid_body_properties(env, actor)
                for b, m in zip(bodies, new[i].tolist(), strict=True):
                    b.mass = m
                gym.set_actor_rigid_body_properties(env, actor, bodies, True)
            elif name == "geom_friction":
                shapes = gym.get_actor_rigid_shape_properties(env, actor)
                for s, f in zip(shapes, new[i].tolist(), strict=True):
                    s.friction = f
                gym.set_actor_rigid_shape_properties(env, actor, shapes)
        self._params[name] = new.clone()
        if name == "actuator_gain":
            self._gain = self._params[name].to(self.device)


class CartpoleTask(IsaacGymTask):
    """Balance a pole on a cart (as IsaacGymEnvs' Cartpole): force on the cart, 4-d state.

    Observation ``state``: ``[cart position, cart velocity, pole angle, pole angular velocity]``.
    Reward ``1 - θ² - 0.01 |ẋ| - 0.005 |θ̇|``, and -2 when the pole passes 90° or the cart leaves
    ±3 m, which terminates the episode. Success: the pole is still up (``|θ| < 0.2``) and the cart on
    the rail; an episode that lasts until truncation with the pole up is a success.
    """

    reset_dist: ClassVar[float] = 3.0

    def _configure(self, props: np.ndarray) -> list[int]:
        if self.num_dofs != 2:
            raise ValueError(f"cartpole needs 2 DOFs (cart, pole), the asset has {self.num_dofs}")
        return [0]

    def _sample_reset(self) -> tuple[torch.Tensor, torch.Tensor]:
        n, d = self.num_envs, self.num_dofs
        return 0.2 * (self.rand(n, d) - 0.5), 0.5 * (self.rand(n, d) - 0.5)

    def _observe(self) -> dict[str, torch.Tensor]:
        return {"state": torch.stack([self.dof_pos[:, 0], self.dof_vel[:, 0], self.dof_pos[:, 1],
                                      self.dof_vel[:, 1]], dim=-1).clone()}

    def _reward_and_status(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, xd, th, thd = self.dof_pos[:, 0], self.dof_vel[:, 0], self.dof_pos[:, 1], self.dof_vel[:, 1]
        failed = (x.abs() > self.reset_dist) | (th.abs() > math.pi / 2)
        reward = 1.0 - th * th - 0.01 * xd.abs() - 0.005 * thd.abs()
        reward = torch.where(failed, torch.full_like(reward, -2.0), reward)
        success = ~failed & (th.abs() < 0.2)
        return reward, failed, success


class JointTargetTask(IsaacGymTask):
    """Any fixed-base URDF/MJCF arm: drive every joint to a random target (position control by default).

    Observation ``state``: ``[q, q̇, target − q]`` (``3 D``). Reward ``−|target − q|`` (2-norm), +10 on
    success, which is every joint within ``success_tolerance`` and terminates the episode. Targets are
    uniform in the middle 80 % of each joint's range (±π for unlimited joints).
    """

    default_control: ClassVar[Literal["effort", "position"]] = "position"

    target: torch.Tensor = torch.zeros(0)

    def _reset(self, done: torch.Tensor) -> None:
        lo, hi = self._ranges()
        mid, half = (lo + hi) / 2, 0.4 * (hi - lo)
        target = mid + half * (2 * self.rand(self.num_envs, self.num_dofs) - 1)
        if self.target.shape != target.shape:
            self.target = target
        self.target = torch.where(done.unsqueeze(-1), target, self.target)
        super()._reset(done)

    def _sample_reset(self) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = self._ranges()
        n, d = self.num_envs, self.num_dofs
        start = (lo + hi) / 2 + 0.4 * (hi - lo) * (2 * self.rand(n, d) - 1)
        return start, torch.zeros(n, d, device=self.device)

    def _observe(self) -> dict[str, torch.Tensor]:
        if self.target.shape != self.dof_pos.shape:
            self.target = self.dof_pos.clone()
        return {"state": torch.cat([self.dof_pos, self.dof_vel, self.target - self.dof_pos], dim=-1).clone()}

    def _reward_and_status(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        err = self.target - self.dof_pos
        success = (err.abs() < self.cfg.success_tolerance).all(dim=-1)
        reward = -torch.linalg.vector_norm(err, dim=-1) + 10.0 * success.float()
        return reward, success, success
