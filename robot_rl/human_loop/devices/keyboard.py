"""Terminal keyboard teleop: non-blocking, on a reader thread, no window and no extra packages.

A terminal reports key presses, never releases. "Holding" a key is therefore seen as the terminal's key
repeat: an axis stays active while its key was seen within ``hold_window_s`` (longer than the repeat
delay, ~0.25–0.6 s on most systems). In hold mode the arm is under keyboard control while any motion key
is held; toggle mode (`t`) suits the keyboard better.

Where the key bytes come from is a :class:`KeySource`: :class:`TerminalKeys` reads a terminal (stdin by
default) itself; :class:`QueueKeys` takes the bytes the e-stop guard process read from the terminal and
forwarded (``EStopGuard(forward_keys=True).keys``). With the guard, only the guard reads the terminal (two
readers of one terminal steal each other's bytes), and the e-stop key (:data:`~robot_rl.hardware.estop.ESTOP_KEYS`)
stops the robot even when this process hangs.
"""

from __future__ import annotations

import os
import queue
import select
import sys
import termios
import threading
import time
import tty
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from robot_rl.hardware.estop import ESTOP_KEYS
from robot_rl.hardware.teleop import TELEOP_DEVICES, TeleopConfig, TeleopDevice, TeleopReading

# key → (axis, sign); axes are x y z roll pitch yaw
MOTION_KEYS: dict[str, tuple[int, float]] = {
    "w": (0, 1.0), "s": (0, -1.0), "a": (1, 1.0), "d": (1, -1.0), "r": (2, 1.0), "f": (2, -1.0),
    "u": (3, 1.0), "j": (3, -1.0), "i": (4, 1.0), "k": (4, -1.0), "q": (5, 1.0), "e": (5, -1.0),
}
EVENT_KEYS: dict[str, str] = {"t": "toggle", "g": "success", "b": "failure", "n": "reset",
                              "[": "rewind", "]": "correct", **dict.fromkeys(ESTOP_KEYS, "estop")}
GRIPPER_KEYS: dict[str, float] = {"o": 1.0, "c": -1.0}


class KeySource(Protocol):
    """Where the keyboard device's key bytes come from. Read from the device's reader thread only."""

    def open(self) -> None:
        """Start delivering keys (e.g. put the terminal in cbreak mode)."""

    def read(self, timeout_s: float) -> bytes:
        """Key bytes that arrived, waiting at most ``timeout_s``; ``b""`` if none. ``EOFError``: source gone."""

    def close(self) -> None:
        """Stop delivering keys and undo what :meth:`open` changed."""


class TerminalKeys:
    """Keys read from a terminal descriptor (default: stdin) in cbreak mode; the mode is restored on close.

    Any readable descriptor works (tests use a pipe); cbreak is set only on a terminal.
    """

    def __init__(self, fd: int | None = None) -> None:
        self.fd = fd
        self._old_attrs: Any = None

    def open(self) -> None:
        """Use stdin unless a descriptor was given; switch a terminal to cbreak (keys arrive unbuffered)."""
        if self.fd is None:
            if not sys.stdin.isatty():
                raise RuntimeError("keyboard teleop needs an interactive terminal (stdin is not a TTY)")
            self.fd = sys.stdin.fileno()
        if os.isatty(self.fd):
            self._old_attrs = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)

    def read(self, timeout_s: float) -> bytes:
        """Bytes from the descriptor (end of file, the terminal is gone: ``EOFError``)."""
        assert self.fd is not None, "open() first"
        ready, _, _ = select.select([self.fd], [], [], timeout_s)
        if not ready:
            return b""
        data = os.read(self.fd, 64)
        if not data:
            raise EOFError
        return data

    def close(self) -> None:
        """Restore the terminal mode."""
        if self._old_attrs is not None and self.fd is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._old_attrs)
            self._old_attrs = None


class QueueKeys:
    """Keys from a queue of ``bytes``: the e-stop guard's forwarded terminal keys (``EStopGuard.keys``).

    ``alive``: optional check of the producer (e.g. ``lambda: guard.alive``); once it fails the source ends
    (``EOFError``), so the device reads as disconnected and a takeover ends safely instead of freezing.
    """

    def __init__(self, keys: Any, alive: Callable[[], bool] | None = None) -> None:
        self.keys = keys
        self.alive = alive

    def open(self) -> None:
        """Nothing to open: the producer owns the terminal."""

    def read(self, timeout_s: float) -> bytes:
        """The next forwarded chunk, or ``b""`` after ``timeout_s``."""
        try:
            return bytes(self.keys.get(timeout=timeout_s))
        except queue.Empty:
            if self.alive is not None and not self.alive():
                raise EOFError from None
            return b""

    def close(self) -> None:
        """Nothing to undo."""


class KeyboardDevice(TeleopDevice):
    """Reads single key presses from a :class:`KeySource` (default: stdin in cbreak mode).

    ``fd=`` and ``keys=`` are shorthands for ``TerminalKeys(fd)`` and ``QueueKeys(keys)``.
    """

    name = "keyboard"

    def __init__(self, source: KeySource | None = None, *, fd: int | None = None, keys: Any = None,
                 hold_window_s: float = 0.6, speed: float = 1.0) -> None:
        if sum(x is not None for x in (source, fd, keys)) > 1:
            raise ValueError("give one key source: source, fd or keys")
        if source is None:
            source = QueueKeys(keys) if keys is not None else TerminalKeys(fd)
        self.source: KeySource = source
        self.hold_window_s = hold_window_s
        self.speed = speed
        self._lock = threading.Lock()
        self._last_press: dict[int, tuple[float, float]] = {}
        self._events: list[str] = []
        self._gripper: float | None = None
        self._alive_t = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def connect(self) -> None:
        """Open the key source (a terminal goes to cbreak mode until disconnect) and start the reader thread."""
        self.source.open()
        self._stop.clear()
        self._alive_t = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="keyboard-teleop", daemon=True)
        self._thread.start()

    def disconnect(self) -> None:
        """Stop reading and close the key source (restores the terminal)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        self.source.close()

    @property
    def is_connected(self) -> bool:
        """Whether the reader thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.source.read(0.05)
            except (EOFError, OSError):
                return  # is_connected becomes False: readings go stale, interventions end safely
            now = time.monotonic()
            with self._lock:
                self._alive_t = now
                for ch in data.decode(errors="ignore").lower():
                    self.press(ch, now)

    def press(self, ch: str, now: float | None = None) -> None:
        """Handle one key (the reader thread calls this; tests may too)."""
        now = time.monotonic() if now is None else now
        if ch in MOTION_KEYS:
            axis, sign = MOTION_KEYS[ch]
            self._last_press[axis] = (now, sign)
        elif ch in EVENT_KEYS:
            self._events.append(EVENT_KEYS[ch])
        elif ch in GRIPPER_KEYS:
            self._gripper = GRIPPER_KEYS[ch]

    def read(self) -> TeleopReading | None:
        """Axes whose key was seen within the hold window; engage while any is active."""
        now = time.monotonic()
        with self._lock:
            delta = np.zeros(6)
            for axis, (t, sign) in self._last_press.items():
                if now - t <= self.hold_window_s:
                    delta[axis] = sign * self.speed
            events, self._events = tuple(self._events), []
            return TeleopReading(timestamp=self._alive_t, delta=delta, gripper=self._gripper,
                                 engage=bool(np.any(delta)), events=events)

    def buttons(self) -> dict[str, str]:
        """The key map."""
        return {"w/s": "+x/-x", "a/d": "+y/-y", "r/f": "+z/-z", "u/j": "roll +/-", "i/k": "pitch +/-",
                "q/e": "yaw +/-", "o/c": "gripper open/close", "hold a motion key": "intervene (hold mode)",
                "t": "take over / hand back (toggle mode)", "g": "success", "b": "failure", "n": "reset",
                "[ / ]": "mark rewind / correction segment",
                "/".join("space" if k == " " else k for k in ESTOP_KEYS): "E-STOP"}


@TELEOP_DEVICES.register("keyboard")
@dataclass
class KeyboardConfig(TeleopConfig):
    """The terminal keyboard."""

    hold_window_s: float = 0.6
    """A motion key counts as held this long after its last (auto-repeated) press."""
    speed: float = 1.0
    """Delta per step while a key is held (fraction of the robot's max step)."""

    def make(self, source: KeySource | None = None) -> KeyboardDevice:
        """A keyboard device on ``source`` (default: stdin; the e-stop guard's keys: ``QueueKeys(guard.keys)``)."""
        return KeyboardDevice(source, hold_window_s=self.hold_window_s, speed=self.speed)

    @classmethod
    def discover(cls) -> tuple[list[str], str]:
        """Available when stdin is an interactive terminal."""
        if sys.stdin.isatty():
            return ["terminal keyboard (this terminal)"], ""
        return [], "stdin is not an interactive terminal"
