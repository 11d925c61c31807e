"""Back-pressure: the outbox policies (block, spill), and a 50 Hz actor loop next to a slow learner."""

import itertools
import logging
import statistics
import threading
import time
from pathlib import Path

import pytest
import torch
from transport_helpers import drain, free_tcp_addr, tagged_batch
from waiting import wait_until

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqLearnerEndpoint, ZmqSettings

# ZeroMQ endpoints on 127.0.0.1 (docs/testing.md's tiers).
pytestmark = pytest.mark.integration

SPEC = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((2,), low=-1.0, high=1.0))


def _tags(batches: list[TransitionBatch]) -> list[int]:
    return [int(b.reward[0]) for b in batches]


@pytest.mark.timeout(60)
def test_block_policy_paces_the_sender_and_loses_nothing():
    addr = free_tcp_addr()
    actor = ZmqActorEndpoint(addr, 1, SPEC, ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.3,
                                                        outbox_size=4))
    try:
        accepted = [k for k in range(12) if actor.send(tagged_batch(k), timeout_s=0.1)]
        # No learner: 4 chunks in the outbox plus 4 queued behind it, then send() waits and says so.
        assert accepted == list(range(8)) and actor.stats.send_timeouts == 4
        learner = ZmqLearnerEndpoint(addr, SPEC, ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.3))
        try:
            assert _tags(drain(learner, 8)) == list(range(8))
            wait_until(lambda: actor.unacked() == 0, 20, "every chunk acknowledged", seen=actor.unacked)
            assert actor.send(tagged_batch(8), timeout_s=0.1)  # room again
            assert _tags(drain(learner, 1)) == [8]
        finally:
            learner.close()
    finally:
        actor.close()


@pytest.mark.timeout(60)
def test_spill_policy_never_waits_resends_from_disk_and_counts_every_drop(tmp_path: Path, caplog):
    addr = free_tcp_addr()
    spill = tmp_path / "spill"
    settings = ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.3, outbox_size=4, outbox_policy="spill",
                           spill_dir=str(spill), spill_max_bytes=5 * 1024)
    actor = ZmqActorEndpoint(addr, 1, SPEC, settings)
    try:
        t0 = time.monotonic()
        assert all(actor.send(tagged_batch(k), timeout_s=0.5) for k in range(30))
        # Never waits: blocking would cost 0.5 s per chunk over the outbox (13 s); generous for a loaded machine.
        assert time.monotonic() - t0 < 5.0 and actor.stats.send_timeouts == 0
        wait_until(lambda: actor.waiting() == 0, 20, "the I/O thread to take every waiting chunk",
                   seen=actor.waiting)
        files = sorted(spill.glob("*.chunk"))
        # 4 in memory; the rest on disk up to the 5 KiB budget (10 chunks); the overflow dropped, counted, logged.
        assert actor.spill is not None and len(files) == actor.spill.spilled == len(actor.spill)
        dropped_full = actor.spill.dropped
        assert dropped_full > 0 and actor.stats.rejected["spill_full"] == dropped_full
        assert 4 + len(files) + dropped_full == 30
        # A spill file damaged on disk is caught by its checksum: dropped, counted, never sent.
        damaged = bytearray(files[3].read_bytes())
        damaged[-10] ^= 0xFF
        files[3].write_bytes(damaged)
        caplog.set_level(logging.WARNING, logger="robot_rl.transport")
        learner = ZmqLearnerEndpoint(addr, SPEC, ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.3))
        try:
            expected = 4 + len(files) - 1
            got = _tags(drain(learner, expected))
            assert len(got) == expected and got == sorted(got) and len(set(got)) == expected
            wait_until(lambda: actor.unacked() == 0, 20, "every chunk acknowledged", seen=actor.unacked)
            assert actor.spill.corrupt == 1 and actor.dropped() == dropped_full + 1
            assert not list(spill.glob("*.chunk"))  # resent from disk, then removed
            assert any("unreadable" in r.getMessage() for r in caplog.records)
            assert any("full" in r.getMessage() for r in caplog.records)
            assert actor.send(tagged_batch(99), timeout_s=0.5)
            assert _tags(drain(learner, 1)) == [99]  # the gaps were skipped
        finally:
            learner.close()
    finally:
        actor.close()


@pytest.mark.timeout(90)
def test_50hz_actor_keeps_its_period_and_bounded_memory_next_to_a_slow_learner(tmp_path: Path):
    from robot_rl.hardware.rate import RateLoop
    from robot_rl.loop.actor import Actor
    from robot_rl.policies.sac import SACConfig
    from robot_rl.testing import FakeVecEnv

    env = FakeVecEnv(num_envs=4)
    algo = SACConfig(actor_hidden=(32, 32), critic_hidden=(32, 32)).build(env.spec, "cpu", 0)
    addr = free_tcp_addr()
    learner = ZmqLearnerEndpoint(addr, env.spec, ZmqSettings(heartbeat_s=0.1, resend_after_s=0.5, inbox_size=2))
    # One message per chunk: with coalescing the waiting chunks would leave together, 16 per take of this learner,
    # and it would keep up instead of making the backlog this test sends to disk.
    endpoint = ZmqActorEndpoint(addr, 1, env.spec, ZmqSettings(
        coalesce=False, heartbeat_s=0.1, resend_after_s=0.5, outbox_size=16, outbox_policy="spill",
        spill_dir=str(tmp_path)))
    stop = threading.Event()

    def slow_learner() -> None:
        while not stop.is_set():
            if learner.recv(0.05) is not None:
                time.sleep(0.1)  # simulates a learner busy in update(): 10 chunks/s against 50 produced

    from robot_rl.core.transport import VersionedWeights

    learner.publish_weights(VersionedWeights(1, algo.actor_weights()))
    thread = threading.Thread(target=slow_learner, daemon=True)
    thread.start()
    actor = Actor(env, algo.make_policy(), endpoint, send_timeout_s=5.0)
    try:
        actor.wait_for_weights(-1, 10)
        rate, ticks = RateLoop(50.0, max_ticks=150), []
        max_in_memory = 0
        for _ in rate:  # 3 s at 50 Hz
            ticks.append(time.monotonic())
            actor.sync_weights()
            actor.step()
            max_in_memory = max(max_in_memory, len(endpoint._outbox) + endpoint.waiting())
        periods = [b - a for a, b in itertools.pairwise(ticks)]
        mean, median = statistics.mean(periods), statistics.median(periods)
        # A sender paced by the learner would tick at ~0.1 s; the bounds leave room for a loaded 2-core machine
        # (a late tick is not made up, so load only lengthens the mean).
        assert abs(median - 0.02) < 0.004 and 0.019 < mean < 0.03, (mean, median, rate.overruns)
        assert actor.dropped_batches == 0 and endpoint.stats.send_timeouts == 0
        # Memory stays bounded: the learner holds 2, the actor at most its outbox (+ a queue of 16); the
        # backlog went to disk, and nothing was dropped.
        assert max_in_memory <= 2 * 16 and endpoint.spill is not None and endpoint.spill.spilled > 50
        assert learner.pending() <= 2 and endpoint.dropped() == 0
    finally:
        stop.set()
        thread.join(5)
        endpoint.close()
        learner.close()


@pytest.mark.timeout(60)
def test_a_buffer_reused_by_the_env_after_send_does_not_change_the_chunk():
    addr = free_tcp_addr()
    learner = ZmqLearnerEndpoint(addr, SPEC, ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.3))
    actor = ZmqActorEndpoint(addr, 1, SPEC, ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.3))
    try:
        batch = tagged_batch(7)
        assert actor.send(batch, timeout_s=1.0)
        batch.obs["state"].fill_(-1.0)  # a driver writing the next frame into the same buffer
        batch.reward.fill_(-1.0)
        (b,) = drain(learner, 1)
        assert torch.equal(b.obs["state"], torch.full((2, 3), 7.0)) and float(b.reward[0]) == 7.0
        assert learner.stats.rejected.get("bad_crc", 0) == 0
    finally:
        actor.close()
        learner.close()
