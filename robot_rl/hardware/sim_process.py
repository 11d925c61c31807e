"""The client side of a simulated robot's own process: start or join it, one request at a time, hold, stop.

:class:`SimProcess` is mixed into the simulated robots (:class:`~robot_rl.hardware.sim_arm.SimulatedArm`, the
simulated SO-101's link in :mod:`robot_rl.hardware.sim_so101`): it starts
:mod:`robot_rl.hardware.sim_arm_server` with the robot's config as JSON (or joins one at ``config.address``),
and talks to it over a local ZeroMQ REQ socket with msgpack maps (no pickle). ``hold`` has its own socket and
lock, so a stuck control call never delays it. The config must have ``address``, ``request_timeout_s`` and
``start_timeout_s``.
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
from dataclasses import asdict
from typing import Any

from robot_rl.hardware.robot import NotConnectedError, RobotError

log = logging.getLogger(__name__)


class SimProcess:
    """Process and wire of a simulated robot (see the module docstring); call :meth:`_init_process` first."""

    config: Any

    def _init_process(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.address: str | None = None
        self._ctx: Any = None
        self._socks: dict[str, Any] = {}
        self._locks = {"main": threading.Lock(), "hold": threading.Lock()}
        self._connected = False
        self._disconnecting = False  # set while disconnect() holds and shuts the server down

    def _server_config(self) -> dict[str, Any]:
        """The server's config (JSON): the robot config's fields but ``address``."""
        return {k: v for k, v in asdict(self.config).items() if k not in ("address",)}

    @property
    def is_connected(self) -> bool:
        """Connected and (when this client started it) the server process is alive."""
        return self._connected and (self.process is None or self.process.poll() is None)

    def connect(self) -> None:
        """Start (or join) the simulator and check it answers; the arm holds where it starts."""
        if self._connected:
            return
        import zmq

        # The shared context, not one per arm: a private context left to the garbage collector (an arm dropped
        # without disconnect(), in a reference cycle) hangs the collector, as its finaliser terms it before the
        # sockets' own finalisers close them.
        self._ctx = zmq.Context.instance()
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
        from robot_rl.hardware.sim_arm_server import NO_RENDERING
        from robot_rl.sims.mujoco.render import RenderingUnavailableError, forgotten_backend

        cfg = self._server_config()
        env = dict(os.environ)
        if "MUJOCO_GL" not in env and forgotten_backend() is not None:
            env["MUJOCO_GL"] = str(forgotten_backend())  # the user's choice, which this process's kinematics forgot
        if "MUJOCO_GL" not in env:
            # Headless: OSMesa renders the cameras on the CPU. Without libOSMesa (no libosmesa6), MUJOCO_GL=osmesa
            # would break `import mujoco` itself; the arm then runs without a renderer and a camera fails to
            # start with a message naming the package.
            if env.get("DISPLAY"):
                env["MUJOCO_GL"] = "glfw"
            elif ctypes.util.find_library("OSMesa") is not None:
                env["MUJOCO_GL"] = "osmesa"
        if not cfg.get("cameras") and _gl_library_missing(env.get("MUJOCO_GL", "")):
            # A camera-less arm never renders, but `import mujoco` under a backend whose library is absent fails
            # inside PyOpenGL: run the physics without one rather than refuse to start.
            env.pop("MUJOCO_GL", None)
            env.pop("PYOPENGL_PLATFORM", None)
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
                for rest in proc.stdout.read().splitlines():
                    if rest.startswith(f"{NO_RENDERING} "):  # no OpenGL for its cameras: the server's one line
                        raise RenderingUnavailableError(rest.split(" ", 1)[1])
                raise RobotError(f"the simulated arm process exited with code {proc.returncode} while starting "
                                 "(see its stderr above; MuJoCo needs `pip install 'robot-rl[mujoco]'` and, "
                                 "headless, libosmesa6 with MUJOCO_GL=osmesa)")
            ready, _, _ = select.select([proc.stdout], [], [], 0.1)
            if ready:
                line = proc.stdout.readline().strip()
                if line.startswith("READY "):
                    return proc, line.split(" ", 1)[1]
                if line.startswith(f"{NO_RENDERING} "):
                    proc.wait(timeout=self.config.start_timeout_s)
                    raise RenderingUnavailableError(line.split(" ", 1)[1])
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

    def sim_stats(self) -> dict[str, float]:
        """Simulated seconds so far and how often the physics had to skip ahead of a lagging clock."""
        r = self._call("stats")
        return {"sim_time": float(r["sim_time"]), "lag_skips": float(r["lag_skips"]),
                "human_resets": float(r["human_resets"]), "episode_resets": float(r["episode_resets"])}

    def human_reset(self, seed: int | None = None) -> None:
        """A person puts the arm and the cube back by hand (teleported in the simulator, counted in ``sim_stats``)."""
        self._call("human_reset", seed=seed)


def _gl_library_missing(backend: str) -> bool:
    """``MUJOCO_GL`` names a headless backend (osmesa, egl) whose library is not installed."""
    lib = {"osmesa": "OSMesa", "egl": "EGL"}.get(backend.lower().strip())
    return lib is not None and ctypes.util.find_library(lib) is None
