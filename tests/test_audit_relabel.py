"""A reward audit's answers correct the learner's replay: exactly the rows they name, and still after a reopen."""

from __future__ import annotations

from pathlib import Path

import torch

from robot_rl.core.transition import TransitionBatch
from robot_rl.human_loop.audit_relabel import ReplayRelabeller
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.replay.crashtest import SPEC
from robot_rl.replay.segments import open_buffer
from robot_rl.rewards.audit_queue import AuditQueue, Question

FIRES = (4, 9, 15, 22)
"""Rows where the learned reward fired (reward 1, the episode ends); the others pay 0 and go on."""


def _episode_rows(actor_id: int, n: int = 30) -> TransitionBatch:
    """One env's ``n`` steps: state = (t, t, t), next state (t + 1, ...); fires at ``FIRES`` end their episodes."""
    t = torch.arange(n, dtype=torch.float32)
    fire = torch.zeros(n, dtype=torch.bool)
    fire[list(FIRES)] = True
    return TransitionBatch(obs={"state": t[:, None].expand(n, 3).clone()}, action=torch.zeros(n, 2),
                           reward=fire.float(), terminated=fire.clone(), truncated=torch.zeros(n, dtype=torch.bool),
                           next_obs={"state": (t + 1)[:, None].expand(n, 3).clone()},
                           intervened=torch.zeros(n, dtype=torch.bool),
                           policy_version=torch.zeros(n, dtype=torch.int64),
                           env_index=torch.zeros(n, dtype=torch.int64), actor_id=actor_id)


def _open(d: Path) -> ReplayBuffer:
    buf = ReplayBuffer(SPEC, 200)
    open_buffer(buf, d, segment_transitions=8)
    return buf


def _outcomes(buf: ReplayBuffer) -> tuple[torch.Tensor, ...]:
    return buf.outcomes(torch.arange(buf.transitions_written))


def _key(step: int) -> dict[str, list[float]]:
    return {"state": [step + 1.0] * 3}  # the next observation of the step


def test_answers_and_rescorings_change_exactly_their_rows_and_survive_a_reopen(tmp_path: Path) -> None:
    buf = _open(tmp_path / "replay")
    buf.add(_episode_rows(actor_id=0))
    buf.add(_episode_rows(actor_id=1))  # the same states from another actor: never touched
    buf.flush()  # on disk before the answers come: the segments keep the old rewards, the journal the new
    before = _outcomes(buf)
    queue = AuditQueue(tmp_path / "audit_queue")
    for step, ok in ((9, False), (15, True)):  # a "no" about a paid step; a "yes" changes nothing
        queue.ask(Question(f"q{step}", episode=0, step=step, actor_id=0, key=_key(step), paid=True), {})
        queue.answer(f"q{step}", ok)
    queue.add_relabels([{"actor_id": 0, "key": _key(22), "success": False, "source": "rescored"},
                        {"actor_id": 0, "key": _key(3), "success": False, "source": "rescored"},  # paid nothing
                        {"actor_id": 5, "key": _key(9), "success": False, "source": "rescored"}])  # no such actor

    relabeller = ReplayRelabeller(queue, buf)
    assert relabeller.poll(force=True) == 2 and relabeller.unmatched == 2
    assert relabeller.poll(force=True) == 0  # read once

    reward, terminated, truncated = _outcomes(buf)
    changed = torch.nonzero((reward != before[0]) | (terminated != before[1]) | (truncated != before[2])).flatten()
    assert changed.tolist() == [9, 22]  # actor 0's rows 9 and 22 (actor 1's rows are 30..59)
    assert reward[[9, 22]].tolist() == [0.0, 0.0]
    assert not terminated[[9, 22]].any() and truncated[[9, 22]].all()  # the episode still ended there
    assert reward[[4, 15, 34, 39, 52]].tolist() == [1.0] * 5
    buf.close()

    again = _open(tmp_path / "replay")
    assert all(torch.equal(a, b) for a, b in zip(_outcomes(again), (reward, terminated, truncated), strict=True))
    # A learner restarted reads the queue again: its corrections are already there, nothing changes twice.
    assert ReplayRelabeller(queue, again).poll(force=True) == 0
    again.close()


def test_a_yes_about_a_withheld_step_that_ended_its_episode_pays_it(tmp_path: Path) -> None:
    buf = ReplayBuffer(SPEC, 100)
    rows = _episode_rows(actor_id=0)
    rows.reward[4], rows.terminated[4], rows.truncated[4] = 0.0, False, True
    buf.add(rows)
    queue = AuditQueue(tmp_path)
    queue.ask(Question("q4", episode=0, step=4, key=_key(4), paid=False), {})
    queue.answer("q4", True)
    assert ReplayRelabeller(queue, buf).poll(force=True) == 1
    assert [x[4].item() for x in _outcomes(buf)] == [1.0, True, False]
