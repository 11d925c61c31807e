"""`robot-rl launch --backend local`: the learner and N actors as subprocesses of this one, supervised.

An actor that dies (a crash, ``kill -9``) is started again with the same id, up to ``max_restarts`` times each;
the learner drops any chunk it already stored, so a restart neither loses acknowledged data nor stores a row
twice. When the learner exits, the actors get SIGTERM (they drain and say goodbye) and SIGKILL after the
grace time. SIGINT/SIGTERM to the launcher is passed on the same way: the learner checkpoints, the actors drain.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from robot_rl.launch import processes
from robot_rl.launch.plan import LaunchPlan, parse_listening
from robot_rl.loop.stop_signals import StopRequest

log = logging.getLogger(__name__)


@dataclass
class ActorSlot:
    """One actor id: its current process, its log file and how often it was started again."""

    actor_id: int
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    exits: list[int] = field(default_factory=list)
    next_start: float = 0.0
    given_up: bool = False


@dataclass
class LaunchResult:
    """How a launch ended."""

    learner_returncode: int
    run_dir: Path | None
    restarts: dict[int, int]
    actor_exits: dict[int, list[int]]


class LearnerOutput:
    """Relays the learner's stdout line by line and catches its "listening" line (address, run directory)."""

    def __init__(self, stream: IO[bytes], sink: IO[str]) -> None:
        self.address: str | None = None
        self.run_dir: Path | None = None
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._relay, args=(stream, sink), daemon=True)
        self._thread.start()

    def _relay(self, stream: IO[bytes], sink: IO[str]) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            found = parse_listening(line)
            if found is not None and not self.ready.is_set():
                self.address, self.run_dir = found
                self.ready.set()
            sink.write(line)
            sink.flush()

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the learner's output to end."""
        self._thread.join(timeout_s)


class LocalLauncher:
    """Start, watch and stop one learner and ``plan.actors`` actor processes on this machine."""

    def __init__(self, plan: LaunchPlan, bind: str = "tcp://127.0.0.1:*", max_restarts: int = 5,
                 restart_backoff_s: float = 1.0, grace_s: float = 30.0, start_timeout_s: float = 120.0,
                 resume: Path | None = None) -> None:
        self.plan, self.bind, self.resume = plan, bind, resume
        self.max_restarts, self.restart_backoff_s = max_restarts, restart_backoff_s
        self.grace_s, self.start_timeout_s = grace_s, start_timeout_s
        self.slots = [ActorSlot(i) for i in range(plan.actors)]
        self.learner: subprocess.Popen[bytes] | None = None
        self.output: LearnerOutput | None = None

    def run(self, stop: StopRequest | None = None) -> LaunchResult:
        """Run until the learner exits (or a stop is asked for); the actors are stopped after it."""
        stop = stop or StopRequest()
        with stop.installed():
            try:
                self._start_learner(stop)
                self._supervise(stop)
            finally:
                self._stop_all()
        assert self.learner is not None
        return LaunchResult(self.learner.returncode, self.output.run_dir if self.output else None,
                            {s.actor_id: s.restarts for s in self.slots},
                            {s.actor_id: s.exits for s in self.slots})

    def _start_learner(self, stop: StopRequest) -> None:
        self.learner = processes.start(self.plan.learner_argv(self.bind, self.resume), subprocess.PIPE)
        assert self.learner.stdout is not None
        self.output = LearnerOutput(self.learner.stdout, sys.stdout)
        deadline = time.monotonic() + self.start_timeout_s
        while not self.output.ready.wait(0.2):
            if self.learner.poll() is not None:
                raise RuntimeError(f"the learner exited with code {self.learner.returncode} before it listened; "
                                   "its output above says why")
            if stop.is_set():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the learner did not listen within {self.start_timeout_s:.0f}s")
        log.info("learner at %s; starting %d actors", self.output.address, len(self.slots))
        for slot in self.slots:
            self._start_actor(slot)

    def _start_actor(self, slot: ActorSlot) -> None:
        assert self.output is not None and self.output.address is not None and self.output.run_dir is not None
        slot.process = processes.start_logged(self.plan.actor_argv(slot.actor_id, self.output.address),
                                              self.output.run_dir / "launch" / f"actor-{slot.actor_id}.log")

    def _supervise(self, stop: StopRequest) -> None:
        assert self.learner is not None
        while self.learner.poll() is None and not stop.is_set():
            now = time.monotonic()
            for slot in self.slots:
                self._watch(slot, now)
            stop.sleep(0.2)

    def _watch(self, slot: ActorSlot, now: float) -> None:
        p = slot.process
        if p is None:
            if not slot.given_up and now >= slot.next_start:
                slot.restarts += 1
                log.warning("restarting actor %d (restart %d of %d)", slot.actor_id, slot.restarts,
                            self.max_restarts)
                print(f"launch: restarting actor {slot.actor_id} ({slot.restarts}/{self.max_restarts})", flush=True)
                self._start_actor(slot)
            return
        code = p.poll()
        if code is None:
            return
        slot.exits.append(code)
        slot.process = None
        if code == 0:
            slot.given_up = True  # it chose to stop (its step budget); not a failure to repair
            return
        print(f"launch: actor {slot.actor_id} exited with code {code}", flush=True)
        if slot.restarts >= self.max_restarts:
            slot.given_up = True
            print(f"launch: actor {slot.actor_id} gave up after {slot.restarts} restarts; see "
                  f"launch/actor-{slot.actor_id}.log in the run directory", flush=True)
        else:
            slot.next_start = now + self.restart_backoff_s * (2 ** slot.restarts)

    def _stop_all(self) -> None:
        """SIGTERM to the learner (it checkpoints) and the actors (they drain); SIGKILL after the grace time."""
        procs = [s.process for s in self.slots if s.process is not None]
        processes.stop(([self.learner] if self.learner is not None else []) + procs, self.grace_s)
        for s in self.slots:
            if s.process is not None:
                s.exits.append(s.process.returncode)
        if self.output is not None:
            self.output.join(5.0)
