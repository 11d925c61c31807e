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
- :mod:`.vocabulary`: what the verbs share: config sections derived from the configs, help from the registries

:data:`VERBS` is the table :func:`main` parses and dispatches through. One vocabulary across verbs: the robot is
``--robot``, the teleop device ``--teleop``, the live status line ``--status/--no-status``; every verb that takes a
config takes dotted ``section.key=value`` overrides after the options and the same as ``--section.key VALUE``
flags, with the sections its config has (:meth:`~robot_rl.cli.base.Command.config_sections`). A renamed flag's
old spelling works for one release, with a one-line warning. A :class:`~robot_rl.core.errors.UserError` (a
``ConfigError`` …), a missing file or a deadline is one line and exit code 2; anything else is a bug and keeps
its traceback. Nothing outside this package imports it.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

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
from robot_rl.cli.vocabulary import sub_verb_union
from robot_rl.core.errors import UserError
from robot_rl.durable import DiskFullError

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

DESCRIPTION = "Reinforcement learning for robots: train, evaluate, inspect configs."

#: The errors that are the user's to fix: one line on stderr and exit code 2. Anything else keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (UserError, FileNotFoundError, TimeoutError)


def verb_union() -> Any:
    """The tyro subcommand type of :data:`VERBS`: one subcommand per verb, named by its key."""
    return sub_verb_union(VERBS)


def command_of(argv: list[str]) -> tuple[type[Command] | None, int]:
    """The options class ``argv`` names (walking a group's sub-verbs) and how many words name it."""
    if not argv or argv[0] not in VERBS:
        return None, 0
    cls, n = VERBS[argv[0]], 1
    while n < len(argv) and argv[n] in cls.sub_verbs:
        cls, n = cls.sub_verbs[argv[n]], n + 1
    return cls, n


def normalized_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(argv as the parser takes it, deprecation warnings)``.

    A renamed flag's old spelling becomes the new one, with a warning. A config flag becomes an override:
    ``--cotrain.real-dataset PATH`` → ``cotrain.real_dataset=PATH`` (``--section.key=VALUE`` too; dashes in the
    key become underscores), for every section of the verb's config; overrides go last, after every option.
    """
    cls, n = command_of(argv)
    if cls is None:
        return list(argv), []
    sections, renamed, verb = cls.config_sections(), cls.renamed_flags, " ".join(argv[:n])
    out, overrides, warnings, i = list(argv[:n]), [], [], n
    while i < len(argv):
        arg = argv[i]
        head, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", "")
        section, _, key = head[2:].partition(".")
        if head in renamed:
            new = renamed[head]
            warnings.append(f"robot-rl {verb}: warning: {head} is deprecated, use {new} (the old spelling stops "
                            "working in the next release)")
            out.append(new + eq + value)
        elif section in sections and key:
            if not eq:
                if i + 1 == len(argv):
                    out.append(arg)  # no value: let the parser report it
                    break
                i += 1
                value = argv[i]
            overrides.append(f"{section}.{key.replace('-', '_')}={value}")
        else:
            out.append(arg)
        i += 1
    return out + overrides, warnings


def dotted_flags(argv: list[str]) -> list[str]:
    """``argv`` with config flags as overrides and renamed flags in their new spelling (:func:`normalized_argv`)."""
    return normalized_argv(argv)[0]


def verb_config(argv: list[str]) -> VerbConfigArgs:
    """`robot-rl config VERB [VERB's options and overrides] [--yaml]`: VERB parsed as it would run."""
    rest = [a for a in argv if a != "--yaml"]
    command = tyro.cli(VERBS[rest[0]], args=rest[1:], prog=f"robot-rl config {rest[0]}",
                       description=f"Print the config `robot-rl {rest[0]}` would run with these options (--yaml: "
                                   "as a file its --config takes).")
    # A verb with sub-verbs (reward) is named with the one chosen: "reward serve".
    name = " ".join(rest[:2]) if isinstance(command, VerbGroup) else rest[0]
    return VerbConfigArgs(verb=name, command=command, yaml="--yaml" in argv)


def parse(argv: list[str]) -> Command:
    """The verb ``argv`` names, parsed (tyro prints the help or a usage error and exits on its own)."""
    if len(argv) > 1 and argv[0] == "config" and argv[1] in VERBS and argv[1] != "config":
        return verb_config(argv[1:])
    return tyro.cli(verb_union(), args=argv, prog="robot-rl", description=DESCRIPTION)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `robot-rl` console script: parse ``argv`` (default: sys.argv) and run the verb.

    A user's mistake (:data:`USER_ERRORS`) is one line on stderr and exit code 2; any other exception propagates
    with its traceback (exit code 1 from the interpreter).
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else list(argv)
    config_prefix = argv[:1] if len(argv) > 1 and argv[0] == "config" and argv[1] in VERBS else []
    rest, warnings = normalized_argv(argv[len(config_prefix):])
    for line in warnings:
        print(line, file=sys.stderr)
    try:
        args = parse(config_prefix + rest)
        args.argv = config_prefix + rest  # in the new spelling: a command run again (torchrun's ranks) warns no more
        return args.run()
    except DiskFullError as e:
        print(f"robot-rl: disk full: {e}", file=sys.stderr)
        return 2
    except USER_ERRORS as e:
        print(f"robot-rl: error: {e}", file=sys.stderr)
        return 2


__all__ = ["USER_ERRORS", "VERBS", "Command", "dotted_flags", "main", "normalized_argv"]
