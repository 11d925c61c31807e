"""The fleet's supervisor: one operator's queue fed by every robot's process (`robot-rl deploy --fleet`).

It reads the robots' messages (:class:`~robot_rl.human_loop.fleet.PipeLink`), keeps the
:class:`~robot_rl.human_loop.operator_queue.OperatorQueue`, sends the operator to the most urgent request, and
tells the person which robot and why: a line on the terminal and a bell each time the operator is sent. It never
waits on a robot: a robot that asks holds in its own loop, the others keep acting, and a robot whose process
ends has its request withdrawn. Every queue event goes to ``fleet_operator.jsonl`` with its time.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import IO, Any

from robot_rl.human_loop.operator_queue import OperatorQueue


class FleetSupervisor:
    """Serves the robots' help requests with one operator; collects their episodes and final reports."""

    def __init__(self, conns: dict[str, Connection], out: IO[str] | None = None, bell: bool = True,
                 event_log: Path | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.conns = dict(conns)
        """The robots still connected, by name."""
        self.queue = OperatorQueue(clock)
        self.clock = clock
        self.t0 = clock()
        self.out = out if out is not None else sys.stdout
        self.bell = bell and self.out.isatty()
        self.episodes: dict[str, list[dict[str, Any]]] = {name: [] for name in conns}
        self.reports: dict[str, dict[str, Any]] = {}
        self.errors: dict[str, str] = {}
        self._log: IO[str] | None = None
        if event_log is not None:
            event_log.parent.mkdir(parents=True, exist_ok=True)
            self._log = event_log.open("a")

    # ---- the loop -------------------------------------------------------------------------------

    def poll(self, timeout_s: float) -> None:
        """Handle every message that arrives within ``timeout_s``, then send the operator where needed."""
        by_conn = {id(c): (name, c) for name, c in self.conns.items()}
        for ready in wait(list(self.conns.values()), timeout_s):
            name, conn = by_conn[id(ready)]
            try:
                while conn.poll(0):
                    self.handle(name, conn.recv())
            except (EOFError, OSError):
                self._gone(name)
        self.serve_next()

    def run(self, until: Callable[[], bool] = lambda: False, poll_s: float = 0.1) -> None:
        """Serve until every robot has disconnected (or ``until()`` is true)."""
        while self.conns and not until():
            self.poll(poll_s)

    def handle(self, name: str, message: tuple[Any, ...]) -> None:
        """One message from robot ``name``."""
        kind = message[0]
        if kind == "ask":
            _, request_id, reason, urgency = message
            self.queue.ask(name, request_id, reason, urgency)
            waiting = ", ".join(self.queue.order())
            self._event(name, "ask", reason, f"{name} asks for help: {reason}; waiting: {waiting}")
        elif kind == "done":
            served = self.queue.serving
            self.queue.done(name, message[1])
            if served is not None and self.queue.serving is None:
                self._event(name, "released", served.reason, f"operator done with {name} ({_length(served):.1f}s)",
                            served_s=_length(served))
        elif kind == "claim":
            got = self.queue.claim(name)
            busy = "" if got else f" (the operator was with {self.queue.serving.robot if self.queue.serving else '?'})"
            self._event(name, "claim", "", f"a person took {name} over without being asked{busy}")
        elif kind == "handback":
            served = self.queue.serving
            self.queue.handed_back(name)
            if served is not None and self.queue.serving is None:
                self._event(name, "released", "", f"operator handed {name} back", served_s=_length(served))
        elif kind == "episode":
            self.episodes.setdefault(name, []).append(message[1])
        elif kind == "report":
            self.reports[name] = message[1]
        elif kind == "error":
            self.errors[name] = message[1]
            self._event(name, "error", message[1], f"{name} stopped: {message[1]}")

    def serve_next(self) -> None:
        """Send the free operator to the most urgent waiting request."""
        request = self.queue.next()
        if request is None:
            return
        try:
            self.conns[request.robot].send(("grant", request.request_id))
        except (KeyError, BrokenPipeError, OSError):
            self._gone(request.robot)
            return
        waited = self.clock() - request.asked_at
        self._event(request.robot, "serve", request.reason,
                    f"OPERATOR -> {request.robot}: {request.reason} (waited {waited:.1f}s)", waited_s=waited)
        if self.bell:
            self.out.write("\a")

    # ---- results --------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """The fleet's totals: episodes, successes, the operator's attention, per robot and together."""
        robots = {}
        for name, eps in self.episodes.items():
            robots[name] = {"episodes": len(eps), "successes": sum(bool(e["success"]) for e in eps),
                            "steps": sum(int(e["steps"]) for e in eps),
                            "requests": sum(int(e.get("help_requests", 0)) for e in eps),
                            "timeouts": sum(int(e.get("help_timeouts", 0)) for e in eps),
                            "attention_steps": sum(int(e.get("attention_steps", 0)) for e in eps)}
        attention_min = self.queue.attention_s() / 60.0
        successes = sum(r["successes"] for r in robots.values())
        served = [s for s in self.queue.history if s.request_id is not None]
        return {"robots": robots, "episodes": sum(r["episodes"] for r in robots.values()), "successes": successes,
                "wall_s": self.clock() - self.t0, "attention_min": attention_min,
                "successes_per_attention_min": successes / attention_min if attention_min > 0 else None,
                "requests_served": len(served), "requests_withdrawn": self.queue.withdrawn,
                "unasked_takeovers": sum(s.request_id is None for s in self.queue.history),
                "longest_wait_s": max((s.waited_s for s in served), default=0.0), "errors": dict(self.errors)}

    def close(self) -> None:
        """Close the event log."""
        if self._log is not None:
            self._log.close()
            self._log = None

    # ---- internals ------------------------------------------------------------------------------

    def _gone(self, name: str) -> None:
        self.conns.pop(name, None)
        self.queue.drop(name)

    def _event(self, robot: str, kind: str, reason: str, text: str, **extra: float) -> None:
        t = self.clock() - self.t0
        self.out.write(f"[fleet {int(t // 60):02d}:{t % 60:04.1f}] {text}\n")
        self.out.flush()
        if self._log is not None:
            self._log.write(json.dumps({"t": round(t, 3), "robot": robot, "event": kind, "reason": reason,
                                        **extra}) + "\n")
            self._log.flush()


def _length(service: Any) -> float:
    return (service.end or service.start) - service.start
