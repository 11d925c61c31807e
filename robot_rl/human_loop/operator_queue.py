"""One operator, several robots: the queue of help requests the operator serves one at a time.

Robots ask (:meth:`OperatorQueue.ask`) with the reason their help gate gave; the operator serves the most urgent
request first. Priority is the *kind* of reason before its size, risk first (the ThriftyDAgger ordering: a robot
that may break something before one that is merely unsure):

1. a non-finite score (the gate failed safe: something is wrong with the robot's data);
2. ``safety`` (near-violations), then ``risk`` (a low value), then ``progress`` (a stall);
3. ``novelty`` and ``classifier`` (the robot is unsure, nothing bad is known);

and within a kind the larger standardised urgency, then the older request. A robot whose request waits holds
(its own control loop does that); the others keep acting. The operator stays with the robot served until that
robot's request closes (the person handed back, or the episode ended); a takeover nobody asked for
(:meth:`claim`) takes the operator too when they are free, and is recorded either way.

The queue is plain Python with an injectable clock: the fleet supervisor (:mod:`robot_rl.human_loop.fleet`) feeds
it the robots' messages, and the tests drive it directly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

REASON_RANK = {"nonfinite": 0, "safety": 1, "risk": 2, "progress": 3, "novelty": 4, "classifier": 5}
"""Serving order of the reasons' kinds (lower first)."""


def reason_kind(reason: str) -> str:
    """The kind of a gate reason: ``risk +2.3 sd (threshold 2.0)`` → ``risk``; a non-finite score → ``nonfinite``."""
    if "non-finite" in reason:
        return "nonfinite"
    head = reason.split(" ", 1)[0]
    return head if head in REASON_RANK else "novelty"


@dataclass
class HelpRequest:
    """One robot's open request."""

    robot: str
    request_id: int
    reason: str
    urgency: float
    asked_at: float

    def priority(self) -> tuple[int, float, float]:
        """Sort key: smaller is served first."""
        urgency = self.urgency if math.isfinite(self.urgency) else math.inf
        return REASON_RANK[reason_kind(self.reason)], -urgency, self.asked_at


@dataclass
class Service:
    """A stretch of the operator's attention on one robot."""

    robot: str
    start: float
    end: float | None = None
    request_id: int | None = None
    """The request served (None: a takeover nobody asked for)."""
    reason: str = ""
    waited_s: float = 0.0
    """How long the request had waited when the operator came."""


@dataclass
class OperatorQueue:
    """The operator's queue (module docstring). Not thread-safe: one supervisor feeds it."""

    clock: Callable[[], float] = time.monotonic
    pending: dict[str, HelpRequest] = field(default_factory=dict)
    serving: Service | None = None
    history: list[Service] = field(default_factory=list)
    withdrawn: int = 0
    """Requests closed before the operator came (their robot timed out and took its fallback, or the episode
    ended)."""

    def ask(self, robot: str, request_id: int, reason: str, urgency: float) -> None:
        """``robot`` opens request ``request_id`` (a robot has at most one open request: a new one replaces it)."""
        self.pending[robot] = HelpRequest(robot, request_id, reason, urgency, self.clock())

    def done(self, robot: str, request_id: int) -> None:
        """``robot``'s request ``request_id`` closed: withdrawn if still waiting, or the operator is free again."""
        waiting = self.pending.get(robot)
        if waiting is not None and waiting.request_id == request_id:
            del self.pending[robot]
            self.withdrawn += 1
        s = self.serving
        if s is not None and s.robot == robot and s.request_id == request_id:
            self._release()

    def claim(self, robot: str) -> bool:
        """A person took ``robot`` over without the queue sending them (unasked, or before its turn came).

        The operator is now there if they were free (True); a request ``robot`` had waiting is served by it.
        """
        if self.serving is None:
            waiting = self.pending.pop(robot, None)
            now = self.clock()
            self._serve(Service(robot, now) if waiting is None else
                        Service(robot, now, request_id=waiting.request_id, reason=waiting.reason,
                                waited_s=now - waiting.asked_at))
            return True
        return self.serving.robot == robot

    def handed_back(self, robot: str) -> None:
        """The person let go of ``robot`` after an unasked takeover: the operator is free again."""
        s = self.serving
        if s is not None and s.robot == robot and s.request_id is None:
            self._release()

    def drop(self, robot: str) -> None:
        """``robot`` is gone (its process ended): its request is withdrawn and the operator freed."""
        if self.pending.pop(robot, None) is not None:
            self.withdrawn += 1
        if self.serving is not None and self.serving.robot == robot:
            self._release()

    def next(self) -> HelpRequest | None:
        """If the operator is free and someone waits, serve the most urgent request and return it."""
        if self.serving is not None or not self.pending:
            return None
        request = min(self.pending.values(), key=HelpRequest.priority)
        del self.pending[request.robot]
        now = self.clock()
        self._serve(Service(request.robot, now, request_id=request.request_id, reason=request.reason,
                            waited_s=now - request.asked_at))
        return request

    def order(self) -> list[str]:
        """The waiting robots, next served first."""
        return [r.robot for r in sorted(self.pending.values(), key=HelpRequest.priority)]

    def attention_s(self) -> float:
        """Seconds the operator has spent serving robots (the open stretch counted up to now)."""
        now = self.clock()
        return sum((s.end if s.end is not None else now) - s.start for s in self.history)

    def _serve(self, service: Service) -> None:
        self.serving = service
        self.history.append(service)

    def _release(self) -> None:
        assert self.serving is not None
        self.serving.end = self.clock()
        self.serving = None
