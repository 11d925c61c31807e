"""The fake Isaac Gym's plain ``gymapi`` data: constants, the DOF property layout and the parameter classes.

Values and field names follow Isaac Gym (``isaacgym-stubs``); :mod:`robot_rl.testing.fake_isaacgym`
re-exports all of them, so they are reached as ``gymapi.SimParams`` and so on.
"""

from __future__ import annotations

import numpy as np

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
