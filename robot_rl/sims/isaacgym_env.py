"""The Isaac Gym adapter: :class:`IsaacGymTask`, ``num_envs`` copies of one asset stepped as a :class:`VecEnv`.

Everything a task shares lives here: building the sim and its envs, the effort/position drive, the
same-step auto-reset through ``set_dof_state_tensor_indexed``, and the randomisable parameters. A task
(robot_rl/sims/isaacgym_tasks.py, or your own subclass) only fills the hooks. :class:`GymApi` is the
subset of Isaac Gym this calls. The task config and the task ids are in robot_rl/sims/isaacgym.py.
"""

from __future__ import annotations

import importlib
import math
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import numpy as np
import torch

from robot_rl.core.env import StepResult, VecEnv, check_action
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.sims.extras import require

if TYPE_CHECKING:
    from robot_rl.sims.isaacgym import IsaacGymTaskConfig


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
        """Current per-world parameters on the env's device (listed in robot_rl/sims/isaacgym.py's docstring)."""
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
