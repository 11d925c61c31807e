"""A fake of the Isaac Gym tensor API subset that :mod:`robot_rl.sims.isaacgym` uses, for tests.

This module stands in for both ``isaacgym.gymapi`` and ``isaacgym.gymtorch`` (``gymapi`` and
``gymtorch`` below are this module): the names, call order and tensor layouts follow the
``isaacgym-stubs`` signatures, so the adapter runs against it unchanged
(``IsaacGymTaskConfig(api="robot_rl.testing.fake_isaacgym")``). It is strict where the real thing
is: tensors acquired from the sim change only on ``refresh_*``; ``simulate`` results become
visible only after ``fetch_results``; actors cannot be added after ``prepare_sim``; tensor setters
take ``gymapi.Tensor`` (from ``gymtorch.unwrap_tensor``), of the right size, dtype and device.

Physics is deliberately small: URDF joints (revolute, continuous, prismatic) become DOFs, each
integrated on its own with semi-implicit Euler (``substeps`` per ``dt``)::

    I q̈ = τ_drive + τ_gravity − damping q̇ − friction sign(q̇)

``I`` is the child link's inertia about the axis plus its mass times the squared distance of its
centre of mass (or the mass, for a prismatic joint), plus armature. Gravity acts on the child's
centre of mass as placed by this joint alone; a prismatic ancestor's acceleration acts like extra
gravity, so a cart's push tips its pole (a one-way coupling: the pole does not push back). Drives
follow the DOF properties: ``DOF_MODE_EFFORT`` applies the actuation force (clamped to ``effort``),
``DOF_MODE_POS`` a PD law towards the position target. Unlike PhysX, damping also acts in effort
mode. Limits stop the joint. Enough to check plumbing, shapes, resets and stability; not a
physics engine.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

# ---- constants (values as in Isaac Gym) ----------------------------------------------------------

DOF_MODE_NONE, DOF_MODE_POS, DOF_MODE_VEL, DOF_MODE_EFFORT = 0, 1, 2, 3
SIM_FLEX, SIM_PHYSX = 0, 1
UP_AXIS_Y, UP_AXIS_Z = 0, 1
DOF_ROTATION, DOF_TRANSLATION = 0, 1
DOMAIN_ACTOR, DOMAIN_ENV, DOMAIN_SIM = 0, 1, 2

#: Layout of ``get_asset_dof_properties`` / ``get_actor_dof_properties`` (a structured array).
DOF_PROPERTIES_DTYPE = np.dtype([
    ("hasLimits", "?"), ("lower", "<f4"), ("upper", "<f4"), ("driveMode", "<i4"), ("velocity", "<f4"),
    ("effort", "<f4"), ("stiffness", "<f4"), ("damping", "<f4"), ("friction", "<f4"), ("armature", "<f4"),
])


class Vec3:
    """A 3-vector."""

    def __init__(self, x: float = 0.0, y: float = 0.0, z: float = 0.0) -> None:
        self.x, self.y, self.z = float(x), float(y), float(z)


class Quat:
    """A quaternion ``x i + y j + z k + w``."""

    def __init__(self, x: float = 0.0, y: float = 0.0, z: float = 0.0, w: float = 1.0) -> None:
        self.x, self.y, self.z, self.w = float(x), float(y), float(z), float(w)


class Transform:
    """A pose: position ``p`` and rotation ``r``."""

    def __init__(self, p: Vec3 | None = None, r: Quat | None = None) -> None:
        self.p = p or Vec3()
        self.r = r or Quat()


class PlaneParams:
    """Ground plane parameters."""

    def __init__(self) -> None:
        self.normal = Vec3(0, 0, 1)
        self.distance = 0.0
        self.static_friction = 1.0
        self.dynamic_friction = 1.0
        self.restitution = 0.0


class PhysXParams:
    """PhysX solver parameters (recorded, not used)."""

    def __init__(self) -> None:
        self.num_threads = 0
        self.solver_type = 1
        self.num_position_iterations = 4
        self.num_velocity_iterations = 1
        self.use_gpu = False


class SimParams:
    """Simulation parameters."""

    def __init__(self) -> None:
        self.dt = 1.0 / 60.0
        self.substeps = 2
        self.gravity = Vec3(0.0, 0.0, -9.81)
        self.up_axis = UP_AXIS_Y
        self.use_gpu_pipeline = False
        self.physx = PhysXParams()


class AssetOptions:
    """Asset import options (the fake honours disable_gravity, armature and default_dof_drive_mode)."""

    def __init__(self) -> None:
        self.fix_base_link = False
        self.disable_gravity = False
        self.armature = 0.0
        self.default_dof_drive_mode = DOF_MODE_NONE
        self.angular_damping = 0.0
        self.linear_damping = 0.0


class RigidBodyProperties:
    """Mass properties of one body."""

    def __init__(self) -> None:
        self.mass = 1.0
        self.com = Vec3()
        self.flags = 0


class RigidShapeProperties:
    """Contact properties of one shape."""

    def __init__(self) -> None:
        self.friction = 1.0
        self.restitution = 0.0
        self.rolling_friction = 0.0
        self.torsion_friction = 0.0


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


# ---- assets ------------------------------------------------------------------------------------


@dataclass
class _Joint:
    name: str
    kind: str  # "revolute" | "prismatic"
    parent: str
    child: str
    axis: np.ndarray
    lower: float
    upper: float
    limited: bool
    effort: float
    velocity: float
    damping: float
    friction: float


@dataclass
class Asset:
    """A parsed URDF: its links (bodies), collision shapes and movable joints (DOFs, in file order)."""

    path: Path
    options: AssetOptions
    links: dict[str, tuple[float, np.ndarray, np.ndarray]] = field(default_factory=dict)
    shapes: list[str] = field(default_factory=list)
    joints: list[_Joint] = field(default_factory=list)


def _floats(text: str | None, default: str) -> np.ndarray:
    return np.array([float(v) for v in (text or default).split()], np.float64)


def _load_urdf(path: Path, options: AssetOptions) -> Asset:
    root = ET.parse(path).getroot()
    if root.tag != "robot":
        raise ValueError(f"{path}: not a URDF (root element <{root.tag}>)")
    asset = Asset(path, options)
    for link in root.findall("link"):
        inertial = link.find("inertial")
        mass, com, inertia = 0.0, np.zeros(3), np.zeros(3)
        if inertial is not None:
            m, o, i = inertial.find("mass"), inertial.find("origin"), inertial.find("inertia")
            mass = float(m.get("value", "0")) if m is not None else 0.0
            com = _floats(o.get("xyz") if o is not None else None, "0 0 0")
            if i is not None:
                inertia = np.array([float(i.get(k, "0")) for k in ("ixx", "iyy", "izz")])
        asset.links[link.get("name", "")] = (mass, com, inertia)
        asset.shapes += [link.get("name", "")] * len(link.findall("collision"))
    for joint in root.findall("joint"):
        kind = joint.get("type", "fixed")
        if kind == "fixed":
            continue
        if kind not in ("revolute", "continuous", "prismatic"):
            raise ValueError(f"{path}: joint type {kind!r} is not supported by the fake")
        lim = joint.find("limit")
        dyn = joint.find("dynamics")
        axis_el = joint.find("axis")
        axis = _floats(axis_el.get("xyz") if axis_el is not None else None, "1 0 0")
        get = (lambda e, k, d: float(e.get(k, d)) if e is not None else float(d))  # noqa: E731
        parent, child = joint.find("parent"), joint.find("child")
        if parent is None or child is None:
            raise ValueError(f"{path}: joint {joint.get('name')!r} needs <parent> and <child>")
        asset.joints.append(_Joint(
            name=joint.get("name", ""), kind="prismatic" if kind == "prismatic" else "revolute",
            parent=parent.get("link", ""), child=child.get("link", ""),
            axis=axis / max(np.linalg.norm(axis), 1e-12), lower=get(lim, "lower", "0"), upper=get(lim, "upper", "0"),
            limited=kind != "continuous" and lim is not None, effort=get(lim, "effort", "0"),
            velocity=get(lim, "velocity", "0"), damping=get(dyn, "damping", "0"), friction=get(dyn, "friction", "0")))
    return asset


# ---- the simulation -----------------------------------------------------------------------------


class Env:
    """One environment: its actors (the fake allows one per env)."""

    def __init__(self, sim: Sim, index: int) -> None:
        self.sim = sim
        self.index = index
        self.actors: list[Asset] = []
        self.dof_props = np.zeros(0, DOF_PROPERTIES_DTYPE)
        self.body_props: list[RigidBodyProperties] = []
        self.shape_props: list[RigidShapeProperties] = []


class Sim:
    """Simulation state, batched over envs as ``[num_envs, num_dofs]`` torch tensors."""

    def __init__(self, device: torch.device, params: SimParams) -> None:
        self.device = device
        self.params = params
        self.envs: list[Env] = []
        self.prepared = False
        self.pending = False
        self.ground = False

    def _build(self) -> None:
        assets = [a for e in self.envs for a in e.actors]
        if not assets or any(a is not assets[0] for a in assets):
            raise RuntimeError("the fake needs exactly one actor of one asset in every env")
        asset, n, dev = assets[0], len(self.envs), self.device
        self.asset = asset
        self.num_dofs = len(asset.joints)
        dofs = self.num_dofs
        self.q = torch.zeros(n, dofs, device=dev)
        self.qd = torch.zeros(n, dofs, device=dev)
        self.force = torch.zeros(n, dofs, device=dev)
        self.target = torch.zeros(n, dofs, device=dev)
        self.dof_props = [e.dof_props for e in self.envs]
        self.body_props = [e.body_props for e in self.envs]
        self._sync_props()
        self.dof_state = torch.zeros(n * dofs, 2, device=dev)  # the acquired buffer
        prismatic = [j.kind == "prismatic" for j in asset.joints]
        self.prismatic = torch.tensor(prismatic, device=dev)
        # anc[i, j]: DOF j is a prismatic ancestor of DOF i (its acceleration moves DOF i's frame).
        child_of = {j.child: k for k, j in enumerate(asset.joints)}
        anc = torch.zeros(dofs, dofs, device=dev)
        for i, j in enumerate(asset.joints):
            link = j.parent
            while link in child_of:
                k = child_of[link]
                if prismatic[k]:
                    anc[i, k] = 1.0
                link = asset.joints[k].parent
        self.ancestors = anc
        self.axis = torch.tensor(np.stack([j.axis for j in asset.joints]), dtype=torch.float32, device=dev)
        com = torch.tensor(np.stack([asset.links[j.child][1] for j in asset.joints]), dtype=torch.float32,
                           device=dev)
        along = (com * self.axis).sum(-1, keepdim=True) * self.axis
        self.com_perp = com - along  # rotates with the joint
        self.com_along = along
        self.prepared = True

    def _sync_props(self) -> None:
        """Per-env DOF and body properties as tensors (after actor property changes)."""
        dev, asset = self.device, self.asset
        props = np.stack(self.dof_props)
        f = (lambda k: torch.tensor(props[k].astype(np.float32), device=dev))  # noqa: E731
        self.lower, self.upper, self.limited = f("lower"), f("upper"), f("hasLimits") > 0
        self.effort, self.velocity, self.stiffness = f("effort"), f("velocity"), f("stiffness")
        self.damping, self.friction, self.armature = f("damping"), f("friction"), f("armature")
        self.mode = torch.tensor(np.array(props["driveMode"], np.int64), device=dev)
        names = list(asset.links)
        child_idx = [names.index(j.child) for j in asset.joints]
        masses = torch.tensor([[b.mass for b in bp] for bp in self.body_props], dtype=torch.float32, device=dev)
        self.mass = masses[:, child_idx]
        self.axis_inertia = torch.tensor(
            [[float(np.dot(asset.links[j.child][2], j.axis**2)) for j in asset.joints]] * len(self.envs),
            dtype=torch.float32, device=dev)

    def step(self) -> None:
        """Advance every env by ``dt`` in ``substeps`` semi-implicit Euler steps."""
        p = self.params
        h = p.dt / max(p.substeps, 1)
        g = torch.tensor([p.gravity.x, p.gravity.y, p.gravity.z], device=self.device)
        if self.asset.options.disable_gravity:
            g = torch.zeros_like(g)
        for _ in range(max(p.substeps, 1)):
            tau = torch.where(self.mode == DOF_MODE_EFFORT, self.force.clamp(-self.effort, self.effort),
                              torch.zeros_like(self.force))
            pd = self.stiffness * (self.target - self.q) - self.damping * self.qd
            tau = torch.where(self.mode == DOF_MODE_POS, pd.clamp(-self.effort, self.effort), tau)
            tau = tau - torch.where(self.mode == DOF_MODE_POS, 0.0, self.damping) * self.qd
            tau = tau - self.friction * torch.sign(self.qd)
            # Prismatic DOFs first: their acceleration is felt by descendants as extra gravity.
            grav_p = self.mass * (self.axis @ g)
            inertia_p = self.mass + self.armature + 1e-6
            acc_p = torch.where(self.prismatic, (tau + grav_p) / inertia_p, torch.zeros_like(tau))
            # [n, i, j, 3]: DOF j's acceleration along its axis, where j is a prismatic ancestor of i.
            frame_acc = (acc_p.unsqueeze(1) * self.ancestors.unsqueeze(0)).unsqueeze(-1) * self.axis
            g_eff = g - frame_acc.sum(dim=2)  # [n, dofs, 3]
            c, s = torch.cos(self.q).unsqueeze(-1), torch.sin(self.q).unsqueeze(-1)
            r = self.com_along + c * self.com_perp + s * torch.cross(self.axis.expand_as(self.com_perp),
                                                                    self.com_perp, dim=-1)
            torque_g = (torch.cross(r, self.mass.unsqueeze(-1) * g_eff, dim=-1) * self.axis).sum(-1)
            inertia_r = self.axis_inertia + self.mass * (self.com_perp**2).sum(-1) + self.armature + 1e-6
            acc_r = (tau + torque_g) / inertia_r
            acc = torch.where(self.prismatic, acc_p, acc_r)
            qd = self.qd + h * acc
            vmax = torch.where(self.velocity > 0, self.velocity, torch.full_like(self.velocity, float("inf")))
            qd = torch.maximum(torch.minimum(qd, vmax), -vmax)
            q = self.q + h * qd
            below, above = self.limited & (q < self.lower), self.limited & (q > self.upper)
            q = torch.where(below, self.lower, torch.where(above, self.upper, q))
            self.qd = torch.where(below | above, torch.zeros_like(qd), qd)
            self.q = q


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
        return _load_urdf(path, options or AssetOptions())

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
    from robot_rl.sims.isaacgym import GymApi

    _conforms: GymApi = Gym()
