"""A robot never drops a transition: chunks a full outbox refuses are kept, in order, and sent later (issue 52)."""

import threading

import pytest
from transport_helpers import tagged_batch

from robot_rl.core.transport import LearnerUnreachable, LinkState
from robot_rl.human_loop.deploy_outbox import KeptChunks


class _Outbox:
    """A transport whose outbox has ``room`` places (the learner takes nothing) and a learner heard ``silent_s`` ago."""

    def __init__(self, room: int, silent_s: float = 0.0) -> None:
        self.room, self.silent_s, self.sent = room, silent_s, []

    def send(self, batch, timeout_s):
        assert timeout_s == 0.0  # the control loop never waits on the network
        if len(self.sent) >= self.room:
            return False
        self.sent.append(float(batch.reward[0]))
        return True

    def link_state(self):
        return LinkState("tcp://10.0.0.2:5555", True, self.silent_s, len(self.sent), 3)


def test_a_full_outbox_keeps_chunks_in_order_and_sends_them_first_later():
    kept, outbox = KeptChunks(), _Outbox(room=2)
    sent = sum(kept.hand_over(outbox, tagged_batch(float(k))) for k in range(5))
    assert sent == 2 and len(kept) == 3 and kept.kept == 3
    outbox.room = 10  # the learner caught up
    assert kept.hand_over(outbox, tagged_batch(5.0)) == 4
    assert outbox.sent == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and len(kept) == 0  # nothing lost, nothing reordered


def test_between_episodes_the_robot_waits_for_a_live_learner_and_stops_for_a_silent_one():
    kept, outbox = KeptChunks(), _Outbox(room=0)
    kept.hand_over(outbox, tagged_batch(1.0))
    outbox.room = 1
    assert kept.wait_sent(outbox, threading.Event(), max_wait_s=60.0) == 1 and len(kept) == 0
    kept.hand_over(outbox, tagged_batch(2.0))  # the outbox is full again, and the learner went silent
    outbox.silent_s = 61.0
    with pytest.raises(LearnerUnreachable, match=r"has not answered for 61s .* 1 chunks are kept"):
        kept.wait_sent(outbox, threading.Event(), max_wait_s=60.0)
    assert len(kept) == 1  # still here, reported: not dropped


class _Learning(_Outbox):
    """A learner that acknowledges one more chunk each time the robot looks (it learns from them one by one)."""

    def __init__(self, unacked: int) -> None:
        super().__init__(room=10)
        self.unacked = unacked

    def link_state(self):
        self.unacked = max(self.unacked - 1, 0)
        return LinkState("tcp://10.0.0.2:5555", True, self.silent_s, self.unacked + 1, 3)


def test_with_max_unlearned_chunks_the_robot_waits_between_episodes_until_the_learner_caught_up():
    kept, learner, pauses = KeptChunks(), _Learning(unacked=6), []
    assert kept.wait_sent(learner, threading.Event(), 60.0, most_unacked=2, on_pause=lambda: pauses.append(1)) == 0
    assert learner.unacked + 1 <= 2 and pauses == [1] and kept.paused_s > 0  # held once, for the learner's updates
    assert kept.wait_sent(learner, threading.Event(), 60.0, most_unacked=2, on_pause=lambda: pauses.append(1)) == 0
    assert pauses == [1]  # caught up: no pause
    learner.unacked, learner.silent_s = 9, 61.0  # behind, and silent
    with pytest.raises(LearnerUnreachable, match="has not answered for 61s"):
        kept.wait_sent(learner, threading.Event(), 60.0, most_unacked=2)


def test_a_bound_on_unlearned_chunks_sends_one_chunk_per_message() -> None:
    # A merged message is taken in and acknowledged at once, before the updates of all but its first chunk have run:
    # the bound would let the robot run several chunks ahead (test_hil_update_ratio failed so under load).
    from robot_rl.human_loop.deploy_config import DeployConfig

    assert DeployConfig(max_unlearned_chunks=2).transport.coalesce is False
    assert DeployConfig().transport.coalesce is True  # the robot never waits: merging costs nothing there
