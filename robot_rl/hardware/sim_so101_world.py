"""The simulated SO-101's physics: the published arm model with physical jaws, a table, a cube and two cameras.

Runs inside :mod:`robot_rl.hardware.sim_arm_server` (``world: so101`` in its config). The scene is built from
the very MJCF the kinematics use (robot_rl/hardware/kinematics/assets/so101.xml), so the simulated joints, their
zeros and limits and the tool frame are those of ``ArmKinematics("so101")``, and so of the LeRobot driver's FK.
Added to it (only here, never to the kinematic model):

- position servos on the five arm joints (STS3215-like torque limit) with gravity compensation, so a goal
  is held the way the real servos hold it;
- **jaws that collide**: a pad on the fixed jaw and a pad on a *sliding* moving jaw. The real SO-101's moving
  jaw rotates; a slide keeps the pads parallel, so a 3 cm cube is held flat between them. The gripper value
  therefore maps linearly to the opening (0 closed … 100 = ``JAW_OPEN_M`` apart), not to a jaw angle;
- a table (z = 0 at the base's underside), a riser under the pick area and a 3 cm cube on it. The riser is
  there because the SO-101 preset workspace box (the LeRobot driver's default) keeps the tool frame, the tip of
  the fixed jaw, 3 cm above the base's underside: a cube lying on the table itself could not be reached;
- cameras ``front`` (on the table, facing the arm) and ``wrist`` (on the gripper, looking along the jaws).

The wire speaks the units of LeRobot's so101_follower with ``use_degrees``: joints in degrees (0 = the middle of
the calibrated range = the model's zero), ``gripper.pos`` 0 (closed) … 100 (open).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from robot_rl.hardware.kinematics.config import arm_model
from robot_rl.hardware.sim_arm_server import (
    grip_start_area,
    in_reach,
    make_renderers,
    pack_array,
    render_cameras,
    start_check,
)

#: Distance between the pads at gripper.pos 100 (m); a 3 cm cube is held at about 60.
JAW_OPEN_M = 0.05
#: Height of the riser under the pick area (m); its top is the cube's table.
RISER_M = 0.035
CUBE_HALF_M = 0.015
#: Start pose (degrees; the model's zero is the middle of each range): the jaws point down, 7 cm above the riser,
#: about 23 cm in front of the base (the wrist_flex limit, 95 degrees, is what tilts it higher up).
HOME_DEG = (0.0, -6.0, 0.0, 92.0, 0.0)
JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")

_ADDED_DEFAULTS = """
    <default class="collide">
      <geom contype="1" conaffinity="1" condim="4" friction="1 0.02 0.002" solref="0.01 1" group="0"/>
    </default>
    <default class="pad">
      <geom type="box" contype="1" conaffinity="1" condim="4" friction="1.5 0.02 0.002" solref="0.01 1"
            group="0" rgba="0.2 0.2 0.22 1" mass="0.005"/>
    </default>
"""
# In the gripper body's frame: the tool frame (gripper_tip) is at (-0.0079, 0, -0.098) with its x axis (the
# approach) along -z and its z axis (the closing direction) along +x. The fixed pad's inner face is the tool
# frame's plane; the grip site is midway between the open pads, 1.5 cm back from the tip: aimed at the cube, it
# leaves 1 cm on either side of a 3 cm cube (closing pushes the cube against the fixed pad).
_GRIPPER_ADDITIONS = f"""
                <geom name="fixed_pad" class="pad" pos="-0.0119 -0.0002 -0.078" size="0.004 0.012 0.02"/>
                <site name="grip" pos="{-0.0079 + JAW_OPEN_M / 2:.4f} -0.0002 -0.0831" size="0.004" rgba="1 0.3 0.3 1"/>
                <camera name="wrist" pos="-0.035 0 -0.02" xyaxes="0 1 0 -0.832 0 -0.555" fovy="75"/>
                <body name="moving_jaw" pos="-0.0079 -0.0002 -0.078">
                  <joint name="gripper" type="slide" axis="1 0 0" range="0 {JAW_OPEN_M}" damping="2" armature="0.01"/>
                  <geom name="moving_pad" class="pad" pos="0.004 0 0" size="0.004 0.012 0.02"/>
                </body>"""
_WORLD_ADDITIONS = f"""
    <light pos="0.3 0 1.2" dir="0 0 -1" directional="true" diffuse="0.8 0.8 0.8"/>
    <geom name="table" type="plane" size="0.8 0.8 0.05" class="collide" rgba="0.62 0.52 0.42 1"/>
    <geom name="riser" type="box" pos="0.25 0 {RISER_M / 2}" size="0.08 0.13 {RISER_M / 2}" class="collide"
          rgba="0.55 0.58 0.62 1"/>
    <camera name="front" pos="0.62 0 0.34" xyaxes="0 1 0 -0.6 0 0.8" fovy="45"/>
    <body name="cube" pos="0.25 0 {RISER_M + CUBE_HALF_M}">
      <freejoint name="cube"/>
      <geom name="cube" type="box" size="{CUBE_HALF_M} {CUBE_HALF_M} {CUBE_HALF_M}" class="collide" mass="0.02"
            rgba="0.85 0.3 0.25 1"/>
    </body>
"""
_ACTUATORS = """
  <actuator>
""" + "".join(f'    <position name="{j}" joint="{j}" kp="20" kv="1" forcerange="-3 3" inheritrange="1"/>\n'
              for j in JOINTS) + """    <position name="gripper" joint="gripper" kp="200" kv="5" forcerange="-5 5"
              inheritrange="1"/>
  </actuator>
"""


def scene_xml() -> str:
    """The MJCF text of the SO-101 pick scene (see the module docstring)."""
    xml = arm_model("so101").model_path().read_text()
    xml = xml.replace('<compiler angle="radian" autolimits="true"/>',
                      '<compiler angle="radian" autolimits="true"/>\n  <option timestep="0.002" integrator='
                      '"implicitfast"/>\n  <visual><global offwidth="640" offheight="480"/><quality shadowsize="0"/>'
                      '</visual>')
    xml = xml.replace("  <default>\n", "  <default>\n" + _ADDED_DEFAULTS, 1)
    xml = re.sub(r'<body name="(\w+)"', r'<body name="\1" gravcomp="1"', xml)
    # The published rotating jaw becomes the sliding one (see the module docstring).
    xml, n = re.subn(r'\n\s*<body name="moving_jaw".*?</body>', _GRIPPER_ADDITIONS, xml, flags=re.S)
    if n != 1:
        raise RuntimeError("so101.xml changed: no moving_jaw body to replace")
    xml = xml.replace("  </worldbody>", _WORLD_ADDITIONS + "  </worldbody>")
    return xml.replace("</mujoco>", _ACTUATORS + "</mujoco>")


class So101World:
    """Physics, servos and pick task of one simulated SO-101 (no networking); the server's ``world``."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        from robot_rl.sims.mujoco.render import choose_gl, import_mujoco

        choose_gl("cpu")
        mujoco = import_mujoco(renders=bool(cfg.get("cameras")))

        self._mj = mujoco
        self.cfg = cfg
        self.model = mujoco.MjModel.from_xml_string(scene_xml())
        self.model.opt.timestep = float(cfg["physics_timestep"])
        self.data = mujoco.MjData(self.model)
        self.rng = np.random.default_rng(int(cfg["seed"]))
        jid = [self.model.joint(n).id for n in JOINTS]
        self.arm_qpos = self.model.jnt_qposadr[jid].astype(np.int64)
        self.arm_low = self.model.jnt_range[jid, 0].copy()
        self.arm_high = self.model.jnt_range[jid, 1].copy()
        self.jaw_q = int(self.model.jnt_qposadr[self.model.joint("gripper").id])
        self.cube_q = int(self.model.jnt_qposadr[self.model.joint("cube").id])
        self.arm_ctrl = np.array([self.model.actuator(n).id for n in JOINTS])
        self.jaw_ctrl = int(self.model.actuator("gripper").id)
        self.grip = int(self.model.site("grip").id)
        self.renderers = make_renderers(mujoco, self.model, self.data, cfg["cameras"])
        self.target_q = np.zeros(5)
        self.opening = 1.0
        self.sim_time = 0.0
        home = self.model.qpos0.copy()
        home[self.arm_qpos] = np.radians(HOME_DEG)
        self.grip_area = grip_start_area(mujoco, self.model, home, self.arm_qpos, float(cfg["start_noise"]),
                                         self.arm_low, self.arm_high, self.grip)
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        """Arm at the start pose (uniform noise of ``start_noise`` rad), jaws open, cube at a random spot."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        mj, d = self._mj, self.data
        mj.mj_resetData(self.model, d)
        q = np.radians(HOME_DEG) + self.rng.uniform(-1, 1, 5) * float(self.cfg["start_noise"])
        d.qpos[self.arm_qpos] = np.clip(q, self.arm_low, self.arm_high)
        d.qpos[self.jaw_q] = JAW_OPEN_M
        lo, hi = np.asarray(self.cfg["cube_low"]), np.asarray(self.cfg["cube_high"])
        d.qpos[self.cube_q:self.cube_q + 2] = self.rng.uniform(lo, hi)
        d.qpos[self.cube_q + 2] = RISER_M + CUBE_HALF_M
        yaw = self.rng.uniform(-1, 1) * math.radians(float(self.cfg["cube_yaw_deg"]))
        d.qpos[self.cube_q + 3:self.cube_q + 7] = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))
        self.opening = 1.0
        mj.mj_forward(self.model, d)
        self.hold()
        self.control()

    def hold(self) -> None:
        """Stop: the servos' goals become the measured joints."""
        self.target_q = self.data.qpos[self.arm_qpos].copy()

    def state(self) -> dict[str, Any]:
        """What the bus reports (joints in degrees, gripper 0..100), and the cube and grip-site positions."""
        d = self.data
        return {"joints_deg": pack_array(np.degrees(d.qpos[self.arm_qpos]).astype(np.float64)),
                "gripper_pos": float(np.clip(d.qpos[self.jaw_q] / JAW_OPEN_M, 0.0, 1.0) * 100.0),
                "cube": pack_array(d.qpos[self.cube_q:self.cube_q + 3].copy()),
                "grip": pack_array(d.site_xpos[self.grip].copy()), "sim_time": self.sim_time}

    def images(self) -> dict[str, Any]:
        """One rendered frame per camera."""
        return render_cameras(self.renderers, self.data)

    def task(self) -> dict[str, Any]:
        """Pick status: ``success`` when the cube is between the pads and ``lift_height`` above the riser."""
        d = self.data
        cube = d.qpos[self.cube_q:self.cube_q + 3]
        reach = float(np.linalg.norm(cube - d.site_xpos[self.grip]))
        opening = float(d.qpos[self.jaw_q])
        grasped = reach < 0.035 and opening < 2 * CUBE_HALF_M + 0.006
        lifted = float(cube[2]) - (RISER_M + CUBE_HALF_M)
        lift = float(self.cfg["lift_height"])
        success = bool(grasped and lifted >= lift)
        if self.cfg["reward"] == "sparse":
            reward = 1.0 if success else 0.0
        else:  # sim_arm's shaping, as a cost until success (why: robot_rl/hardware/sim_arm_server.py)
            shaping = (0.4 * (1.0 - np.tanh(10.0 * reach)) + 0.2 * grasped
                       + 0.4 * grasped * min(max(lifted, 0.0) / lift, 1.0))
            reward = 5.0 if success else shaping - 1.0
        rest = RISER_M + CUBE_HALF_M
        return {"success": success, "reward": float(reward), "grasped": bool(grasped), "lifted_m": lifted,
                "in_reach": in_reach(cube, self.cfg, rest),
                **start_check(cube, d.site_xpos[self.grip], opening / JAW_OPEN_M, grasped, self.cfg, rest,
                              self.grip_area)}

    def command(self, target: np.ndarray, gripper: float) -> None:
        """Joint goals in degrees ``[5]`` (clipped to the model's ranges, as the servos' limits do) and 0..1."""
        if not np.isfinite(target).all() or not np.isfinite(gripper):
            raise ValueError("non-finite target")
        if target.shape != (5,):
            raise ValueError(f"the SO-101 takes 5 joint goals, got shape {target.shape}")
        self.target_q = np.clip(np.radians(target), self.arm_low, self.arm_high)
        self.opening = float(np.clip(gripper, 0.0, 1.0))

    def control(self) -> None:
        """The servos' goals from the current command."""
        self.data.ctrl[self.arm_ctrl] = self.target_q
        self.data.ctrl[self.jaw_ctrl] = self.opening * JAW_OPEN_M

    def advance(self, seconds: float) -> None:
        """Step the physics ``seconds`` forward (the goals are applied at every step, as a servo's are)."""
        dt = self.model.opt.timestep
        self.control()
        for _ in range(int(seconds / dt)):
            self._mj.mj_step(self.model, self.data)
            self.sim_time += dt
