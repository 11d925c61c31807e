"""The process layout every launch backend starts: the learner's and each actor's command line."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

#: The line `robot-rl learner` prints once it is bound (robot_rl/cli/distributed.py).
LISTENING = re.compile(r"^learner listening on (\S+) \(run directory (.+)\)\s*$")


@dataclass
class LaunchPlan:
    """What to run: the shared run options and how many actors.

    ``run_args`` are the options both roles take (``--task``, ``--algo``, ``--config``, dotted overrides); the
    learner adds its bind address, each actor its id and the learner's address.
    """

    actors: int
    run_args: list[str] = field(default_factory=list)
    python: str = sys.executable

    def __post_init__(self) -> None:
        if self.actors < 1:
            raise ValueError(f"a launch needs at least one actor, got actors={self.actors}")

    def learner_argv(self, bind: str, resume: Path | None = None) -> list[str]:
        """The learner's command: every actor's envs feed it (``loop.remote_actors`` for on-policy rollouts)."""
        extra = ["--resume", str(resume)] if resume is not None else []
        return [self.python, "-m", "robot_rl.cli", "learner", "--bind", bind, *extra, *self.run_args,
                f"loop.remote_actors={self.actors}"]

    def actor_argv(self, actor_id: int, connect: str) -> list[str]:
        """Actor ``actor_id``'s command, connecting to the learner at ``connect``."""
        return [self.python, "-m", "robot_rl.cli", "actor", "--actor-id", str(actor_id), "--connect", connect,
                *self.run_args, f"loop.remote_actors={self.actors}"]


def parse_listening(line: str) -> tuple[str, Path] | None:
    """``(address, run_dir)`` from the learner's "listening" line, None for any other line."""
    m = LISTENING.match(line)
    return (m.group(1), Path(m.group(2))) if m else None
