"""A kill -9 between the commits of the online buffer and the demo buffer it routes interventions to.

A :class:`~robot_rl.replay.mixing.MixingSampler` stores every row in ``online`` and copies the intervened ones
to ``demos``; each buffer commits to its own segment log, so a kill can fall between the two commits. Whatever
the order, the reopened ``demos`` must hold exactly the intervened rows of what ``online`` holds: none lost
(online committed, demos not: the actor's resend of those chunks is dropped as stored), none twice (demos
committed, online not: the actor resends those chunks and they are routed again).

The kill is simulated without a process: the storage is dropped after committing one buffer and not the other
(what the disk holds is all a restarted learner sees), then a fresh storage is opened on the same directory.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from robot_rl.core.transition import TransitionBatch
from robot_rl.replay.buffer import MixingSampler, ReplayBuffer
from robot_rl.replay.crashtest import SPEC, id_rows
from robot_rl.replay.persist import attach_replay
from robot_rl.replay.segments import open_buffer


def _open(root: Path, segment: int = 1000, capacity: int = 1000) -> MixingSampler:
    storage = MixingSampler({"online": ReplayBuffer(SPEC, capacity), "demos": ReplayBuffer(SPEC, capacity)},
                            {"online": 0.5, "demos": 0.5})
    attach_replay(storage, root, segment, math.inf, delete_evicted=True)
    return storage


def _chunk(first: int, n: int, rng: random.Random, envs: int | None = None) -> TransitionBatch:
    """Rows with ids ``first…`` (reward = id), intervened where :func:`_intervened`; ``envs`` streams (default: one
    row each)."""
    b = id_rows(first, n, rng)
    b.intervened = _intervened(b.reward.long())
    if envs is not None:
        b.env_index = torch.arange(n) % envs
    return b


def _intervened(ids: torch.Tensor) -> torch.Tensor:
    return ids % 3 != 1


def _ids(buf: ReplayBuffer) -> list[int]:
    return sorted(buf.gather(torch.arange(len(buf))).reward.long().tolist())


def _assert_routed_exactly(storage: MixingSampler) -> None:
    online, demos = _ids(storage.buffers["online"]), _ids(storage.buffers["demos"])
    assert demos == [i for i in online if i % 3 != 1], f"demos {demos} != intervened rows of online {online}"


def _fill(storage: MixingSampler, first: int, rows: int, chunk: int = 5) -> int:
    rng = random.Random(first)
    while first < rows:
        storage.add(_chunk(first, chunk, rng))
        first += chunk
    return first


def test_online_committed_demos_not_loses_no_intervention(tmp_path: Path) -> None:
    storage = _open(tmp_path)
    _fill(storage, 0, 40)
    storage.flush()
    _fill(storage, 40, 80)
    storage.buffers["online"].flush()  # killed here: MixingSampler.flush committed online, not yet demos
    again = _open(tmp_path)
    assert len(again.buffers["online"]) == 80
    _assert_routed_exactly(again)


def test_demos_committed_online_not_stores_no_intervention_twice(tmp_path: Path) -> None:
    storage = _open(tmp_path)
    _fill(storage, 0, 40)
    storage.flush()
    _fill(storage, 40, 80)
    storage.buffers["demos"].flush()  # killed here: demos' writer was faster than online's
    again = _open(tmp_path)
    assert len(again.buffers["online"]) == 40
    _assert_routed_exactly(again)
    _fill(again, 40, 80)  # the actor resends the chunks online does not hold
    _assert_routed_exactly(again)
    assert len(again.buffers["online"]) == 80


def test_a_kill_inside_routing_one_chunk_over_several_segments(tmp_path: Path) -> None:
    # Two streams: a chunk is added in parts of one row per stream, so the demo buffer commits segments of 4 rows
    # in the middle of routing the chunk's 10 intervened rows (online's segments are larger).
    storage = MixingSampler({"online": ReplayBuffer(SPEC, 1000), "demos": ReplayBuffer(SPEC, 1000)},
                            {"online": 0.5, "demos": 0.5})
    open_buffer(storage.buffers["online"], tmp_path / "online", segment_transitions=100)
    open_buffer(storage.buffers["demos"], tmp_path / "demos", segment_transitions=4)
    batch = _chunk(0, 10, random.Random(0), envs=2)
    batch.intervened[:] = True
    storage.add(batch)
    storage.buffers["online"].flush()
    storage.buffers["demos"]._log.wait()  # its mid-chunk segments are on disk, the chunk's last rows are not
    assert storage.buffers["demos"].watermark[0] == 8
    again = _open(tmp_path, segment=4)
    assert _ids(again.buffers["demos"]) == list(range(10))


def test_reopening_sets_aside_the_copies_online_lacks_and_reopening_again_changes_nothing(tmp_path: Path) -> None:
    storage = _open(tmp_path)
    _fill(storage, 0, 40)
    storage.flush()
    _fill(storage, 40, 80)
    storage.buffers["demos"].flush()
    reports = attach_replay(MixingSampler({"online": ReplayBuffer(SPEC, 1000), "demos": ReplayBuffer(SPEC, 1000)},
                                          {"online": 0.5, "demos": 0.5}), tmp_path, 1000, math.inf, True)
    assert reports["demos"].superseded and not reports["demos"].dropped_segments
    assert sorted(p.name for p in (tmp_path / "demos" / "superseded").iterdir()) == reports["demos"].superseded
    again = _open(tmp_path)  # killed again before committing anything: the same state
    _assert_routed_exactly(again)
    assert len(again.buffers["online"]) == 40 and again.rows_rerouted == 0


def test_a_log_written_before_copies_were_matched_opens_as_it_was(tmp_path: Path) -> None:
    # Two plain buffers write segments with no source_rows, as every demo buffer did before.
    for name, first in (("online", 0), ("demos", 0)):
        buf = ReplayBuffer(SPEC, 1000)
        open_buffer(buf, tmp_path / name, segment_transitions=100)
        buf.add(_chunk(first, 30 if name == "online" else 6, random.Random(0)))
        buf.flush()
    storage = _open(tmp_path)
    assert (len(storage.buffers["online"]), len(storage.buffers["demos"]), storage.rows_rerouted) == (30, 6, 0)
    _fill(storage, 30, 60)  # continues the run, with its copies now matched
    storage.buffers["online"].flush()
    again = _open(tmp_path)
    assert _ids(again.buffers["demos"]) == list(range(6)) + [i for i in range(30, 60) if i % 3 != 1]


def test_demos_added_straight_to_the_demo_buffer_survive_any_kill(tmp_path: Path) -> None:
    storage = _open(tmp_path)
    demos = id_rows(1000, 8, random.Random(1))
    storage.add_to("demos", demos)
    _fill(storage, 0, 20)
    storage.buffers["demos"].flush()  # demos and copies on disk, online's rows not
    again = _open(tmp_path)
    assert len(again.buffers["online"]) == 0
    assert _ids(again.buffers["demos"]) == list(range(1000, 1008))


@pytest.mark.integration  # a few hundred fsynced commits: seconds of waiting on a busy disk
def test_random_kills_between_the_two_buffers_commits(tmp_path: Path) -> None:
    """Random chunk shapes, segment sizes and commit orders; after every kill the demo buffer matches online."""
    for trial in range(12):
        rng = random.Random(trial)
        root = tmp_path / str(trial)
        segment, sent = rng.choice([3, 4, 7, 50]), 0
        for _life in range(3):
            storage = _open(root, segment=segment)
            _assert_routed_exactly(storage)
            online = storage.buffers["online"]
            sent = online.transitions_written  # the actor resends every row online does not hold
            assert _ids(online) == list(range(sent))
            for _ in range(rng.randint(1, 12)):
                n = rng.randint(1, 9)
                storage.add(_chunk(sent, n, rng, envs=rng.choice([None, 1, 2, 3])))
                sent += n
                what = rng.random()
                if what < 0.2:
                    storage.buffers["online"].flush(wait=False)
                elif what < 0.4:
                    storage.buffers["demos"].flush(wait=False)
                elif what < 0.5:
                    storage.flush()
            for buf in storage.buffers.values():  # killed once what was handed to the writers is on disk
                assert buf._log is not None
                buf._log.wait()
        _assert_routed_exactly(_open(root, segment=segment))
