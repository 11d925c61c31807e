"""The contract of a `robot-rl` verb: a dataclass of options that runs itself."""

from __future__ import annotations

import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Protocol, runtime_checkable


class Command(ABC):
    """One verb's (or sub-verb's) options, parsed by tyro, and what the verb does.

    Subclasses are dataclasses: the class docstring is the verb's ``--help`` text, each field's docstring
    the help of its flag. :meth:`run` does the work and returns the process exit code, so tests and
    Python callers can build the dataclass and call it without touching argv.
    """

    sub_verbs: ClassVar[dict[str, type[Command]]] = {}
    """A verb group's verbs by name (`robot-rl robot find-limits`); empty for a verb that runs itself."""
    renamed_flags: ClassVar[dict[str, str]] = {}
    """Old spelling → new one, for flags renamed to the vocabulary every verb shares (``--device`` → ``--teleop``).
    The old spelling still works, with a one-line warning, for one release."""
    argv: list[str] | None = None
    """The command line after ``robot-rl`` it was parsed from (set by ``main``; None when built in Python). Not a
    dataclass field: the base is not a dataclass."""

    @abstractmethod
    def run(self) -> int:
        """Run the verb; the exit code (0 ok, 1 the verb's own "found problems", 2 bad input)."""

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """The sections its ``section.key=value`` overrides may name; () for a verb that takes no config.

        Each also works as a flag, ``--section.key VALUE``. Derived from the verb's config
        (:func:`~robot_rl.cli.vocabulary.sections_of`), so a section added to the config needs no edit here.
        """
        return ()

    def resolved_config(self) -> Any:
        """The config this command would run with, fully resolved (YAML file, defaults, overrides), or None.

        A dataclass tree or a ``{section: dataclass}`` dict; `robot-rl config VERB …` prints it. Building it
        must touch no robot, device, file or socket: only the configs.
        """
        return None


@runtime_checkable
class VerbGroup(Protocol):
    """A verb whose second word picks a sub-verb (``reward serve``, ``data inspect``) into ``action``."""

    action: Any


def missing_extra(e: ImportError) -> bool:
    """Whether ``e`` is an optional package that is not installed (one line, exit 2), not our own import broken."""
    return not (e.name or "").startswith("robot_rl")


def viz_overrides(args: Any) -> list[str]:
    """The ``viz.*`` overrides of a verb's ``--viz`` / ``--viz-file`` flags (train, deploy, record)."""
    out = [f"viz.sink={args.viz}"] if args.viz is not None else []
    return out + ([f"viz.file={args.viz_file}"] if args.viz_file is not None else [])


@contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """Inside, SIGTERM stops the verb like Ctrl-C (a KeyboardInterrupt in the main thread).

    `kill PID`, a service manager's stop or a container's shutdown then ends the episode, holds the robot, writes
    the logs and prints the summary, as Ctrl-C does. Later SIGTERMs are ignored until the verb is out (its
    teardown holds the robot and must not be cut short); a second Ctrl-C still interrupts.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
