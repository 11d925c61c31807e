"""ZeroMQ endpoints on 127.0.0.1: handshake, delivery with acks and dedup, weights, learner restart."""

import logging
import socket
import time

import pytest
import torch
from transport_helpers import drain, tagged_batch
from waiting import wait_until

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transport import VersionedWeights
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqLearnerEndpoint, ZmqSettings

# ZeroMQ endpoints on 127.0.0.1 (docs/testing.md's tiers).
pytestmark = pytest.mark.integration

SPEC = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((2,), low=-1.0, high=1.0))
# One message per send: these tests follow single chunks (coalescing is tested on its own).
FAST = ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.3)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(60)
def test_two_actors_deliver_everything_once_and_get_newest_weights():
    addr = f"tcp://127.0.0.1:{_free_port()}"
    learner = ZmqLearnerEndpoint(addr, SPEC, FAST)
    actors = [ZmqActorEndpoint(addr, i, SPEC, FAST) for i in (1, 2)]
    try:
        assert all(a.connected.wait(10) for a in actors)
        for k in range(25):
            for a in actors:
                assert a.send(tagged_batch(float(k), 4), timeout_s=1.0)
        got = drain(learner, 50)
        assert len(got) == 50
        keys = {(b.actor_id, b.seq) for b in got}
        assert len(keys) == 50 and {a for a, _ in keys} == {1, 2}
        wait_until(lambda: all(a.unacked() == 0 for a in actors), 20, "every chunk acknowledged",
                   seen=lambda: [a.unacked() for a in actors])
        for v in range(1, 4):  # one version after another: each reaches both actors before the next
            learner.publish_weights(VersionedWeights(v, {"w": torch.full((5,), float(v))}))
            wait_until(lambda v=v: all(a.poll_weights(v - 1) is not None for a in actors), 20,
                       f"weights v{v} at both actors")
        for a in actors:
            w = a.wait_weights(2, timeout_s=10)
            assert w is not None and w.version == 3 and torch.equal(w.weights["w"], torch.full((5,), 3.0))
        wait_until(lambda: learner.peers() == {1: 3, 2: 3}, 20, "both actors to report v3", seen=learner.peers)
        assert learner.stats.rejected.get("duplicate", 0) == 0
        from robot_rl.loop.progress import transport_summary

        m = learner.metrics()
        assert m["transitions_per_s"] > 0 and m["mb_per_s"] > 0 and m["actors"] == 2.0
        assert m["weight_lag/actor1"] == 0.0 and m["weight_lag_max"] == 0.0 and m["inbox"] == 0.0
        # Per actor: both sent, and their rates add up to the total (the same interval).
        assert m["transitions_per_s/actor1"] > 0 and m["transitions_per_s/actor2"] > 0
        assert m["transitions_per_s/actor1"] + m["transitions_per_s/actor2"] == pytest.approx(m["transitions_per_s"])
        learner.publish_weights(VersionedWeights(9, {"w": torch.zeros(5)}))
        assert set(learner.weight_lag().values()) <= {0, 6}  # 6 until their heartbeats report v9
        wait_until(lambda: learner.weight_lag() == {1: 0, 2: 0}, 20, "both actors to report v9",
                   seen=learner.weight_lag)
        line = transport_summary(m)
        assert "tr/s" in line and "MB/s" in line and "acks pending 0" in line and "lag 1:0,2:0" in line
        assert "tr/s per actor 1:" in line and "duplicates" not in line
    finally:
        for a in actors:
            a.close()
        learner.close()


@pytest.mark.timeout(60)
def test_spec_mismatch_is_refused_at_handshake():
    addr = f"tcp://127.0.0.1:{_free_port()}"
    learner = ZmqLearnerEndpoint(addr, SPEC, FAST)
    other = EnvSpec({"state": ArraySpec((4,))}, ArraySpec((2,), low=-1.0, high=1.0))
    actor = ZmqActorEndpoint(addr, 7, other, FAST)
    try:
        wait_until(lambda: actor.handshake_error is not None, 20, "the handshake to be refused")
        assert "observation['state']" in actor.handshake_error
        assert not actor.connected.is_set()
        assert learner.stats.rejected.get("handshake", 0) >= 1
        # Waiting for weights stops at once with the reason (before: the whole deadline, then "is it alive?").
        from robot_rl.core.transport import HandshakeRefused, wait_first_weights

        t0 = time.monotonic()
        with pytest.raises(HandshakeRefused, match="observation"):
            wait_first_weights(actor, timeout_s=30.0)
        assert time.monotonic() - t0 < 5.0
    finally:
        actor.close()
        learner.close()


@pytest.mark.timeout(90)
def test_learner_restart_loses_nothing():
    port = _free_port()
    addr = f"tcp://127.0.0.1:{port}"
    learner = ZmqLearnerEndpoint(addr, SPEC, FAST)
    actor = ZmqActorEndpoint(addr, 3, SPEC, FAST)
    try:
        assert actor.connected.wait(10)
        for k in range(10):
            actor.send(tagged_batch(float(k), 4), 1.0)
        first = drain(learner, 10)
        wait_until(lambda: actor.unacked() == 0, 20, "the first 10 chunks acknowledged", seen=actor.unacked)
        learner.close()
        # The learner is gone: the actor keeps producing into its outbox, nothing blocks.
        for k in range(10, 30):
            assert actor.send(tagged_batch(float(k), 4), 1.0)
        # It notices (3 silent heartbeats) before the learner comes back, so it reconnects and resends.
        wait_until(lambda: not actor.connected.is_set(), 10, "the actor to notice the learner is gone")
        learner = ZmqLearnerEndpoint(addr, SPEC, FAST)
        second = drain(learner, 20, timeout=30)
        rewards = sorted(int(b.reward[0]) for b in first + second)
        assert rewards == list(range(30))  # none lost, none twice
        wait_until(lambda: actor.unacked() == 0, 20, "the resent chunks acknowledged", seen=actor.unacked)
    finally:
        actor.close()
        learner.close()


@pytest.mark.timeout(60)
def test_garbage_and_pickle_on_the_socket_are_rejected_and_learner_keeps_running(tmp_path, monkeypatch):
    import os
    import pickle
    import random

    import zmq

    from robot_rl.transport.codec import encode
    from robot_rl.transport.transition_codec import encode_transitions

    class Canary:
        def __reduce__(self):
            return (open, (str(tmp_path / "canary"), "w"))

    addr = f"tcp://127.0.0.1:{_free_port()}"
    learner = ZmqLearnerEndpoint(addr, SPEC, FAST)
    raw = zmq.Context.instance().socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(addr)
    try:
        rng = random.Random(1)
        payload = pickle.dumps(Canary())
        raw.send_multipart([payload])
        raw.send_multipart(encode_transitions(tagged_batch(1.0, 4), "s"))  # before any hello
        raw.send_multipart(encode("hello", "s", 0, meta={"actor_id": 9, "session": "raw", "spec": SPEC.to_dict()}))
        wait_until(lambda: 9 in learner.peers(), 10, "the learner to welcome the raw socket", seen=learner.peers)
        for _ in range(300):
            frames = [os.urandom(rng.randrange(1, 100)) for _ in range(rng.randrange(1, 4))]
            raw.send_multipart(frames)
        raw.send_multipart([payload, payload])
        good = encode_transitions(tagged_batch(5.0, 4), "raw")
        raw.send_multipart(good)
        got = drain(learner, 1)
        assert len(got) == 1 and float(got[0].reward[0]) == 5.0
        assert sum(learner.stats.rejected.values()) >= 300
        assert not (tmp_path / "canary").exists()
    finally:
        raw.close(0)
        learner.close()


@pytest.mark.timeout(60)
def test_curve_accepts_allow_listed_keys_only(tmp_path, caplog):
    import shutil

    from robot_rl.transport.zmq_transport import generate_keys

    keys = tmp_path / "keys"
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    server_pub, server_sec = generate_keys(str(keys), "learner")
    alice_pub, alice_sec = generate_keys(str(keys), "alice")
    _, mallory_sec = generate_keys(str(keys), "mallory")
    shutil.copy(alice_pub, allowed)
    addr = f"tcp://127.0.0.1:{_free_port()}"
    learner_settings = ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.3, server_secret_key=server_sec,
                                   allowed_clients_dir=str(allowed))
    caplog.set_level(logging.WARNING, logger="robot_rl.transport")
    # Record the monitor's own log directly: a library imported by an earlier test in the same process may have
    # reconfigured logging (the full suite lost these records once under caplog alone).
    records: list[logging.LogRecord] = []
    monitor_log = logging.getLogger("robot_rl.transport.peer_monitor")
    monitor_log.disabled = False
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    monitor_log.addHandler(handler)
    learner = ZmqLearnerEndpoint(addr, SPEC, learner_settings)
    alice = ZmqActorEndpoint(addr, 1, SPEC, ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.3,
                                                        server_public_key=server_pub, client_secret_key=alice_sec))
    mallory = ZmqActorEndpoint(addr, 2, SPEC, ZmqSettings(coalesce=False, heartbeat_s=0.1, server_public_key=server_pub,
                                                          client_secret_key=mallory_sec))
    plaintext = ZmqActorEndpoint(addr, 3, SPEC, FAST)
    try:
        assert alice.connected.wait(10)
        alice.send(tagged_batch(4.0, 4), 1.0)
        got = drain(learner, 1)
        assert len(got) == 1 and got[0].actor_id == 1
        # Both are refused inside ZeroMQ; the socket monitor counts each refusal and logs its address.
        # Peers retry every 100 ms. On localhost a plaintext peer's greeting can fail before the
        # monitor reads the descriptor's address (logged as "?"), or the peer hangs up first
        # (handshake_aborted); wait until both peers were refused with their address read.
        wait_until(lambda: {r for r, addr in learner.monitor.refused if addr != "?"}
                   & {"refused_protocol", "handshake_aborted"}
                   and any(r == "refused_key" and addr != "?" for r, addr in learner.monitor.refused),
                   10, "both peers refused with their address read", seen=lambda: learner.monitor.refused)
        assert not mallory.connected.is_set() and not plaintext.connected.is_set()
        assert set(learner.peers()) == {1}
        assert learner.stats.rejected["refused_key"] >= 1
        assert learner.stats.rejected.get("refused_protocol", 0) + learner.stats.rejected.get("handshake_aborted", 0)
        assert all(addr.startswith("127.0.0.1:") for _, addr in learner.monitor.refused if addr != "?")
        logged = [r.getMessage() for r in records if "refused a connection from 127.0.0.1:" in r.getMessage()]
        assert any("allow-list" in m for m in logged), logged
    finally:
        monitor_log.removeHandler(handler)
        for a in (alice, mallory, plaintext):
            a.close()
        learner.close()
    with pytest.raises(ValueError, match="keys generate"):
        ZmqActorEndpoint(addr, 4, SPEC, ZmqSettings(server_public_key=str(tmp_path / "nope.key"),
                                                    client_secret_key=alice_sec))


@pytest.mark.timeout(60)
def test_state_dict_round_trip_drops_resends_of_stored_chunks_and_rejects_bad_state():
    addr = f"tcp://127.0.0.1:{_free_port()}"
    learner = ZmqLearnerEndpoint(addr, SPEC, FAST)
    actor = ZmqActorEndpoint(addr, 3, SPEC, FAST)
    try:
        assert actor.connected.wait(10)
        for k in range(5):
            actor.send(tagged_batch(float(k), 4), 1.0)
        assert len(drain(learner, 5)) == 5
        state = learner.state_dict()
        assert state == {"sessions": {actor.session: {"floor": 5, "above": []}}}
        fresh = ZmqLearnerEndpoint(f"tcp://127.0.0.1:{_free_port()}", SPEC, FAST)
        try:
            fresh.load_state_dict(state)
            assert fresh.state_dict() == state
            for bad in ({}, {"sessions": {"s": {"floor": -1}}}, {"sessions": {"s": {"floor": 2, "above": [1]}}}):
                with pytest.raises(ValueError):
                    fresh.load_state_dict(bad)
        finally:
            fresh.close()
    finally:
        actor.close()
        learner.close()


@pytest.mark.timeout(60)
def test_two_learners_on_one_port_get_a_clear_error():
    from robot_rl.core.config import ConfigError

    addr = f"tcp://127.0.0.1:{_free_port()}"
    first = ZmqLearnerEndpoint(addr, SPEC, FAST)
    try:
        with pytest.raises(ConfigError, match=r"already in use: another learner .* stop it, or bind another port"):
            ZmqLearnerEndpoint(addr, SPEC, FAST)
    finally:
        first.close()


@pytest.mark.timeout(60)
def test_a_backlogged_learner_holds_chunks_instead_of_receiving_resends():
    # The learner takes nothing for 3 s (10 resend periods) with room for 2 chunks: it says "held" for the rest,
    # and the actor waits for its back-pressure instead of resending every chunk on its timer.
    addr = f"tcp://127.0.0.1:{_free_port()}"
    settings = ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.3, inbox_size=2)
    learner = ZmqLearnerEndpoint(addr, SPEC, settings)
    actor = ZmqActorEndpoint(addr, 1, SPEC, settings)
    try:
        wait_until(lambda: actor.connected.is_set(), 20, "the handshake")
        n = 12
        for k in range(n):
            assert actor.send(tagged_batch(k), timeout_s=5.0)
        time.sleep(3.0)
        dups = learner.stats.rejected.get("duplicate", 0)
        assert actor.held_notices >= n - settings.inbox_size
        assert dups <= 2 * settings.inbox_size, f"{dups} duplicates while held"  # one resend per inbox chunk
        got = drain(learner, n, timeout=20)
        assert sorted(int(b.reward[0]) for b in got) == list(range(n))  # all of them, once
        wait_until(lambda: actor.unacked() == 0, 20, "every chunk acknowledged", seen=actor.unacked)
    finally:
        actor.close()
        learner.close()


def test_chunks_the_learner_has_are_leased_not_resent_however_long_it_takes():
    # ack_after=confirm (the learner's replay decides when a chunk is stored) and room for 2 chunks in the inbox.
    # For 4 s (40 resend periods, 2.5x a held notice's wait) nothing is confirmed: 4 chunks are taken, the rest
    # wait ahead. The heartbeats renew the lease on all of them, so the actor sends no copies meanwhile.
    addr = f"tcp://127.0.0.1:{_free_port()}"
    settings = ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=0.1, ack_after="confirm", inbox_size=2)
    learner = ZmqLearnerEndpoint(addr, SPEC, settings)
    actor = ZmqActorEndpoint(addr, 1, SPEC, settings)
    try:
        wait_until(lambda: actor.connected.is_set(), 20, "the handshake")
        n = 12
        for k in range(n):
            assert actor.send(tagged_batch(k), timeout_s=5.0)
        got = drain(learner, 4, timeout=20)
        wait_until(lambda: actor.held_notices >= n, 20, "a held notice for every chunk",
                   seen=lambda: actor.held_notices)
        # A copy may leave before its first notice arrives (0.1 s timers on a loaded machine); none after it.
        resent, dups = actor.resent, learner.stats.rejected.get("duplicate", 0)
        time.sleep(4.0)
        assert (actor.resent, learner.stats.rejected.get("duplicate", 0)) == (resent, dups)
        assert actor.unacked() == n  # nothing acknowledged before it is stored
        while len(got) < n:
            for b in got:
                learner.confirm(b)
            got += drain(learner, min(4, n - len(got)), timeout=20)
        for b in got:
            learner.confirm(b)
        assert sorted(int(b.reward[0]) for b in got) == list(range(n))
        wait_until(lambda: actor.unacked() == 0, 20, "every chunk acknowledged", seen=actor.unacked)
    finally:
        actor.close()
        learner.close()


@pytest.mark.timeout(60)
def test_waiting_chunks_go_as_one_message_each_row_once_in_order_within_the_outbox():
    # 8 chunks fill the outbox and 8 more wait behind it. When the learner takes the first 8, their acknowledgements
    # free room, and the waiting chunks go together. Every row arrives once and in order, and the outbox bounds the
    # chunks in flight throughout (counted in chunks, not messages).
    addr = f"tcp://127.0.0.1:{_free_port()}"
    learner = ZmqLearnerEndpoint(addr, SPEC, ZmqSettings(heartbeat_s=0.1, resend_after_s=0.3, inbox_size=8))
    actor = ZmqActorEndpoint(addr, 1, SPEC, ZmqSettings(heartbeat_s=0.1, resend_after_s=0.3, outbox_size=8))
    try:
        assert actor.connected.wait(10)
        for k in range(16):
            assert actor.send(tagged_batch(float(k), 3), timeout_s=10.0)
        wait_until(lambda: actor.waiting() == 8, 20, "a full outbox and 8 chunks waiting", seen=actor.waiting)
        assert actor.unacked() == 16
        wait_until(lambda: learner.pending() > 0, 20, "the first chunks at the learner")
        got = [learner.recv(1.0) for _ in range(learner.pending())]  # at once: their acks go out together
        while sum(len(b) for b in got if b is not None) < 48:
            got.append(learner.recv(10.0))
            assert got[-1] is not None, "a chunk did not arrive"
        rows = [r for b in got if b is not None for r in b.reward.tolist()]
        assert rows == [float(k) for k in range(16) for _ in range(3)]
        assert all(b is not None and torch.equal(b.obs["state"][:, 0], b.reward) for b in got)  # rows stay whole
        assert len(got) < 16  # the waiting chunks shared messages
        wait_until(lambda: actor.unacked() == 0, 20, "every chunk acknowledged", seen=actor.unacked)
        assert actor.acked == 16 and learner.stats.rejected.get("duplicate", 0) == 0
    finally:
        actor.close()
        learner.close()
