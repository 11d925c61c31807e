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

import ctypes.util
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.hardware.robot import ROBOTS, NotConnectedError, Robot, RobotConfig, RobotError, RobotState

log = logging.getLogger(__name__)

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


class SimulatedArm(Robot):
    """The Robot contract over a simulator process; also ``reset_task()`` and ``task_status()``."""

    config: SimulatedArmConfig

    def __init__(self, config: SimulatedArmConfig) -> None:
        self.config = config
        self.process: subprocess.Popen[str] | None = None
        self.address: str | None = None
        self._ctx: Any = None
        self._socks: dict[str, Any] = {}
        self._locks = {"main": threading.Lock(), "hold": threading.Lock()}
        self._connected = False
        self._disconnecting = False  # set while disconnect() holds and shuts the server down
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

    # ---- connection -----------------------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        """Connected and (when this client started it) the server process is alive."""
        return self._connected and (self.process is None or self.process.poll() is None)

    def connect(self) -> None:
        """Start (or join) the simulator and check it answers; the arm holds where it starts."""
        if self._connected:
            return
        import zmq

        self._ctx = zmq.Context()
        if self.config.address is None:
            self.process, self.address = self._spawn()
        else:
            self.address = self.config.address
        self._connected = True
        self._disconnecting = False
        try:
            self._call("hello", timeout_s=self.config.start_timeout_s)
            self._call("hold")
        except BaseException:
            self.disconnect()
            raise

    def _spawn(self) -> tuple[subprocess.Popen[str], str]:
        cfg = {k: v for k, v in asdict(self.config).items() if k not in ("address",)}
        env = dict(os.environ)
        if "MUJOCO_GL" not in env:
            # Headless: OSMesa renders the cameras on the CPU. Without libOSMesa (no libosmesa6), MUJOCO_GL=osmesa
            # would break `import mujoco` itself; the arm then runs without a renderer and a camera fails to
            # start with a message naming the package.
            if env.get("DISPLAY"):
                env["MUJOCO_GL"] = "glfw"
            elif ctypes.util.find_library("OSMesa") is not None:
                env["MUJOCO_GL"] = "osmesa"
        if env.get("MUJOCO_GL") == "osmesa":
            env.setdefault("PYOPENGL_PLATFORM", "osmesa")
        # Its own session: Ctrl-C in the terminal reaches the owner only, which holds the arm and then shuts the
        # server down (in the terminal's process group it died first, and the hold failed). An orphaned server
        # stops by itself (it watches its parent).
        proc = subprocess.Popen([sys.executable, "-m", "robot_rl.hardware.sim_arm_server", json.dumps(cfg)],
                                stdout=subprocess.PIPE, stderr=None, text=True, env=env, start_new_session=True)
        assert proc.stdout is not None
        deadline = time.monotonic() + self.config.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RobotError(f"the simulated arm process exited with code {proc.returncode} while starting "
                                 "(see its stderr above; MuJoCo needs `pip install 'robot-rl[mujoco]'` and, "
                                 "headless, libosmesa6 with MUJOCO_GL=osmesa)")
            ready, _, _ = select.select([proc.stdout], [], [], 0.1)
            if ready:
                line = proc.stdout.readline().strip()
                if line.startswith("READY "):
                    return proc, line.split(" ", 1)[1]
        proc.kill()
        raise RobotError(f"the simulated arm did not start within {self.config.start_timeout_s:.0f}s")

    def disconnect(self) -> None:
        """Hold, stop the server (if this client started it) and close the sockets. Safe to call twice."""
        if not self._connected:
            return
        self._disconnecting = True
        try:
            if self.is_connected:
                self._call("hold")
                if self.process is not None:
                    self._call("shutdown")
        except RobotError as e:
            log.warning("simulated arm: %s", e)
        finally:
            self._connected = False
            # The watchdog thread may be mid-``hold`` on its own socket: close each socket under its channel's
            # lock, between calls (closing it under a call raised ZMQ's "Socket operation on non-socket").
            for channel, lock in self._locks.items():
                with lock:
                    sock = self._socks.pop(channel, None)
                    if sock is not None:
                        sock.close(0)
            if self.process is not None:
                try:
                    self.process.wait(timeout=5.0)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
                if self.process.stdout is not None:
                    self.process.stdout.close()
            if self._ctx is not None:
                self._ctx.term()
                self._ctx = None

    # ---- the wire -------------------------------------------------------------------------------

    def _socket(self, channel: str) -> Any:
        import zmq

        sock = self._socks.get(channel)
        if sock is None:
            sock = self._ctx.socket(zmq.REQ)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(self.address)
            self._socks[channel] = sock
        return sock

    def _call(self, op: str, timeout_s: float | None = None, channel: str = "main", **kw: Any) -> dict[str, Any]:
        """One request/reply; ``hold`` uses its own socket so a stuck control call never delays it."""
        import msgpack

        timeout = self.config.request_timeout_s if timeout_s is None else timeout_s
        with self._locks[channel]:
            if not self._connected:  # checked under the lock: disconnect() closes sockets under it
                raise NotConnectedError(f"SimulatedArm.{op} before connect() (or after disconnect())")
            sock = self._socket(channel)
            try:
                sock.send(msgpack.packb({"op": op, **kw}, use_bin_type=True))
                answered = sock.poll(int(timeout * 1e3))
                reply = msgpack.unpackb(sock.recv(), raw=False) if answered else None
            except BaseException:
                # Ctrl-C between the request and its reply: the same as no reply, below (the next call, e.g. the
                # hold on the way out, gets a fresh socket).
                sock.close(0)
                self._socks.pop(channel, None)
                raise
            if reply is None:
                # A REQ socket without its reply is unusable: drop it, the next call makes a fresh one.
                sock.close(0)
                self._socks.pop(channel, None)
                raise RobotError(self._dead_reason(op, timeout))
        if not reply.get("ok"):
            raise RobotError(f"simulated arm refused {op}: {reply.get('error')}")
        return dict(reply)

    def _dead_reason(self, op: str, timeout: float) -> str:
        if self.process is not None and self.process.poll() is not None:
            return (f"the simulated arm process (pid {self.process.pid}) exited with code "
                    f"{self.process.returncode}; no answer to {op!r}. Reconnect to start a new one")
        return (f"the simulated arm at {self.address} did not answer {op!r} within {timeout:.2f}s "
                f"(process hung or gone)")

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

    def hold(self) -> None:
        """Brake where the arm is (own socket and lock: callable from the watchdog thread).

        A hold that races :meth:`disconnect` does nothing: disconnecting holds the arm itself.
        """
        if self._connected:
            try:
                self._call("hold", channel="hold")
            except NotConnectedError:
                pass
            except RobotError:
                # The server may exit under this hold once disconnect() has sent it "shutdown" (after its own
                # hold): the arm is held by then, so a racing hold has nothing left to do.
                if not self._disconnecting:
                    raise

    def emergency_stop_command(self) -> Any:
        """A picklable ``hold`` for :class:`~robot_rl.hardware.estop.EStopGuard` (after :meth:`connect`)."""
        from robot_rl.hardware.sim_arm_server import SimArmEmergencyStop

        if self.address is None:
            raise NotConnectedError("the e-stop command needs the simulator's address: connect() first")
        return SimArmEmergencyStop(self.address)

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
        return TaskStatus(bool(r["success"]), float(r["reward"]),
                          {"grasped": bool(r["grasped"]), "lifted_m": float(r["lifted_m"])})

    def sim_stats(self) -> dict[str, float]:
        """Simulated seconds so far and how often the physics had to skip ahead of a lagging clock."""
        r = self._call("stats")
        return {"sim_time": float(r["sim_time"]), "lag_skips": float(r["lag_skips"])}


def pick_expert_action(obs: dict[str, np.ndarray], cfg: SimulatedArmConfig, gain: float = 1.0,
                       miss_m: float = 0.0) -> np.ndarray:
    """A scripted pick (``ee_delta`` action ``[7]``) from an observation with ``object_in_state``.

    Above the cube with the gripper open, down, close, lift: the "human" of tests and benchmarks and the
    source of demonstrations. ``gain`` scales the motion (1.0: full speed). ``miss_m`` aims that far beside
    the cube (along x): the same motions grasping nothing, the failures a success classifier must tell apart.
    """
    state = obs["state"]
    grip_pos, opening, cube = state[6:9], state[12], state[13:16]
    off = cube + np.array([miss_m, 0.0, 0.0], np.float32) - grip_pos
    a = np.zeros(7, np.float32)
    horizontal = float(np.linalg.norm(off[:2]))
    if horizontal > 0.012 and cube[2] < 0.04:  # line up above the cube, at a safe height
        a[:2] = off[:2]
        a[2] = 0.08 - grip_pos[2]
        a[6] = 1.0
    elif grip_pos[2] - cube[2] > 0.012 and opening > 0.6:  # descend open
        a[:2] = off[:2]
        a[2] = -(grip_pos[2] - cube[2])
        a[6] = 1.0
    elif opening > 0.7:  # close
        a[6] = -1.0
    else:  # lift
        a[:2] = off[:2]
        a[2] = 0.05
        a[6] = -1.0
    a[:3] = np.clip(gain * a[:3] / cfg.max_step_m, -1.0, 1.0)
    return a


class PickIntervener:
    """A scripted "human" for :class:`~robot_rl.human_loop.devices.scripted.ScriptedDevice` on the pick task.

    It watches what the robot last observed (``arm.last_observation``), and takes over with
    :func:`pick_expert_action` for ``takeover_steps`` steps when the policy made no progress (closer to the
    cube, or the cube higher) for ``patience`` steps (``patience=0``: always in control, i.e. demonstrations). With
    ``press_success`` it presses the success key when it sees the cube lifted. ``intervene=False`` keeps
    only the keys. ``miss_m > 0`` grasps that far beside the cube and presses *failure* once the empty gripper
    is lifted (failed attempts for a classifier's data). Use: ``ScriptedDevice(PickIntervener(arm))``.
    """

    def __init__(self, arm: SimulatedArm, patience: int = 8, takeover_steps: int = 30, press_success: bool = True,
                 intervene: bool = True, miss_m: float = 0.0) -> None:
        if not arm.config.object_in_state:
            raise ValueError("PickIntervener reads the cube from the state: set object_in_state=True")
        self.arm = arm
        self.patience = patience
        self.takeover_steps = takeover_steps
        self.press_success = press_success
        self.intervene = intervene
        self.miss_m = miss_m
        self.takeovers = 0
        self._new_episode()
        self._prev_cube: np.ndarray | None = None

    def _new_episode(self) -> None:
        self._best = np.inf
        self._stall = 0
        self._left = 0
        self._pressed = False

    def __call__(self, step: int) -> Any:
        """The reading for this control step."""
        from robot_rl.human_loop.devices.base import TeleopReading

        obs = self.arm.last_observation
        if obs is None:
            return TeleopReading(timestamp=0.0)
        state = obs["state"]
        grip, cube = state[6:9], state[13:16]
        if self._prev_cube is not None and np.linalg.norm(cube - self._prev_cube) > 0.02 and cube[2] < 0.03:
            self._new_episode()  # the cube jumped back onto the table: a reset happened
        self._prev_cube = cube.copy()
        events: tuple[str, ...] = ()
        lifted = cube[2] - 0.025 >= self.arm.config.lift_height and np.linalg.norm(cube - grip) < 0.04
        if self.press_success and lifted and not self._pressed:
            self._pressed = True
            events = ("success",)
        closed_high = state[12] < 0.7 and grip[2] - cube[2] >= self.arm.config.lift_height
        if self.miss_m and closed_high and not lifted and not self._pressed:
            self._pressed = True
            events = ("failure",)
        # Progress is getting closer to the cube or raising it: a policy that holds the cube and lifts it is
        # left to try (as a human lets a lift go on), not taken over because the distance no longer shrinks.
        dist = float(np.linalg.norm(cube - grip)) - max(float(cube[2]) - 0.025, 0.0)
        if dist < self._best - 0.005:
            self._best, self._stall = dist, 0
        else:
            self._stall += 1
        if self.intervene and self._left == 0 and self._stall >= self.patience and not lifted:
            self._left, self._stall = self.takeover_steps, 0
            self.takeovers += 1
        if self._left > 0:
            self._left -= 1
            a = pick_expert_action(obs, self.arm.config, miss_m=self.miss_m)
            return TeleopReading(timestamp=0.0, delta=a[:6], gripper=float(a[6]), engage=True, events=events)
        return TeleopReading(timestamp=0.0, events=events)
