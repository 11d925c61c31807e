"""Gamepad teleop through ``pygame`` (Xbox / PlayStation layouts; ``pip install 'robot-rl[teleop]'``).

A reader thread polls the pad at ``poll_hz``. Hold LB to intervene (hold mode) or press RB to toggle.
Sticks move the end effector, triggers close/open the gripper. Unplugging the pad disconnects the device,
so an intervention in progress ends safely.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robot_rl.hardware.teleop import TELEOP_DEVICES, TeleopConfig, TeleopDevice, TeleopReading


def _pygame() -> Any:
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # no window needed for joysticks
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        import pygame
    except ImportError as e:
        raise ImportError("gamepad teleop needs pygame: pip install 'robot-rl[teleop]'") from e
    pygame.display.init()  # the event queue (pad removal) needs it; pygame.init() would also open audio
    pygame.joystick.init()
    return pygame


@TELEOP_DEVICES.register("gamepad")
@dataclass
class GamepadConfig(TeleopConfig):
    """An Xbox/PlayStation-style gamepad."""

    index: int = 0
    """Which pad (pygame joystick index)."""
    deadzone: float = 0.1
    """Stick deflection below this reads as zero."""
    axes: list[int] = field(default_factory=lambda: [1, 0, 4, -1, -1, 3])
    """Pad axis for each of x, y, z, roll, pitch, yaw (-1 = unused); sticks: left y/x, right y/x."""
    signs: list[float] = field(default_factory=lambda: [-1.0, -1.0, -1.0, 1.0, 1.0, -1.0])
    """Sign per delta axis (pads report 'up' as negative)."""
    engage_button: int = 4
    """Hold to intervene (LB)."""
    toggle_button: int = 5
    """Press to take over / hand back in toggle mode (RB)."""
    event_buttons: dict[int, str] = field(default_factory=lambda: {0: "success", 1: "failure", 2: "reset",
                                                                   3: "rewind", 6: "correct", 7: "estop"})
    """Button → event (A success, B failure, X reset, Y rewind, Back correct, Start e-stop)."""
    gripper_axes: tuple[int, int] = (2, 5)
    """Trigger axes that close (LT) and open (RT) the gripper."""
    poll_hz: float = 100.0
    """Reader thread rate."""

    def make(self) -> GamepadDevice:
        """An unconnected gamepad device."""
        return GamepadDevice(self)

    @classmethod
    def discover(cls) -> tuple[list[str], str]:
        """Pads pygame sees."""
        try:
            pg = _pygame()
        except ImportError as e:
            return [], str(e)
        names = [pg.joystick.Joystick(i).get_name() for i in range(pg.joystick.get_count())]
        return [f"gamepad {i}: {n}" for i, n in enumerate(names)], "" if names else "no gamepad found"


class GamepadDevice(TeleopDevice):
    """Polls a pygame joystick on its own thread."""

    name = "gamepad"

    def __init__(self, config: GamepadConfig | None = None) -> None:
        self.config = config or GamepadConfig()
        self._lock = threading.Lock()
        self._reading: TeleopReading | None = None
        self._events: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pad: Any = None

    def connect(self) -> None:
        """Open the pad and start polling."""
        pg = _pygame()
        if pg.joystick.get_count() <= self.config.index:
            raise RuntimeError(f"no gamepad {self.config.index} (found {pg.joystick.get_count()})")
        self._pad = pg.joystick.Joystick(self.config.index)
        self._pad.init()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(pg,), name="gamepad-teleop", daemon=True)
        self._thread.start()

    def disconnect(self) -> None:
        """Stop polling."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    @property
    def is_connected(self) -> bool:
        """Whether the poller runs (it stops when the pad is removed)."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self, pg: Any) -> None:
        c, pad = self.config, self._pad
        pressed_before: set[int] = set()
        while not self._stop.wait(1.0 / c.poll_hz):
            for ev in pg.event.get():
                if ev.type == getattr(pg, "JOYDEVICEREMOVED", -1):
                    return
            delta = np.zeros(6)
            for i, (axis, sign) in enumerate(zip(c.axes, c.signs)):
                if axis >= 0 and axis < pad.get_numaxes():
                    v = pad.get_axis(axis)
                    delta[i] = sign * v if abs(v) > c.deadzone else 0.0
            pressed = {b for b in range(pad.get_numbuttons()) if pad.get_button(b)}
            new = pressed - pressed_before
            pressed_before = pressed
            gripper = None
            if max(c.gripper_axes) < pad.get_numaxes():
                close, open_ = (pad.get_axis(a) for a in c.gripper_axes)
                if close > 0.5:
                    gripper = -1.0
                elif open_ > 0.5:
                    gripper = 1.0
            with self._lock:
                self._events += [c.event_buttons[b] for b in new if b in c.event_buttons]
                if c.toggle_button in new:
                    self._events.append("toggle")
                self._reading = TeleopReading(time.monotonic(), delta, gripper, c.engage_button in pressed)

    def read(self) -> TeleopReading | None:
        """Newest pad state with the button presses since the last read."""
        with self._lock:
            r = self._reading
            if r is None:
                return None
            events, self._events = tuple(self._events), []
            return TeleopReading(r.timestamp, r.delta, r.gripper, r.engage, events)

    def buttons(self) -> dict[str, str]:
        """The button map."""
        c = self.config
        out = {"left stick": "x / y", "right stick": "z / yaw", "LT / RT": "gripper close / open",
               f"button {c.engage_button} (LB)": "hold to intervene",
               f"button {c.toggle_button} (RB)": "take over / hand back (toggle mode)"}
        out.update({f"button {b}": ev for b, ev in c.event_buttons.items()})
        return out
