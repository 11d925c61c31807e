"""The robot asks for help: the deploy loop's side of the help gate (:mod:`robot_rl.human_loop.help_gate`).

Per control step the desk computes the gate's scores from what the actor has at hand:

- ``novelty``: the spread (standard deviation) of the critic ensemble's Q for the action the policy proposes;
- ``risk``: minus the ensemble's mean Q (a state the critics value low);
- ``safety``: the safety layer's events (clips, limits, change limits) over the last ``help.window`` steps;
- ``classifier``: the success classifier's uncertainty ``1 - |2p - 1|`` (with ``reward_source=classifier``);
- ``progress``: a process reward model's progress stalling over ``help.window`` steps (``help.prm``,
  :mod:`robot_rl.human_loop.help_progress`).

The critics come from the learner with the actor weights (``help.enabled`` makes the HIL learner publish them).

What happens then, the timeline an operator sees:

1. **ask**: the gate opens a request. The terminal bell rings (``help.bell``), the status line says
   ``ASKS FOR HELP`` and why, and the robot **holds** (a zero step through the safety layer every tick, so
   the watchdog keeps watching the loop).
2. **takeover**: the operator engages the teleop device; the request is answered, the human acts (those rows
   are flagged intervened, as always) until they hand back.
3. **timeout**: nobody engaged within ``help.wait_timeout_s``: ``help.fallback`` decides: ``continue`` (the
   policy acts again), ``reset`` (the episode ends as a failure) or ``skip`` (the episode ends, marked skipped).

A takeover without a request is still possible at any time; it is counted apart (``unasked``): those are the
states where the gate should have asked and did not. Every step's scores, urgency, threshold, whether the robot
asked and whether a human acted go to ``help_scores.jsonl`` in the run directory, so the gate can be checked
against where interventions were really needed.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np
import torch

from robot_rl.core.algorithm import BuildsValueEstimator, Policy, ValueEstimator, Weights
from robot_rl.core.specs import EnvSpec
from robot_rl.human_loop.help_gate import HelpDecision, HelpGate, HelpGateConfig

log = logging.getLogger(__name__)


class OperatorLink(Protocol):
    """The way to an operator shared by several robots (:mod:`robot_rl.human_loop.fleet`): requests queue there."""

    def ask(self, request_id: int, reason: str, urgency: float) -> None:
        """Queue request ``request_id`` (the robot holds meanwhile)."""

    def done(self, request_id: int) -> None:
        """Request ``request_id`` closed (answered and handed back, timed out, or the episode ended)."""

    def granted(self, request_id: int) -> bool:
        """The operator has turned to request ``request_id`` (never blocks)."""

    def takeover(self, acting: bool) -> None:
        """A person took this robot over unasked (``True``) or handed it back (``False``)."""


@dataclass
class HelpCounts:
    """What the desk did over the run (and in the current episode: ``episode_*``)."""

    requests: int = 0
    answered: int = 0
    timeouts: int = 0
    unasked_takeovers: int = 0
    attention_steps: int = 0
    """Steps under an open request or with the person acting: the operator's attention."""
    wait_s: float = 0.0
    """Seconds the robot held waiting for the operator."""


def _value_estimator(algo: Any, spec: EnvSpec, policy: Policy) -> ValueEstimator | None:
    """The algorithm's critics for ``policy``, or None (then no ``novelty`` and ``risk`` scores)."""
    estimator = algo.build_value_estimator(spec, policy) if isinstance(algo, BuildsValueEstimator) else None
    if estimator is None:
        log.info("help: no critics at the actor for a %s under %s; novelty and risk are not scored",
                 type(policy).__name__, type(algo).__name__)
    return estimator


class HelpDesk:
    """One deploy actor's help requests: scores, the gate, the hold while waiting, the fallback, the log."""

    def __init__(self, config: HelpGateConfig, spec: EnvSpec, algo: Any, policy: Policy,
                 score_log: Path | None = None, bell: IO[str] | None = None, robot: str = "robot",
                 link: OperatorLink | None = None, observed: dict[str, tuple[int, ...]] | None = None) -> None:
        self.config = config
        self.progress = None
        if config.prm and "progress" in config.scores:
            from robot_rl.human_loop.help_progress import ProgressStall

            self.progress = ProgressStall(config.prm, config.goal, config.window)
            if observed is not None:
                self.progress.check(observed)
        self.link = link
        """Several robots share the operator: requests queue there, and only a granted one calls the person."""
        self._request_id = 0
        self._open_request: int | None = None
        self.gate = HelpGate(config)
        self.robot = robot
        self.estimator = _value_estimator(algo, spec, policy)
        self.critic_version = -1
        self._told_no_critics = False
        self.counts = HelpCounts()
        self._at_episode_start = (0, 0, 0, 0)
        self._events: deque[int] = deque(maxlen=config.window)
        self._waiting_since: float | None = None
        self._human_was = False
        self._unasked = False
        self._answered = False
        self.status = ""
        """For the status line while a request is open (empty otherwise)."""
        # In a fleet the supervisor rings, once for the robot the operator turns to.
        self._bell = None if link is not None else bell if bell is not None else (
            sys.stderr if sys.stderr.isatty() else None)
        self._log: IO[str] | None = None
        if score_log is not None:
            score_log.parent.mkdir(parents=True, exist_ok=True)
            self._log = score_log.open("a")

    # ---- weights ------------------------------------------------------------------------------

    def load_critic(self, weights: Weights, version: int) -> None:
        """The critics published with actor weights ``version`` (ignored without an estimator)."""
        if self.estimator is None:
            return
        if not weights:
            if not self._told_no_critics:
                self._told_no_critics = True
                log.warning("help: the learner sends no critics with weights v%d, so novelty and risk are not "
                            "scored: start the learner with help.enabled=true too", version)
            return
        try:
            self.estimator.load_critic_weights(weights)
        except (RuntimeError, KeyError, ValueError) as e:
            log.warning("help: critic weights v%d do not load (%s); novelty and risk stay at v%d", version, e,
                        self.critic_version)
            return
        self.critic_version = version

    # ---- per step -----------------------------------------------------------------------------

    def scores(self, policy: Policy, seen: dict[str, np.ndarray], action: np.ndarray, safety_events: int,
               success_p: float | None = None, obs: dict[str, np.ndarray] | None = None) -> dict[str, float]:
        """The step's scores (the critics' only once their weights arrived).

        ``obs``: everything the robot observed (the process reward model reads cameras the policy may not see;
        default ``seen``).
        """
        self._events.append(int(safety_events))
        out: dict[str, float] = {"safety": float(sum(self._events))}
        if self.progress is not None:
            stall = self.progress.score(obs if obs is not None else seen)
            if stall is not None:
                out["progress"] = stall
        if self.estimator is not None and self.critic_version >= 0:
            batch = {k: torch.as_tensor(v).unsqueeze(0) for k, v in seen.items()}
            q = self.estimator.q_values(policy, batch, torch.as_tensor(action, dtype=torch.float32).unsqueeze(0))
            q = q[:, 0].double()
            out["novelty"] = float(q.std()) if q.numel() > 1 else 0.0
            out["risk"] = -float(q.mean())
        if success_p is not None:
            out["classifier"] = 1.0 - abs(2.0 * float(success_p) - 1.0)
        return out

    def step(self, scores: dict[str, float], human: bool, episode: int, step: int) -> str:
        """What the loop does this tick, given the scores and whether a human acts.

        ``act`` (policy or human as usual), ``hold`` (waiting for the operator), or the fallback after an
        unanswered request: ``continue`` (act), ``reset`` or ``skip`` (end the episode).
        """
        handed_back = self._human_was and not human
        started_human = human and not self._human_was
        self._human_was = human
        if started_human and not self.gate.asking:
            self.counts.unasked_takeovers += 1
            self._write_event("unasked_takeover", episode, step, "")
            self._unasked = True
            if self.link is not None:
                self.link.takeover(True)
        elif handed_back and self._unasked:
            self._unasked = False
            if self.link is not None:
                self.link.takeover(False)
        # Open while the robot waits for an answer and while the person acts: it closes once they hand back.
        keep_open = human or (self._waiting_since is not None and not self._answered)
        decision = self.gate.step(scores, operator_done=handed_back and self._answered, waiting=keep_open)
        self._log_step(decision, scores, human, episode, step)
        if decision.started:
            self._open(decision, episode, step)
        # The operator's attention: asked for, or acting (an unasked takeover needs them as much).
        self.counts.attention_steps += int(decision.ask or human)
        if not decision.ask:
            self._close()
            return "act"
        if human and not self._answered:
            if self.link is not None and not self.operator_called:  # they came before the queue sent them
                self.link.takeover(True)
            self._answered = True
            self.counts.answered += 1
            self._stop_waiting()
            self._write_event("answered", episode, step, decision.reason)
        if self._answered or self._waiting_since is None:
            return "act"
        waited = time.monotonic() - self._waiting_since
        queued = "" if self.operator_called else "queued for the operator, "
        self.status = f"ASKS FOR HELP: {decision.reason} ({queued}{waited:.0f}s/{self.config.wait_timeout_s:.0f}s)"
        if waited < self.config.wait_timeout_s:
            return "hold"
        self.counts.timeouts += 1
        self._write_event("timeout", episode, step, decision.reason)
        log.warning("help: %s asked %.1fs ago and nobody took over (%s); fallback: %s", self.robot, waited,
                    decision.reason, self.config.fallback)
        self.gate.dismiss()
        self._close()
        return self.config.fallback

    def end_episode(self) -> dict[str, int]:
        """The episode ended: an open request closes. Returns the episode's counts (EpisodeRecord's help fields)."""
        self.gate.end_episode()
        if self.progress is not None:
            self.progress.reset()
        self._close()
        if self._unasked and self.link is not None:
            self.link.takeover(False)
        self._human_was = self._unasked = False
        if self._log is not None:
            self._log.flush()
        now = (self.counts.requests, self.counts.timeouts, self.counts.unasked_takeovers, self.counts.attention_steps)
        diff = [a - b for a, b in zip(now, self._at_episode_start)]
        self._at_episode_start = now
        return dict(zip(("help_requests", "help_timeouts", "unasked_takeovers", "attention_steps"), diff))

    def close(self) -> None:
        """Close the score log."""
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def operator_called(self) -> bool:
        """A request is open and the operator is called to it (at once alone; in a fleet, once granted)."""
        if not self.gate.asking:
            return False
        return self.link is None or (self._open_request is not None and self.link.granted(self._open_request))

    # ---- internals ----------------------------------------------------------------------------

    def _open(self, decision: HelpDecision, episode: int, step: int) -> None:
        self.counts.requests += 1
        self._request_id += 1
        self._open_request = self._request_id
        if self.link is not None:
            self.link.ask(self._request_id, decision.reason, decision.urgency)
        self._answered = False
        self._waiting_since = time.monotonic()
        self.status = f"ASKS FOR HELP: {decision.reason}"
        log.warning("help: %s asks for help (episode %d step %d): %s", self.robot, episode, step, decision.reason)
        self._write_event("ask", episode, step, decision.reason)
        if self.config.bell and self._bell is not None:
            self._bell.write("\a")
            self._bell.flush()

    def _stop_waiting(self) -> None:
        if self._waiting_since is not None:
            self.counts.wait_s += time.monotonic() - self._waiting_since
        self._waiting_since = None
        self.status = ""

    def _close(self) -> None:
        self._stop_waiting()
        self._answered = False
        if self._open_request is not None:
            if self.link is not None:
                self.link.done(self._open_request)
            self._open_request = None

    def _write_event(self, kind: str, episode: int, step: int, reason: str) -> None:
        if self._log is not None:
            self._log.write(json.dumps({"event": kind, "robot": self.robot, "episode": episode, "step": step,
                                        "reason": reason, "time": time.time()}) + "\n")

    def _log_step(self, d: HelpDecision, scores: dict[str, float], human: bool, episode: int, step: int) -> None:
        if self._log is not None:
            finite = {k: (v if np.isfinite(v) else str(v)) for k, v in scores.items()}
            self._log.write(json.dumps({"episode": episode, "step": step, "scores": finite,
                                        "urgency": d.urgency if np.isfinite(d.urgency) else str(d.urgency),
                                        "threshold": d.threshold, "ask": d.ask, "human": human}) + "\n")
