"""The graded human-in-the-loop schedule's configs (torch-free: the CLI lists their keys).

The machinery that runs them is :mod:`robot_rl.hil.schedule`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from robot_rl.hardware.teleop import TeleopDevice

PHASES = ("offline", "return_and_explore", "human_guided")


@dataclass
class HILPhase:
    """One phase of the schedule."""

    name: str
    """``offline``, ``return_and_explore`` or ``human_guided``."""
    env_steps: int
    """How long the phase lasts (env transitions; for ``offline``, learner updates)."""
    reset_to_demo_prob: float = 0.0
    """``return_and_explore``: probability that a finished sub-env restarts from a demo state."""
    late_bias: float = 0.0
    """0 = demo states drawn uniformly; 1 = only from the last half of each demo."""
    human_keys: bool = False
    """Whether success/failure keys from a human are read in this phase."""

    def __post_init__(self) -> None:
        if self.name not in PHASES:
            raise ValueError(f"unknown HIL phase {self.name!r}; phases: {', '.join(PHASES)}")
        if self.env_steps < 0 or not 0.0 <= self.reset_to_demo_prob <= 1.0 or not 0.0 <= self.late_bias <= 1.0:
            raise ValueError(f"phase {self.name}: env_steps >= 0 and probabilities in [0, 1] needed")


@dataclass
class HILSchedule:
    """The graded schedule: the phases in order (defaults follow VLAC's offline → return → human)."""

    phases: list[HILPhase] = field(default_factory=lambda: [
        HILPhase("offline", 5_000),
        HILPhase("return_and_explore", 20_000, reset_to_demo_prob=0.5, late_bias=0.5),
        HILPhase("human_guided", 50_000, human_keys=True),
    ])

    def phase_at(self, step: int) -> HILPhase:
        """The phase in force after ``step`` env steps (the last phase continues forever)."""
        for p in self.phases:
            if step < p.env_steps:
                return p
            step -= p.env_steps
        return self.phases[-1]



@dataclass
class HILConfig:
    """Graded human-in-the-loop schedule (offline demos → return-and-explore → human-guided); null = ordinary training.

    ``loop.hil`` runs `robot-rl train` through it (docs/rewards.md; the section of the ``hil`` extension,
    robot_rl.hil.extension). Phases: ``offline_updates`` learner updates from the demo buffer only (needs
    ``demos.path`` and a demo buffer, e.g. ``algo.demo_ratio=0.5``; actors wait), then ``return_steps`` env steps
    of return-and-explore, then human-guided exploration for the rest of the run. From the end of
    the offline phase on, a teleop ``device`` (if set) may take over sub-env 0 (the one a person
    watches; a real robot's only one); its steps are flagged ``intervened``, and the states of its
    successful episodes become the return-and-explore start states.
    """

    offline_updates: int = 1_000
    """Learner updates on demos before any env step."""
    return_steps: int = 20_000
    """Env transitions of the return-and-explore phase."""
    reset_to_demo_prob: float = 0.5
    """Return-and-explore: probability that a finished sub-env restarts from a demonstrated state."""
    late_bias: float = 0.5
    """0 = demo states drawn uniformly; 1 = only from the later half of each demo."""
    device: str | None = None
    """Teleop device (``robot-rl devices`` lists them: keyboard, gamepad, spacemouse, leader_arm, scripted)."""
    human_success_reward: float = 1.0
    """Human-guided phase: added to sub-env 0's reward on the step the human presses the success key."""
    human_failure_reward: float = -1.0
    """Human-guided phase: added to sub-env 0's reward on the step the human presses the failure key."""
    intervention_mode: str = "hold"
    """``hold`` (act while the intervene control is held) or ``toggle``."""

    def __post_init__(self) -> None:
        if self.offline_updates < 0 or self.return_steps < 0:
            raise ValueError("loop.hil: offline_updates and return_steps must be >= 0")
        if not 0.0 <= self.reset_to_demo_prob <= 1.0 or not 0.0 <= self.late_bias <= 1.0:
            raise ValueError("loop.hil: reset_to_demo_prob and late_bias must lie in [0, 1]")

    def schedule(self) -> HILSchedule:
        """The phases (the last one, human-guided, lasts for the rest of the run)."""
        return HILSchedule([HILPhase("offline", self.offline_updates),
                            HILPhase("return_and_explore", self.return_steps, self.reset_to_demo_prob,
                                     self.late_bias),
                            HILPhase("human_guided", 0, human_keys=True)])

    def make_device(self) -> TeleopDevice | None:
        """The configured teleop device (not yet connected), or ``None``."""
        if self.device is None:
            return None
        from robot_rl.hardware.teleop import TELEOP_DEVICES

        return TELEOP_DEVICES.get(self.device)().make()  # type: ignore[no-any-return]
