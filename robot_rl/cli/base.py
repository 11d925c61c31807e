"""The contract of a `robot-rl` verb: a dataclass of options that runs itself."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar


class Command(ABC):
    """One verb's (or sub-verb's) options, parsed by tyro, and what the verb does.

    Subclasses are dataclasses: the class docstring is the verb's ``--help`` text, each field's docstring
    the help of its flag. :meth:`run` does the work and returns the process exit code, so tests and
    Python callers can build the dataclass and call it without touching argv.
    """

    config_flags: ClassVar[bool] = False
    """Whether `--section.key VALUE` flags are read as config overrides (verbs that resolve a TrainConfig)."""

    @abstractmethod
    def run(self) -> int:
        """Run the verb; the exit code (0 ok, 1 the verb's own "found problems", 2 bad input)."""

    def resolved_config(self) -> Any:
        """The config this command would run with, fully resolved (YAML file, defaults, overrides), or None.

        A dataclass tree or a ``{section: dataclass}`` dict; `robot-rl config VERB …` prints it. Building it
        must touch no robot, device, file or socket: only the configs.
        """
        return None


def viz_overrides(args: Any) -> list[str]:
    """The ``viz.*`` overrides of a verb's ``--viz`` / ``--viz-file`` flags (train, deploy, record)."""
    out = [f"viz.sink={args.viz}"] if args.viz is not None else []
    return out + ([f"viz.file={args.viz_file}"] if args.viz_file is not None else [])
