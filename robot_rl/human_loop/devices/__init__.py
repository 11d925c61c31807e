"""Teleop devices: keyboard, gamepad (pygame), SpaceMouse (hidapi), leader arms (lerobot), scripted.

Registered in ``TELEOP_DEVICES``.
"""

from robot_rl.hardware.teleop import TELEOP_DEVICES, TeleopConfig, TeleopDevice, TeleopReading
from robot_rl.human_loop.devices import gamepad, keyboard, leader_arm, scripted, spacemouse  # noqa: F401 - registration
from robot_rl.human_loop.devices.keyboard import KeyboardDevice
from robot_rl.human_loop.devices.scripted import ScriptedDevice

__all__ = ["TELEOP_DEVICES", "KeyboardDevice", "ScriptedDevice", "TeleopConfig", "TeleopDevice", "TeleopReading"]
