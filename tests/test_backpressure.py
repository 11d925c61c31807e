"""A learner that cannot keep up slows its actors instead of losing their data (issue 52, loop.on_backlog).

The old give-up time (60 s) is the config value ``loop.max_wait_s`` (``Actor(send_timeout_s=…)``); these tests set it
to a fraction of a second and stall the learner for twice that. The fair share itself, counted by hand without
sockets, is in tests/test_fair_service.py; here it is checked over real ZeroMQ traffic.
"""

import threading
import time
from collections import Counter

import pytest
import torch
from transport_helpers import free_tcp_addr, tagged_batch
from waiting import wait_until

from robot_rl.core.algorithm import Policy
from robot_rl.core.transport import LearnerUnreachable
from robot_rl.loop.actor import Actor
from robot_rl.testing import FakeVecEnv
from robot_rl.transport.inproc import InprocTransport
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqLearnerEndpoint, ZmqSettings

# Threads, ZeroMQ on 127.0.0.1 and stalls of a fraction of a second (docs/testing.md's tiers).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

GIVE_UP_S = 0.4  # stands for loop.max_wait_s's 60 s
STALL_S = 2 * GIVE_UP_S
# One message per send: these tests follow single chunks (coalescing is tested on its own).
FAST = ZmqSettings(coalesce=False, heartbeat_s=0.05, resend_after_s=0.3, outbox_size=4, inbox_size=2)


class _ZeroPolicy(Policy):
    """Acts with zeros: the tests are about the transport, not the policy."""

    def act(self, obs, deterministic=False):
        return torch.zeros(obs["state"].shape[0], 2), {}


def _acting(actor: Actor, steps: int) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            for _ in range(steps):
                actor.step()
        except BaseException as e:  # handed to the test
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def _blocked(endpoint: ZmqActorEndpoint) -> bool:
    return endpoint.waiting() >= endpoint.settings.outbox_size  # the actor's send waits: outbox and hand-over full


def _receive(learner: ZmqLearnerEndpoint, rows: int, timeout_s: float = 20.0) -> int:
    got = [0]

    def more() -> bool:
        batch = learner.recv(0.05)
        if batch is not None:
            learner.confirm(batch)
            got[0] += len(batch)
        return got[0] >= rows

    wait_until(more, timeout_s, f"{rows} transitions at the learner", poll_s=0.0, seen=lambda: got[0])
    return got[0]


def test_default_wait_drops_nothing_when_the_learner_stalls_past_the_old_give_up_time():
    addr = free_tcp_addr()
    learner = ZmqLearnerEndpoint(addr, FakeVecEnv().spec, FAST)
    endpoint = ZmqActorEndpoint(addr, 1, FakeVecEnv().spec, FAST, num_envs=4)
    actor = Actor(FakeVecEnv(num_envs=4), _ZeroPolicy(), endpoint, send_timeout_s=GIVE_UP_S)
    steps = 30
    try:
        assert endpoint.connected.wait(10)
        thread, errors = _acting(actor, steps)
        wait_until(lambda: _blocked(endpoint), 10, "the actor waiting on a full outbox")
        time.sleep(STALL_S)  # what is tested: the learner takes nothing for twice the old give-up time
        assert thread.is_alive() and not errors and actor.dropped_batches == 0
        assert _receive(learner, steps * 4) == steps * 4  # every transition, once the learner takes again
        thread.join(10)
        assert not errors and actor.dropped_transitions == 0 and actor.backlog_s >= STALL_S * 0.9
    finally:
        endpoint.close()
        learner.close()


def test_a_learner_that_stops_answering_is_a_clear_error_not_a_silent_loss():
    addr = free_tcp_addr()
    learner = ZmqLearnerEndpoint(addr, FakeVecEnv().spec, FAST)
    endpoint = ZmqActorEndpoint(addr, 1, FakeVecEnv().spec, FAST)
    actor = Actor(FakeVecEnv(num_envs=4), _ZeroPolicy(), endpoint, send_timeout_s=GIVE_UP_S)
    learner_open = True
    try:
        assert endpoint.connected.wait(10)
        thread, errors = _acting(actor, 1000)
        wait_until(lambda: _blocked(endpoint), 10, "the actor waiting on a full outbox")
        learner.close()  # dead: no heartbeat comes any more
        learner_open = False
        thread.join(10 + GIVE_UP_S)
        assert not thread.is_alive() and len(errors) == 1 and isinstance(errors[0], LearnerUnreachable)
        message = str(errors[0])
        assert f"the learner at {addr}" in message and "has not answered for" in message, message
        assert "chunks unacknowledged" in message and actor.dropped_batches == 0
    finally:
        endpoint.close()
        if learner_open:
            learner.close()


def test_drop_is_explicit_counted_on_the_actor_and_shown_by_the_learner():
    addr = free_tcp_addr()
    learner = ZmqLearnerEndpoint(addr, FakeVecEnv().spec, FAST)
    endpoint = ZmqActorEndpoint(addr, 1, FakeVecEnv().spec, FAST, num_envs=4)
    actor = Actor(FakeVecEnv(num_envs=4), _ZeroPolicy(), endpoint, send_timeout_s=GIVE_UP_S / 4, on_backlog="drop")
    steps = 30
    try:
        assert endpoint.connected.wait(10)
        thread, errors = _acting(actor, steps)
        wait_until(lambda: actor.dropped_batches > 0, 10, "a chunk dropped")  # nobody takes anything meanwhile
        thread.join(10)
        assert not errors and actor.dropped_transitions == 4 * actor.dropped_batches
        received = _receive(learner, steps * 4 - actor.dropped_transitions)
        assert received + actor.dropped_transitions == steps * 4  # what was not dropped arrived
        # The learner hears of the drops from the actor's heartbeats: its status line and summary show them.
        wait_until(lambda: learner.metrics().get("dropped/actor1") == actor.dropped_transitions, 10,
                   "the learner's count of the actor's drops", seen=learner.metrics)
    finally:
        endpoint.close()
        learner.close()


def test_in_process_actors_wait_too():
    t = InprocTransport(max_queued_batches=2)
    actor = Actor(FakeVecEnv(num_envs=4), _ZeroPolicy(), t.actor_endpoint(0), send_timeout_s=GIVE_UP_S)
    thread, errors = _acting(actor, 10)
    learner = t.learner_endpoint()
    wait_until(lambda: learner.pending() == 2, 10, "a full queue")
    time.sleep(STALL_S)  # the learner thread is busy elsewhere (an evaluation, a long update)
    got = 0
    while got < 40:
        batch = learner.recv(5.0)
        assert batch is not None, f"{got} transitions received"
        got += len(batch)
    thread.join(10)
    assert not errors and actor.dropped_batches == 0 and got == 40


def test_an_actor_flooding_the_learner_over_zeromq_does_not_starve_a_second_one():
    # Actor 1 (1 env) floods 200 chunks; actor 2 (3 envs) sends 40. The learner takes nothing until both inboxes are
    # full, then takes 2 x inbox_size chunks: one of each per turn, rows 1 : 3 like their env counts.
    settings = ZmqSettings(coalesce=False, heartbeat_s=0.1, resend_after_s=5.0, outbox_size=256, inbox_size=8)
    addr = free_tcp_addr()
    spec = FakeVecEnv().spec
    learner = ZmqLearnerEndpoint(addr, spec, settings)
    flood = ZmqActorEndpoint(addr, 1, spec, settings, num_envs=1)
    calm = ZmqActorEndpoint(addr, 2, spec, settings, num_envs=3)
    try:
        assert flood.connected.wait(10) and calm.connected.wait(10)
        for k in range(200):
            assert flood.send(tagged_batch(float(k), 1), 5.0)
        for k in range(40):
            assert calm.send(tagged_batch(float(k), 3), 5.0)
        inbox = learner._ledger.inbox
        wait_until(lambda: inbox.size(flood.session) == 8 and inbox.size(calm.session) == 8, 20,
                   "both actors' inboxes full", seen=lambda: (inbox.size(flood.session), inbox.size(calm.session)))
        rows: Counter = Counter()
        for _ in range(16):
            batch = learner.recv(5.0)
            assert batch is not None
            rows[batch.actor_id] += len(batch)
        assert rows == {1: 8, 2: 24}
        m = learner.metrics()
        assert m["share/actor2"] == pytest.approx(0.75) and m["fairness"] == pytest.approx(1.0)
    finally:
        flood.close()
        calm.close()
        learner.close()
