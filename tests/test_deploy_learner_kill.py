"""`robot-rl deploy --mode learn` on sim_so101 with a scripted intervener, and a kill -9 of the learner mid-run.

Real processes as a user starts them (no terminal): the learner, the actor driving the simulated SO-101 with the
scripted person taking over when the policy stalls, then SIGKILL to the learner's process group while the actor
keeps acting, and the learner started again with ``--resume``. The actor's episode log is the ground truth: the
resumed learner must end with exactly as many transitions, and as many of them flagged intervened, as the actor's
episodes had steps and intervened steps.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mujoco")  # the simulated SO-101
pytest.importorskip("mink")  # its driver's IK
pytest.importorskip("msgpack")

pytestmark = [pytest.mark.sim, pytest.mark.timeout(420), pytest.mark.slow]

CLI = str(Path(sys.executable).with_name("robot-rl"))
EPISODES = 6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, cwd=log.parent, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for(what: str, check, timeout: float, procs: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        dead = [p for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            tails = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in logs)
            pytest.fail(f"waiting for {what}: {'a process exited' if dead else 'timed out'}\n{tails}")
        time.sleep(0.2)


def test_a_learner_killed_mid_run_resumes_and_the_actor_loses_no_step(tmp_path: Path) -> None:
    address = f"tcp://127.0.0.1:{_free_port()}"
    # Twice real time (control rate and speed limits scaled with it); the cube's position in the state, no cameras.
    common = ["--max-episode-steps", "30", "--no-status", "robot.type=sim_so101", "robot.cameras={}",
              "robot.object_in_state=true", "robot.time_scale=2", "safety.control_hz=20", "safety.max_linear_speed=0.5",
              f"transport.address={address}", "algo.batch_size=32", "algo.learning_starts=64"]
    run, episodes_log = tmp_path / "run", tmp_path / "episodes.jsonl"
    learner_log, actor_log, resumed_log = tmp_path / "learner.log", tmp_path / "actor.log", tmp_path / "resumed.log"
    learner = _start([CLI, "deploy", "--role", "learner", "--run-dir", str(run), *common], learner_log)
    procs, logs = [learner], [learner_log]
    try:
        _wait_for("the learner to listen", lambda: "listening on" in learner_log.read_text(), 60, procs, logs)
        actor = _start([CLI, "deploy", "--mode", "learn", "--teleop", "pick_intervener", "--episodes", str(EPISODES),
                        "--episode-log", str(episodes_log), *common], actor_log)
        procs, logs = [learner, actor], [learner_log, actor_log]
        _wait_for("two finished episodes", lambda: episodes_log.exists() and
                  len(episodes_log.read_text().splitlines()) >= 2, 180, procs, logs)
        os.killpg(learner.pid, signal.SIGKILL)  # kill -9: no checkpoint, nothing flushed on the way out
        assert learner.wait(timeout=10) == -signal.SIGKILL
        done_at_kill = len(episodes_log.read_text().splitlines())
        time.sleep(1.0)  # the actor keeps acting without a learner
        resumed = _start([CLI, "deploy", "--role", "learner", "--run-dir", str(run), "--resume", *common], resumed_log)
        procs, logs = [resumed, actor], [resumed_log, actor_log]
        assert actor.wait(timeout=240) == 0, actor_log.read_text(errors="replace")[-3000:]
        actor_out = actor_log.read_text(errors="replace")
        assert "LOST" not in actor_out, actor_out[-3000:]
        os.killpg(resumed.pid, signal.SIGINT)  # Ctrl-C
        assert resumed.wait(timeout=60) == 0, resumed_log.read_text(errors="replace")[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    episodes = [json.loads(line) for line in episodes_log.read_text().splitlines()]
    assert len(episodes) == EPISODES and done_at_kill < EPISODES  # the kill fell inside the run
    steps = sum(e["steps"] for e in episodes)
    intervened = sum(e["intervened_steps"] for e in episodes)
    assert 0 < intervened < steps  # the scripted person took over some of the time, not all of it
    out = resumed_log.read_text(errors="replace")
    stopped = re.search(r"stopped after (\d+) transitions \((\d+) intervened\)", out)
    assert stopped is not None, out[-3000:]
    assert (int(stopped.group(1)), int(stopped.group(2))) == (steps, intervened), out[-3000:]
