"""The operator's side of a deployment: the teleop device and the e-stop guard process attached to a robot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from robot_rl.core.config import ConfigError


def make_teleop(name: str, robot: Any, keys: Any = None) -> Any:
    """The teleop device called ``name`` for ``robot`` (``pick_intervener`` needs the simulated arm).

    ``keys``: the keyboard's :class:`~robot_rl.human_loop.devices.keyboard.KeySource` (default: the terminal).
    """
    from robot_rl.human_loop.devices.base import TELEOP_DEVICES
    from robot_rl.human_loop.devices.keyboard import KeyboardConfig

    if keys is not None:
        if name != "keyboard":
            raise ConfigError(f"a key source is for the keyboard teleop, not {name}")
        return KeyboardConfig().make(keys)
    return TELEOP_DEVICES.get(name)().make_for(robot)


def start_estop_guard(robot: Any, trigger_file: Path | None, tty: str | None = None,
                      forward_keys: bool = False, heartbeat_timeout_s: float = 0.3) -> Any:
    """Connect ``robot`` and start an :class:`~robot_rl.hardware.estop.EStopGuard` with its stop command.

    ``tty``: the terminal the guard reads the e-stop key from; ``forward_keys``: put the other keys on
    ``guard.keys`` for the keyboard teleop (see :func:`guard_key_source`).
    """
    from robot_rl.hardware.estop import EStopGuard, EStopGuardConfig
    from robot_rl.hardware.robot import EmergencyStoppable

    if heartbeat_timeout_s < 0:  # before connecting: a bad flag should not touch the robot
        raise ConfigError(f"--estop-heartbeat-s must be >= 0 (0 = off), got {heartbeat_timeout_s}")
    robot.connect()  # the simulator's address (the guard's own connection) exists once it runs
    if isinstance(robot, EmergencyStoppable):
        command: Any = robot.emergency_stop_command()
    else:
        raise ConfigError(f"{type(robot).__name__} has no emergency-stop command for the guard process")
    cfg = EStopGuardConfig(trigger_file=str(trigger_file) if trigger_file else None, tty=tty,
                           heartbeat_timeout_s=heartbeat_timeout_s)
    guard = EStopGuard(command, cfg, forward_keys=forward_keys and tty is not None)
    try:
        return guard.start()
    except (OSError, ValueError) as e:
        raise ConfigError(f"the e-stop guard cannot read {tty}: {e}; pass --estop-tty off or another terminal") from e


def guard_key_source(guard: Any) -> Any:
    """The keyboard's key source fed by ``guard`` (its forwarded keys; ends when the guard process dies)."""
    from robot_rl.human_loop.devices.keyboard import QueueKeys

    return QueueKeys(guard.keys, alive=lambda: guard.alive)
