"""The words every verb shares: config sections derived from the configs, and ``--help`` texts read from the registries.

One vocabulary across `robot-rl` verbs: ``--robot NAME``, ``--teleop NAME`` (its settings as ``device.KEY=VALUE``),
``--status/--no-status``, ``--viz {none,rerun}``, and ``--section.key VALUE`` for every section of a verb's config.
The help texts are built when the help is (tyro evaluates the annotations that call them at parse time), so a task,
algorithm, robot or device a plugin registers is listed without an edit here.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import TYPE_CHECKING, Annotated, Any, Union

import tyro

from robot_rl.core.config import ALGOS, TASKS
from robot_rl.core.registry import PluginLoadError, Registry
from robot_rl.hardware.robot import ROBOTS
from robot_rl.hardware.teleop import TELEOP_DEVICES

if TYPE_CHECKING:
    from robot_rl.cli.base import Command


def sections_of(config_cls: type) -> tuple[str, ...]:
    """The fields of a config dataclass that are sections: those typed as a dataclass (``X`` or ``X | None``)."""
    hints = typing.get_type_hints(config_cls)

    def is_section(tp: Any) -> bool:
        options = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
        return any(isinstance(t, type) and dataclasses.is_dataclass(t) for t in options)

    return tuple(f.name for f in dataclasses.fields(config_cls) if is_section(hints.get(f.name)))


def sub_verb_union(verbs: dict[str, type[Command]]) -> Any:
    """The tyro subcommand type of a verb table: one subcommand per entry, named by its key."""
    return Union[tuple(Annotated[cls, tyro.conf.subcommand(name)] for name, cls in verbs.items())]


def names_of(registry: Registry[Any], listing: str) -> str:
    """``a, b, c``: a registry's names for a ``--help`` text, read when the help is built (plugins included).

    ``listing``: the command that lists them, said instead when a plugin fails to import (choosing a name then
    reports the failure).
    """
    try:
        return ", ".join(registry.names())
    except PluginLoadError:
        return f"see `{listing}`"


def overrides_help(sections: tuple[str, ...], example: str) -> str:
    """The ``--help`` of a verb's dotted overrides, listing its config's sections."""
    return (f"Dotted config overrides `section.key=value` (sections: {', '.join(sections)}), also as flags "
            f"`--section.key VALUE`, e.g. {example}.")


def algo_help(lead: str = "Learner") -> str:
    """``--algo``'s help: every registered algorithm."""
    return f"{lead}: {names_of(ALGOS, 'docs/algorithms.md')}."


def task_help() -> str:
    """``--task``'s help: every registered task and the ``<backend>/<id>`` form."""
    return (f"Task id: {names_of(TASKS, 'robot-rl tasks')}, or `<backend>/<id>` (gymnasium/Pendulum-v1, "
            "maniskill/PickCube-v1, isaacgym/cartpole); `robot-rl tasks` says what each needs.")


def robot_help() -> str:
    """``--robot``'s help: every registered robot."""
    return (f"Robot: {names_of(ROBOTS, 'docs/hardware.md')} (lerobot: SO-100/SO-101, Koch … through LeRobot; "
            "sim_arm: the MuJoCo stand-in; sim_so101: a simulated SO-101 behind the LeRobot driver); its settings "
            "as robot.KEY=VALUE.")


def teleop_help(lead: str = "Teleop device") -> str:
    """``--teleop``'s help: every registered teleop device."""
    return (f"{lead}: {names_of(TELEOP_DEVICES, 'robot-rl devices')}; its settings as device.KEY=VALUE (e.g. "
            "device.port=/dev/ttyACM1 device.id=my_leader); `robot-rl devices` lists them and their controls.")


ALGO_DEFAULT = "(default: the config's algo.type, else sac)"
TASK_DEFAULT = "(default: the config's task.type, else reach)"


VIZ_SINKS = "{none,rerun}"
"""The metavar of ``--viz``: its choices without tyro's ``None`` (the flag left out)."""
