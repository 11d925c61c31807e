"""Terminal keyboard teleop: non-blocking, on a reader thread, no window and no extra packages.

A terminal reports key presses, never releases. "Holding" a key is therefore seen as the terminal's key
repeat: an axis stays active while its key was seen within ``hold_window_s`` (longer than the repeat
delay, ~0.25–0.6 s on most systems). In hold mode the arm is under keyboard control while any motion key
is held; toggle mode (`t`) suits the keyboard better. The keys can also come from the e-stop guard's
forwarded terminal bytes (``EStopGuard(forward_keys=True).keys``), so that the guard owns the terminal
and the space bar stops the robot even when this process hangs.
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
from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_rl.human_loop.devices.base import TELEOP_DEVICES, TeleopConfig, TeleopDevice, TeleopReading

# key → (axis, sign); axes are x y z roll pitch yaw
MOTION_KEYS: dict[str, tuple[int, float]] = {
    "w": (0, 1.0), "s": (0, -1.0), "a": (1, 1.0), "d": (1, -1.0), "r": (2, 1.0), "f": (2, -1.0),
    "u": (3, 1.0), "j": (3, -1.0), "i": (4, 1.0), "k": (4, -1.0), "q": (5, 1.0), "e": (5, -1.0),
}
EVENT_KEYS: dict[str, str] = {"t": "toggle", "g": "success", "b": "failure", "n": "reset", " ": "estop",
                              "[": "rewind", "]": "correct"}
GRIPPER_KEYS: dict[str, float] = {"o": 1.0, "c": -1.0}


class KeyboardDevice(TeleopDevice):
    """Reads single key presses from ``fd`` (default: stdin in cbreak mode) or from a queue of bytes."""

    name = "keyboard"

    def __init__(self, fd: int | None = None, keys: Any = None, hold_window_s: float = 0.6,
                 speed: float = 1.0) -> None:
        self._fd = fd
        self._keys = keys  # a queue of bytes (the e-stop guard's forwarded keys) instead of a file descriptor
        self.hold_window_s = hold_window_s
        self.speed = speed
        self._lock = threading.Lock()
        self._last_press: dict[int, tuple[float, float]] = {}
        self._events: list[str] = []
        self._gripper: float | None = None
        self._alive_t = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._old_attrs: Any = None

    def connect(self) -> None:
        """Put the terminal in cbreak mode (restored on disconnect) and start the reader thread."""
        if self._keys is None:
            if self._fd is None:
                if not sys.stdin.isatty():
                    raise RuntimeError("keyboard teleop needs an interactive terminal (stdin is not a TTY)")
                self._fd = sys.stdin.fileno()
            if os.isatty(self._fd):
                self._old_attrs = termios.tcgetattr(self._fd)
                tty.setcbreak(self._fd)
        self._stop.clear()
        self._alive_t = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="keyboard-teleop", daemon=True)
        self._thread.start()

    def disconnect(self) -> None:
        """Stop reading and restore the terminal."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self._old_attrs is not None and self._fd is not None:
            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._old_attrs)
            self._old_attrs = None

    @property
    def is_connected(self) -> bool:
        """Whether the reader thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def _next_bytes(self) -> bytes:
        if self._keys is not None:
            try:
                return bytes(self._keys.get(timeout=0.05))
            except queue.Empty:
                return b""
        assert self._fd is not None
        ready, _, _ = select.select([self._fd], [], [], 0.05)
        if not ready:
            return b""
        data = os.read(self._fd, 64)
        if not data:  # end of file: the terminal is gone
            raise EOFError
        return data

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._next_bytes()
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
                "[ / ]": "mark rewind / correction segment", "space": "E-STOP"}


@TELEOP_DEVICES.register("keyboard")
@dataclass
class KeyboardConfig(TeleopConfig):
    """The terminal keyboard."""

    hold_window_s: float = 0.6
    """A motion key counts as held this long after its last (auto-repeated) press."""
    speed: float = 1.0
    """Delta per step while a key is held (fraction of the robot's max step)."""

    def make(self) -> KeyboardDevice:
        """A keyboard device on stdin."""
        return KeyboardDevice(hold_window_s=self.hold_window_s, speed=self.speed)

    @classmethod
    def discover(cls) -> tuple[list[str], str]:
        """Available when stdin is an interactive terminal."""
        if sys.stdin.isatty():
            return ["terminal keyboard (this terminal)"], ""
        return [], "stdin is not an interactive terminal"
