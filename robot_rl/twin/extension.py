"""The ``twin`` extension of a training run: train in a fitted twin, and refit it while training.

``twin.file`` puts the twin's parameters in the run's task; ``twin.refit_every`` refits it from the real robot's new
episodes in the background (docs/real2sim.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from robot_rl.core.config import ConfigError, TaskConfig
from robot_rl.core.extension import BaseExtension, RunHandle, register_extension
from robot_rl.twin.run_config import TwinRunConfig


class TwinExtension(BaseExtension):
    """Puts the twin's parameters in the run's task; with ``refit_every``, refits it in the background."""

    def __init__(self, section: TwinRunConfig, run_cfg: Any) -> None:
        self.section = section
        self.run_cfg = run_cfg
        self.refitter: Any = None

    def adapt_task(self, task: TaskConfig) -> TaskConfig:
        """The run's task with the twin's parameters in its ``randomize`` section."""
        from robot_rl.twin.in_training import twin_task

        return twin_task(task, self.section)

    def attach(self, run: RunHandle) -> None:
        """With ``refit_every`` (rank 0 only), start watching the real robot's episodes."""
        if not self.section.refit_every or not run.is_main:
            return
        if run.remote:
            raise ConfigError("twin.refit_every moves the training envs to each new fit, so it needs them in "
                              "this process: with actor processes, refit with `robot-rl twin fit` and restart "
                              "the actors with the new file (twin.file=…)")
        from robot_rl.twin.in_training import TwinRefitter

        self.refitter = TwinRefitter(self.section, self.run_cfg.task, list(run.envs), run.run_dir)

    def single_process(self) -> str:
        """A refit moves this process's envs only."""
        return "twin.refit_every (it would move only rank 0's envs to each new fit)" if self.section.refit_every else ""

    def metrics(self) -> Mapping[str, float]:
        """A finished refit's scalars (``twin/…``); starts the next when enough new episodes arrived."""
        return self.refitter.poll() if self.refitter is not None else {}

    def close(self) -> None:
        """Stop a refit in progress."""
        if self.refitter is not None:
            self.refitter.close()


@register_extension("twin", TwinRunConfig, "train in a fitted twin and refit it while training (docs/real2sim.md)")
def build(section: TwinRunConfig, run_cfg: Any) -> TwinExtension | None:
    """The extension when ``twin.file`` is set, else None."""
    return TwinExtension(section, run_cfg) if section.active else None
