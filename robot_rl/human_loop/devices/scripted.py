"""A scripted teleop device for tests and demos: a function of the step decides what the "human" does.

:meth:`ScriptedDevice.freeze` makes it stop updating (a hung driver: the last reading keeps its old
timestamp), :meth:`ScriptedDevice.unplug` disconnects it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from robot_rl.human_loop.devices.base import TELEOP_DEVICES, TeleopConfig, TeleopDevice, TeleopReading

Script = Callable[[int], TeleopReading]
"""Step index (reads so far) → reading; the device stamps it with the time of the read."""


class ScriptedDevice(TeleopDevice):
    """Replays ``script``; every :meth:`read` advances it by one step."""

    name = "scripted"

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or (lambda i: TeleopReading(timestamp=0.0))
        self.steps = 0
        self._connected = False
        self._frozen: TeleopReading | None = None
        self._lock = threading.Lock()

    def connect(self) -> None:
        """Start replaying."""
        self._connected = True

    def disconnect(self) -> None:
        """Stop."""
        self._connected = False

    def unplug(self) -> None:
        """Simulate the cable being pulled."""
        self._connected = False

    def freeze(self) -> None:
        """Simulate a hung driver: the newest reading stops changing (its timestamp ages)."""
        with self._lock:
            self._frozen = self._frozen or self._last

    def unfreeze(self) -> None:
        """Resume fresh readings."""
        with self._lock:
            self._frozen = None

    _last: TeleopReading | None = None

    @property
    def is_connected(self) -> bool:
        """Whether the device is 'plugged in'."""
        return self._connected

    def read(self) -> TeleopReading | None:
        """The next scripted reading, or the frozen one."""
        with self._lock:
            if self._frozen is not None:
                return TeleopReading(self._frozen.timestamp, self._frozen.delta, self._frozen.gripper,
                                     self._frozen.engage, ())
            r = self.script(self.steps)
            self.steps += 1
            r.timestamp = time.monotonic()
            self._last = r
            return r

    def buttons(self) -> dict[str, str]:
        """Nothing to press: a script acts."""
        return {"(script)": "a function of the step decides deltas, engage and events"}


@TELEOP_DEVICES.register("scripted")
@dataclass
class ScriptedDeviceConfig(TeleopConfig):
    """A device that never intervenes (tests pass a script to :class:`ScriptedDevice` directly)."""

    def make(self) -> ScriptedDevice:
        """An idle scripted device."""
        return ScriptedDevice()

    @classmethod
    def discover(cls) -> tuple[list[str], str]:
        """Always available."""
        return ["scripted (for tests and demos)"], ""
