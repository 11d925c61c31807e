"""The graded human-in-the-loop schedule (VLAC) as a config, and return-and-explore resets.

Three phases, in order, each lasting a number of env steps:

1. ``offline``: replay demos only (the learner trains on the demo buffer; actors do not act);
2. ``return_and_explore``: episodes start, with probability ``reset_to_demo_prob``, from a state
   visited by a demo (chosen uniformly, or from the demo's later part with ``late_bias``), so the
   policy practises the hard end of the task; needs a backend with ``get_state``/``set_state``
   (the MuJoCo tasks); other backends fall back to ordinary resets and say so once;
3. ``human_guided``: ordinary resets; a human may take over (teleop) and press success/failure
   keys, which the reward composer turns into the success term.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from robot_rl.envs import VecEnv

log = logging.getLogger(__name__)

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


@runtime_checkable
class StateRestorable(Protocol):
    """A VecEnv whose physics state can be read and written (``[N, S]`` for all worlds)."""

    def get_state(self) -> torch.Tensor:
        """Every world's state."""

    def set_state(self, state: torch.Tensor) -> None:
        """Load every world's state."""


class ReturnAndExplore:
    """A pool of demo states and the reset that puts chosen sub-envs back into them.

    Call :meth:`record` on every step of a demo rollout (states of sub-env rows that are in a demo),
    then :meth:`reset_rows` on the sub-envs whose episode just ended.
    """

    def __init__(self, env: VecEnv, late_bias: float = 0.0, seed: int = 0) -> None:
        self.env = env
        self.supported = isinstance(env, StateRestorable) and hasattr(env, "_observe")
        if not self.supported:
            log.warning("%s has no get_state/set_state: return-and-explore falls back to ordinary resets",
                        type(env).__name__)
        self.late_bias = late_bias
        self.states: list[torch.Tensor] = []
        self.progress: list[float] = []
        self.gen = torch.Generator().manual_seed(seed)

    def record(self, rows: torch.Tensor, progress: torch.Tensor) -> None:
        """Store the current states of sub-envs ``rows`` with their progress (t / demo length)."""
        if not self.supported:
            return
        state = self.env.get_state()  # type: ignore[attr-defined]
        for r, p in zip(rows.tolist(), progress.tolist(), strict=True):
            self.states.append(state[r].clone())
            self.progress.append(float(p))

    def reset_rows(self, rows: torch.Tensor) -> dict[str, torch.Tensor] | None:
        """Put sub-envs ``rows`` into demo states; returns the new observation of all sub-envs.

        ``None`` (nothing changed) if the backend cannot restore states or the pool is empty.
        Episode counters of those rows restart at 0: a new episode begins at the demo state.
        """
        if not self.supported or not self.states or len(rows) == 0:
            return None
        prog = torch.tensor(self.progress)
        weight = torch.where(prog >= 0.5, 1.0, 1.0 - self.late_bias)
        pick = torch.multinomial(weight, len(rows), replacement=True, generator=self.gen)
        state = self.env.get_state()  # type: ignore[attr-defined]
        for r, i in zip(rows.tolist(), pick.tolist(), strict=True):
            state[r] = self.states[i]
        self.env.set_state(state)  # type: ignore[attr-defined]
        for name in ("episode_length", "episode_return"):
            counter = getattr(self.env, name, None)
            if isinstance(counter, torch.Tensor):
                counter[rows.to(counter.device)] = 0
        return self.env._observe(self.env.readout)  # type: ignore[attr-defined, no-any-return]
