"""How the learner shares itself among actors (issue 52): per-actor inboxes taken in turn by env count.

Counted by hand on the inbox and on the learner's session ledger, without sockets or clocks; the same over real
ZeroMQ traffic and under a stalled learner is in tests/test_backpressure.py.
"""

from collections import Counter

import pytest
from transport_helpers import tagged_batch

from robot_rl.core.transport import TransportStats
from robot_rl.loop.progress import actor_totals, transport_summary
from robot_rl.transport.fair_inbox import FairInbox, jain_index
from robot_rl.transport.zmq_common import ZmqSettings
from robot_rl.transport.zmq_sessions import SessionLedger


def _served(inbox: FairInbox, takes: int, rows: dict[str, int]) -> tuple[Counter, Counter]:
    chunks, served_rows = Counter(), Counter()
    for _ in range(takes):
        got = inbox.get(0.0)
        assert got is not None
        chunks[got[0]] += 1
        served_rows[got[0]] += rows[got[0]]
    return chunks, served_rows


def test_a_flooding_key_gets_its_weight_and_no_more():
    # "flood" has 100 chunks waiting, "calm" 10: while both wait they alternate, one chunk each per turn.
    inbox = FairInbox(capacity=100)
    for i in range(100):
        assert inbox.put_nowait("flood", i, rows=4, weight=4)
    for i in range(10):
        assert inbox.put_nowait("calm", i, rows=4, weight=4)
    chunks, _ = _served(inbox, 20, {"flood": 4, "calm": 4})
    assert chunks == {"flood": 10, "calm": 10}
    # Then "calm" has nothing left and "flood" gets every turn: an idle key keeps no credit.
    chunks, _ = _served(inbox, 5, {"flood": 4, "calm": 4})
    assert chunks == {"flood": 5}


def test_rows_served_follow_the_env_counts_whatever_the_chunk_sizes():
    # Weights 8 : 2 : 1 (env counts). Chunks: one step of every env (8 and 2 rows), and for the 1-env robot
    # chunks of 10 steps (deploy's send_every). Deficit round robin in rows: each within one chunk of its share.
    inbox = FairInbox(capacity=1000)
    rows = {"sim8": 8, "sim2": 2, "robot1": 10}
    weights = {"sim8": 8, "sim2": 2, "robot1": 1}
    for key in rows:
        for i in range(300):
            inbox.put_nowait(key, i, rows[key], weights[key])
    _, served = _served(inbox, 330, rows)
    per_weight = {k: served[k] / weights[k] for k in rows}
    rounds = served["sim8"] / 8  # one 8-row chunk per turn: the number of rounds played
    for key in rows:
        assert abs(served[key] - rounds * weights[key]) <= rows[key], (served, per_weight)


def test_each_key_has_its_own_room_and_a_get_says_when_it_freed_some():
    inbox = FairInbox(capacity=2)
    assert inbox.put_nowait("a", 0, 1) and inbox.put_nowait("a", 1, 1)
    assert not inbox.put_nowait("a", 2, 1) and inbox.full("a")
    assert inbox.put_nowait("b", 0, 1) and len(inbox) == 3  # "a" flooding does not take "b"'s room
    assert inbox.get(0.0) == ("a", 0, True)  # "a" was full: room made
    assert inbox.get(0.0) == ("b", 0, False)
    assert inbox.get(0.0) == ("a", 1, False)
    assert inbox.get(0.0) is None


def test_the_pre_change_shared_inbox_is_first_come_first_served():
    inbox = FairInbox(capacity=2, fair=False)
    assert inbox.put_nowait("a", 0, 1) and inbox.put_nowait("a", 1, 1)
    assert not inbox.put_nowait("b", 0, 1)  # one queue for all: "a" filled it, "b" waits
    assert inbox.get(0.0) == ("a", 0, True)


def test_jain_index_by_hand():
    assert jain_index([5.0, 5.0, 5.0]) == 1.0
    assert jain_index([1.0, 0.0]) == 0.5  # one of two gets everything: 1/n
    assert jain_index([3.0, 1.0]) == pytest.approx(16 / 20)  # (3+1)^2 / (2 * (9+1))
    assert jain_index([96.0, 1154.0]) == pytest.approx(1250**2 / (2 * (96**2 + 1154**2)))  # the run: 0.58
    assert jain_index([]) == 1.0 and jain_index([0.0, 0.0]) == 1.0


def _ledger(fair: bool) -> SessionLedger:
    return SessionLedger(ZmqSettings(inbox_size=4, fair_service=fair), TransportStats(), lambda: None)


def _chunk(seq: int, rows: int):
    batch = tagged_batch(float(seq), rows)
    batch.seq = seq
    return batch


def _flood_and_trickle(ledger: SessionLedger, flood: int, trickle: int, trickle_rows: int = 2) -> None:
    """Actor 0 (session "A", 2 envs) has ``flood`` chunks in flight, actor 1 (session "B") ``trickle``; both said
    hello, A first (what an I/O thread does with them, in one thread)."""
    ledger.open_session(0, "A", 0, weight=2)
    ledger.open_session(1, "B", 0, weight=trickle_rows)
    for seq in range(flood):
        ledger.deliver(b"a", 0, "A", _chunk(seq, 2), 100)
    for seq in range(trickle):
        ledger.deliver(b"b", 1, "B", _chunk(seq, trickle_rows), 100)


def _take(ledger: SessionLedger, n: int) -> Counter:
    rows: Counter = Counter()
    for _ in range(n):
        batch = ledger.take(0.0)
        assert batch is not None
        rows[batch.actor_id] += len(batch)
        ledger.release_waiting()  # the I/O thread refills the inboxes after every take
    return rows


def test_an_actor_flooding_the_learner_does_not_starve_a_second_one():
    ledger = _ledger(fair=True)
    _flood_and_trickle(ledger, flood=60, trickle=10)
    assert _take(ledger, 20) == {0: 20, 1: 20}  # 2 envs each: 10 chunks of 2 rows each, in turn


def test_actors_are_served_by_env_count():
    ledger = _ledger(fair=True)
    _flood_and_trickle(ledger, flood=60, trickle=30, trickle_rows=6)  # actor 1 has 6 envs, actor 0 has 2
    rows = _take(ledger, 20)
    assert rows == {0: 20, 1: 60}  # one chunk each per turn: 2 : 6 rows, the env counts


def test_the_pre_change_ledger_let_the_first_actor_starve_the_second():
    # The same traffic through one shared inbox: after the first fill, every freed slot goes to the session that
    # said hello first, the issue's `tr/s per actor 0:0,1:84`.
    ledger = _ledger(fair=False)
    _flood_and_trickle(ledger, flood=60, trickle=10)
    rows = _take(ledger, 20)
    assert rows[1] == 0 and rows[0] == 40


def test_status_line_and_summary_show_shares_fairness_and_drops():
    m = {"transitions_per_s": 100.0, "share/actor0": 0.25, "share/actor1": 0.75, "fairness": 0.8,
         "transitions/actor0": 50.0, "transitions/actor1": 150.0, "dropped/actor1": 32.0}
    line = transport_summary(m)
    assert "share 0:25%,1:75%" in line and "fairness 0.80" in line and "DROPPED 1:32" in line
    assert actor_totals(m) == {"0": {"transitions": 50, "dropped": 0}, "1": {"transitions": 150, "dropped": 32}}
