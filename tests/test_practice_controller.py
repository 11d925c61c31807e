"""Practice's bookkeeping by hand: the schedule, the stuck rule, the person's budget, the relabelled experience."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from robot_rl.hardware.teleop import TeleopReading
from robot_rl.human_loop.practice.config import PracticeConfig
from robot_rl.human_loop.practice.controller import Attempt, PracticeController
from robot_rl.human_loop.practice.loop import KeyPerson, Mirror


def test_task_and_reset_alternate_and_a_person_reset_gives_the_task_its_turn() -> None:
    ctl = PracticeController(PracticeConfig(), now=0.0)
    order = []
    for i in range(4):
        order.append(ctl.next_policy())
        ctl.record(Attempt(ctl.next_policy(), success=i == 1, steps=5), now=float(i))
    assert order == ["task", "reset", "task", "reset"]
    ctl.record(Attempt("task", False, 5), 5.0)  # now the reset's turn ...
    ctl.answered(True, 6.0)  # ... but the person put the scene back: the task acts
    assert ctl.next_policy() == "task"
    c = ctl.counts
    assert (c.task_attempts, c.task_successes, c.reset_attempts, c.reset_successes) == (3, 0, 2, 1)


def test_stuck_after_attempts_without_success_after_time_and_at_once_out_of_reach() -> None:
    ctl = PracticeController(PracticeConfig(stuck_after_attempts=3, stuck_after_s=100.0), now=0.0)
    for i in range(2):
        ctl.record(Attempt("task" if i % 2 == 0 else "reset", False, 10), now=1.0)
        assert ctl.stuck(1.0) == ""
    ctl.record(Attempt("task", False, 10), now=2.0)
    assert ctl.stuck(2.0) == "no success in 3 attempts"
    ctl.record(Attempt("reset", True, 4), now=3.0)  # a success clears it
    assert ctl.stuck(3.0) == "" and ctl.stuck(103.0) == "no success for 100s"
    ctl.record(Attempt("task", False, 10, in_reach=False), now=4.0)
    assert ctl.stuck(4.0) == "the object is out of reach"
    quiet = PracticeController(PracticeConfig(ask_when_out_of_reach=False), now=0.0)
    quiet.record(Attempt("task", False, 10, in_reach=False), now=1.0)
    assert quiet.stuck(1.0) == ""


def test_the_budget_holds_whatever_the_robot_asks() -> None:
    """A robot stuck at every attempt for 3 hours asks at most 1 + rate × hours times."""
    cfg = PracticeConfig(stuck_after_attempts=1, max_requests_per_hour=4.0)
    ctl = PracticeController(cfg, now=0.0)
    for k in range(1, 3 * 3600, 30):  # an attempt every 30 s, each one failing, the scene never back
        now = float(k)
        ctl.record(Attempt("task" if k % 60 == 1 else "reset", False, 40), now)
        kind, _ = ctl.ask(now)
        if kind == "reset":
            ctl.answered(False, now)  # nobody came: it stays stuck and keeps asking
        c = ctl.counts
        assert c.reset_requests + c.takeover_requests <= 1 + 4.0 * now / 3600
    # the last attempt at 2.99 h: 1 + floor(4 × 2.99) = 12 requests
    c = ctl.counts
    assert c.reset_requests + c.takeover_requests == 12 and c.takeover_requests == 1  # at first the scene was back
    assert c.unanswered == c.reset_requests
    assert ctl.counts.over_budget > 300
    zero = PracticeController(PracticeConfig(stuck_after_attempts=1, max_requests_per_hour=0.0), now=0.0)
    zero.record(Attempt("task", False, 40), 1.0)
    assert zero.ask(1.0)[0] and not zero.ask(10_000.0)[0]  # one at the start, then none


def test_with_the_scene_at_its_start_the_robot_asks_for_a_takeover_else_for_a_reset() -> None:
    ctl = PracticeController(PracticeConfig(stuck_after_attempts=2, max_requests_per_hour=3600.0), now=0.0)
    ctl.record(Attempt("task", False, 40), 1.0)
    ctl.record(Attempt("reset", True, 0), 2.0)  # not needed: no progress, and the scene is at its start
    assert ctl.counts.reset_not_needed == 1 and ctl.failed_in_row == 1
    ctl.record(Attempt("task", False, 40), 3.0)
    assert ctl.ask(3.0) == ("takeover", "no success in 2 attempts") and ctl.next_policy() == "task"
    ctl.record(Attempt("task", False, 40, interventions=1), 4.0)
    ctl.record(Attempt("reset", False, 40), 5.0)  # the scene is not back
    assert ctl.ask(5.0) == ("reset", "no success in 2 attempts")
    ctl.answered(True, 6.0)
    ctl.record(Attempt("task", False, 40, in_reach=False), 7.0)
    assert ctl.ask(7.0) == ("reset", "the object is out of reach")  # a takeover cannot reach it
    c = ctl.counts
    assert (c.takeover_requests, c.reset_requests, c.takeovers, c.human_resets) == (1, 2, 1, 1)
    ctl.record(Attempt("task", True, 0), 8.0)  # the task found done: not the policy's success
    assert c.task_successes == 0 and c.task_already_done == 1


def test_human_actions_are_the_persons_resets_and_takeovers() -> None:
    ctl = PracticeController(PracticeConfig(stuck_after_attempts=1), now=0.0)
    ctl.record(Attempt("reset", False, 40, interventions=2), 1.0)
    assert ctl.ask(1.0)[0] == "reset"
    ctl.answered(True, 2.0)
    ctl.record(Attempt("reset", True, 0), 3.0)
    c = ctl.counts
    assert (c.human_resets, c.takeovers, c.human_actions, c.reset_not_needed) == (1, 2, 3, 1)
    assert c.as_dict()["human_actions"] == 3


def test_a_bad_practice_setting_is_one_line_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"practice\.reset_classifier"):
        PracticeConfig(reset_reward="classifier")
    with pytest.raises(ValueError, match="valid: robot"):
        PracticeConfig(reset_reward="magic")


class _Peer:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def record_row(self, row: dict[str, Any]) -> None:
        self.rows.append(row)


def test_a_transition_reaches_the_other_learner_with_its_reward_never_flagged_intervened() -> None:
    peer = _Peer()
    paid = iter([(-0.7, False), (5.0, True), (-0.2, False)])
    mirror = Mirror(peer, lambda obs: next(paid))  # type: ignore[arg-type]
    base = {"obs": {}, "action": np.zeros(7), "next_obs": {}, "version": 3, "extras": {}}
    mirror({**base, "reward": 1.0, "terminated": False, "truncated": False, "intervened": True}, {})
    mirror({**base, "reward": -1.0, "terminated": False, "truncated": False, "intervened": False}, {})
    mirror({**base, "reward": 5.0, "terminated": True, "truncated": False, "intervened": False}, {})
    got = [(r["reward"], r["terminated"], r["truncated"], r["intervened"]) for r in peer.rows]
    # the acting policy's success ends its attempt: for the other policy that is a cut, not a terminal state
    assert got == [(-0.7, False, False, False), (5.0, True, False, False), (-0.2, False, True, False)]
    assert mirror.rows == 3


class _Keys:
    def __init__(self, events_at: int) -> None:
        self.reads = 0
        self.events_at = events_at

    def read(self) -> TeleopReading:
        self.reads += 1
        return TeleopReading(timestamp=0.0, events=("reset",) if self.reads == self.events_at else ())


def test_a_person_at_a_real_cell_answers_with_a_key_and_the_robot_holds_until_then() -> None:
    held = []
    clock = iter(np.arange(0.0, 100.0, 0.1))
    person = KeyPerson(_Keys(events_at=5), lambda: held.append(1), timeout_s=2.0,  # type: ignore[arg-type]
                       clock=lambda: float(next(clock)), bell=False)
    assert person.put_back("no success in 6 attempts") and len(held) == 5
    late = KeyPerson(_Keys(events_at=10**6), lambda: None, timeout_s=2.0,  # type: ignore[arg-type]
                     clock=lambda: float(next(clock)), bell=False)
    assert not late.put_back("the object is out of reach")


def test_each_policy_is_paid_as_its_own_loop_pays_it() -> None:
    """``phase_reward``: a task reader (the reset policy's ``at_start``), else the robot's task, else a classifier."""
    from types import SimpleNamespace

    from robot_rl.human_loop.practice.loop import PhaseStatus, phase_reward

    reader = SimpleNamespace(task_reader=lambda: PhaseStatus(True, 5.0), robot=object(),
                             cfg=SimpleNamespace(reward_source="robot"), judge=None)
    assert phase_reward(reader)({}) == (5.0, True)  # type: ignore[arg-type]
    start_frames = SimpleNamespace(task_reader=None, robot=object(), cfg=SimpleNamespace(reward_source="classifier"),
                                   judge=lambda obs: float(obs["image.front"].mean()) < 0.5)
    pay = phase_reward(start_frames)  # type: ignore[arg-type]
    assert pay({"image.front": np.zeros((2, 2, 3))}) == (1.0, True)
    assert pay({"image.front": np.ones((2, 2, 3))}) == (0.0, False)
    keys = SimpleNamespace(task_reader=None, robot=object(), cfg=SimpleNamespace(reward_source="keys"), judge=None)
    assert phase_reward(keys)({}) == (0.0, False)  # type: ignore[arg-type]


class _Loop:
    """A deploy loop as the runner drives it: every call logged in one shared journal."""

    def __init__(self, name: str, journal: list[str]) -> None:
        from types import SimpleNamespace

        self.name, self.journal = name, journal
        self.task_reader, self.judge, self.on_row = None, None, None
        self.robot, self.device = object(), object()
        self.cfg = SimpleNamespace(reward_source="robot")

    def wait_for_learner(self, stop: Any) -> None:
        self.journal.append(f"wait {self.name}")

    def run_episode(self, index: int) -> Any:
        from types import SimpleNamespace

        self.journal.append(f"run {self.name}")
        return SimpleNamespace(success=False, steps=3, interventions=0, end="time_limit", policy_version=1)


def test_before_every_attempt_both_learners_catch_up_so_the_update_ratio_holds_under_load() -> None:
    """Each learner is fed every step (its own policy's and, relabelled, the other's): with max_unlearned_chunks the
    robot waits, held, for both before the next attempt, as one deploy loop waits for its learner."""
    from robot_rl.human_loop.deploy_config import DeployConfig
    from robot_rl.human_loop.practice.loop import PracticeRunner

    journal: list[str] = []
    runner = PracticeRunner(DeployConfig(max_unlearned_chunks=4), _Loop("task", journal),  # type: ignore[arg-type]
                            _Loop("reset", journal), None, clock=lambda: 0.0)  # type: ignore[arg-type]
    runner.attempt()
    runner.attempt()
    assert journal == ["wait task", "wait reset", "run task", "wait task", "wait reset", "run reset"]


def test_a_failed_reset_is_tried_again_up_to_reset_tries_then_the_task_acts_from_where_it_is() -> None:
    ctl = PracticeController(PracticeConfig(reset_tries=3, stuck_after_attempts=50), now=0.0)
    order = []
    for success in (False, False, False, False, False, True):
        order.append(ctl.next_policy())
        ctl.record(Attempt(ctl.next_policy(), success=success and ctl.next_policy() == "reset", steps=5), 0.0)
    assert order == ["task", "reset", "reset", "reset", "task", "reset"]
    ctl.record(Attempt("task", False, 5), 0.0)
    ctl.record(Attempt("reset", True, 5), 0.0)  # back at the start: the task's turn at once
    assert ctl.next_policy() == "task"
    with pytest.raises(ValueError, match="reset_tries"):
        PracticeConfig(reset_tries=0)
