"""kill -9 at random moments and at exact commit steps; after each restart nothing committed is lost.

The writer runs in a forkserver child (torch imported once), so 24 kill/restart cycles stay fast.
"""

import json
import multiprocessing as mp
import random
import time
from pathlib import Path

import pytest
import torch
from waiting import wait_until

from robot_rl.checkpoint import load_latest, state_digest
from robot_rl.replay.crashtest import run_writer, verify_run

#: Deterministic kill points inside the commit protocols (robot_rl.replay.durable.crash_point).
CRASH_POINTS = ["segment.before_rename", "segment.before_manifest:2", "manifest.before_rename:3",
                "checkpoint.after_state", "checkpoint.before_rename:2", "checkpoint.before_latest"]


@pytest.fixture(scope="module")
def ctx():
    c = mp.get_context("forkserver")
    # torch._dynamo: Adam imports it lazily (seconds), so each child would pay it again.
    c.set_forkserver_preload(["torch", "torch._dynamo", "robot_rl.replay.crashtest"])
    return c


def _events(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0


def _run_until_killed(ctx, run: Path, events: Path, seed: int, point: str, after_events: int, extra_s: float) -> None:
    """One writer run: it dies at its crash ``point``, or is killed -9 once it has logged ``after_events`` events
    (its OPEN, COMMITs and CKPTs) and ``extra_s`` more have passed (a random moment inside the next round).

    Counted in the writer's own progress, not in wall-clock seconds: on a loaded machine a fixed delay killed runs
    before they had done anything (90 rows after 24 restarts in a stress-suite pass), and a crash point a run had
    not reached within its 5 s was a plain kill that the test could not tell from one.
    """
    start = _events(events)
    p = ctx.Process(target=run_writer, args=(str(run), str(events), seed, point))
    p.start()
    try:
        if point:  # the writer kills itself there; the deadline is only for a writer that hangs
            p.join(120)
            assert not p.is_alive(), f"the writer did not reach its crash point {point} in 120 s"
        else:
            wait_until(lambda: _events(events) >= start + after_events or not p.is_alive(), 120,
                       f"{after_events} events from the writer", seen=lambda: _events(events) - start)
            p.join(extra_s)
    finally:
        if p.is_alive():
            p.kill()  # SIGKILL
            p.join(10)
    assert p.exitcode is not None and p.exitcode < 0, f"writer ended with {p.exitcode}, expected a kill"


@pytest.mark.slow  # 26 kills, ~17 s on 2 cores
def test_kill_9_in_a_loop_loses_nothing_committed(tmp_path: Path, ctx):
    run, events = tmp_path / "run", tmp_path / "events.log"
    rng = random.Random(1234)
    plan = [(p, 0, 0.0) for p in CRASH_POINTS] + [("", rng.randint(1, 12), rng.uniform(0.0, 0.05)) for _ in range(18)]
    rng.shuffle(plan)
    checkpoints = set()
    for i, (point, after_events, extra_s) in enumerate(plan):
        _run_until_killed(ctx, run, events, seed=i, point=point, after_events=after_events, extra_s=extra_s)
        result = verify_run(run, events)
        checkpoints.add(result["checkpoint"])
    # The runs really got somewhere: rows and several checkpoints across the 24 restarts.
    assert result["rows"] > 100 and len(checkpoints) > 3, (result, checkpoints)
    assert len(plan) >= 20


def test_train_resume_continues_exactly(tmp_path: Path):
    from robot_rl.cli import main
    from robot_rl.loop.runner import InProcessRunner, load_run_config

    tiny = ["loop.total_env_steps=400", "loop.eval_every_env_steps=400", "loop.eval_episodes=4",
            "run.progress=false", "task.num_envs=4", "algo.learning_starts=64", "algo.batch_size=16",
            "algo.actor_hidden=[16,16]", "algo.critic_hidden=[16,16]", "replay.segment_transitions=64"]
    assert main(["train", "--name", "r", f"run.root={tmp_path}", *tiny]) == 0
    run = tmp_path / "r"
    state, meta, _ = load_latest(run)
    summary = json.loads((run / "summary.json").read_text())
    runner = InProcessRunner(load_run_config(run), run_dir=run, resume=True)
    try:
        # Same networks, optimisers, temperature and counters; the replay is back, not refilled.
        assert state_digest(runner.algo.state_dict()) == meta["algo_digest"] == state_digest(state["algo"])
        assert runner.learner.transitions == summary["env_steps"] == meta["env_steps"]
        assert len(runner.learner.storage) == state["replay"]["sizes"]["online"] == summary["env_steps"]
        assert runner.learner.owed_updates == int(state["learner"]["owed_updates"])
        assert torch.equal(torch.get_rng_state(), state["rng"]["torch"])
        before = len(runner.learner.storage)
    finally:
        for env in [*runner.envs, runner.eval_env]:
            env.close()
    t0 = time.monotonic()
    assert main(["train", "--resume", str(run), "loop.total_env_steps=480", "run.progress=false"]) == 0
    again = json.loads((run / "summary.json").read_text())
    # Updates continued at once (no learning_starts wait), and the replay grew from where it was.
    assert again["gradient_updates"] > summary["gradient_updates"]
    state2, _, _ = load_latest(run)
    assert state2["replay"]["sizes"]["online"] == again["env_steps"] > before
    assert time.monotonic() - t0 < 60
