"""The simulated arm's own process: MuJoCo physics advancing with the wall clock, served over ZeroMQ.

``python -m robot_rl.hardware.sim_arm_server '<config json>'`` binds a ROUTER socket on
``tcp://127.0.0.1:<free port>``, prints ``READY <address>`` on stdout and serves until told to stop or
until its parent process exits. The wire is msgpack maps; arrays travel as ``{dtype, shape, data}``
with the dtype checked against an allow-list (never pickle).

One thread does everything, so the OpenGL context and ``MjData`` are never shared: it steps the
physics up to *now* (times ``time_scale``, 1 = real time; ``physics_timestep`` per step; a render that
took 8 ms is followed by 4 quick steps at 2 ms), runs the damped least-squares IK toward the commanded
pose every ``ik_period_s``, and serves each request ``latency_s`` after it arrived (state is read and
commands are applied at that moment, so the round trip is ``latency_s`` longer than the wire's).

The scene is the MuJoCo tasks' arm with their cube (:mod:`robot_rl.sims.mujoco.scene`), or with ``world: so101``
in the config the SO-101 of :mod:`robot_rl.hardware.sim_so101_world` (joint goals only: its IK runs in the
client, as the LeRobot driver's does); the task is *pick*: reset puts the arm near home and the cube at a
random spot, success is the cube held ``lift_height`` above where it lay.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError

ALLOWED_DTYPES = ("float32", "float64", "uint8", "bool", "int64")
#: Physics may fall this far behind the wall clock (a long render, a busy machine) before it skips ahead.
MAX_LAG_S = 0.25
#: The line the server prints instead of ``READY <address>`` when its cameras cannot render, then the reason.
NO_RENDERING = "NO-RENDERING"
#: With no request due, the server wakes this often (wall-clock seconds) to advance the physics.
IDLE_S = 0.005
#: Who may put the scene back between episodes (the robot config's ``resets``).
RESETS = ("teleport", "physical")


class SceneResets:
    """Who puts the simulated scene back, and how often a person did (the server's ``reset``/``human_reset``).

    ``teleport`` (the default, HIL-SERL's setting): every episode starts from a scene the simulator placed anew.
    ``physical`` (practice, ``docs/practice.md``): an episode's reset places nothing; the arm only holds where it
    is, so only physics and the robot's own actions move the cube, and a cube pushed out of reach stays there,
    as on a real cell. Either way :meth:`human_reset` is a person putting the scene back by hand: it places the
    arm and the cube as a reset does, and is counted (``stats``), since a person's time is what practice saves.
    """

    def __init__(self, world: Any, mode: str) -> None:
        if mode not in RESETS:
            raise ConfigError(f"resets={mode!r}; valid: {', '.join(RESETS)}")
        self.world = world
        self.mode = mode
        self.human_resets = 0
        self.episode_resets = 0

    def episode_reset(self, seed: int | None) -> None:
        """A new episode: the scene placed anew (``teleport``) or left as it is, the arm held (``physical``)."""
        self.episode_resets += 1
        if self.mode == "teleport":
            self.world.reset(seed)
        else:
            self.world.hold()

    def human_reset(self, seed: int | None) -> None:
        """A person puts the arm and the cube back (counted)."""
        self.human_resets += 1
        self.world.reset(seed)


#: The reset policy's goal area is the cube's start area widened by this much on every side (m).
START_MARGIN_M = 0.02


def grip_start_area(mj: Any, model: Any, home_qpos: np.ndarray, arm_qpos: np.ndarray, noise: float,
                    low: np.ndarray, high: np.ndarray, grip: int, samples: int = 64) -> tuple[np.ndarray, float]:
    """Where the placed starts put the grip site: the home pose's, and the farthest the start noise moves it.

    Sampled as ``reset`` draws the arm (home plus uniform noise of ``noise`` rad per joint, clipped to the joint
    ranges), kinematics only, on a data of its own and a fixed seed: the world's own state and draws are untouched.
    """
    data = mj.MjData(model)
    data.qpos[:] = home_qpos
    mj.mj_kinematics(model, data)
    home = data.site_xpos[grip].copy()
    rng, far = np.random.default_rng(0), 0.0
    for _ in range(samples):
        q = home_qpos[arm_qpos] + rng.uniform(-1, 1, len(arm_qpos)) * noise
        data.qpos[arm_qpos] = np.clip(q, low, high)
        mj.mj_kinematics(model, data)
        far = max(far, float(np.linalg.norm(data.site_xpos[grip] - home)))
    return home, far


def start_check(cube: np.ndarray, grip: np.ndarray, opening: float, grasped: bool, cfg: dict[str, Any],
                rest_z: float, grip_area: tuple[np.ndarray, float]) -> dict[str, Any]:
    """The scene as the demos start it, the goal of practice's reset policy (``at_start`` and ``start_reward``).

    ``at_start``: the cube rests in the start area (``cube_low..cube_high`` widened by :data:`START_MARGIN_M`), not
    held, the gripper open (``opening`` 0..1 above 0.7), clear above it (3 cm) and back where the starts put it
    (``grip_area``: :func:`grip_start_area`'s centre and radius, widened by :data:`START_MARGIN_M`). The arm's pose
    is part of the start: a task policy that practises from a gripper left just above the cube never practises the
    approach it is scored on from the demos' starts. ``start_reward`` is shaped like the pick's (a cost until done,
    5 then; ``reward=sparse``: 1 then): the cube's distance to the area, resting, released, then the gripper's
    distance to its start.
    """
    lo = np.asarray(cfg["cube_low"], np.float64) - START_MARGIN_M
    hi = np.asarray(cfg["cube_high"], np.float64) + START_MARGIN_M
    outside = float(np.linalg.norm(np.maximum(lo - cube[:2], 0.0) + np.maximum(cube[:2] - hi, 0.0)))
    resting = abs(float(cube[2]) - rest_z) < 0.01
    released = not grasped and opening > 0.7
    clear = released and float(grip[2]) - rest_z >= 0.03
    centre, radius = grip_area
    away = max(float(np.linalg.norm(np.asarray(grip, np.float64) - centre)) - radius - START_MARGIN_M, 0.0)
    at_start = bool(outside == 0.0 and resting and clear and away == 0.0)
    if cfg["reward"] == "sparse":
        reward = 1.0 if at_start else 0.0
    else:
        shaping = (0.4 * (1.0 - np.tanh(10.0 * outside)) + 0.2 * resting + 0.2 * released
                   + 0.2 * released * (1.0 - np.tanh(10.0 * away)))
        reward = 5.0 if at_start else float(shaping) - 1.0
    return {"at_start": at_start, "start_reward": float(reward)}


def in_reach(cube: np.ndarray, cfg: dict[str, Any], rest_z: float) -> bool:
    """The cube lies where the arm can pick it: in the ``reach_low..reach_high`` box (x, y), not below its rest."""
    lo, hi = np.asarray(cfg["reach_low"], np.float64), np.asarray(cfg["reach_high"], np.float64)
    return bool(np.all(cube[:2] >= lo) and np.all(cube[:2] <= hi) and cube[2] >= rest_z - 0.01)


def pack_array(a: np.ndarray) -> dict[str, Any]:
    """An array as a msgpack-able map."""
    a = np.ascontiguousarray(a)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.tobytes()}


def make_renderers(mujoco: Any, model: Any, data: Any, cameras: dict[str, Any]) -> dict[str, Any]:
    """One renderer per named camera, each rendered once already (both simulated worlds).

    The first render of a GL context costs ~100 ms on OSMesa (context and buffers set up); paid here, at start,
    it never lands on the first control tick as a missed period.
    """
    from robot_rl.sims.mujoco.render import new_renderer

    renderers = {name: new_renderer(mujoco, model, int(h), int(w)) for name, (h, w) in cameras.items()}
    render_cameras(renderers, data)
    return renderers


def render_cameras(renderers: dict[str, Any], data: Any) -> dict[str, Any]:
    """One rendered frame per named camera of ``data``'s scene, packed for the wire (both simulated worlds)."""
    out = {}
    for name, r in renderers.items():
        r.update_scene(data, camera=name)
        out[name] = pack_array(r.render())
    return out


def unpack_array(d: Any) -> np.ndarray:
    """Inverse of :func:`pack_array`, checking the dtype and that the bytes fit the shape."""
    if not isinstance(d, dict) or d.get("dtype") not in ALLOWED_DTYPES:
        raise ValueError(f"bad array frame (dtype {d.get('dtype') if isinstance(d, dict) else type(d)})")
    shape = tuple(int(s) for s in d["shape"])
    dtype = np.dtype(d["dtype"])
    if len(d["data"]) != int(np.prod(shape)) * dtype.itemsize:
        raise ValueError(f"array frame of {len(d['data'])} bytes does not fit shape {shape} {dtype}")
    return np.frombuffer(d["data"], dtype=dtype).reshape(shape).copy()


def mat_to_rpy(m: np.ndarray) -> np.ndarray:
    """Roll, pitch, yaw (ZYX convention) of a rotation matrix ``[3, 3]``."""
    pitch = np.arcsin(-np.clip(m[2, 0], -1.0, 1.0))
    return np.array([np.arctan2(m[2, 1], m[2, 2]), pitch, np.arctan2(m[1, 0], m[0, 0])])


class SimArmEmergencyStop:
    """Picklable stop command for :class:`~robot_rl.hardware.estop.EStopGuard`: ``hold`` over its own socket.

    Lives here (not in ``sim_arm.py``) so the guard process unpickles it without importing torch.
    """

    def __init__(self, address: str, timeout_s: float = 0.5) -> None:
        self.address = address
        self.timeout_s = timeout_s

    def __call__(self) -> None:
        """Hold the simulated arm; raise if it does not answer."""
        import msgpack
        import zmq

        ctx = zmq.Context()
        sock = ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(self.address)
            sock.send(msgpack.packb({"op": "hold"}, use_bin_type=True))
            if not sock.poll(int(self.timeout_s * 1e3)):
                raise RuntimeError(f"simulated arm at {self.address} did not answer the e-stop hold")
            sock.recv()
        finally:
            sock.close(0)
            ctx.term()


class SimArmWorld:
    """The physics, controller and pick task of one simulated arm (no networking)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        from robot_rl.sims.mujoco.render import choose_gl, import_mujoco

        choose_gl("cpu")
        mujoco = import_mujoco(renders=bool(cfg.get("cameras")))

        from robot_rl.sims.mujoco.scene import build_model

        self._mj = mujoco
        self.cfg = cfg
        self.model, self.ix = build_model(("cube.xml",), timestep=float(cfg["physics_timestep"]))
        self.data = mujoco.MjData(self.model)
        self.rng = np.random.default_rng(int(cfg["seed"]))
        self.grip = self.ix.site["grip"]
        self.arm_low, self.arm_high = self.ix.arm_low, self.ix.arm_high
        self.cube_q = self.ix.free_qpos["cube"]
        self.joint_mode = cfg["control_mode"] in ("joint", "joint_delta")  # robot.JOINT_MODES: targets are joints
        self.renderers = make_renderers(mujoco, self.model, self.data, cfg["cameras"])
        self._jacp = np.zeros((3, self.model.nv))
        self._jacr = np.zeros((3, self.model.nv))
        self.target_pos = np.zeros(3)
        self.target_q = np.zeros(6)
        self.gripper = 1.0
        self.sim_time = 0.0
        self.grip_area = grip_start_area(mujoco, self.model, self.ix.home_qpos, self.ix.arm_qpos,
                                         float(cfg["start_noise"]), self.arm_low, self.arm_high, self.grip)
        self.reset()

    # ---- state --------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> None:
        """Arm near home (uniform noise of ``start_noise`` rad), gripper open, cube at a random spot."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        mj, d, ix = self._mj, self.data, self.ix
        mj.mj_resetData(self.model, d)
        q = ix.home_qpos.copy()
        q[ix.arm_qpos] += self.rng.uniform(-1, 1, 6) * float(self.cfg["start_noise"])
        lo, hi = np.asarray(self.cfg["cube_low"]), np.asarray(self.cfg["cube_high"])
        q[self.cube_q:self.cube_q + 2] = self.rng.uniform(lo, hi)
        d.qpos[:] = q
        d.ctrl[ix.arm_ctrl] = q[ix.arm_qpos]
        d.ctrl[ix.finger_ctrl] = q[ix.finger_qpos]
        mj.mj_forward(self.model, d)
        self.gripper = 1.0
        self._hold_here()

    def _hold_here(self) -> None:
        self.target_pos = self.data.site_xpos[self.grip].copy()
        self.target_q = self.data.qpos[self.ix.arm_qpos].copy()
        self.data.ctrl[self.ix.arm_ctrl] = self.target_q

    def hold(self) -> None:
        """Stop: the targets become the measured pose (the servos brake the arm there)."""
        self._hold_here()

    def state(self) -> dict[str, Any]:
        """Joints, grip-site pose, gripper opening, cube position."""
        d, ix = self.data, self.ix
        # Orientation relative to the home (pointing-down) frame: near zero in use, so it never wraps at ±π
        # the way the world-frame roll of a downward gripper does.
        rel = ix.grip_home_rot.T @ d.site_xmat[self.grip].reshape(3, 3)
        pose = np.concatenate([d.site_xpos[self.grip], mat_to_rpy(rel)])
        grip = float(np.clip(d.qpos[ix.finger_qpos].mean() / 0.04, 0.0, 1.0))
        return {"joints": pack_array(d.qpos[ix.arm_qpos].astype(np.float64)), "ee_pose": pack_array(pose),
                "gripper": grip, "cube": pack_array(d.qpos[self.cube_q:self.cube_q + 3].copy()),
                "sim_time": self.sim_time}

    def images(self) -> dict[str, Any]:
        """One rendered frame per camera."""
        return render_cameras(self.renderers, self.data)

    def task(self) -> dict[str, Any]:
        """Pick-task status: ``success`` (cube lifted and between the fingers) and the reward."""
        d = self.data
        cube = d.qpos[self.cube_q:self.cube_q + 3]
        grip = d.site_xpos[self.grip]
        reach = float(np.linalg.norm(cube - grip))
        opening = 2.0 * float(d.qpos[self.ix.finger_qpos].mean())
        grasped = reach < 0.04 and opening < 0.055
        lifted = float(cube[2]) - 0.025
        success = bool(grasped and lifted >= float(self.cfg["lift_height"]))
        if self.cfg["reward"] == "sparse":
            reward = 1.0 if success else 0.0
        else:  # shaped: approach, then grasp, then lift (0..1), as a cost until success
            shaping = (0.4 * (1.0 - np.tanh(10.0 * reach)) + 0.2 * grasped
                       + 0.4 * grasped * min(max(lifted, 0.0) / float(self.cfg["lift_height"]), 1.0))
            # Success ends the episode (terminated), so any positive per-step reward before it is worth more
            # than succeeding: at γ 0.95, holding the cube just below lift_height earns ~0.9 / (1 − γ) ≈ 18
            # against a one-off bonus of 5, and a policy learns to hover. As a cost (shaping − 1 ≤ 0) every
            # step before success is paid for, so succeeding is always best and the stages stay ordered.
            reward = 5.0 if success else shaping - 1.0
        return {"success": success, "reward": float(reward), "grasped": bool(grasped), "lifted_m": lifted,
                "in_reach": in_reach(cube, self.cfg, 0.025),
                **start_check(cube, grip, opening / 0.08, grasped, self.cfg, 0.025, self.grip_area)}

    # ---- commands and physics -----------------------------------------------------------------

    def command(self, target: np.ndarray, gripper: float) -> None:
        """Set the pose (ee_delta: position [3] used, the gripper keeps pointing down) or joint target."""
        if not np.isfinite(target).all() or not np.isfinite(gripper):
            raise ValueError("non-finite target")
        if self.joint_mode:
            self.target_q = np.clip(target[:6], self.ix.arm_low, self.ix.arm_high)
        else:
            self.target_pos = target[:3].astype(np.float64)
        self.gripper = float(np.clip(gripper, 0.0, 1.0))

    def control(self) -> None:
        """Servo targets from the current command (one damped least-squares IK step in ee mode)."""
        mj, d, ix = self._mj, self.data, self.ix
        if not self.joint_mode:
            mj.mj_jacSite(self.model, d, self._jacp, self._jacr, self.grip)
            jac = np.vstack([self._jacp, self._jacr])[:, ix.arm_dof]
            rot = d.site_xmat[self.grip].reshape(3, 3)
            rot_err = 0.5 * sum(np.cross(rot[:, i], ix.grip_home_rot[:, i]) for i in range(3))
            err = np.concatenate([self.target_pos - d.site_xpos[self.grip], rot_err])
            dq = jac.T @ np.linalg.solve(jac @ jac.T + 0.05 ** 2 * np.eye(6), err)
            q = d.qpos[ix.arm_qpos]
            self.target_q = np.clip(q + np.clip(dq, -0.1, 0.1), ix.arm_low, ix.arm_high)
        d.ctrl[ix.arm_ctrl] = self.target_q
        d.ctrl[ix.finger_ctrl] = self.gripper * 0.04

    def advance(self, seconds: float) -> None:
        """Step the physics ``seconds`` forward, re-running the controller every ``ik_period_s``."""
        dt = self.model.opt.timestep
        every = max(1, round(float(self.cfg["ik_period_s"]) / dt))
        for _ in range(int(seconds / dt)):
            if round(self.sim_time / dt) % every == 0:
                self.control()
            self._mj.mj_step(self.model, self.data)
            self.sim_time += dt


def make_world(cfg: dict[str, Any]) -> Any:
    """The world ``cfg["world"]`` names: ``arm`` (default, :class:`SimArmWorld`) or ``so101``."""
    kind = cfg.get("world", "arm")
    if kind == "so101":
        from robot_rl.hardware.sim_so101_world import So101World

        return So101World(cfg)
    if kind != "arm":
        raise ConfigError(f"unknown simulated world {kind!r}; known: arm, so101")
    return SimArmWorld(cfg)


class SimArmServer:
    """Serves a world (:func:`make_world`) on a ROUTER socket; see the module docstring."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        import zmq

        self.cfg = cfg
        self.world = make_world(cfg)
        self.resets = SceneResets(self.world, str(cfg.get("resets", "teleport")))
        self.latency = float(cfg["latency_s"])
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self.queue: list[tuple[float, int, list[bytes]]] = []
        self.lag_skips = 0
        self.running = True
        self._n = 0

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        """Serve one request map; the reply map has ``ok`` and either the data or ``error``."""
        w, op = self.world, req.get("op")
        if op == "state":
            return {"ok": True, **w.state()}
        if op == "observe":
            return {"ok": True, **w.state(), "images": w.images(), "task": w.task()}
        if op == "command":
            w.command(unpack_array(req["target"]).astype(np.float64), float(req["gripper"]))
            return {"ok": True}
        if op == "hold":
            w.hold()
            return {"ok": True}
        if op == "reset":
            self.resets.episode_reset(req.get("seed"))
            return {"ok": True}
        if op == "human_reset":
            self.resets.human_reset(req.get("seed"))
            return {"ok": True}
        if op == "task":
            return {"ok": True, **w.task()}
        if op == "hello":
            return {"ok": True, "pid": os.getpid(), "arm_low": pack_array(w.arm_low),
                    "arm_high": pack_array(w.arm_high), "timestep": w.model.opt.timestep}
        if op == "stats":
            return {"ok": True, "sim_time": w.sim_time, "lag_skips": self.lag_skips,
                    "human_resets": self.resets.human_resets, "episode_resets": self.resets.episode_resets}
        if op == "shutdown":
            self.running = False
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def _serve_due(self, now: float) -> None:
        import msgpack

        while self.queue and self.queue[0][0] <= now:
            _, _, frames = heapq.heappop(self.queue)
            try:
                req = msgpack.unpackb(frames[-1], raw=False)
                reply = self.handle(req) if isinstance(req, dict) else {"ok": False, "error": "not a map"}
            except Exception as e:  # a bad request is answered, never fatal
                reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            self.sock.send_multipart([*frames[:-1], msgpack.packb(reply, use_bin_type=True)])

    def serve(self) -> None:
        """Run until ``shutdown`` or the parent process is gone."""
        import zmq

        parent = os.getppid()
        start = time.monotonic()
        w = self.world
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        next_parent_check = start
        scale = float(self.cfg.get("time_scale", 1.0))  # simulated seconds per wall-clock second
        while self.running:
            now = time.monotonic()
            behind = (now - start) * scale - w.sim_time
            if behind > MAX_LAG_S * scale:  # never burst through seconds of physics: skip ahead, counted
                self.lag_skips += 1
                w.sim_time = (now - start) * scale - w.model.opt.timestep
                behind = w.model.opt.timestep
            if behind >= w.model.opt.timestep:
                w.advance(behind)
            self._serve_due(time.monotonic())
            # Requests wake the poll at once, and physics is brought up to *now* before any is served, so
            # between requests it can advance in slices of IDLE_S: the same trajectory for far less CPU
            # than waking for every physics step (~60 % of a core at 3x real time).
            next_due = self.queue[0][0] if self.queue else now + IDLE_S
            wait = min(next_due, now + IDLE_S) - time.monotonic()
            for sock, _ in poller.poll(math.ceil(max(wait, 0.0) * 1e3)):  # whole ms, never a sub-ms spin
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._n += 1
                    heapq.heappush(self.queue, (time.monotonic() + self.latency, self._n, frames))
            if time.monotonic() >= next_parent_check:
                next_parent_check = time.monotonic() + 0.5
                if os.getppid() != parent:  # orphaned: the robot's owner is gone
                    break
        self._serve_due(float("inf"))
        for r in w.renderers.values():
            r.close()
        self.sock.close(0)
        self.ctx.term()


def main(argv: list[str] | None = None) -> int:
    """Process entry: ``sim_arm_server '<json config>'``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m robot_rl.hardware.sim_arm_server '<json config>'", file=sys.stderr)
        return 2
    from robot_rl.sims.mujoco.render import RenderingUnavailableError

    try:
        server = SimArmServer(json.loads(args[0]))
    except RenderingUnavailableError as e:  # the client raises it again: one line, no traceback
        print(f"{NO_RENDERING} {e}", flush=True)
        return 2
    print(f"READY {server.address}", flush=True)
    server.serve()
    sys.stdout.flush()
    # Sockets and GL contexts are closed; skip the interpreter's slow teardown of torch (pulled in by the
    # scene module's package), so that a disconnect returns quickly.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
