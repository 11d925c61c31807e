"""A learner-shaped workload for kill -9 tests: rows with known ids into persisted replay, plus checkpoints.

:func:`run_writer` opens ``<run>/replay/online`` and ``<run>/checkpoints`` exactly as a restarted
learner would, then loops: add a few rows whose ``reward`` is their id, take an optimiser step, and
every few rounds commit a checkpoint. Every durable event is written to ``events`` (one line, with
``os.write``, which a SIGKILL cannot lose once it returned) *after* it is durable:

- ``OPEN <rows> <len>`` after reopening; ``COMMIT <rows>`` after a segment commit;
- ``CKPT <step> <sha256 of the state>`` after a checkpoint commit.

:func:`verify_run` then checks what a restarted learner would see against those lines.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robot_rl.checkpoint import CheckpointError, load_latest, save_checkpoint, state_digest
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.replay.segments import LoadReport, open_buffer

SPEC = EnvSpec(observation={"state": ArraySpec((3,))}, action=ArraySpec((2,), "float32", -1.0, 1.0))


def id_rows(first: int, n: int, rng: random.Random) -> TransitionBatch:
    """``n`` rows with ids ``first …``: reward = id, state = (id, id, id), next state = id + 0.5."""
    ids = torch.arange(first, first + n, dtype=torch.float32)
    return TransitionBatch(
        obs={"state": ids[:, None].expand(n, 3).clone()}, action=torch.zeros(n, 2), reward=ids.clone(),
        terminated=torch.tensor([rng.random() < 0.1 for _ in range(n)]), truncated=torch.zeros(n, dtype=torch.bool),
        next_obs={"state": (ids + 0.5)[:, None].expand(n, 3).clone()}, intervened=torch.zeros(n, dtype=torch.bool),
        policy_version=torch.zeros(n, dtype=torch.int64), env_index=torch.arange(n))


def _model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def open_run(run: Path, capacity: int = 100_000, segment: int = 16) -> tuple[ReplayBuffer, LoadReport]:
    """The run's replay, opened as a restarted learner opens it."""
    buf = ReplayBuffer(SPEC, capacity)
    return buf, open_buffer(buf, Path(run) / "replay" / "online", segment_transitions=segment)


def run_writer(run: str, events: str, seed: int, crash_point: str = "", rounds: int = 10_000) -> None:
    """The workload (runs until killed, or ``rounds`` rounds)."""
    if crash_point:
        os.environ["ROBOT_RL_CRASH_POINT"] = crash_point
    torch.set_num_threads(1)
    fd = os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    rng = random.Random(seed)
    buf, _ = open_run(Path(run))
    model, optim = _model()
    step = 0
    try:
        state, meta, _ = load_latest(Path(run))
        model.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        step = int(meta["step"])
    except CheckpointError:
        pass
    emit(f"OPEN {buf.transitions_written} {len(buf)}")
    committed = buf.watermark[0]
    for r in range(rounds):
        buf.add(id_rows(buf.transitions_written, rng.randint(1, 6), rng))
        if buf.watermark[0] != committed:
            committed = buf.watermark[0]
            emit(f"COMMIT {committed}")
        batch = buf.sample(8)
        loss = (model(batch.obs["state"]) - batch.reward[:, None]).square().mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
        if r % 4 == 3:
            step += 1
            committed = buf.flush()[0]
            emit(f"COMMIT {committed}")
            state = {"model": model.state_dict(), "optim": optim.state_dict(), "watermark": committed}
            save_checkpoint(Path(run), step, state, {"digest": state_digest(state)}, keep=2)
            emit(f"CKPT {step} {state_digest(state)}")
    os.close(fd)


def verify_run(run: Path, events: Path) -> dict[str, Any]:
    """Check a killed run as a restart sees it; raise AssertionError naming what is wrong.

    Every row committed before the kill is present, ids are contiguous and unique, the newest
    checkpoint verifies and its state hashes to what was saved (and to what the writer printed).
    """
    lines = [ln.split() for ln in events.read_text().splitlines() if ln.strip()]
    committed = max([int(x[1]) for x in lines if x[0] in ("COMMIT", "OPEN")], default=0)
    printed = {int(x[1]): x[2] for x in lines if x[0] == "CKPT"}
    buf, report = open_run(run)
    assert not report.dropped_segments, report.summary()
    ids = buf.gather(torch.arange(len(buf))).reward.long()
    n = len(buf)
    assert n >= committed, f"{committed} rows were committed before the kill, only {n} are on disk"
    assert torch.equal(ids, torch.arange(n)), "rows missing, duplicated or out of order"
    again, _ = open_run(run)
    assert again.transitions_written == n and torch.equal(again.gather(torch.arange(n)).reward, ids.float())
    out: dict[str, Any] = {"rows": n, "committed": committed, "checkpoint": None}
    try:
        state, meta, path = load_latest(run)
    except CheckpointError:
        assert not printed, "a checkpoint was reported committed but none loads"
        return out
    digest = state_digest(state)
    assert digest == meta["digest"], f"{path}: state loads but hashes differently from what was saved"
    step = int(meta["step"])
    assert step >= max(printed, default=0), f"checkpoint {max(printed)} was committed, newest loadable is {step}"
    if step in printed:
        assert printed[step] == digest, f"{path}: digest differs from the one printed at save time"
    assert state["watermark"] <= n, "the checkpoint's replay watermark is beyond the rows on disk"
    model, optim = _model()
    model.load_state_dict(state["model"])
    optim.load_state_dict(state["optim"])
    assert state_digest({"model": model.state_dict(), "optim": optim.state_dict(),
                         "watermark": state["watermark"]}) == digest
    out["checkpoint"] = step
    return out
