"""kill -9 of `robot-rl learner` mid-run (twice), restarted on the same run directory, two actor processes.

Every transition the actors produced must be in the replay on disk exactly once, and training must
continue from the checkpoint (same weights digest as saved, the update counter carrying on).
"""

import json
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from waiting import wait_until

from robot_rl.checkpoint import list_checkpoints
from robot_rl.replay.segments import decode_segment

STEPS = 120  # per actor, in env steps of 4 sub-envs: 480 transitions each
COMMON = ["task.num_envs=4", "algo.actor_hidden=[16,16]", "algo.critic_hidden=[16,16]", "run.progress=false",
          "algo.learning_starts=64", "algo.batch_size=16", "algo.utd_ratio=2", "transport.resend_after_s=0.5",
          "transport.heartbeat_s=0.2", "loop.max_wait_s=60", "run.torch_threads=1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _learner(run_dir: Path, addr: str, resume: bool) -> subprocess.Popen:
    where = ["--resume", str(run_dir)] if resume else ["--name", run_dir.name, f"run.root={run_dir.parent}"]
    return subprocess.Popen(
        [sys.executable, "-m", "robot_rl.cli", "learner", "--algo", "sac", "--bind", addr, *where,
         f"loop.total_env_steps={2 * STEPS * 4}", "loop.eval_every_env_steps=1000000", "loop.eval_episodes=2",
         "loop.success_threshold=null", "loop.checkpoint_every_s=0.7", *COMMON],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_rows(run_dir: Path, min_rows: int, deadline: float, learner: subprocess.Popen) -> None:
    """Until the replay on disk holds ``min_rows`` rows more (the learner is mid-run, storing); fails at deadline."""
    seg_dir = run_dir / "replay" / "online"
    start = _disk_rows(seg_dir)
    wait_until(lambda: _disk_rows(seg_dir) >= start + min_rows, max(deadline - time.monotonic(), 0.0),
               f"{min_rows} more rows in {seg_dir}/manifest.json (from {start})", poll_s=0.05,
               seen=lambda: f"{_disk_rows(seg_dir)} rows, learner exit code {learner.poll()}")


def _disk_rows(seg_dir: Path) -> int:
    try:
        return int(json.loads((seg_dir / "manifest.json").read_text())["transitions"])
    except (OSError, ValueError, KeyError):
        return 0


def _replay_rows(seg_dir: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """actor_id, env_index, reward, action of every row in the verified segments (in row order)."""
    parts: dict[str, list[torch.Tensor]] = {"row.actor_id": [], "row.env_index": [], "row.reward": [],
                                            "row.action": []}
    expect = 0
    for path in sorted(seg_dir.glob("seg_*.rrs")):
        meta, arrays = decode_segment(bytearray(path.read_bytes()), path.name)
        assert meta["t0"] == expect, f"{path.name} starts at {meta['t0']}, expected {expect}"
        expect = meta["t1"]
        for k in parts:
            parts[k].append(arrays[k])
    assert not (seg_dir / "damaged").exists() or not any((seg_dir / "damaged").iterdir())
    cat = {k: torch.cat(v) for k, v in parts.items()}
    return cat["row.actor_id"], cat["row.env_index"], cat["row.reward"], cat["row.action"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_learner_killed_twice_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    addr = f"tcp://127.0.0.1:{_free_port()}"
    run_dir = tmp_path / "crash"
    rng = random.Random()
    hard = time.monotonic() + 100
    procs: list[subprocess.Popen] = []
    saved_meta: dict[str, dict] = {}
    newest: list[str] = []  # the newest committed checkpoint at each kill (the one a resume must load)
    try:
        learner = _learner(run_dir, addr, resume=False)
        procs.append(learner)
        actors = [subprocess.Popen(
            [sys.executable, "-m", "robot_rl.cli", "actor", "--algo", "sac", "--connect", addr, "--actor-id",
             str(i), "--max-env-steps", str(STEPS * 4), *COMMON],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in (1, 2)]
        procs += actors
        for kill in range(2):
            # Mid-run: after some rows reached the disk, plus a random delay (a commit or a checkpoint
            # may be under way, acknowledgements may be in flight). The first kill may come before
            # the first checkpoint (the restart keeps the replay, networks start fresh); the second
            # comes after one, so the restart must restore it.
            _wait_for_rows(run_dir, 150, hard, learner)
            if kill:
                wait_until(lambda: list_checkpoints(run_dir), max(hard - time.monotonic(), 0.0),
                           "a first checkpoint before the second kill", poll_s=0.05)
            delay = rng.uniform(0.0, 0.6)
            time.sleep(delay)  # what is tested: a kill at a random moment of the learner's work
            learner.send_signal(signal.SIGKILL)
            learner.wait(timeout=10)
            ckpts = list_checkpoints(run_dir)
            print(f"kill {kill + 1}: {delay:.2f}s after the wait, newest checkpoint {ckpts[-1] if ckpts else None}")
            if ckpts:  # read now: older checkpoints are pruned later in the run
                newest.append(str(ckpts[-1]))
                saved_meta[newest[-1]] = json.loads((ckpts[-1] / "meta.json").read_text())
            learner = _learner(run_dir, addr, resume=True)
            procs.append(learner)
        try:
            out, _ = learner.communicate(timeout=max(hard - time.monotonic(), 1))
            actor_out = [a.communicate(timeout=max(hard - time.monotonic(), 1))[0] for a in actors]
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            logs = [p.communicate()[0][-2000:] for p in procs if p.stdout is not None and not p.stdout.closed]
            pytest.fail("learner or actors did not finish:\n" + "\n---\n".join(logs))
    finally:
        for p in procs:
            p.kill()
    assert learner.returncode == 0, out[-3000:]

    # Every chunk each actor produced was acknowledged (nothing unacknowledged or dropped).
    produced = {}
    for i, text in zip((1, 2), actor_out, strict=True):
        m = re.search(r"actor (\d+): ([\d,]+) env steps, (\d+)/(\d+) chunks acknowledged, (\d+) unacknowledged, "
                      r"(\d+) dropped", text)
        assert m, text[-2000:]
        steps, acked, sent, unacked, dropped = (int(g.replace(",", "")) for g in m.groups()[1:])
        assert (acked, unacked, dropped) == (sent, 0, 0), text[-2000:]
        produced[i] = steps

    # On disk: each actor's transitions exactly once. The policy samples actions from a Gaussian, so
    # (actor, sub-env, reward, action) identifies a transition; a chunk stored twice repeats its keys.
    actor_id, env_index, reward, action = _replay_rows(run_dir / "replay" / "online")
    for i, steps in produced.items():
        assert int((actor_id == i).sum()) == steps, f"actor {i}: {steps} produced, {(actor_id == i).sum()} stored"
    keys = torch.cat([actor_id[:, None].double(), env_index[:, None].double(), reward[:, None].double(),
                      action.double()], 1)
    assert torch.unique(keys, dim=0).shape[0] == keys.shape[0], "a transition is stored twice"

    # Training resumed from the newest checkpoint (the first restart may find none yet): the digest
    # of the restored networks is the one the checkpoint saved, and the update counter carried on.
    log_text = (run_dir / "train.log").read_text()
    resumes = re.findall(r"resumed from (\S+) at \d+ env steps, (\d+) updates, policy version \d+, "
                         r"algo digest (\w+)", log_text)
    no_ckpt = log_text.count("has no checkpoint yet")
    assert len(resumes) + no_ckpt == 2 and resumes, log_text[-3000:]
    assert [p for p, _, _ in resumes] == newest
    for path, updates, digest in resumes:
        meta = saved_meta[path]
        assert meta["algo_digest"] == digest and meta["updates"] == int(updates)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["gradient_updates"] > max(int(u) for _, u, _ in resumes) > 0
    assert summary["env_steps"] == sum(produced.values())
    # Besides duplicates, only a connection that hung up during the ZeroMQ handshake (an actor reconnecting
    # while a learner dies or starts) may be counted: a socket event, not a message.
    assert set(summary["rejected_batches"]) <= {"duplicate", "handshake_aborted"}, summary["rejected_batches"]
    assert list_checkpoints(run_dir)


# ---- the pieces, in process (fast) ---------------------------------------------------------------


def test_segments_record_whole_chunks_and_the_window_survives_pruning(tmp_path: Path) -> None:
    from robot_rl.replay.buffer import ReplayBuffer
    from robot_rl.replay.crashtest import SPEC, id_rows
    from robot_rl.replay.persist import keep_chunk_whole, mark_chunk
    from robot_rl.replay.segments import open_buffer

    rng = random.Random(0)
    buf = ReplayBuffer(SPEC, capacity=40)
    open_buffer(buf, tmp_path, segment_transitions=10)
    for seq in range(30):  # chunks of 4 rows, segments of at most 10: a chunk would straddle without care
        keep_chunk_whole(buf, 4)
        buf.add(id_rows(4 * seq, 4, rng))
        mark_chunk(buf, "sess", seq)
    buf.flush()
    for seq in range(30, 32):  # added, never committed: "killed" before the next commit
        buf.add(id_rows(4 * seq, 4, rng))
        mark_chunk(buf, "sess", seq)
    segs = sorted(tmp_path.glob("seg_*.rrs"))
    assert len(segs) < 15  # old segments were pruned (capacity 40), the window must not shrink with them
    again = ReplayBuffer(SPEC, capacity=40)
    report = open_buffer(again, tmp_path, segment_transitions=10)
    assert report.chunks == {"sess": {"floor": 30, "above": []}}
    assert again.transitions_written == 120 and again.transitions_written % 4 == 0


@pytest.mark.integration
def test_a_resend_that_arrived_before_the_windows_were_loaded_is_dropped_and_acked() -> None:
    from robot_rl.replay.crashtest import SPEC, id_rows
    from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqLearnerEndpoint, ZmqSettings

    fast = ZmqSettings(heartbeat_s=0.1, resend_after_s=0.3, ack_after="confirm")
    learner = ZmqLearnerEndpoint("tcp://127.0.0.1:0", SPEC, fast)
    actor = ZmqActorEndpoint(learner.address, 1, SPEC, fast)
    try:
        assert actor.send(id_rows(0, 3, random.Random(0)), 5.0)
        wait_until(lambda: learner.pending() > 0, 5, "the chunk at the learner")
        # A restarted learner learns from its replay on disk that chunk 0 of this session is stored.
        learner.merge_state_dict({"sessions": {actor.session: {"floor": 1, "above": []}}})
        assert learner.recv(0.3) is None
        assert learner.stats.rejected.get("duplicate") == 1
        wait_until(lambda: actor.unacked() == 0, 5, "the dropped resend acknowledged", seen=actor.unacked)
        assert learner.state_dict()["sessions"][actor.session] == {"floor": 1, "above": []}
    finally:
        actor.close()
        learner.close()
