"""What a deploy run reports: each finished episode (who acted, how it ended) and the run's totals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EpisodeRecord:
    """One finished episode."""

    success: bool
    steps: int
    ret: float
    intervened_steps: int
    interventions: int
    intervention_lengths: list[int]
    end: str
    """``success``, ``failure`` (key), ``reset`` (key), ``time_limit``, ``safety`` (latched), or after a request
    for help nobody answered, ``help_timeout`` (``help.fallback=reset``) or ``skipped`` (``skip``)."""
    wall_s: float
    policy_version: int
    help_requests: int = 0
    """Times the robot asked for help (``help.enabled``)."""
    help_timeouts: int = 0
    """Requests nobody answered within ``help.wait_timeout_s``."""
    unasked_takeovers: int = 0
    """Takeovers without a request: where the help gate should have asked."""
    attention_steps: int = 0
    """Steps under an open request or with the person acting (``help.enabled``): the operator's attention."""
    audit_asked: int = 0
    """Times the operator was asked whether the classifier's success was one (``audit.enabled``)."""
    audit_rejected: int = 0
    """Of those, answered "not a success" (the reward withheld, the episode went on)."""
    task_success: bool | None = None
    """Where the reward is learned (``reward_source`` classifier or keys) and the robot knows its task (a
    simulated arm): the task's own verdict at the episode's end, to measure the learned reward against."""
    extensions: dict[str, float] = field(default_factory=dict)
    """The deploy config's extensions' scalars at the episode's end (``<name>/<key>``; empty without any)."""

    @property
    def intervention_rate(self) -> float:
        """Fraction of the episode's steps under human control."""
        return self.intervened_steps / self.steps if self.steps else 0.0


@dataclass
class DeployReport:
    """What a deploy run did."""

    episodes: list[EpisodeRecord]
    steps: int
    policy_version: int
    safety_counts: dict[str, int]
    rate: Any
    weights_accepted: int
    weights_rejected: int
    chunks_sent: int
    dropped_chunks: int
    """Learn mode: chunks never handed to the transport: kept for a learner that stopped answering (while it answers,
    none is dropped: the robot pauses between episodes instead; :mod:`~robot_rl.human_loop.deploy_outbox`)."""
    unacked_chunks: int = 0
    """Learn mode: chunks the learner had not acknowledged when the run ended (lost)."""

    @property
    def success_rate(self) -> float:
        """Successful episodes / episodes."""
        return sum(e.success for e in self.episodes) / len(self.episodes) if self.episodes else 0.0

    def split(self) -> str:
        """``alone 4/6 (67%), with help 3/4``: the policy's own successes apart from those a human helped with."""
        alone = [e.success for e in self.episodes if e.intervened_steps == 0]
        helped = [e.success for e in self.episodes if e.intervened_steps > 0]
        rate = f" ({sum(alone) / len(alone):.0%})" if alone else ""
        return f"alone {sum(alone)}/{len(alone)}{rate}, with help {sum(helped)}/{len(helped)}"


def learned_reward_check(episodes: list[EpisodeRecord]) -> str:
    """The learned reward's successes checked against the task's verdicts; empty when no episode has one.

    ``learned reward vs the task: 40 successes, the task agreed on 31 (alone 18 of 20); 2 task successes it missed``
    """
    known = [e for e in episodes if e.task_success is not None]
    if not known:
        return ""
    said = [e for e in known if e.success]
    agreed = sum(bool(e.task_success) for e in said)
    alone = [e for e in said if e.intervened_steps == 0]
    missed = sum(bool(e.task_success) and not e.success for e in known)
    return (f"learned reward vs the task: {len(said)} successes, the task agreed on {agreed} (alone "
            f"{sum(bool(e.task_success) for e in alone)} of {len(alone)}); {missed} task successes it missed")


def intervention_runs(flags: list[bool]) -> list[int]:
    """Lengths of the runs of consecutive intervened steps (one per intervention)."""
    runs: list[int] = []
    for prev, cur in zip([False, *flags], flags):
        if cur:
            if prev:
                runs[-1] += 1
            else:
                runs.append(1)
    return runs
