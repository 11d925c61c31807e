"""The ``twin`` section of a run config: train in a fitted twin, and refit it while training.

Kept free of torch and MuJoCo: ``robot_rl/loop/config.py`` imports this module; what acts on it
(:mod:`robot_rl.twin.in_training`) is imported only when the section is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass
class TwinRunConfig:
    """Train in the twin of `robot-rl twin fit` (docs/real2sim.md); on when ``twin.file`` is set."""

    file: Path | None = None
    """A ``twin.json`` of `robot-rl twin fit`: the run's task gets its fitted parameters, as fixed values
    (``use=preset``) or as ranges centred on them (``use=dr``), added to any ``task.randomize`` of the run."""
    use: Literal["preset", "dr"] = "dr"
    """``preset``: every episode in the fitted simulator; ``dr``: ranges ``value ± k·std`` (narrow where the
    logs pinned a parameter down, wide where they did not)."""
    k: float = 2.0
    """Width of the ``dr`` ranges in standard deviations of the fit."""
    refit_every: int = 0
    """Calibrate while training: refit the twin each time this many new episodes have arrived in
    ``real_episodes`` (0 = never), with the first fit's parameters and budget, and move the training envs to
    the new fit from each world's next episode. In-process actors only."""
    real_episodes: Path | None = None
    """The real robot's episode store that `robot-rl record` or `deploy` appends to (default: the logs the
    twin was fitted on)."""
    poll_s: float = 10.0
    """How often to look for new episodes in ``real_episodes``."""

    def __post_init__(self) -> None:
        if self.use not in ("preset", "dr"):
            raise ValueError(f"twin.use must be preset or dr, got {self.use!r}")
        if self.k <= 0 or self.refit_every < 0 or self.poll_s <= 0:
            raise ValueError("twin.k and twin.poll_s must be > 0 and twin.refit_every >= 0")
        if self.refit_every and self.file is None:
            raise ValueError("twin.refit_every needs twin.file: the first fit says which parameters to refit "
                             "(write it with `robot-rl twin fit --out twin.json`)")

    @property
    def active(self) -> bool:
        """The run trains in a twin."""
        return self.file is not None
