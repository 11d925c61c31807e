"""3Dconnexion SpaceMouse teleop through ``hidapi`` (``pip install 'robot-rl[teleop]'``).

The puck gives all six axes at once. In hold mode the operator intervenes simply by moving the puck (any
axis beyond the deadzone) or holding a button, as in HIL-SERL; the left button closes, the right one opens
the gripper. On Linux, reading needs a udev rule granting access to the device (see docs/hardware.md).
Axis directions differ between models and mountings: flip them with ``signs``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robot_rl.hardware.teleop import TELEOP_DEVICES, TeleopConfig, TeleopDevice, TeleopReading

VENDOR_IDS = (0x256F, 0x046D)  # 3Dconnexion, and Logitech for the older SpaceMouse models
FULL_SCALE = 350.0  # raw counts at full deflection


def _hid() -> Any:
    try:
        import hid
    except ImportError as e:
        raise ImportError("SpaceMouse teleop needs hidapi: pip install 'robot-rl[teleop]'") from e
    return hid


def parse_report(data: bytes | list[int], raw: np.ndarray, buttons: list[int]) -> None:
    """Update ``raw`` ``[6]`` (tx, ty, tz, rx, ry, rz counts) and ``buttons`` ``[2]`` from one HID report.

    Report 1 carries translation (and rotation too on the newer 13-byte models), 2 rotation, 3 buttons;
    values are little-endian int16.
    """
    data = bytes(data)
    if not data:
        return

    def int16s(b: bytes) -> list[int]:
        return [int.from_bytes(b[i:i + 2], "little", signed=True) for i in range(0, len(b) - 1, 2)]

    rid = data[0]
    if rid == 1:
        vals = int16s(data[1:13] if len(data) >= 13 else data[1:7])
        raw[: len(vals)] = vals
    elif rid == 2 and len(data) >= 7:
        raw[3:6] = int16s(data[1:7])
    elif rid == 3 and len(data) >= 2:
        buttons[0], buttons[1] = data[1] & 1, (data[1] >> 1) & 1


@TELEOP_DEVICES.register("spacemouse")
@dataclass
class SpaceMouseConfig(TeleopConfig):
    """A 3Dconnexion SpaceMouse."""

    deadzone: float = 0.05
    """Normalised deflection below this reads as zero (and does not engage)."""
    signs: list[float] = field(default_factory=lambda: [-1.0, 1.0, -1.0, -1.0, 1.0, -1.0])
    """Sign per axis after the axis swap below."""
    swap_xy: bool = True
    """The puck's y is the arm's x (pointing away from the operator) on a usual tabletop setup."""
    path: str | None = None
    """HID path of the device (default: the first SpaceMouse found)."""

    def make(self) -> SpaceMouseDevice:
        """An unconnected SpaceMouse device."""
        return SpaceMouseDevice(self)

    @classmethod
    def discover(cls) -> tuple[list[str], str]:
        """SpaceMice hidapi can see."""
        try:
            hid = _hid()
        except ImportError as e:
            return [], str(e)
        found = [f"{d.get('product_string') or 'SpaceMouse'} ({d['path'].decode(errors='replace')})"
                 for d in hid.enumerate() if d.get("vendor_id") in VENDOR_IDS]
        return found, "" if found else "no SpaceMouse found (on Linux check the udev rule)"


class SpaceMouseDevice(TeleopDevice):
    """Reads HID reports on a thread; engaged while the puck is deflected or a button is held."""

    name = "spacemouse"

    def __init__(self, config: SpaceMouseConfig | None = None) -> None:
        self.config = config or SpaceMouseConfig()
        self._lock = threading.Lock()
        self._raw = np.zeros(6)
        self._buttons = [0, 0]
        self._alive_t = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dev: Any = None

    def connect(self) -> None:
        """Open the HID device and start reading."""
        hid = _hid()
        path = self.config.path.encode() if self.config.path else None
        if path is None:
            for d in hid.enumerate():
                if d.get("vendor_id") in VENDOR_IDS:
                    path = d["path"]
                    break
        if path is None:
            raise RuntimeError("no SpaceMouse found (on Linux check the udev rule, see docs/hardware.md)")
        self._dev = hid.device()
        self._dev.open_path(path)
        self._alive_t = time.monotonic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="spacemouse-teleop", daemon=True)
        self._thread.start()

    def disconnect(self) -> None:
        """Stop reading and close the device."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self._dev is not None:
            self._dev.close()
            self._dev = None

    @property
    def is_connected(self) -> bool:
        """Whether the reader thread runs (it ends when the device is unplugged)."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._dev.read(13, 50)  # 50 ms timeout: the loop notices a stop request
            except OSError:
                return
            with self._lock:
                self._alive_t = time.monotonic()
                if data:
                    parse_report(data, self._raw, self._buttons)

    def read(self) -> TeleopReading | None:
        """Normalised deltas; the gripper follows the buttons."""
        c = self.config
        with self._lock:
            v = np.clip(self._raw / FULL_SCALE, -1.0, 1.0)
            buttons = list(self._buttons)
            t = self._alive_t
        if c.swap_xy:
            v = v[[1, 0, 2, 4, 3, 5]]
        v = v * np.asarray(c.signs)
        v[np.abs(v) < c.deadzone] = 0.0
        gripper = -1.0 if buttons[0] else (1.0 if buttons[1] else None)
        return TeleopReading(t, v, gripper, engage=bool(np.any(v) or any(buttons)))

    def buttons(self) -> dict[str, str]:
        """The controls."""
        return {"puck": "move the end effector in 6 DoF (moving it = intervening in hold mode)",
                "left button": "close gripper", "right button": "open gripper"}
