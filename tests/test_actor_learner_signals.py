"""Stopping as engines stop processes: SIGTERM/SIGINT drain an actor's outbox, checkpoint a learner, real processes.

Ray, SLURM and Kubernetes stop a process with SIGTERM and SIGKILL it after a grace period; a person presses
Ctrl-C. These tests send real signals to real `robot-rl` processes and count what reached the learner.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from robot_rl.loop.stop_signals import StopRequest

# The learner stores and never updates (learning_starts beyond the run), so it keeps up with the actors and a
# drain has nothing to wait for but the transport; evaluations are tiny.
_FAST_LEARNER = ["--task", "reach", "run.progress=false", "algo.learning_starts=10000000", "loop.eval_episodes=2",
                 "loop.eval_num_envs=2", "loop.eval_every_env_steps=100000000", "loop.success_threshold=null",
                 "task.num_envs=4", "loop.actor_hz=100"]


def test_first_signal_asks_second_interrupts() -> None:
    stop = StopRequest()
    seen: list[float] = []
    stop.when_requested(lambda: seen.append(stop.deadline(5.0)))
    with stop.installed():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert stop.is_set() and stop.signal_name == "SIGTERM" and len(seen) == 1
        assert seen[0] == pytest.approx(stop.requested_at + 5.0)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)
    assert signal.getsignal(signal.SIGTERM) is not None  # the previous handlers are back


@pytest.mark.integration
def test_wait_for_returns_on_stop() -> None:
    stop = StopRequest()
    threading.Timer(0.2, stop.set).start()
    t0 = time.monotonic()
    assert stop.wait_for(lambda s: time.sleep(s), timeout_s=10.0) is None
    assert time.monotonic() - t0 < 2.0


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Every process a test starts; killed at the end whatever happened (a failed test leaves nothing running)."""
    started: list[Proc] = []
    yield started
    for proc in started:
        if proc.p.poll() is None:
            proc.p.kill()
            proc.p.wait(10)


class Proc:
    """A `robot-rl` verb in its own process, its output collected by a thread (read without a terminal)."""

    def __init__(self, args: list[str], cwd: Path, started: list[Proc]) -> None:
        started.append(self)
        self.p = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.append(line)

    def wait_line(self, pattern: str, timeout_s: float = 60.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if (m := re.search(pattern, line)) is not None:
                    return m
            if self.p.poll() is not None and not any(re.search(pattern, ln) for ln in self.lines):
                break
            time.sleep(0.1)
        raise AssertionError(f"no line matching {pattern!r}; output:\n{''.join(self.lines)}")

    def stop(self, sig: int, timeout_s: float = 40.0) -> int:
        self.p.send_signal(sig)
        return self.p.wait(timeout_s)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def _env_steps(line_match: re.Match[str]) -> int:
    return int(line_match.group(1).replace(",", ""))


@pytest.mark.slow
def test_signals_drain_actors_and_checkpoint_the_learner(tmp_path: Path, procs: list[Proc]) -> None:
    learner = Proc(["learner", "--bind", "tcp://127.0.0.1:*", "--name", "sig", *_FAST_LEARNER], tmp_path, procs)
    address = learner.wait_line(r"learner listening on (\S+)").group(1)
    sent = 0
    stops = ((0, signal.SIGTERM), (1, signal.SIGINT))
    actors = [Proc(["actor", "--actor-id", str(i), "--connect", address, *_FAST_LEARNER], tmp_path, procs)
              for i, _ in stops]
    for actor_id, _ in stops:
        learner.wait_line(rf"actor {actor_id} connected")
    time.sleep(2.0)  # chunks in flight when the signals land
    for (actor_id, sig), actor in zip(stops, actors, strict=True):
        assert actor.stop(sig) == 0, actor.text
        m = actor.wait_line(rf"actor {actor_id}: ([\d,]+) env steps, (\d+)/(\d+) chunks acknowledged, 0 unacknowledged"
                            rf".*; stopped by {signal.Signals(sig).name}")
        assert m.group(2) == m.group(3) and int(m.group(3)) > 0
        sent += _env_steps(m)
    assert learner.stop(signal.SIGTERM) == 0, learner.text
    stored = _env_steps(learner.wait_line(r"stopped \(interrupted\) after ([\d,]+) env steps"))
    assert stored == sent  # every transition either actor produced reached the learner, none twice
    run_dir = tmp_path / "runs" / "sig"
    assert list(run_dir.glob("checkpoints/*")) or list(run_dir.glob("*.pt")), "SIGTERM wrote no checkpoint"

    resumed = Proc(["learner", "--bind", "tcp://127.0.0.1:*", "--resume", str(run_dir), "run.progress=false"],
                   tmp_path, procs)
    resumed.wait_line(r"learner listening on")
    assert resumed.stop(signal.SIGTERM) == 0, resumed.text
    assert _env_steps(resumed.wait_line(r"stopped \(interrupted\) after ([\d,]+) env steps")) == stored
