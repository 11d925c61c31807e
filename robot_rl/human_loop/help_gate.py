"""The help gate: per step, whether the robot should ask its operator for help, and why.

ThriftyDAgger (Hoque et al., 2021) lets the robot ask when a state is novel or risky, within a set budget of
the supervisor's attention. The gate takes named scores each step (higher = more reason to ask):

``novelty``     disagreement of the critics about the action (their spread), or any other novelty measure;
``risk``        the negated critic value (a low Q is a risky state);
``safety``      the safety layer's events (clips, limits) over the last ``window`` steps: near-violations;
``progress``    a stall of the process reward model's progress over ``window`` steps;
``classifier``  the success classifier's uncertainty, ``1 - |2p - 1|``.

Each score is standardised against its own running mean and spread (an exponential moving average), so scores
in different units compare; the largest standardised score is the step's *urgency* and names the reason. The gate
asks when the urgency crosses a threshold, and the threshold adapts online so that the fraction of steps (or of
episodes) in which the operator is asked converges to ``budget``: after each step it moves up by ``adapt_rate *
(asked - budget)`` (a stochastic-approximation quantile tracker; with the budget fixed the long-run ask rate
equals it whatever the scores' distribution).

Hysteresis: a request lasts at least ``min_ask_steps`` (and until the urgency falls back under the threshold or
the operator has finished), and a new one starts no sooner than ``min_gap_steps`` after the last one ended, so a
noisy score cannot make the gate flap. A score that is NaN or infinite asks at once, whatever the budget (fail
safe), and the request says which score it was.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

HELP_SCORES = ("novelty", "risk", "safety", "progress", "classifier")
"""The scores the gate knows; a config naming another is refused."""


@dataclass
class HelpGateConfig:
    """When the robot asks for help (``help.*`` in a deploy config); off unless ``enabled``."""

    enabled: bool = False
    """Ask for help (robot-gated supervision). Off: the operator watches and takes over unasked (HIL-SERL)."""
    budget: float = 0.1
    """Target fraction of the operator's attention, in (0, 1]: of steps (``budget_unit=steps``) or of episodes
    (``episodes``) in which the robot asks."""
    budget_unit: Literal["steps", "episodes"] = "steps"
    """What the budget counts: steps under a request, or episodes with at least one request."""
    scores: list[str] = field(default_factory=lambda: list(HELP_SCORES))
    """Which scores may trigger a request (a score that is not available, e.g. ``classifier`` without one, is
    simply never given)."""
    min_ask_steps: int = 10
    """A request lasts at least this many steps (hysteresis)."""
    min_gap_steps: int = 10
    """No new request within this many steps of the last one ending (hysteresis)."""
    warmup_steps: int = 50
    """Steps of running statistics before any score may ask (a NaN asks at once regardless)."""
    adapt_rate: float = 0.05
    """How fast the threshold follows the budget (standardised units per step of error)."""
    ema: float = 0.01
    """Weight of the newest value in each score's running mean and variance (about a 100-step memory)."""
    initial_threshold: float = 2.0
    """Starting threshold on the standardised urgency (about the top 2-5 % of a normal score)."""
    window: int = 15
    """Steps over which ``safety`` events are counted and ``progress`` is compared."""
    wait_timeout_s: float = 20.0
    """How long the robot holds waiting for the operator after asking, seconds; then ``fallback``."""
    fallback: Literal["continue", "reset", "skip"] = "continue"
    """After an unanswered request: ``continue`` the policy, ``reset`` (end the episode as a failure and start
    the next), or ``skip`` (end the episode as a time-out, not counted as the policy's failure)."""
    bell: bool = True
    """Ring the terminal bell when the robot asks."""
    prm: str | None = None
    """A process reward model checkpoint (`robot-rl reward train-prm`) for the ``progress`` score: its progress
    over the last ``window`` steps, from the cameras; a stall stands out. None: no ``progress`` score."""
    goal: str = ""
    """With ``prm``: the instruction the model was trained on (the task's goal)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.budget, (int, float)) and 0.0 < self.budget <= 1.0):
            raise ValueError(f"help.budget = {self.budget!r} must be in (0, 1]: the fraction of steps (or episodes) "
                             "the operator is asked to attend, e.g. help.budget=0.1")
        unknown = [s for s in self.scores if s not in HELP_SCORES]
        if unknown:
            raise ValueError(f"help.scores: unknown score(s) {', '.join(map(repr, unknown))}; known: "
                             f"{', '.join(HELP_SCORES)}")
        if not self.scores:
            raise ValueError(f"help.scores is empty: name at least one of {', '.join(HELP_SCORES)}")
        if self.budget_unit not in ("steps", "episodes"):
            raise ValueError(f"help.budget_unit = {self.budget_unit!r}; valid: steps, episodes")
        if self.fallback not in ("continue", "reset", "skip"):
            raise ValueError(f"help.fallback = {self.fallback!r}; valid: continue, reset, skip")
        for name in ("min_ask_steps", "min_gap_steps", "warmup_steps", "window"):
            if getattr(self, name) < 0 or (name == "window" and self.window < 1):
                raise ValueError(f"help.{name} = {getattr(self, name)} must be >= {1 if name == 'window' else 0}")
        if self.prm and not self.goal:
            raise ValueError("help.prm needs help.goal: the instruction the process reward model was trained on")
        if not 0.0 < self.ema < 1.0 or self.adapt_rate <= 0 or self.wait_timeout_s < 0:
            raise ValueError("help.ema must be in (0, 1), help.adapt_rate > 0 and help.wait_timeout_s >= 0")


@dataclass
class HelpDecision:
    """The gate's answer for one step."""

    ask: bool
    """The operator is asked to attend this step."""
    started: bool
    """This step opens a new request (ring the bell, hold the robot)."""
    reason: str
    """Why (the score that crossed, its standardised value), or why not; empty when idle."""
    urgency: float
    """The largest standardised score this step (``inf`` for a non-finite score)."""
    threshold: float
    """The threshold in force."""


class RunningScore:
    """Exponential running mean and variance of one score stream."""

    def __init__(self, ema: float) -> None:
        self.ema = ema
        self.mean = 0.0
        self.var = 0.0
        self.count = 0

    def standardise(self, value: float) -> float:
        """``value``'s distance from the running mean in running standard deviations (before it is added)."""
        if self.count < 2:  # one value has no spread yet
            return 0.0
        # A floor on the spread: after a constant stream any change is news (and never a division by zero).
        return (value - self.mean) / max(math.sqrt(self.var), 1e-6 * max(1.0, abs(self.mean)))

    def add(self, value: float) -> None:
        """Fold ``value`` into the statistics (Welford-style with exponential weights)."""
        self.count += 1
        w = 1.0 / self.count if self.count < 1.0 / self.ema else self.ema
        delta = value - self.mean
        self.mean += w * delta
        self.var = (1.0 - w) * (self.var + w * delta * delta)


class HelpGate:
    """Turns per-step scores into ask / don't ask, within the budget, with hysteresis (module docstring)."""

    def __init__(self, config: HelpGateConfig) -> None:
        self.config = config
        self.threshold = config.initial_threshold
        self.stats = {name: RunningScore(config.ema) for name in config.scores}
        self.steps = 0
        self.asked_steps = 0
        self.requests = 0
        self.episodes = 0
        self.asked_episodes = 0
        self.switches = 0
        self._asking = False
        self._held = 0  # steps into the open request, or since the last one ended
        self._asked_this_episode = False
        self.reason = ""

    @property
    def asking(self) -> bool:
        """A request is open."""
        return self._asking

    @property
    def ask_rate(self) -> float:
        """Fraction of steps (or, with ``budget_unit=episodes``, of finished episodes) with a request so far."""
        if self.config.budget_unit == "episodes":
            return self.asked_episodes / self.episodes if self.episodes else 0.0
        return self.asked_steps / self.steps if self.steps else 0.0

    def step(self, scores: Mapping[str, float], operator_done: bool = False, waiting: bool = False) -> HelpDecision:
        """The decision for this step from ``scores`` (any subset of the configured ones; others are ignored).

        ``operator_done``: the operator took over during the open request and has handed back; the request
        closes (after ``min_ask_steps``) even if the urgency is still high. ``waiting``: the robot holds for an
        answer; the request stays open whatever the urgency (it is answered, dismissed or ends with the episode).
        """
        cfg = self.config
        urgency, why = self._urgency(scores)
        started = False
        if not self._asking:
            gap_ok = self.requests == 0 or self._held >= cfg.min_gap_steps
            episode_ok = cfg.budget_unit == "steps" or not self._asked_this_episode
            warm = self.steps >= cfg.warmup_steps
            if math.isinf(urgency) or (gap_ok and episode_ok and warm and urgency > self.threshold):
                self._open(why)
                started = True
        elif math.isinf(urgency):
            self.reason = why  # still asking, now for the non-finite score
        elif not waiting and self._held >= cfg.min_ask_steps and (operator_done or urgency <= self.threshold):
            self._close()
        self._held += 1
        self.steps += 1
        self.asked_steps += self._asking
        if cfg.budget_unit == "steps" and not math.isinf(urgency):
            self.threshold += cfg.adapt_rate * (float(self._asking) - cfg.budget)
        for name, value in scores.items():
            if name in self.stats and math.isfinite(value):
                self.stats[name].add(float(value))
        return HelpDecision(self._asking, started, self.reason if self._asking else why, urgency, self.threshold)

    def dismiss(self) -> None:
        """Close the open request now (nobody answered it in time); the gap to the next one starts here."""
        if self._asking:
            self._close()

    def end_episode(self) -> None:
        """An episode ended: an open request closes; with ``budget_unit=episodes`` the threshold adapts."""
        cfg = self.config
        self.episodes += 1
        self.asked_episodes += self._asked_this_episode
        if cfg.budget_unit == "episodes":
            # Per episode, a larger step: one decision per episode instead of one per step.
            self.threshold += cfg.adapt_rate * cfg.min_ask_steps * (float(self._asked_this_episode) - cfg.budget)
        if self._asking:
            self._close()
        self._asked_this_episode = False

    def _urgency(self, scores: Mapping[str, float]) -> tuple[float, str]:
        best, why = -math.inf, ""
        for name in self.config.scores:
            if name not in scores:
                continue
            value = scores[name]
            if not math.isfinite(value):
                return math.inf, f"{name} score is {value} (a non-finite score asks: fail safe)"
            z = self.stats[name].standardise(float(value))
            if z > best:
                best, why = z, f"{name} {z:+.1f} sd (threshold {self.threshold:.1f})"
        return (best, why) if why else (0.0, "")

    def _open(self, why: str) -> None:
        self._asking, self._held, self.reason = True, 0, why
        self._asked_this_episode = True
        self.requests += 1
        self.switches += 1

    def _close(self) -> None:
        self._asking, self._held, self.reason = False, 0, ""
        self.switches += 1
