"""The fake Isaac Gym's physics: URDF assets, envs, and a sim batched over envs as torch tensors.

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
physics engine. The API calls that drive it are in :mod:`robot_rl.testing.fake_isaacgym`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from robot_rl.testing.fake_isaacgym_types import (
    DOF_MODE_EFFORT,
    DOF_MODE_POS,
    DOF_PROPERTIES_DTYPE,
    AssetOptions,
    RigidBodyProperties,
    RigidShapeProperties,
    SimParams,
)

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


def load_urdf(path: Path, options: AssetOptions) -> Asset:
    """Parse the URDF at ``path``: links (mass, centre of mass, inertia), collision shapes, movable joints."""
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
