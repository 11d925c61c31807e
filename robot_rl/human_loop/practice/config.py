"""Practice's settings (``practice.*`` in a deploy config): the two policies, when the robot is stuck, the budget."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PracticeConfig:
    """Autonomous practice (`robot-rl deploy --mode practice`, docs/practice.md): task and reset policies alternate."""

    reset_run_dir: str = ""
    """The reset policy's learner run directory (eval: its newest checkpoint is loaded); the task policy's is the
    usual ``--run-dir``."""
    reset_address: str = "tcp://127.0.0.1:5556"
    """Where the reset policy's learner listens (a second `robot-rl deploy --role learner --connect ADDRESS` with its
    own ``--run-dir``); the task policy's learner is at ``transport.address``."""
    reset_reward: str = "robot"
    """The reset policy's reward: ``robot`` (a simulated cell's own check that the scene is back where the demos
    start: ``at_start``) or ``classifier`` (``reset_classifier``: a classifier of the demos' first frames,
    `robot-rl reward train-classifier DEMOS --label first_k`)."""
    reset_classifier: str | None = None
    """``reset_reward=classifier``: the initial-state classifier's checkpoint directory."""
    reset_max_steps: int = 40
    """Steps before a reset attempt is cut; the task policy's attempts are cut at ``max_episode_steps``."""
    reset_tries: int = 1
    """Reset attempts in a row before the task policy acts again from wherever the scene is: a failed reset is
    tried again up to this many times, so that the task policy practises from where the demos start (1: strict
    alternation, MEDAL's schedule)."""
    stuck_after_attempts: int = 6
    """Attempts in a row (task and reset together) with neither policy succeeding: the robot is stuck and asks the
    person to put the scene back (or, with the scene where the demos start, to take over the next task attempt)."""
    stuck_after_s: float = 300.0
    """... or this long (wall-clock seconds) without either succeeding."""
    ask_when_out_of_reach: bool = True
    """Ask at once when the robot reports the object out of reach (a simulated cell's ``in_reach``)."""
    max_requests_per_hour: float = 6.0
    """The person's budget: at most ``1 + this × hours`` requests (resets and takeovers) since the start of practice.
    A stuck robot over budget keeps practising; one whose object is out of reach holds until the budget allows."""
    wait_timeout_s: float = 120.0
    """How long the robot holds for the person after asking for a reset (then it practises on)."""
    person_seed: int = 0
    """Seed of the scene a simulated person puts back (``human_reset``)."""

    def __post_init__(self) -> None:
        if self.reset_reward not in ("robot", "classifier"):
            raise ValueError(f"practice.reset_reward={self.reset_reward!r}; valid: robot (a simulated cell's "
                             "at_start), classifier (practice.reset_classifier=DIR)")
        if self.reset_reward == "classifier" and not self.reset_classifier:
            raise ValueError("practice.reset_reward=classifier needs practice.reset_classifier=<checkpoint directory> "
                             "(`robot-rl reward train-classifier DEMOS --label first_k --out DIR`)")
        if self.reset_max_steps < 1 or self.stuck_after_attempts < 1 or self.reset_tries < 1:
            raise ValueError("practice.reset_max_steps, practice.reset_tries and practice.stuck_after_attempts must "
                             "be >= 1")
        if self.stuck_after_s <= 0 or self.max_requests_per_hour < 0 or self.wait_timeout_s < 0:
            raise ValueError("practice.stuck_after_s must be > 0, max_requests_per_hour and wait_timeout_s >= 0")
