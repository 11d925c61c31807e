"""The operator's side of a deployment: the teleop device and the e-stop guard process attached to a robot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from robot_rl.core.config import ConfigError


def make_teleop(name: str, robot: Any, keys: Any = None, settings: dict[str, Any] | None = None) -> Any:
    """The teleop device called ``name`` for ``robot`` (``pick_intervener`` needs the simulated arm).

    ``keys``: the keyboard's :class:`~robot_rl.human_loop.devices.keyboard.KeySource` (default: the terminal).
    ``settings``: the device config's fields (`device.port=/dev/ttyACM1` on the command line), e.g. a leader arm's
    port and id.
    """
    cfg = teleop_config(name, settings)
    if keys is not None:
        if name != "keyboard":
            raise ConfigError(f"a key source is for the keyboard teleop, not {name}")
        return cfg.make(keys)
    return cfg.make_for(robot)


def teleop_config(name: str, settings: dict[str, Any] | None = None) -> Any:
    """The config of teleop device ``name`` with ``settings``.

    An unknown device or setting raises, listing what is valid: call it before anything connects.
    """
    from robot_rl.config_io import from_dict
    from robot_rl.hardware.teleop import TELEOP_DEVICES

    return from_dict(TELEOP_DEVICES.get(name), settings or {}, where=f"device ({name})")


def split_device_settings(overrides: list[str] | tuple[str, ...]) -> tuple[list[str], dict[str, Any]]:
    """``(the other overrides, the device config's fields)``: ``device.port=/dev/ttyACM1`` → ``{"port": ...}``."""
    from robot_rl.config_io import parse_override

    rest: list[str] = []
    settings: dict[str, Any] = {}
    for text in overrides:
        key, value = parse_override(text)
        if not key.startswith("device."):
            rest.append(text)
            continue
        *parents, leaf = key[len("device."):].split(".")
        node = settings
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return rest, settings


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
    stoppable = isinstance(robot, EmergencyStoppable)  # checked before connecting: nothing to power up in vain
    if not stoppable:
        raise ConfigError(f"{type(robot).__name__} has no emergency-stop command for the guard process")
    robot.connect()  # the simulator's address (the guard's own connection) exists once it runs
    command: Any = robot.emergency_stop_command()
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
