"""Emergency stop: an in-process latch, and a guard process that works when this process hangs.

Two layers, because one Python process cannot protect itself from its own hang:

- :class:`EStop` is a latch inside the control process. Anything may trigger it (the keyboard teleop's
  e-stop key, ``SIGUSR1``, a file appearing); the safety layer holds the robot at once from the
  triggering thread and refuses commands until :meth:`EStop.reset` and a re-arm.
- :class:`EStopGuard` is a separate process (own interpreter, own GIL). It reads the e-stop key
  (:data:`ESTOP_KEYS`) from the terminal itself and forwards every other key to the keyboard teleop, so
  one process reads the terminal and the key works while the control process hangs. It watches a trigger
  file, and watches a heartbeat that the control loop writes into
  shared memory on every command. When the key is pressed, the file appears, the heartbeat is older than
  ``heartbeat_timeout_s`` or the parent process dies, it calls ``stop_command`` (a picklable callable that
  stops the robot through its own connection, e.g. :class:`~robot_rl.hardware.xarm.XArmEmergencyStop`),
  and flags the trip for the safety layer to latch when the control process runs again.

Limits, honestly: the guard is only as good as ``stop_command``. A robot whose controller accepts only
one connection (held by the hung process) cannot be stopped by a second one; for such robots wire a
hardware e-stop or the controller's own communication watchdog. The guard's reaction time is its poll
period (default 5 ms) plus ``stop_command``'s latency. Signals (``SIGUSR1``) are handled by Python in the
main thread only, so they do not help when that thread hangs; the guard does.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import select
import signal
import termios
import threading
import time
import tty
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ESTOP_KEYS = " "
"""The keys that stop the robot (the space bar): the guard's and the keyboard teleop's, defined once here."""


def open_terminal(path: str) -> int:
    """A read-only, non-blocking descriptor of the terminal ``path`` (the caller closes it).

    Raises ``OSError`` if ``path`` cannot be opened, ``ValueError`` if it is not a terminal.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    if not os.isatty(fd):
        os.close(fd)
        raise ValueError(f"{path} is not a terminal")
    return fd


class EStop:
    """A latched emergency stop inside the control process. Thread-safe."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self.reason: str | None = None
        self.triggers = 0
        self._callbacks: list[Callable[[str], None]] = []

    @property
    def is_set(self) -> bool:
        """Whether the e-stop is latched."""
        return self._event.is_set()

    def on_trigger(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` from the triggering thread whenever the e-stop fires."""
        self._callbacks.append(callback)

    def trigger(self, reason: str = "estop") -> None:
        """Latch the e-stop and run the callbacks (each at most once per trigger)."""
        with self._lock:
            first = not self._event.is_set()
            self._event.set()
            self.reason = reason
            self.triggers += 1
        if first:
            log.error("E-STOP: %s", reason)
        for cb in self._callbacks:
            try:
                cb(reason)
            except Exception:
                log.exception("e-stop callback failed")

    def reset(self) -> None:
        """Clear the latch (the robot stays held until the safety layer is re-armed)."""
        self._event.clear()
        self.reason = None

    def install_signal(self, signum: int = signal.SIGUSR1) -> None:
        """Trigger on ``signum`` (``kill -USR1 <pid>``). Main thread only; see the module limits."""
        signal.signal(signum, lambda s, f: self.trigger(f"signal {signal.Signals(s).name}"))


@dataclass
class EStopGuardConfig:
    """Settings of the e-stop guard process."""

    heartbeat_timeout_s: float = 0.3
    """Stop the robot when the control loop has not beaten for this long (0 = don't watch)."""
    trigger_file: str | None = None
    """Stop when this file exists (``touch`` it from any shell)."""
    tty: str | None = None
    """Terminal to read the e-stop key from (``/dev/tty`` for the controlling terminal; None = no key)."""
    estop_keys: str = ESTOP_KEYS
    """Keys that stop the robot (default: the space bar, as the keyboard teleop's e-stop key)."""
    poll_s: float = 0.005
    """How often the guard checks the heartbeat and the file."""


def _guard_main(cfg: EStopGuardConfig, heartbeat: Any, tripped: Any, reason: Any, stop_command: Callable[[], Any],
                parent_pid: int, quit_flag: Any, keys_out: Any, ready: Any) -> None:
    # Runs in the guard process: keep it small, no torch, no robot_rl imports beyond this module.
    # Ctrl-C in the terminal reaches the whole process group; the guard keeps guarding while the control
    # process shuts down, and quits when told (quit_flag) or when that process is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd = None
    old_attrs = None
    if cfg.tty:
        try:
            fd = open_terminal(cfg.tty)
        except (OSError, ValueError) as e:
            reason.value = f"cannot read {cfg.tty}: {e}".encode()[:63]
            return
        try:
            old_attrs = termios.tcgetattr(fd)
            tty.setcbreak(fd)
        except termios.error:
            old_attrs = None

    def trip(why: str) -> None:
        if tripped.value:
            return
        reason.value = why.encode()[:63]
        tripped.value = 1
        try:
            stop_command()
        except Exception as e:  # report, keep guarding
            reason.value = f"{why}; stop_command failed: {e}".encode()[:63]

    ready.value = 1
    try:
        while not quit_flag.value:
            if fd is not None:
                readable, _, _ = select.select([fd], [], [], cfg.poll_s)
                if readable:
                    try:
                        data = os.read(fd, 64)
                    except BlockingIOError:
                        data = b""
                    others = bytes(b for b in data if chr(b) not in cfg.estop_keys)
                    if len(others) < len(data):
                        trip("e-stop key")
                    if others and keys_out is not None:
                        keys_out.put(others)
            else:
                time.sleep(cfg.poll_s)
            hb = heartbeat.value
            if cfg.heartbeat_timeout_s > 0 and hb > 0 and time.monotonic() - hb > cfg.heartbeat_timeout_s:
                trip(f"no heartbeat for {cfg.heartbeat_timeout_s * 1e3:.0f} ms")
            if cfg.trigger_file and os.path.exists(cfg.trigger_file):
                trip(f"trigger file {cfg.trigger_file}")
            if os.getppid() != parent_pid:
                trip("control process died")
                break
    finally:
        if fd is not None:
            if old_attrs is not None:
                termios.tcsetattr(fd, termios.TCSADRAIN, old_attrs)
            os.close(fd)


class WriteTimeStop:
    """A stop command that writes :func:`time.monotonic` into ``path``.

    For tests and demos without a robot, and for controllers that watch a file. Importable without torch,
    so the guard starts quickly.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self) -> None:
        """Record the stop time."""
        Path(self.path).write_text(repr(time.monotonic()))


class EStopGuard:
    """The guard process (see the module docstring). Use as a context manager around the control loop.

    ``stop_command`` runs in the guard process, so it must be picklable (a top-level function or an
    instance of a top-level class) and open its own connection to the robot. With ``config.tty`` the guard
    puts that terminal in cbreak mode; :meth:`close` restores it even if the guard had to be killed.
    ``forward_keys``: put every other key read from the terminal on :attr:`keys` (for the keyboard teleop:
    ``KeyboardDevice(QueueKeys(guard.keys))``), so that nothing else reads the terminal.
    """

    def __init__(self, stop_command: Callable[[], Any], config: EStopGuardConfig | None = None,
                 forward_keys: bool = False) -> None:
        self.config = config or EStopGuardConfig()
        ctx = mp.get_context("spawn")  # fork of a threaded process can deadlock; spawn is clean
        self._heartbeat = ctx.RawValue("d", 0.0)
        self._tripped = ctx.RawValue("i", 0)
        self._reason = ctx.RawArray("c", 64)
        self._quit = ctx.RawValue("i", 0)
        self._ready = ctx.RawValue("i", 0)
        self.keys: Any = ctx.Queue() if forward_keys else None
        """Other key presses the guard read from the terminal (bytes), for the keyboard teleop device."""
        self._tty_attrs: Any = None
        self._proc = ctx.Process(target=_guard_main, name="robot-estop-guard", daemon=True,
                                 args=(self.config, self._heartbeat, self._tripped, self._reason, stop_command,
                                       os.getpid(), self._quit, self.keys, self._ready))

    def start(self, timeout_s: float = 20.0) -> EStopGuard:
        """Start the guard process and return once it is guarding (a fresh interpreter takes a moment).

        Raises ``OSError`` / ``ValueError`` if ``config.tty`` cannot be opened or is not a terminal (checked
        here, before the process starts), ``RuntimeError`` if the process does not come up.
        """
        if self.config.trigger_file and Path(self.config.trigger_file).exists():
            raise RuntimeError(f"e-stop trigger file {self.config.trigger_file} exists; remove it first")
        if self.config.tty:
            fd = open_terminal(self.config.tty)
            try:
                self._tty_attrs = termios.tcgetattr(fd)
            except termios.error:
                self._tty_attrs = None
            finally:
                os.close(fd)
        self._proc.start()
        deadline = time.monotonic() + timeout_s
        while not self._ready.value:
            if not self._proc.is_alive() or time.monotonic() > deadline:
                why = self.reason or f"exit code {self._proc.exitcode}"
                self.close()
                raise RuntimeError(f"e-stop guard process did not start ({why})")
            time.sleep(0.005)
        return self

    def beat(self) -> None:
        """Tell the guard the control loop is alive (call once per control step)."""
        self._heartbeat.value = time.monotonic()

    def pause(self) -> None:
        """Stop watching the heartbeat (e.g. while the robot is disconnected or held on purpose)."""
        self._heartbeat.value = 0.0

    @property
    def tripped(self) -> bool:
        """Whether the guard has stopped the robot."""
        return bool(self._tripped.value)

    @property
    def reason(self) -> str:
        """Why the guard tripped (empty if it has not)."""
        return bytes(self._reason.value).decode(errors="replace")

    @property
    def alive(self) -> bool:
        """Whether the guard process is running."""
        return self._proc.is_alive()

    def reset(self) -> None:
        """Clear the trip flag (after the cause is fixed); the heartbeat restarts at the next :meth:`beat`."""
        self._heartbeat.value = 0.0
        self._tripped.value = 0
        self._reason.value = b""

    def close(self) -> None:
        """Stop the guard process."""
        self._heartbeat.value = 0.0
        self._quit.value = 1
        if self._proc.pid is not None:
            self._proc.join(timeout=2.0)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(timeout=2.0)
        if self._tty_attrs is not None and self.config.tty:
            self._restore_terminal(self.config.tty, self._tty_attrs)
            self._tty_attrs = None

    @staticmethod
    def _restore_terminal(path: str, attrs: Any) -> None:
        # The guard restores the terminal itself when it quits; this covers a guard that was killed.
        try:
            fd = open_terminal(path)
        except (OSError, ValueError):
            return
        try:
            termios.tcsetattr(fd, termios.TCSADRAIN, attrs)
        except termios.error:
            pass
        finally:
            os.close(fd)

    def __enter__(self) -> EStopGuard:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
