"""Replay segments on disk: reopen gives the same state, damage is cut off and reported, full disks are clear."""

import errno
import resource
import signal
import time
from pathlib import Path

import pytest
import torch

from robot_rl.checkpoint import list_checkpoints, load_latest, save_checkpoint
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.replay.crashtest import SPEC, id_rows
from robot_rl.replay.durable import DiskFullError
from robot_rl.replay.segments import open_buffer


def _filled(d: Path, rows: int = 100, seg: int = 10, capacity: int = 1000) -> ReplayBuffer:
    import random

    buf = ReplayBuffer(SPEC, capacity)
    open_buffer(buf, d, segment_transitions=seg)
    rng = random.Random(0)
    while buf.transitions_written < rows:
        buf.add(id_rows(buf.transitions_written, 5, rng))
    buf.flush()
    return buf


def _reopen(d: Path, capacity: int = 1000, seg: int = 10):
    buf = ReplayBuffer(SPEC, capacity)
    return buf, open_buffer(buf, d, segment_transitions=seg)


def _ids(buf: ReplayBuffer) -> list[int]:
    return buf.gather(torch.arange(len(buf))).reward.long().tolist()


def test_reopen_twice_gives_the_same_state(tmp_path: Path):
    orig = _filled(tmp_path)
    a, ra = _reopen(tmp_path)
    b, rb = _reopen(tmp_path)
    assert ra.transitions == rb.transitions == 100 and not ra.dropped_segments
    for x in (a, b):
        sd, so = x.state_dict(), orig.state_dict()
        assert torch.equal(sd["counters"], so["counters"])
        for k in ("obs", "rows"):
            for f in so[k]:
                assert torch.equal(sd[k][f], so[k][f]), (k, f)
    # Sampling the reloaded buffer draws exactly the rows the original would.
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    s1, s2 = orig.sample(64, g1), a.sample(64, g2)
    assert torch.equal(s1.reward, s2.reward) and torch.equal(s1.next_obs["state"], s2.next_obs["state"])
    # Appending after a reopen continues the log where it ended.
    a.add(id_rows(100, 3, __import__("random").Random(1)))
    a.flush()
    c, _ = _reopen(tmp_path)
    assert _ids(c) == list(range(103))


def test_small_ring_reload_keeps_the_newest_rows_and_prunes_old_segments(tmp_path: Path):
    buf = _filled(tmp_path, rows=300, seg=10, capacity=50)
    assert len(buf) <= 50 and len(list(tmp_path.glob("seg_*"))) < 12  # evicted segments were deleted
    again, report = _reopen(tmp_path, capacity=50)
    assert _ids(again) == _ids(buf) and not report.dropped_segments


@pytest.mark.parametrize("damage", ["truncate", "bitflip", "header"])
def test_damaged_last_segment_is_cut_off_and_reported(tmp_path: Path, damage: str):
    _filled(tmp_path)
    last = sorted(tmp_path.glob("seg_*.rrs"))[-1]
    blob = bytearray(last.read_bytes())
    if damage == "truncate":
        blob = blob[: len(blob) - 7]
    elif damage == "bitflip":
        blob[-3] ^= 0x10
    else:
        blob[20] ^= 0x01
    last.write_bytes(bytes(blob))
    buf, report = _reopen(tmp_path)
    assert _ids(buf) == list(range(90))  # everything before the damaged segment
    assert report.dropped_segments and last.name in report.dropped_segments[0]
    assert report.dropped_transitions == (10 if damage != "header" else 0)
    assert "DROPPED" in report.summary() and (tmp_path / "damaged" / last.name).is_file()
    again, report2 = _reopen(tmp_path)  # the second open sees a clean log with the same rows
    assert _ids(again) == list(range(90)) and not report2.dropped_segments


def test_damage_in_the_middle_sets_aside_everything_after(tmp_path: Path):
    _filled(tmp_path)
    segs = sorted(tmp_path.glob("seg_*.rrs"))
    segs[4].unlink()  # a missing segment is a gap: later rows cannot chain to what is lost
    buf, report = _reopen(tmp_path)
    assert _ids(buf) == list(range(40)) and len(report.dropped_segments) >= 5


def test_spec_change_is_a_clear_error(tmp_path: Path):
    from robot_rl.core.specs import ArraySpec, EnvSpec

    _filled(tmp_path)
    other = EnvSpec(observation={"state": ArraySpec((4,))}, action=SPEC.action)
    with pytest.raises(ValueError, match="spec"):
        open_buffer(ReplayBuffer(other, 100), tmp_path, segment_transitions=10)


class _FileSizeLimit:
    """RLIMIT_FSIZE for this process (writes past it fail with EFBIG instead of SIGXFSZ)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes

    def __enter__(self):
        self.old = resource.getrlimit(resource.RLIMIT_FSIZE)
        self.handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.nbytes, self.old[1]))

    def __exit__(self, *exc):
        resource.setrlimit(resource.RLIMIT_FSIZE, self.old)
        signal.signal(signal.SIGXFSZ, self.handler)


def test_full_disk_is_a_clear_error_and_keeps_what_was_committed(tmp_path: Path):
    buf = _filled(tmp_path / "replay", rows=40, seg=200)
    save_checkpoint(tmp_path, 1, {"w": torch.ones(10)}, {})
    big_rows = id_rows(40, 150, __import__("random").Random(0))
    with _FileSizeLimit(4096):
        buf.add(big_rows)  # held in memory; the segment is written on flush
        with pytest.raises(DiskFullError, match="no space") as e:
            buf.flush()
        assert e.value.errno == errno.EFBIG
        with pytest.raises(DiskFullError, match=r"previous checkpoints .* intact"):
            save_checkpoint(tmp_path, 2, {"w": torch.ones(100_000)}, {})
    assert buf.watermark[0] == 40 and len(buf) == 190  # nothing lost from memory
    assert not list((tmp_path / "replay").glob(".tmp-*")) and not list((tmp_path / "checkpoints").glob(".tmp-*"))
    state, _, path = load_latest(tmp_path)  # the last good checkpoint is intact
    assert path.name.endswith("1") and torch.equal(state["w"], torch.ones(10))
    assert [p.name for p in list_checkpoints(tmp_path)] == [path.name]
    assert buf.flush()[0] == 190  # space again: the retry commits everything held
    again, _ = _reopen(tmp_path / "replay")
    assert _ids(again) == list(range(190))


@pytest.mark.integration
def test_runner_stops_actors_on_a_full_disk(tmp_path: Path, monkeypatch):
    import robot_rl.testing  # noqa: F401 - registers the "fake" task
    from robot_rl.loop.config import resolve_train_config
    from robot_rl.loop.runner import InProcessRunner
    from robot_rl.replay.segments import SegmentLog

    cfg = resolve_train_config("reach", "sac", overrides=[
        f"run.root={tmp_path}", "run.name=full", "run.progress=false", "task.num_envs=4",
        "loop.total_env_steps=100000", "loop.eval_every_env_steps=100000", "loop.eval_episodes=2",
        "algo.learning_starts=32", "algo.batch_size=8", "algo.actor_hidden=[8]", "algo.critic_hidden=[8]",
        "replay.segment_transitions=40", "loop.checkpoint_every_s=0"])
    commits = {"n": 0}
    real = SegmentLog.commit

    def commit(self, *a, **k):
        commits["n"] += 1
        if commits["n"] > 5:  # the disk fills up after five segments
            raise DiskFullError(errno.ENOSPC, "no space to write segment (simulated ENOSPC)")
        return real(self, *a, **k)

    monkeypatch.setattr(SegmentLog, "commit", commit)
    runner = InProcessRunner(cfg)
    with pytest.raises(DiskFullError, match=r"Actors were stopped and hold.*(last good|saved a final) checkpoint"):
        runner.train()
    assert runner._stop.is_set()  # the actor threads were told to stop collecting
    held = [a.env_steps for a in runner.actors]
    time.sleep(0.3)  # what is tested: for this long, no actor takes a step
    assert [a.env_steps for a in runner.actors] == held  # and they hold
    assert runner.learner.transitions < 100000
    _, meta, _ = load_latest(tmp_path / "full")  # the last good checkpoint loads
    assert meta["replay_watermark"]["online"][0] <= 200  # written before the disk filled
