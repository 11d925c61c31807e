"""`robot-rl …`: a thin command line over the typed configs, and the package's composition root.

One module per verb group, each verb a dataclass of options (:class:`~robot_rl.cli.base.Command`) whose
docstrings are the ``--help`` text and whose ``run()`` does the work:

- :mod:`.train`: ``train`` (the main job), ``eval`` (score a run, optionally record a video)
- :mod:`.distributed`: ``learner`` / ``actor`` (the same run split across processes over ZeroMQ), ``keys``
- :mod:`.info`: ``config`` (every config key of a task/algorithm pair with its meaning), ``tasks``, ``devices``
- :mod:`.export`: ``export`` (ONNX, C); :mod:`.distill`: ``distill`` (a small student for C);
  :mod:`.data`: ``data …``; :mod:`.reward`: ``reward …``
- :mod:`.flow`: ``flow-sft`` (and the language tasks' scripted demonstrators)
- :mod:`.deploy`: ``deploy``; :mod:`.record`: ``record``

:data:`VERBS` is the table :func:`main` parses and dispatches through. Config keys are set with dotted
``section.key=value`` overrides after the options. Nothing outside this package imports it.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated, Any, Union

import tyro

from robot_rl.cli.base import Command, VerbGroup
from robot_rl.cli.data import DataArgs
from robot_rl.cli.deploy import DeployArgs
from robot_rl.cli.distill import DistillArgs
from robot_rl.cli.distributed import ActorArgs, KeysArgs, LearnerArgs
from robot_rl.cli.export import ExportArgs
from robot_rl.cli.flow import FlowSFTArgs
from robot_rl.cli.info import ConfigArgs, DevicesArgs, TasksArgs, VerbConfigArgs
from robot_rl.cli.launch import LaunchArgs
from robot_rl.cli.record import RecordArgs
from robot_rl.cli.reward import RewardArgs
from robot_rl.cli.robot import RobotArgs
from robot_rl.cli.train import EvalArgs, TrainArgs
from robot_rl.cli.twin import TwinArgs
from robot_rl.core.config import ConfigError
from robot_rl.core.registry import UnknownNameError
from robot_rl.core.specs import SpecMismatchError
from robot_rl.core.transport import HandshakeRefused
from robot_rl.durable import DiskFullError
from robot_rl.sims.mujoco.render import RenderingUnavailableError

#: Every verb, in the order `robot-rl --help` lists them.
VERBS: dict[str, type[Command]] = {
    "train": TrainArgs,
    "eval": EvalArgs,
    "learner": LearnerArgs,
    "actor": ActorArgs,
    "keys": KeysArgs,
    "config": ConfigArgs,
    "tasks": TasksArgs,
    "export": ExportArgs,
    "distill": DistillArgs,
    "devices": DevicesArgs,
    "data": DataArgs,
    "reward": RewardArgs,
    "flow-sft": FlowSFTArgs,
    "deploy": DeployArgs,
    "record": RecordArgs,
    "robot": RobotArgs,
    "launch": LaunchArgs,
    "twin": TwinArgs,
}

#: The fixed sections a `--section.key VALUE` flag may name (verbs with ``config_flags``); each registered
#: extension's section is one too (:func:`_config_sections`).
_CONFIG_SECTIONS = ("task", "algo", "loop", "transport", "run", "replay", "cotrain", "reward")


def _config_sections() -> tuple[str, ...]:
    from robot_rl.core.extension import EXTENSIONS

    return _CONFIG_SECTIONS + tuple(EXTENSIONS.names())

DESCRIPTION = "Reinforcement learning for robots: train, evaluate, inspect configs."


def verb_union() -> Any:
    """The tyro subcommand type of :data:`VERBS`: one subcommand per verb, named by its key."""
    return Union[tuple(Annotated[cls, tyro.conf.subcommand(name)] for name, cls in VERBS.items())]


def dotted_flags(argv: list[str]) -> list[str]:
    """Rewrite config flags as overrides: ``--cotrain.real-dataset PATH`` → ``cotrain.real_dataset=PATH``.

    ``--section.key=VALUE`` works too; dashes in the key become underscores. Only for the verbs whose
    options class sets ``config_flags``.
    """
    if not argv or argv[0] not in VERBS or not VERBS[argv[0]].config_flags:
        return list(argv)
    out, overrides, i = [argv[0]], [], 1
    while i < len(argv):
        arg = argv[i]
        head = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        section, _, key = head.partition(".")
        if key and section in _config_sections():
            if "=" in arg:
                value = arg.split("=", 1)[1]
            elif i + 1 < len(argv):
                i += 1
                value = argv[i]
            else:
                out.append(arg)  # no value: let the parser report it
                break
            overrides.append(f"{section}.{key.replace('-', '_')}={value}")
        else:
            out.append(arg)
        i += 1
    return out + overrides  # positional overrides go last, after every option


def verb_config(argv: list[str]) -> VerbConfigArgs:
    """`robot-rl config VERB [VERB's options and overrides] [--yaml]`: VERB parsed as it would run."""
    rest = dotted_flags([a for a in argv if a != "--yaml"])
    command = tyro.cli(VERBS[rest[0]], args=rest[1:], prog=f"robot-rl config {rest[0]}",
                       description=f"Print the config `robot-rl {rest[0]}` would run with these options (--yaml: "
                                   "as a file its --config takes).")
    # A verb with sub-verbs (reward) is named with the one chosen: "reward serve".
    name = " ".join(rest[:2]) if isinstance(command, VerbGroup) else rest[0]
    return VerbConfigArgs(verb=name, command=command, yaml="--yaml" in argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `robot-rl` console script: parse ``argv`` (default: sys.argv) and run the verb."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else list(argv)
    args: Command
    if len(argv) > 1 and argv[0] == "config" and argv[1] in VERBS and argv[1] != "config":
        args = verb_config(argv[1:])
    else:
        args = tyro.cli(verb_union(), args=dotted_flags(argv), prog="robot-rl", description=DESCRIPTION)
    args.argv = argv
    try:
        return args.run()
    except DiskFullError as e:
        print(f"robot-rl: disk full: {e}", file=sys.stderr)
        return 2
    except (ConfigError, UnknownNameError, SpecMismatchError, FileNotFoundError, ValueError, TimeoutError,
            HandshakeRefused, RenderingUnavailableError) as e:
        print(f"robot-rl: error: {e}", file=sys.stderr)
        return 2


__all__ = ["VERBS", "Command", "dotted_flags", "main"]
