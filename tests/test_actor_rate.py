"""`robot-rl actor` with ``loop.actor_hz`` is paced by the one rate loop (``hardware.rate.RateLoop``)."""

from __future__ import annotations

import logging
import re
import socket
import threading

import pytest

from robot_rl.core.transport import VersionedWeights
from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.remote_actor import run_actor
from robot_rl.transport.zmq_transport import ZmqLearnerEndpoint, ZmqSettings

# A ZeroMQ learner and actor on 127.0.0.1 (docs/testing.md's tiers).
pytestmark = pytest.mark.integration


def _free_addr() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.timeout(90)
def test_actor_hz_paces_the_remote_actor_and_reports_its_period(caplog: pytest.LogCaptureFixture) -> None:
    addr = _free_addr()
    cfg = resolve_train_config("reach", "sac", overrides=[
        "transport.type=zmq", f"transport.address={addr}", "transport.heartbeat_s=0.1", "task.num_envs=4",
        "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]", "loop.actor_hz=50", "loop.max_wait_s=30"])
    env = cfg.make_env("cpu", 0)
    spec = env.spec
    env.close()
    learner = ZmqLearnerEndpoint(addr, spec, ZmqSettings(heartbeat_s=0.1, resend_after_s=0.5))
    learner.publish_weights(VersionedWeights(1, cfg.algo.build(spec, "cpu", 0).actor_weights()))
    stop = threading.Event()

    def receive() -> None:  # the learner's side: take (and so acknowledge) every chunk
        while not stop.is_set():
            learner.recv(0.05)

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    try:
        with caplog.at_level(logging.INFO, logger="robot_rl.loop.remote_actor"):
            report = run_actor(cfg, 1, max_env_steps=4 * 25)
    finally:
        stop.set()
        thread.join(5)
        learner.close()
    assert report.env_steps == 100 and report.unacked == 0 and report.dropped_chunks == 0
    lines = [r.getMessage() for r in caplog.records if "Hz: period" in r.getMessage()]
    assert len(lines) == 1 and "50 Hz" in lines[0] and "in 25 ticks" in lines[0], lines
    p50_ms = float(re.search(r"p50 ([\d.]+) ms", lines[0]).group(1))  # type: ignore[union-attr]
    # Unpaced, a step of this tiny task takes ~1 ms; paced, the median period is the 20 ms tick (loose: 2 shared
    # cores, a late tick is not made up).
    assert 18.0 < p50_ms < 30.0, lines[0]
    assert report.overruns == int(re.search(r"(\d+) overruns", lines[0]).group(1))  # type: ignore[union-attr]
