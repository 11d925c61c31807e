"""What practice does next: which policy acts, when the robot is stuck, and whether the person may be asked.

Pure bookkeeping (no robot, no clock of its own: ``now`` is passed in), so every rule is tested by hand. The task
policy and the reset policy alternate (forward-backward RL, MEDAL's schedule): after every task attempt, successful
or not, the reset policy tries to bring the scene back where the demos start; a reset attempt that finds the scene
there already ends at once. An attempt that ends at once (0 steps: the task already done, the scene already at its
start) is no progress of either policy. The robot is *stuck* when neither policy succeeded in
``stuck_after_attempts`` attempts in a row or ``stuck_after_s`` seconds, or (``ask_when_out_of_reach``) when the
cell reports the object out of reach. Then it asks the person: to put the scene back, or, when the scene is where
the demos start and the task policy still fails, to take over its next attempt. Requests so far never exceed
``1 + max_requests_per_hour × hours`` since the start (one may come at once, then at that rate).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from robot_rl.human_loop.practice.config import PracticeConfig

POLICIES = ("task", "reset")


@dataclass
class Attempt:
    """One attempt of one policy, as practice books it."""

    policy: str
    """``task`` or ``reset``."""
    success: bool
    steps: int
    interventions: int = 0
    """Takeovers by the person during it (runs of intervened steps)."""
    in_reach: bool | None = None
    """The object within the arm's reach at its end (None: the cell cannot tell)."""


@dataclass
class PracticeCounts:
    """The whole practice run so far: the robot's attempts and the person's actions."""

    task_attempts: int = 0
    task_successes: int = 0
    reset_attempts: int = 0
    reset_successes: int = 0
    reset_not_needed: int = 0
    """Reset attempts that found the scene where the demos start (0 steps)."""
    task_already_done: int = 0
    """Task attempts that found the task done (0 steps: the reset policy had not put the object back)."""
    takeovers: int = 0
    """The person took the arm over (one per run of intervened steps, either policy)."""
    reset_requests: int = 0
    """Times the robot asked the person to put the scene back."""
    takeover_requests: int = 0
    """Times the robot asked the person to take over the task policy's next attempt (the scene at its start)."""
    human_resets: int = 0
    """Of those, answered: the person put the scene back."""
    unanswered: int = 0
    """Requests nobody answered within ``wait_timeout_s``."""
    over_budget: int = 0
    """Times the robot was stuck and the budget allowed no request."""
    held_for_budget_s: float = 0.0
    """Seconds (of the practice clock) the robot held with its object out of reach, waiting for the budget."""

    @property
    def human_actions(self) -> int:
        """What the person did: resets and takeovers (the measure practice is to lower)."""
        return self.human_resets + self.takeovers

    def as_dict(self) -> dict[str, Any]:
        """The counts and ``human_actions``, for logs and benchmark JSON."""
        return {**asdict(self), "human_actions": self.human_actions}


class PracticeController:
    """The schedule, the stuck rule and the budget (module docstring)."""

    def __init__(self, cfg: PracticeConfig, now: float) -> None:
        self.cfg = cfg
        self.start = now
        self.counts = PracticeCounts()
        self.failed_in_row = 0
        self.last_success_at = now
        self.out_of_reach = False
        self.scene_at_start = True
        """The last reset attempt (or the person) left the scene where the demos start."""
        self._next = "task"
        self.reset_tries = 0
        """Reset attempts since the task policy last acted."""

    def next_policy(self) -> str:
        """The policy of the next attempt: ``task`` and ``reset`` alternate, the task first."""
        return self._next

    def record(self, attempt: Attempt, now: float) -> None:
        """Book a finished attempt."""
        c = self.counts
        at_once = attempt.success and attempt.steps == 0  # found done: no progress of the policy
        if attempt.policy == "task":
            c.task_attempts += 1
            c.task_successes += attempt.success and not at_once
            c.task_already_done += at_once
        elif attempt.policy == "reset":
            c.reset_attempts += 1
            c.reset_successes += attempt.success and not at_once
            c.reset_not_needed += at_once
            self.scene_at_start = attempt.success
        else:
            raise ValueError(f"policy {attempt.policy!r}; valid: {', '.join(POLICIES)}")
        c.takeovers += attempt.interventions
        if attempt.success and not at_once:
            self.failed_in_row, self.last_success_at = 0, now
        elif not attempt.success:
            self.failed_in_row += 1
        self.out_of_reach = attempt.in_reach is False
        if attempt.policy == "task":
            self._next, self.reset_tries = "reset", 0
        else:  # a failed reset is tried again (reset_tries): the task practises from where the demos start
            self.reset_tries += 1
            again = not attempt.success and self.reset_tries < self.cfg.reset_tries and not self.out_of_reach
            self._next = "reset" if again else "task"

    def stuck(self, now: float) -> str:
        """Why the robot is stuck now (empty: it is not)."""
        if self.out_of_reach and self.cfg.ask_when_out_of_reach:
            return "the object is out of reach"
        if self.failed_in_row >= self.cfg.stuck_after_attempts:
            return f"no success in {self.failed_in_row} attempts"
        if now - self.last_success_at >= self.cfg.stuck_after_s:
            return f"no success for {now - self.last_success_at:.0f}s"
        return ""

    def budget_allows(self, now: float) -> bool:
        """Another request stays within ``1 + max_requests_per_hour × hours`` since the start."""
        hours = max(now - self.start, 0.0) / 3600.0
        asked = self.counts.reset_requests + self.counts.takeover_requests
        return asked + 1 <= 1 + self.cfg.max_requests_per_hour * hours

    def ask(self, now: float) -> tuple[str, str]:
        """What to ask the person now and why: ``("reset", why)``, ``("takeover", why)`` or ``("", "")``.

        A takeover when the scene is where the demos start and the object in reach (a reset would change nothing:
        the task policy needs showing), a reset otherwise. Counts the request, or a refusal over budget.
        """
        why = self.stuck(now)
        if not why:
            return "", ""
        if not self.budget_allows(now):
            self.counts.over_budget += 1
            return "", ""
        if self.scene_at_start and not self.out_of_reach:
            self.counts.takeover_requests += 1
            self.failed_in_row, self.last_success_at = 0, now  # the next attempts are the person's to show
            self._next = "task"
            return "takeover", why
        self.counts.reset_requests += 1
        return "reset", why

    def answered(self, reset: bool, now: float) -> None:
        """The request ended: the person put the scene back (``reset``), or nobody came in time."""
        if reset:
            self.counts.human_resets += 1
            self.failed_in_row, self.last_success_at, self.out_of_reach = 0, now, False
            self.scene_at_start = True
            self._next = "task"  # the scene is where the demos start: the task's turn
        else:
            self.counts.unanswered += 1
