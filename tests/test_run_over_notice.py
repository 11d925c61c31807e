"""The learner's "run over" notice: actor processes stop when the run finishes, not after a grace time.

An actor outlives a learner that only stops (Ctrl-C, SIGTERM, a crash) and resends to the resumed one; a learner
that finished its run (budget, threshold) says so, and its actors end at once, connected or connecting later.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transport_helpers import drain, tagged_batch
from waiting import wait_until

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transport import FinishingEndpoint, VersionedWeights
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqLearnerEndpoint, ZmqSettings

# Learners and actors over ZeroMQ, and as processes (docs/testing.md's tiers).
pytestmark = pytest.mark.integration

SPEC = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((2,), low=-1.0, high=1.0))
FAST = ZmqSettings(heartbeat_s=0.1, resend_after_s=0.3)
EXE = str(Path(sys.executable).with_name("robot-rl"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(60)
def test_finish_reaches_connected_and_late_actors_and_ends_their_waits() -> None:
    addr = f"tcp://127.0.0.1:{_free_port()}"
    learner = ZmqLearnerEndpoint(addr, SPEC, FAST)
    early = ZmqActorEndpoint(addr, 1, SPEC, FAST)
    late = None
    try:
        assert isinstance(learner, FinishingEndpoint)
        assert early.connected.wait(10)
        assert early.send(tagged_batch(1.0, 4), timeout_s=1.0)
        assert len(drain(learner, 1)) == 1
        learner.publish_weights(VersionedWeights(1, {"w": torch.ones(3)}))
        assert early.wait_weights(0, timeout_s=10) is not None
        assert early.learner_finished is None  # running: nothing said yet
        learner.finish("budget")
        t0 = time.monotonic()
        assert early.wait_weights(1, timeout_s=20) is None  # no v2 ever comes: the wait ends on the notice
        assert time.monotonic() - t0 < 5 and early.learner_finished == "budget"
        late = ZmqActorEndpoint(addr, 2, SPEC, FAST)  # connects after the end: told at its hello
        wait_until(lambda: late.learner_finished == "budget", 10, "the late actor to hear the run is over")
        assert not late.connected.is_set()
    finally:
        for a in (early, late):
            if a is not None:
                a.close()
        learner.close()


def test_an_actor_without_a_finish_keeps_waiting_for_a_resumed_learner() -> None:
    addr = f"tcp://127.0.0.1:{_free_port()}"
    learner = ZmqLearnerEndpoint(addr, SPEC, FAST)
    actor = ZmqActorEndpoint(addr, 1, SPEC, FAST)
    try:
        assert actor.connected.wait(10)
        learner.close()  # stopped, not finished (Ctrl-C, SIGTERM): the actor holds its chunks for the next learner
        assert actor.send(tagged_batch(2.0, 4), timeout_s=1.0)
        time.sleep(1.0)
        assert actor.learner_finished is None and actor.unacked() == 1
    finally:
        actor.close()


@pytest.mark.timeout(120)
def test_actor_processes_end_with_the_learners_budget(tmp_path: Path) -> None:
    learner = subprocess.Popen([EXE, "learner", "--bind", "tcp://127.0.0.1:*", "--task", "reach", "run.progress=false",
                                "loop.remote_actors=1", "loop.total_env_steps=1000", "loop.eval_episodes=4",
                                "loop.eval_num_envs=4", "loop.eval_every_env_steps=100000",
                                "algo.learning_starts=1000000"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    actor = None
    try:
        assert learner.stdout is not None
        address = None
        for line in learner.stdout:
            if m := re.search(r"learner listening on (\S+)", line):
                address = m.group(1)
                break
        assert address, "the learner never said where it listens"
        actor = subprocess.Popen([EXE, "actor", "--connect", address, "--task", "reach", "loop.actor_hz=20"],
                                 cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        rest, _ = learner.communicate(timeout=90)
        assert learner.returncode == 0 and "stopped (budget)" in rest, rest
        t_end = time.monotonic()
        out, _ = actor.communicate(timeout=30)
        # Without the notice the actor would wait its drain (loop.max_wait_s, 60 s) for a learner that is gone.
        assert time.monotonic() - t_end < 10, out
        assert actor.returncode == 0 and "the learner finished its run (budget)" in out, out
    finally:
        for p in (learner, actor):
            if p is not None and p.poll() is None:
                p.kill()
