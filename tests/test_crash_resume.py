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


def _run_until_killed(ctx, run: Path, events: Path, seed: int, point: str, delay: float) -> None:
    p = ctx.Process(target=run_writer, args=(str(run), str(events), seed, point))
    p.start()
    p.join(delay)
    if p.is_alive():
        p.kill()  # SIGKILL
        p.join(10)
    assert p.exitcode is not None and p.exitcode < 0, f"writer ended with {p.exitcode}, expected a kill"


@pytest.mark.slow  # 26 kills, ~17 s on 2 cores
def test_kill_9_in_a_loop_loses_nothing_committed(tmp_path: Path, ctx):
    run, events = tmp_path / "run", tmp_path / "events.log"
    rng = random.Random(1234)
    plan = [(p, 5.0) for p in CRASH_POINTS] + [("", rng.uniform(0.05, 0.5)) for _ in range(18)]
    rng.shuffle(plan)
    checkpoints = set()
    for i, (point, delay) in enumerate(plan):
        _run_until_killed(ctx, run, events, seed=i, point=point, delay=delay)
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
