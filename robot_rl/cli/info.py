"""`robot-rl config`, `robot-rl tasks`, `robot-rl devices`: print what can be set, trained on and plugged in."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import tyro

from robot_rl.cli.base import Command
from robot_rl.cli.train import train_sections
from robot_rl.cli.vocabulary import ALGO_DEFAULT, TASK_DEFAULT, algo_help, overrides_help, task_help
from robot_rl.config_io import describe, to_dict
from robot_rl.loop.config import resolve_train_config


@dataclass
class ConfigArgs(Command):
    """Print the resolved config of a task/algorithm pair: every key, its value and its meaning.

    Any other command that takes a config prints its own the same way when prefixed with `robot-rl config`:
    `robot-rl config deploy --mode learn robot.type=sim_arm`, `robot-rl config record --robot sim_arm`,
    `robot-rl config reward train-classifier demos --out clf`, `robot-rl config flow-sft demos`. Add --yaml
    for a file that command's --config takes. Nothing is connected, trained or written.
    """

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(
        metavar="SECTION.KEY=VALUE", help=overrides_help(train_sections(), "`--offline.updates 5`") + " Applied "
        "before printing.")]] = ()
    task: Annotated[str | None, tyro.conf.arg(metavar="NAME", help=task_help(), help_behavior_hint=TASK_DEFAULT)] = None
    algo: Annotated[str | None, tyro.conf.arg(metavar="NAME", help=algo_help(), help_behavior_hint=ALGO_DEFAULT)] = None
    config: Path | None = None
    """A YAML file to resolve."""
    yaml: bool = False
    """Print as YAML (a file you can pass to --config) instead of a table."""

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """The run config's sections."""
        return train_sections()

    def run(self) -> int:
        """Print the table (or the YAML)."""
        print_config(resolve_train_config(self.task, self.algo, self.config, list(self.overrides)), self.yaml)
        return 0


@dataclass
class VerbConfigArgs(Command):
    """`robot-rl config VERB …`: print the config ``command`` (VERB parsed with its options) would run with."""

    verb: str
    command: Command
    yaml: bool = False

    def run(self) -> int:
        """Print the table (or the YAML); say so when the verb takes no config."""
        cfg = self.command.resolved_config()
        if cfg is None:
            print(f"robot-rl {self.verb} takes no config beyond its options: `robot-rl {self.verb} --help` lists "
                  "them")
            return 0
        print_config(cfg, self.yaml)
        return 0


def print_config(cfg: Any, as_yaml: bool) -> None:
    """Print a config (a dataclass tree or ``{section: dataclass}``) as a key/value/meaning table or as YAML."""
    sections = cfg if isinstance(cfg, dict) else {"": cfg}
    if as_yaml:
        import yaml

        data = {k: to_dict(v) for k, v in sections.items()}
        print(yaml.safe_dump(data.get("", data), sort_keys=False), end="")
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table("key", "value", "meaning", show_lines=False)
    for name, section in sections.items():
        for key, value, doc in describe(section, f"{name}." if name else ""):
            # Text, never markup: a doc's ``["state"]`` or a value's [mujoco] is data, not a rich style tag.
            table.add_row(Text(key), Text(repr(value) if isinstance(value, str) else str(value)), Text(doc))
    Console(width=max(160, Console().width)).print(table)


@dataclass
class TasksArgs(Command):
    """List every registered task: its backend, whether that is installed, and what installs it.

    A backend task takes any id of its simulator as `<backend>/<id>`, e.g.
    `robot-rl train --task maniskill/PickCube-v1` or `--task gymnasium/HalfCheetah-v5`. Nothing is
    imported to check: simulators are only located.
    """

    missing: bool = False
    """Only list tasks whose backend is not installed."""

    def run(self) -> int:
        """Print the task table."""
        from rich.console import Console

        from robot_rl.sims.extras import task_catalog

        Console().print(task_table([row for row in task_catalog() if not (self.missing and row.installed)]))
        return 0


def task_table(rows: list[Any]) -> Any:
    """`robot-rl tasks`' table: a task's names, then its backend, ids, install line and summary under each other.

    Two columns, so that at 80 columns the text wraps in one wide cell instead of six narrow ones. Every cell is
    a :class:`~rich.text.Text`: ``pip install 'robot-rl[mujoco]'`` must not lose ``[mujoco]`` as a markup tag.
    """
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table("task", "backend, install, what", box=box.SIMPLE_HEAD, show_lines=True, show_edge=False)
    table.columns[0].no_wrap = True
    for row in rows:
        about = Text(row.backend)
        about.append(" (installed)" if row.installed else " (not installed)",
                     style="green" if row.installed else "yellow")
        if row.id_hint:
            about.append(f"\nids: {row.id_hint}")
        if not row.installed and row.install:
            about.append(f"\ninstall: {row.install}")
        about.append(f"\n{row.summary}")
        table.add_row(Text("\n".join(row.names), style="bold"), about)
    return table


@dataclass
class DevicesArgs(Command):
    """List the teleop devices that are connected (keyboard, gamepad, SpaceMouse) and what each control does.

    Works with nothing connected (it says so). Gamepads need `pygame`, SpaceMice `hidapi`:
    `pip install 'robot-rl[teleop]'`.
    """

    scripted: bool = True
    """Also list the scripted devices (a script in place of a person: the simulated arm's pick demonstrator and
    intervener, and an idle one for tests); --no-scripted hides them."""

    def run(self) -> int:
        """Print the device listing."""
        from robot_rl.human_loop.devices.listing import format_listing, list_devices

        print(format_listing(list_devices(include_scripted=self.scripted)))
        return 0
