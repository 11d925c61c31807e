"""Faults on the wire: a proxy that drops, duplicates, reorders and bit-flips; a stalled actor."""

import threading
import time

import pytest
import torch
from transport_helpers import drain, free_tcp_addr, tagged_batch
from waiting import wait_until

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.core.transport import VersionedWeights
from robot_rl.transport.fault_proxy import FaultProxy
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqLearnerEndpoint, ZmqSettings

# ZeroMQ endpoints on 127.0.0.1 behind a fault proxy (docs/testing.md's tiers).
pytestmark = pytest.mark.integration

SPEC = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((2,), low=-1.0, high=1.0))
# One message per send: these tests follow single chunks (coalescing is tested on its own).
FAST = ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.3)


def _batch(tag: int) -> TransitionBatch:
    return tagged_batch(tag, 4, action=tag / 1000, next_offset=0.5)


def _intact(b: TransitionBatch) -> int:
    """The chunk's tag if every array is exactly what was sent, else fail."""
    tag = int(b.reward[0])
    assert torch.equal(b.reward, torch.full((4,), float(tag)))
    assert torch.equal(b.obs["state"], torch.full((4, 3), float(tag)))
    assert torch.equal(b.next_obs["state"], torch.full((4, 3), tag + 0.5))
    assert torch.equal(b.action, torch.full((4, 2), tag / 1000))
    assert torch.equal(b.env_index, torch.arange(4))
    return tag


@pytest.mark.timeout(90)
def test_fault_proxy_nothing_corrupt_or_duplicated_is_stored_and_everything_arrives():
    back = free_tcp_addr()
    learner = ZmqLearnerEndpoint(back, SPEC, FAST)
    proxy = FaultProxy("tcp://127.0.0.1:0", back, drop=0.1, duplicate=0.1, reorder=0.1, flip=0.1, seed=7)
    actors = [ZmqActorEndpoint(proxy.front, i, SPEC, FAST) for i in (1, 2)]
    try:
        n = 60
        for k in range(n):
            for i, a in enumerate(actors):
                assert a.send(_batch(1000 * (i + 1) + k), timeout_s=5.0)
        got = drain(learner, 2 * n, timeout=60)
        tags = [_intact(b) for b in got]
        assert sorted(tags) == sorted(1000 * (i + 1) + k for i in range(2) for k in range(n))  # all, once
        for aid in (1, 2):  # and in sequence order per actor
            seqs = [b.seq for b in got if b.actor_id == aid]
            assert seqs == sorted(seqs) and len(seqs) == n
        c = proxy.counts
        assert c.dropped and c.duplicated and c.reordered and c.flipped, c
        assert learner.stats.rejected.get("duplicate", 0) > 0
        m = learner.metrics()  # per actor: the duplicates dropped add up to the total
        assert sum(m.get(f"duplicates/actor{i}", 0) for i in (1, 2)) == learner.stats.rejected["duplicate"]
        assert learner.stats.rejected.get("bad_crc", 0) + learner.stats.rejected.get("no_handshake", 0) > 0
        assert learner.recv(0.5) is None  # nothing extra trickles in afterwards
    finally:
        for a in actors:
            a.close()
        proxy.close()
        learner.close()


@pytest.mark.timeout(60)
def test_stalled_actor_pauses_when_stale_and_converges_to_the_newest_weights():
    from robot_rl.loop.actor import Actor
    from robot_rl.policies.sac import SACConfig
    from robot_rl.testing import FakeVecEnv

    env = FakeVecEnv(num_envs=2)
    algo = SACConfig(actor_hidden=(8,), critic_hidden=(8,)).build(env.spec, "cpu", 0)
    back = free_tcp_addr()
    learner = ZmqLearnerEndpoint(back, env.spec, FAST)
    proxy = FaultProxy("tcp://127.0.0.1:0", back)
    endpoint = ZmqActorEndpoint(proxy.front, 1, env.spec, FAST)
    actor = Actor(env, algo.make_policy(), endpoint, send_timeout_s=20.0, max_staleness=2)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            actor.step()
            time.sleep(0.005)  # the actor's control period (a paced loop, not a synchronisation)

    thread = threading.Thread(target=run, daemon=True)
    try:
        learner.publish_weights(VersionedWeights(1, algo.actor_weights()))
        actor.wait_for_weights(-1, 10)
        thread.start()
        wait_until(lambda: actor.env_steps > 20, 20, "the actor to take 20 steps")
        proxy.drop_types = {"weights"}  # the link stalls for weights; heartbeats still announce versions
        for v in range(2, 7):
            learner.publish_weights(VersionedWeights(v, algo.actor_weights()))
        wait_until(lambda: actor.stale_pauses == 1, 20, "the actor to pause on stale weights")
        paused_at = actor.env_steps
        time.sleep(0.5)  # what is tested: for this long, no step is taken (and stale_s counts it below)
        assert actor.env_steps == paused_at  # not exploring with 5-versions-old weights
        assert actor.policy_version == 1
        proxy.drop_types = set()  # the stall ends: the learner resends the newest weights
        wait_until(lambda: actor.policy_version == 6 and actor.env_steps > paused_at + 20, 20,
                   "the actor to resume with v6", seen=lambda: (actor.policy_version, actor.env_steps - paused_at))
        assert actor.stale_pauses == 1 and actor.stale_s > 0.4
        wait_until(lambda: learner.peers() == {1: 6}, 20, "the actor to report v6", seen=learner.peers)
    finally:
        stop.set()
        thread.join(5)
        endpoint.close()
        proxy.close()
        learner.close()


@pytest.mark.timeout(60)
def test_lost_acks_are_made_good_by_the_heartbeats_cumulative_ack():
    # Every `ack` frame is dropped (as when the actor reconnected on a new socket and the ROUTER drops what was
    # addressed to the old one). The learner's heartbeats still say it has the chunks, which leases them on the
    # actor: without the cumulative ack they would never be resent, so never acknowledged, and stay forever.
    back = free_tcp_addr()
    learner = ZmqLearnerEndpoint(back, SPEC, FAST)
    proxy = FaultProxy("tcp://127.0.0.1:0", back)
    proxy.drop_types = {"ack"}
    actor = ZmqActorEndpoint(proxy.front, 1, SPEC, FAST)
    try:
        for k in range(10):
            assert actor.send(_batch(k), timeout_s=5.0)
        got = drain(learner, 10, timeout=20)
        assert sorted(_intact(b) for b in got) == list(range(10))
        # Well inside the lease (16 resend intervals = 4.8 s): the heartbeats, not resends, clear the outbox.
        wait_until(lambda: actor.unacked() == 0, 3, "the outbox to empty without a single ack",
                   seen=actor.unacked)
        # The learner did ack (an ack message may name several chunks).
        assert proxy.counts.by_type.get("ack", 0) >= 1 and proxy.counts.dropped >= 1
        assert actor.acked == 10 and learner.stats.rejected.get("duplicate", 0) == 0  # nothing was resent
    finally:
        actor.close()
        proxy.close()
        learner.close()
