"""A fake of the Isaac Gym tensor API subset that :mod:`robot_rl.sims.isaacgym` uses, for tests.

This module stands in for both ``isaacgym.gymapi`` and ``isaacgym.gymtorch`` (``gymapi`` and
``gymtorch`` below are this module): the names, call order and tensor layouts follow the
``isaacgym-stubs`` signatures, so the adapter runs against it unchanged
(``IsaacGymTaskConfig(api="robot_rl.testing.fake_isaacgym")``). It is strict where the real thing
is: tensors acquired from the sim change only on ``refresh_*``; ``simulate`` results become
visible only after ``fetch_results``; actors cannot be added after ``prepare_sim``; tensor setters
take ``gymapi.Tensor`` (from ``gymtorch.unwrap_tensor``), of the right size, dtype and device.

Here: the ``Gym`` calls and the ``gymtorch`` tensor handles. The constants and parameter classes are in
:mod:`robot_rl.testing.fake_isaacgym_types`, the assets and the (deliberately small) physics in
:mod:`robot_rl.testing.fake_isaacgym_physics`; both are re-exported here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from robot_rl.testing.fake_isaacgym_physics import Asset, Env, Sim, load_urdf
from robot_rl.testing.fake_isaacgym_types import (
    DOF_MODE_EFFORT,
    DOF_MODE_NONE,
    DOF_MODE_POS,
    DOF_MODE_VEL,
    DOF_PROPERTIES_DTYPE,
    DOF_ROTATION,
    DOF_TRANSLATION,
    DOMAIN_ACTOR,
    DOMAIN_ENV,
    DOMAIN_SIM,
    SIM_FLEX,
    SIM_PHYSX,
    UP_AXIS_Y,
    UP_AXIS_Z,
    AssetOptions,
    PhysXParams,
    PlaneParams,
    Quat,
    RigidBodyProperties,
    RigidShapeProperties,
    SimParams,
    Transform,
    Vec3,
)

__all__ = ["DOF_MODE_EFFORT", "DOF_MODE_NONE", "DOF_MODE_POS", "DOF_MODE_VEL", "DOF_PROPERTIES_DTYPE", "DOF_ROTATION",
           "DOF_TRANSLATION", "DOMAIN_ACTOR", "DOMAIN_ENV", "DOMAIN_SIM", "SIM_FLEX", "SIM_PHYSX", "UP_AXIS_Y",
           "UP_AXIS_Z", "Asset", "AssetOptions", "Env", "Gym", "PhysXParams", "PlaneParams", "Quat",
           "RigidBodyProperties", "RigidShapeProperties", "Sim", "SimParams", "Tensor", "Transform", "Vec3",
           "acquire_gym", "gymapi", "gymtorch", "unwrap_tensor", "wrap_tensor"]


class Tensor:
    """``gymapi.Tensor``: an opaque handle on a buffer (here, a torch tensor)."""

    def __init__(self, data: torch.Tensor) -> None:
        self._data = data

    @property
    def shape(self) -> tuple[int, ...]:
        """The buffer's shape."""
        return tuple(self._data.shape)


def wrap_tensor(t: Tensor) -> torch.Tensor:
    """``gymtorch.wrap_tensor``: a torch view of a sim buffer (no copy)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"wrap_tensor expects a gymapi.Tensor, got {type(t).__name__}")
    return t._data


def unwrap_tensor(t: torch.Tensor) -> Tensor:
    """``gymtorch.unwrap_tensor``: a gymapi.Tensor handle on a contiguous torch tensor."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"unwrap_tensor expects a torch.Tensor, got {type(t).__name__}")
    if not t.is_contiguous():
        raise ValueError("unwrap_tensor needs a contiguous tensor")
    return Tensor(t)



class Gym:
    """The ``gymapi.Gym`` handle: every call takes the sim or env it acts on."""

    def create_sim(self, compute_device: int = 0, graphics_device: int = 0, type: int = SIM_PHYSX,
                   params: SimParams | None = None) -> Sim:
        """A sim on ``cuda:compute_device`` with the GPU pipeline, else on the CPU."""
        params = params or SimParams()
        if type != SIM_PHYSX:
            raise ValueError("the fake simulates PhysX only")
        if params.use_gpu_pipeline:
            if not torch.cuda.is_available():
                raise RuntimeError("use_gpu_pipeline needs CUDA")
            device = torch.device("cuda", compute_device)
        else:
            device = torch.device("cpu")
        return Sim(device, params)

    def add_ground(self, sim: Sim, params: PlaneParams) -> None:
        """Add the ground plane (recorded; the fake's joints do not collide)."""
        sim.ground = True

    def load_asset(self, sim: Sim, rootpath: str, filename: str, options: AssetOptions | None = None) -> Asset:
        """Parse a URDF file ``rootpath/filename``."""
        path = Path(rootpath) / filename
        if not path.is_file():
            raise FileNotFoundError(f"asset {path} not found")
        return load_urdf(path, options or AssetOptions())

    def get_asset_dof_count(self, asset: Asset) -> int:
        """Number of DOFs of the asset."""
        return len(asset.joints)

    def get_asset_dof_names(self, asset: Asset) -> list[str]:
        """DOF (joint) names in DOF order."""
        return [j.name for j in asset.joints]

    def get_asset_rigid_body_count(self, asset: Asset) -> int:
        """Number of bodies (links)."""
        return len(asset.links)

    def get_asset_rigid_shape_count(self, asset: Asset) -> int:
        """Number of collision shapes."""
        return len(asset.shapes)

    def get_asset_dof_properties(self, asset: Asset) -> np.ndarray:
        """The asset's DOF properties (a structured array, a fresh copy)."""
        props = np.zeros(len(asset.joints), DOF_PROPERTIES_DTYPE)
        for k, j in enumerate(asset.joints):
            props[k] = (j.limited, j.lower, j.upper, asset.options.default_dof_drive_mode, j.velocity,
                        j.effort, 0.0, j.damping, j.friction, asset.options.armature)
        return props

    def create_env(self, sim: Sim, lower: Vec3, upper: Vec3, per_row: int) -> Env:
        """A new env in ``sim``."""
        if sim.prepared:
            raise RuntimeError("cannot create envs after prepare_sim")
        env = Env(sim, len(sim.envs))
        sim.envs.append(env)
        return env

    def create_actor(self, env: Env, asset: Asset, pose: Transform, name: str = "", group: int = -1,
                     filter: int = -1, segmentationId: int = 0) -> int:
        """Place ``asset`` in ``env``; returns the actor handle (its index in the env)."""
        if env.sim.prepared:
            raise RuntimeError("cannot create actors after prepare_sim")
        env.actors.append(asset)
        env.dof_props = self.get_asset_dof_properties(asset)
        bodies = []
        for mass, _, _ in asset.links.values():
            b = RigidBodyProperties()
            b.mass = mass
            bodies.append(b)
        env.body_props = bodies
        env.shape_props = [RigidShapeProperties() for _ in asset.shapes]
        return len(env.actors) - 1

    def get_actor_dof_properties(self, env: Env, actor: int) -> np.ndarray:
        """A copy of the actor's DOF properties."""
        return env.dof_props.copy()

    def set_actor_dof_properties(self, env: Env, actor: int, props: np.ndarray) -> bool:
        """Replace the actor's DOF properties."""
        if props.dtype != DOF_PROPERTIES_DTYPE or len(props) != len(env.actors[actor].joints):
            raise ValueError("set_actor_dof_properties: wrong dtype or length")
        env.dof_props = props.copy()
        if env.sim.prepared:
            env.sim.dof_props[env.index] = env.dof_props
            env.sim._sync_props()
        return True

    def get_actor_rigid_body_properties(self, env: Env, actor: int) -> list[RigidBodyProperties]:
        """Copies of the actor's body properties."""
        out = []
        for b in env.body_props:
            c = RigidBodyProperties()
            c.mass, c.com, c.flags = b.mass, b.com, b.flags
            out.append(c)
        return out

    def set_actor_rigid_body_properties(self, env: Env, actorHandle: int, props: list[RigidBodyProperties],
                                        recomputeInertia: bool = False) -> bool:
        """Replace the actor's body properties (mass changes take effect on the next simulate)."""
        env.body_props = list(props)
        if env.sim.prepared:
            env.sim.body_props[env.index] = env.body_props
            env.sim._sync_props()
        return True

    def get_actor_rigid_shape_properties(self, env: Env, actor: int) -> list[RigidShapeProperties]:
        """Copies of the actor's shape properties."""
        out = []
        for s in env.shape_props:
            c = RigidShapeProperties()
            c.friction, c.restitution = s.friction, s.restitution
            out.append(c)
        return out

    def set_actor_rigid_shape_properties(self, env: Env, actor: int, props: list[RigidShapeProperties]) -> bool:
        """Replace the actor's shape properties (the fake has no contacts; they are stored)."""
        env.shape_props = list(props)
        return True

    def prepare_sim(self, sim: Sim) -> bool:
        """Freeze the scene and allocate the state buffers."""
        sim._build()
        return True

    def get_sim_dof_count(self, sim: Sim) -> int:
        """DOFs summed over all envs."""
        return len(sim.envs) * sim.num_dofs

    def acquire_dof_state_tensor(self, sim: Sim) -> Tensor:
        """The ``[num_envs * num_dofs, 2]`` (position, velocity) buffer; filled by refresh_dof_state_tensor."""
        self._prepared(sim)
        return Tensor(sim.dof_state)

    def refresh_dof_state_tensor(self, sim: Sim) -> bool:
        """Copy the latest fetched state into the acquired buffer."""
        self._prepared(sim)
        if sim.pending:
            raise RuntimeError("refresh before fetch_results: the last simulate's results are not fetched")
        sim.dof_state[:, 0] = sim.q.reshape(-1)
        sim.dof_state[:, 1] = sim.qd.reshape(-1)
        return True

    def set_dof_actuation_force_tensor(self, sim: Sim, forces: Tensor) -> bool:
        """DOF efforts for every DOF of the sim (applied to DOFs in effort mode)."""
        sim.force = self._dof_buffer(sim, forces, "set_dof_actuation_force_tensor").clone()
        return True

    def set_dof_position_target_tensor(self, sim: Sim, targets: Tensor) -> bool:
        """DOF position targets for every DOF of the sim (used by DOFs in position mode)."""
        sim.target = self._dof_buffer(sim, targets, "set_dof_position_target_tensor").clone()
        return True

    def set_dof_state_tensor_indexed(self, sim: Sim, state: Tensor, indices: Tensor, count: int) -> bool:
        """Set the DOF state of the actors in ``indices`` (int32, ``count`` of them) from the full ``state``."""
        self._prepared(sim)
        s, idx = wrap_tensor(state), wrap_tensor(indices)
        if tuple(s.shape) != tuple(sim.dof_state.shape) or s.device != sim.device:
            raise ValueError(f"set_dof_state_tensor_indexed: state must be {list(sim.dof_state.shape)} on "
                             f"{sim.device}, got {list(s.shape)} on {s.device}")
        if idx.dtype != torch.int32 or idx.device != sim.device or idx.numel() < count:
            raise ValueError("set_dof_state_tensor_indexed: indices must be int32 on the sim device")
        rows = idx[:count].long()
        if bool(((rows < 0) | (rows >= len(sim.envs))).any()):
            raise IndexError("set_dof_state_tensor_indexed: actor index out of range")
        view = s.view(len(sim.envs), sim.num_dofs, 2)
        sim.q[rows] = view[rows, :, 0]
        sim.qd[rows] = view[rows, :, 1]
        return True

    def simulate(self, sim: Sim) -> None:
        """Advance the sim by ``dt`` (results pending until fetch_results)."""
        self._prepared(sim)
        sim.step()
        sim.pending = True

    def fetch_results(self, sim: Sim, wait: bool) -> None:
        """Make the last simulate's results visible to refresh_*."""
        sim.pending = False

    def destroy_sim(self, sim: Sim) -> None:
        """Release the sim."""
        sim.envs.clear()
        sim.prepared = False

    @staticmethod
    def _prepared(sim: Sim) -> None:
        if not sim.prepared:
            raise RuntimeError("call prepare_sim first")

    @staticmethod
    def _dof_buffer(sim: Sim, t: Tensor, what: str) -> torch.Tensor:
        Gym._prepared(sim)
        x = wrap_tensor(t)
        n = len(sim.envs) * sim.num_dofs
        if x.numel() != n or x.dtype != torch.float32 or x.device != sim.device:
            raise ValueError(f"{what}: need {n} float32 values on {sim.device}, got {list(x.shape)} "
                             f"{x.dtype} on {x.device}")
        return x.reshape(len(sim.envs), sim.num_dofs)


def acquire_gym(*args: Any, **kwargs: Any) -> Gym:
    """The Gym singleton (a fresh fake each call; handles are self-contained)."""
    return Gym()


#: This module plays both isaacgym.gymapi and isaacgym.gymtorch.
gymapi = gymtorch = sys.modules[__name__]

if TYPE_CHECKING:  # mypy checks that the fake offers every call the adapter makes, with the same arity
    from robot_rl.sims.isaacgym_env import GymApi

    _conforms: GymApi = Gym()
