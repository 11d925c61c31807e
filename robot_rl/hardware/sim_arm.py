"""``SimulatedArm``: a MuJoCo arm behind the Robot contract, in its own process, at real-time pace.

The stand-in for hardware in tests, demos and docs. :meth:`SimulatedArm.connect` starts
:mod:`robot_rl.hardware.sim_arm_server` (or joins one at ``address``) and talks to it over a local
ZeroMQ socket with msgpack maps (no pickle). The physics advances with the wall clock whether or not
commands arrive, so a slow control loop, a network hiccup or a killed process behave as they would on
an arm: the watchdog and the safety layer see real time pass. Cameras are MuJoCo renders (``front``,
``top``, ``wrist``; ``MUJOCO_GL=osmesa`` on CPU), and ``latency_s`` delays every request.

It also runs a task, *pick* (see :meth:`SimulatedArm.task_status`), so deploy runs have real success and
failure. With ``object_in_state`` the cube's position is appended to ``state`` (``[q 6, pose 6, gripper,
cube xyz]``), as a real cell with an object tracker would; without it, policies must use the cameras.

Orientation: in ``ee_delta`` mode only the translation is followed; the IK keeps the gripper pointing
down (a top-down pick), so rotation entries of the action are accepted and ignored. The measured roll,
pitch, yaw are relative to that pointing-down home frame (zero there), so they never wrap at ±π.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.hardware.robot import ROBOTS, Robot, RobotConfig, RobotState
from robot_rl.hardware.sim_pick import PickIntervener, PickView, pick_expert
from robot_rl.hardware.sim_process import SimProcess

log = logging.getLogger(__name__)

__all__ = ["PickIntervener", "SimulatedArm", "SimulatedArmConfig", "TaskStatus", "pick_expert_action"]
#: Height of the 5 cm cube's centre resting on the table (robot_rl/sims/mujoco/assets/cube.xml).
CUBE_REST_Z = 0.025
#: Joint ranges of the arm in robot_rl/sims/mujoco/assets/arm.xml (radians).
ARM_RANGE = (2.9, 1.8, 2.6, 2.9, 2.2, 2.9)


@ROBOTS.register("sim_arm")
@dataclass
class SimulatedArmConfig(RobotConfig):
    """A MuJoCo arm in a separate process (pick-a-cube task), used like hardware."""

    joint_low: list[float] = field(default_factory=lambda: [-r for r in ARM_RANGE])
    """Lower joint limits (the model's), radians."""
    joint_high: list[float] = field(default_factory=lambda: list(ARM_RANGE))
    """Upper joint limits (the model's), radians."""
    cameras: dict[str, tuple[int, int]] = field(default_factory=lambda: {"front": (64, 64), "wrist": (64, 64)})
    """Rendered cameras (``front``, ``top``, ``wrist``) → (height, width)."""
    latency_s: float = 0.0
    """Each request is served this long after it arrives (state read and commands applied then)."""
    physics_timestep: float = 0.002
    """MuJoCo timestep, seconds of simulated (= wall-clock at ``time_scale`` 1) time."""
    time_scale: float = 1.0
    """Simulated seconds per wall-clock second. 1 (default) behaves like hardware; > 1 is a benchmark option
    to collect robot time faster than real time: the control loop must then run ``time_scale`` times faster
    (``safety.control_hz``), and wall-clock limits (speeds, watchdog, ``latency_s``) stay in wall seconds."""
    ik_period_s: float = 0.01
    """How often the simulated controller recomputes joint targets (the arm's servo rate)."""
    object_in_state: bool = True
    """Append the cube's position (x, y, z) to ``state`` (a stand-in for an object tracker)."""
    reward: str = "dense"
    """Pick reward: ``dense`` (approach, grasp and lift shaping in 0..1, minus 1, on every step before success; 5
    on success, so ending the episode by success always pays most) or ``sparse`` (1 on success). Dense is what
    the documented HIL workflow learns with (docs/deploy.md)."""
    max_step_m: float = 0.02
    """ee_delta: translation per step at action 1.0, metres (2 cm: the pick fits in a 40-step episode at 10 Hz)."""
    lift_height: float = 0.04
    """Success: the grasped cube is this far (m) above its resting height."""
    cube_low: tuple[float, float] = (0.36, -0.05)
    """Lower corner (m) of the cube's start area."""
    cube_high: tuple[float, float] = (0.44, 0.05)
    """Upper corner (m) of the cube's start area."""
    start_noise: float = 0.05
    """Start joint angles: home pose plus uniform noise of this half-width (rad)."""
    resets: str = "teleport"
    """Between episodes: ``teleport`` (the simulator places the arm and the cube anew, HIL-SERL's setting) or
    ``physical`` (nothing is placed: only physics and the robot move things, a cube pushed out of reach stays
    there until a person puts it back, :meth:`SimulatedArm.human_reset`; ``docs/practice.md``)."""
    reach_low: tuple[float, float] = (0.2, -0.3)
    """Lower corner (x, y, m) of where the arm can still pick the cube (``in_reach`` in the task status)."""
    reach_high: tuple[float, float] = (0.6, 0.3)
    """Upper corner (x, y, m) of where the arm can still pick the cube."""
    seed: int = 0
    """Seed of the resets (cube position, start pose)."""
    address: str | None = None
    """Join an already running server at this address instead of starting one."""
    request_timeout_s: float = 1.0
    """A request unanswered this long means the simulator is gone: :class:`RobotError`."""
    start_timeout_s: float = 60.0
    """Time allowed for the server process to start (MuJoCo import, OpenGL context)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.reward not in ("sparse", "dense"):
            raise ValueError(f"reward {self.reward!r}; valid: sparse, dense")
        check_resets(self.resets)
        for name in ("latency_s", "lift_height", "start_noise"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if not 0 < self.time_scale <= 20:
            raise ValueError("time_scale must be in (0, 20] (simulated seconds per wall-clock second)")
        if not 0 < self.physics_timestep <= 0.01 or self.ik_period_s < self.physics_timestep:
            raise ValueError("physics_timestep must be in (0, 0.01] s and ik_period_s >= physics_timestep")
        unknown = set(self.cameras) - {"front", "top", "wrist"}
        if unknown:
            raise ValueError(f"unknown simulated cameras {sorted(unknown)}; valid: front, top, wrist")

    def make(self) -> SimulatedArm:
        """An unconnected :class:`SimulatedArm`."""
        return SimulatedArm(self)


@dataclass
class TaskStatus:
    """The task as the simulator sees it now: success, the step's reward, and details."""

    success: bool
    reward: float
    info: dict[str, Any]


class SimulatedArm(SimProcess, Robot):
    """The Robot contract over a simulator process; also ``reset_task()`` and ``task_status()``."""

    config: SimulatedArmConfig

    def __init__(self, config: SimulatedArmConfig) -> None:
        self.config = config
        self._init_process()
        self.last_observation: dict[str, np.ndarray] | None = None
        self.cube: np.ndarray = np.zeros(3)
        self._task: dict[str, Any] | None = None
        self.cameras = {}

    # ---- features -------------------------------------------------------------------------------

    @property
    def features(self) -> EnvSpec:
        """State (plus the cube with ``object_in_state``), one image per camera, the action."""
        spec = super().features
        if self.config.object_in_state:
            obs = dict(spec.observation)
            obs["state"] = ArraySpec((self.config.num_joints + 10,), "float32")
            spec = EnvSpec(observation=obs, action=spec.action, extras=spec.extras)
        return spec

    # ---- Robot contract -------------------------------------------------------------------------

    def _state(self, reply: dict[str, Any]) -> RobotState:
        from robot_rl.hardware.sim_arm_server import unpack_array

        self.cube = unpack_array(reply["cube"])
        return RobotState(joints=unpack_array(reply["joints"]), ee_pose=unpack_array(reply["ee_pose"]),
                          gripper=float(reply["gripper"]), timestamp=time.monotonic())

    def measure(self) -> RobotState:
        """Joints, grip-site pose and gripper opening, read from the simulator now."""
        return self._state(self._call("state"))

    def observe(self) -> dict[str, np.ndarray]:
        """State and camera frames in one request (the images and the state are of the same instant)."""
        from robot_rl.hardware.sim_arm_server import unpack_array

        reply = self._call("observe")
        self._task = reply["task"]  # the task as of this observation, until the next command
        state = self._state(reply).as_vector()
        if self.config.object_in_state:
            state = np.concatenate([state, self.cube]).astype(np.float32)
        obs = {"state": state}
        for name in self.config.cameras:
            obs[f"image.{name}"] = unpack_array(reply["images"][name])
        self.last_observation = obs
        return obs

    def stale_sensors(self) -> list[str]:
        """Simulated cameras render on request: they are never stale (a dead simulator raises instead)."""
        return []

    def _command(self, target: np.ndarray, gripper: float) -> None:
        from robot_rl.hardware.sim_arm_server import pack_array

        self._task = None
        self._call("command", target=pack_array(np.asarray(target, np.float64)), gripper=float(gripper))

    # ---- the task -------------------------------------------------------------------------------

    def reset_task(self, seed: int | None = None) -> None:
        """Start a new episode: arm near home, gripper open, cube at a random spot (``seed``: that spot)."""
        self._task = None
        self._call("reset", seed=seed)

    def task_status(self) -> TaskStatus:
        """Whether the cube is picked (grasped and lifted ``lift_height``), and the step reward."""
        # Right after observe() (and before a command) the status observe() brought along is the one that
        # matches the observation: no second request, no later instant.
        r = self._task if self._task is not None else self._call("task")
        return TaskStatus(bool(r["success"]), float(r["reward"]), task_info(r))

    def pick_view(self) -> PickView | None:
        """The pick task at the last observation, from its state (:class:`~robot_rl.hardware.sim_pick.PickScene`)."""
        if not self.config.object_in_state:
            raise ConfigError("the scripted pick reads the cube from the state: set object_in_state=True")
        obs = self.last_observation
        return None if obs is None else _view(obs["state"], self.config)


def check_resets(resets: str) -> None:
    """``resets`` is one the simulator knows (``robot.resets``), else a one-line error."""
    from robot_rl.hardware.sim_arm_server import RESETS

    if resets not in RESETS:
        raise ValueError(f"resets={resets!r}; valid: {', '.join(RESETS)} (physical: nothing placed between episodes)")


def task_info(reply: dict[str, Any]) -> dict[str, Any]:
    """The task status's details from the simulator's reply (both simulated arms)."""
    return {"grasped": bool(reply["grasped"]), "lifted_m": float(reply["lifted_m"]),
            "in_reach": bool(reply["in_reach"]), "at_start": bool(reply["at_start"]),
            "start_reward": float(reply["start_reward"])}


def pick_expert_action(obs: dict[str, np.ndarray], cfg: SimulatedArmConfig, gain: float = 1.0,
                       miss_m: float = 0.0) -> np.ndarray:
    """:func:`~robot_rl.hardware.sim_pick.pick_expert` (``ee_delta`` ``[7]``) on an observation with the cube."""
    return pick_expert(_view(obs["state"], cfg), gain, miss_m)


def _view(state: np.ndarray, cfg: SimulatedArmConfig) -> PickView:
    return PickView(grip=state[6:9], cube=state[13:16], opening=float(state[12]), rest_z=CUBE_REST_Z,
                    lift_height=cfg.lift_height, max_step_m=cfg.max_step_m)
