"""``robot.type=sim_so101``: a simulated SO-101 follower behind the very code that drives the real one.

:class:`SimSo101Robot` *is* the LeRobot driver (:class:`~robot_rl.hardware.lerobot_robot.LeRobotRobot`) with the
lerobot robot object replaced by :class:`So101Link`, a client of a MuJoCo SO-101 in its own process
(:mod:`robot_rl.hardware.sim_so101_world`, served by :mod:`robot_rl.hardware.sim_arm_server` at real-time pace,
with ``latency_s`` and ``time_scale`` as for ``sim_arm``). The link speaks lerobot's so101_follower dicts
(``shoulder_pan.pos`` … in degrees, ``gripper.pos`` 0..100, one ``(H, W, 3)`` image per camera), so units,
``state`` layout, action layout per control mode, joint limits, the ``ee_delta`` IK (mink on the arm model) and
the default workspace box (the ``so101`` preset) are the driver's own, not a copy of them. The config is the
driver's config plus the simulator's fields: a config written for ``robot.type=lerobot`` runs here unchanged
(its port, id and lerobot options are ignored), and one written here runs on the arm once the simulator's
fields are dropped.

The pick task: reset places the cube at a random spot of the riser in front of the arm; success is the cube held
between the jaws ``lift_height`` above the riser (``task_status``, the TaskRobot protocol). ``object_in_state``
appends the cube's position to ``state`` (off by default: the real arm has no object tracker); the scripted
devices read the cube either way (:meth:`SimSo101Robot.pick_view`, as a person watching the cell would).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.hardware.lerobot_robot import SO_JOINTS, LeRobotRobot, LeRobotRobotConfig
from robot_rl.hardware.robot import ROBOTS, RobotState
from robot_rl.hardware.sim_arm import TaskStatus, check_resets, task_info
from robot_rl.hardware.sim_pick import PickView
from robot_rl.hardware.sim_process import SimProcess

__all__ = ["SimSo101Config", "SimSo101Robot", "So101Link"]

#: The riser's top plus half the cube (robot_rl/hardware/sim_so101_world.py): the cube's resting centre height.
CUBE_REST_Z = 0.05
SIM_CAMERAS = ("front", "wrist")


@ROBOTS.register("sim_so101")
@dataclass
class SimSo101Config(LeRobotRobotConfig):
    """A simulated SO-101 follower (MuJoCo, own process, pick-a-cube task) driven like the real one."""

    control_mode: str = "ee_delta"
    """``ee_delta`` (default here: what deploy and the scripted devices drive), ``joint_delta`` or ``joint`` (the
    LeRobot driver's default). The one default that differs from ``robot.type=lerobot``: name the mode in a
    config meant for both."""

    cameras: dict[str, tuple[int, int]] = field(default_factory=lambda: {"front": (64, 64), "wrist": (64, 64)})
    """Rendered cameras (``front``: on the table facing the arm; ``wrist``: on the gripper) → (height, width)."""
    latency_s: float = 0.0
    """Each request is served this long after it arrives (the bus's and cameras' delay)."""
    physics_timestep: float = 0.002
    """MuJoCo timestep, seconds of simulated (= wall-clock at ``time_scale`` 1) time."""
    time_scale: float = 1.0
    """Simulated seconds per wall-clock second (1: like hardware; > 1 collects robot time faster, the control
    loop must then run that many times faster too)."""
    object_in_state: bool = False
    """Append the cube's position (x, y, z) to ``state`` (an object tracker the real arm does not have)."""
    reward: str = "dense"
    """Pick reward: ``dense`` (sim_arm's shaping as a cost, 5 on success) or ``sparse`` (1 on success)."""
    lift_height: float = 0.04
    """Success: the grasped cube is this far (m) above the riser."""
    cube_low: tuple[float, float] = (0.21, -0.05)
    """Lower corner (x, y; m, base frame) of the cube's start area (on the riser, where the jaws reach pointing
    down)."""
    cube_high: tuple[float, float] = (0.27, 0.05)
    """Upper corner (m) of the cube's start area."""
    cube_yaw_deg: float = 0.0
    """The cube's start yaw: uniform within ± this (degrees)."""
    start_noise: float = 0.05
    """Start joint angles: the start pose plus uniform noise of this half-width (rad)."""
    resets: str = "teleport"
    """Between episodes: ``teleport`` (the simulator places the arm and the cube anew) or ``physical`` (nothing is
    placed: only physics and the robot move things; a cube pushed off the riser stays there until a person puts it
    back, :meth:`SimSo101Robot.human_reset`; ``docs/practice.md``)."""
    reach_low: tuple[float, float] = (0.17, -0.13)
    """Lower corner (x, y, m) of where the jaws can still pick the cube: the riser's top (``in_reach``)."""
    reach_high: tuple[float, float] = (0.33, 0.13)
    """Upper corner (x, y, m) of the riser's top; a cube off it lies below the preset workspace box."""
    seed: int = 0
    """Seed of the resets (cube position, start pose)."""
    address: str | None = None
    """Join an already running simulator at this address instead of starting one."""
    request_timeout_s: float = 1.0
    """A request unanswered this long means the simulator is gone: :class:`RobotError`."""
    start_timeout_s: float = 60.0
    """Time allowed for the simulator process to start (MuJoCo import, OpenGL context)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.robot_type != "so101_follower" or self.arm_name != "so101":
            raise ValueError(f"sim_so101 simulates lerobot's so101_follower with the so101 arm model (robot_type "
                             f"{self.robot_type!r}, arm {self.arm!r}): leave robot_type and arm at their defaults")
        if not self.degrees or tuple(self.joint_names) != tuple(SO_JOINTS) or self.gripper_name != "gripper":
            raise ValueError("sim_so101 reports the SO-101's motors in degrees (use_degrees): leave degrees, "
                             "joint_names and gripper_name at their defaults")
        if self.reward not in ("sparse", "dense"):
            raise ValueError(f"reward {self.reward!r}; valid: sparse, dense")
        check_resets(self.resets)
        for name in ("latency_s", "lift_height", "start_noise", "cube_yaw_deg"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if not 0 < self.time_scale <= 20:
            raise ValueError("time_scale must be in (0, 20] (simulated seconds per wall-clock second)")
        if not 0 < self.physics_timestep <= 0.01:
            raise ValueError("physics_timestep must be in (0, 0.01] s")
        if not all(lo <= hi for lo, hi in zip(self.cube_low, self.cube_high)):
            raise ValueError(f"cube_low {self.cube_low} must be at or below cube_high {self.cube_high}")
        unknown = set(self.cameras) - set(SIM_CAMERAS)
        if unknown:
            raise ValueError(f"unknown simulated cameras {sorted(unknown)}; valid: {', '.join(SIM_CAMERAS)}")

    def make(self) -> SimSo101Robot:
        """An unconnected :class:`SimSo101Robot`."""
        return SimSo101Robot(self)

    def exclusive_resources(self) -> list[str]:
        """Only a joined simulator's address: the serial port and cameras of the real arm are not used."""
        return [f"address {self.address}"] if self.address else []


class So101Link(SimProcess):
    """The simulator as lerobot's so101_follower looks to the driver (features, observation and action dicts)."""

    def __init__(self, config: SimSo101Config) -> None:
        self.config = config
        self._init_process()
        self.cube = np.zeros(3)
        self.grip = np.zeros(3)
        self.task: dict[str, Any] | None = None

    def _server_config(self) -> dict[str, Any]:
        cfg = {k: v for k, v in asdict(self.config).items() if k not in ("address", "options")}
        return {**cfg, "world": "so101"}

    @property
    def action_features(self) -> dict[str, type]:
        """``<motor>.pos`` per motor, as lerobot's follower declares them."""
        return {f"{m}.pos": float for m in (*SO_JOINTS, "gripper")}

    @property
    def observation_features(self) -> dict[str, Any]:
        """The motors and one ``(H, W, 3)`` image per camera."""
        return {**self.action_features, **{n: (h, w, 3) for n, (h, w) in self.config.cameras.items()}}

    def _motors(self, reply: dict[str, Any]) -> dict[str, Any]:
        from robot_rl.hardware.sim_arm_server import unpack_array

        self.cube = unpack_array(reply["cube"])
        self.grip = unpack_array(reply["grip"])
        out: dict[str, Any] = {f"{m}.pos": float(v) for m, v in zip(SO_JOINTS, unpack_array(reply["joints_deg"]))}
        out["gripper.pos"] = float(reply["gripper_pos"])
        return out

    def read_motors(self) -> dict[str, Any]:
        """The motors only (no camera render): what a bus read returns."""
        return self._motors(self._call("state"))

    def get_observation(self) -> dict[str, Any]:
        """Motors and camera frames of one instant, as lerobot's ``get_observation``."""
        from robot_rl.hardware.sim_arm_server import unpack_array

        reply = self._call("observe")
        self.task = reply["task"]  # the task as of this observation, until the next command
        out = self._motors(reply)
        for name in self.config.cameras:
            out[name] = unpack_array(reply["images"][name])
        return out

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        """Send the goal positions (degrees, gripper 0..100); returns them (the servos clip to their ranges)."""
        from robot_rl.hardware.sim_arm_server import pack_array

        goal = np.array([float(action[f"{m}.pos"]) for m in SO_JOINTS], np.float64)
        self.task = None
        self._call("command", target=pack_array(goal), gripper=float(action["gripper.pos"]) / 100.0)
        return dict(action)

    def reset(self, seed: int | None) -> None:
        """A new episode in the simulator."""
        self.task = None
        self._call("reset", seed=seed)

    def task_now(self) -> dict[str, Any]:
        """The task as of the last observation (until a command), else as of now."""
        return self.task if self.task is not None else self._call("task")


class SimSo101Robot(LeRobotRobot):
    """The LeRobot driver on a simulated SO-101; also ``reset_task``/``task_status`` and :meth:`pick_view`."""

    config: SimSo101Config

    def __init__(self, config: SimSo101Config) -> None:
        self.link = So101Link(config)
        super().__init__(config, robot=self.link)
        self.last_observation: dict[str, np.ndarray] | None = None

    @property
    def features(self) -> EnvSpec:
        """The driver's spec (plus the cube in ``state`` with ``object_in_state``)."""
        spec = super().features
        if self.config.object_in_state:
            obs = dict(spec.observation)
            obs["state"] = ArraySpec((spec.observation["state"].shape[0] + 3,), "float32")
            spec = EnvSpec(observation=obs, action=spec.action, extras=spec.extras)
        return spec

    def connect(self) -> None:
        """Start (or join) the simulator; the arm holds where it starts. No calibration: the sim's is exact."""
        if not self.is_connected:
            self.link.connect()

    def measure(self) -> RobotState:
        """Joints, pose (FK of the arm model) and gripper, from a motor read (no render)."""
        with self._lock:
            return self._state(self.link.read_motors())

    def observe(self) -> dict[str, np.ndarray]:
        """The driver's observation (plus the cube with ``object_in_state``)."""
        obs = super().observe()
        if self.config.object_in_state:
            obs["state"] = np.concatenate([obs["state"], self.link.cube]).astype(np.float32)
        self.last_observation = obs
        return obs

    def hold(self) -> None:
        """Brake where the arm is, on the simulator's own hold socket (callable from the watchdog thread)."""
        self.link.hold()

    def emergency_stop_command(self) -> Any:
        """A picklable ``hold`` for :class:`~robot_rl.hardware.estop.EStopGuard` (after :meth:`connect`)."""
        return self.link.emergency_stop_command()

    def sim_stats(self) -> dict[str, float]:
        """Simulated seconds so far and how often the physics skipped ahead of a lagging clock."""
        return self.link.sim_stats()

    def reset_task(self, seed: int | None = None) -> None:
        """Start a new episode: arm near the start pose, jaws open, cube at a random spot (``seed``: that spot)."""
        self.link.reset(seed)

    def task_status(self) -> TaskStatus:
        """Whether the cube is picked (between the jaws and ``lift_height`` up), and the step reward."""
        r = self.link.task_now()
        return TaskStatus(bool(r["success"]), float(r["reward"]), task_info(r))

    def human_reset(self, seed: int | None = None) -> None:
        """A person puts the arm and the cube back (teleported in the simulator, counted in ``sim_stats``)."""
        self.link.task = None
        self.link.human_reset(seed)

    def pick_view(self) -> PickView | None:
        """The pick task at the last observation (:class:`~robot_rl.hardware.sim_pick.PickScene`)."""
        if self.config.control_mode != "ee_delta":
            raise ConfigError("the scripted pick acts in ee_delta: set robot.control_mode=ee_delta")
        if self.last_observation is None:
            return None
        state = self.last_observation["state"]
        # The sideways miss: the jaws close along the arm's radius, so a miss along it could still pinch the cube.
        return PickView(grip=self.link.grip.copy(), cube=self.link.cube.copy(), opening=float(state[11]),
                        rest_z=CUBE_REST_Z, lift_height=self.config.lift_height, max_step_m=self.config.max_step_m,
                        miss_dir=(0.0, 1.0, 0.0), lift_follow=False)
