"""Build the MuJoCo model of one task and find the indices the controller and the tasks read.

The scene is ``assets/arm.xml`` (arm, gripper, table, goal marker) with the task's object files
(``assets/cube.xml``, ``assets/peg.xml``) pasted in at its ``<!-- OBJECTS -->`` marker. MuJoCo is
imported by the caller; this module only takes the compiled model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import mujoco

#: Arm joint angles (rad) of the home pose: the grip site 15 cm above the table at x = 0.40 m,
#: pointing straight down (q2 + q3 + q5 = π; worked out with the law of cosines for the 0.3 m links).
HOME_ARM = (0.0, 0.521, 1.63, 0.0, 0.99, 0.0)
#: Finger slide range (m per finger); the opening between the fingers is twice the joint position.
FINGER_MAX = 0.04
ARM_JOINTS = ("j1", "j2", "j3", "j4", "j5", "j6")
FINGER_JOINTS = ("finger_left", "finger_right")


def scene_xml(objects: tuple[str, ...]) -> str:
    """The MJCF text of the arm scene with the given object files (``"cube.xml"``, ...) inserted."""
    assets = resources.files("robot_rl.sims.mujoco") / "assets"
    xml = (assets / "arm.xml").read_text()
    parts = [(assets / name).read_text() for name in objects]
    return xml.replace("<!-- OBJECTS -->", "\n".join(parts))


@dataclass(frozen=True)
class SceneIndex:
    """Addresses into ``qpos``/``qvel``/``ctrl``/sites/mocap of a compiled scene, and its home pose."""

    nq: int
    nv: int
    nu: int
    arm_qpos: np.ndarray
    """qpos addresses of the six arm joints."""
    arm_dof: np.ndarray
    """dof (qvel) addresses of the six arm joints."""
    finger_qpos: np.ndarray
    finger_dof: np.ndarray
    arm_ctrl: np.ndarray
    finger_ctrl: np.ndarray
    arm_low: np.ndarray
    """Joint range lower bounds of the arm (rad)."""
    arm_high: np.ndarray
    site: dict[str, int]
    """Site name → id (``grip``, ``goal`` and the objects' sites)."""
    mocap: dict[str, int]
    """Mocap body name → mocap index (``goal``, ``hole``)."""
    free_qpos: dict[str, int]
    """Free-joint name → qpos address of its 7 numbers (position, then quaternion w x y z)."""
    home_qpos: np.ndarray
    """Full qpos of the home pose (arm at :data:`HOME_ARM`, fingers open, objects as in the XML)."""
    home_mocap: np.ndarray
    """``[nmocap, 3]`` mocap positions of the XML."""
    grip_home_pos: np.ndarray
    """World position of the grip site in the home pose."""
    grip_home_rot: np.ndarray
    """``[3, 3]`` world rotation of the grip site in the home pose (the IK's orientation target)."""


def index_scene(model: mujoco.MjModel) -> SceneIndex:
    """Look up every address the env needs, and compute the home pose's grip-site frame."""
    import mujoco

    def jid(name: str) -> int:
        return int(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name))

    def aid(name: str) -> int:
        return int(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, name))

    arm_j = [jid(n) for n in ARM_JOINTS]
    fin_j = [jid(n) for n in FINGER_JOINTS]
    site = {model.site(i).name: i for i in range(model.nsite)}
    mocap = {model.body(b).name: int(model.body_mocapid[b]) for b in range(model.nbody) if model.body_mocapid[b] >= 0}
    free = {model.joint(j).name: int(model.jnt_qposadr[j]) for j in range(model.njnt)
            if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE}
    data = mujoco.MjData(model)
    home = model.qpos0.copy()
    arm_qpos = model.jnt_qposadr[arm_j].astype(np.int64)
    finger_qpos = model.jnt_qposadr[fin_j].astype(np.int64)
    home[arm_qpos] = HOME_ARM
    home[finger_qpos] = FINGER_MAX
    data.qpos[:] = home
    mujoco.mj_kinematics(model, data)
    grip = site["grip"]
    mocap_bodies = np.flatnonzero(model.body_mocapid >= 0)
    home_mocap = model.body_pos[mocap_bodies[np.argsort(model.body_mocapid[mocap_bodies])]].copy()
    return SceneIndex(
        nq=model.nq, nv=model.nv, nu=model.nu,
        arm_qpos=arm_qpos, arm_dof=model.jnt_dofadr[arm_j].astype(np.int64),
        finger_qpos=finger_qpos, finger_dof=model.jnt_dofadr[fin_j].astype(np.int64),
        arm_ctrl=np.array([aid(n) for n in ARM_JOINTS]), finger_ctrl=np.array([aid(n) for n in FINGER_JOINTS]),
        arm_low=model.jnt_range[arm_j, 0].copy(), arm_high=model.jnt_range[arm_j, 1].copy(),
        site=site, mocap=mocap, free_qpos=free, home_qpos=home,
        home_mocap=home_mocap,
        grip_home_pos=data.site_xpos[grip].copy(), grip_home_rot=data.site_xmat[grip].reshape(3, 3).copy(),
    )


def build_model(objects: tuple[str, ...], timestep: float | None = None) -> tuple[Any, SceneIndex]:
    """Compile the scene with ``objects`` (optionally overriding the physics ``timestep``)."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(scene_xml(objects))
    if timestep is not None:
        if not (0 < timestep <= 0.02 and math.isfinite(timestep)):
            raise ValueError(f"timestep must be in (0, 0.02] s, got {timestep}")
        model.opt.timestep = timestep
    return model, index_scene(model)
