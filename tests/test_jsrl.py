"""JSRL's curriculum: the guide's horizon follows its schedule, only on sustained success."""

from __future__ import annotations

import pytest

from robot_rl.loop.jsrl import JSRLConfig, JSRLSchedule


def test_the_guide_horizon_shrinks_in_stages_when_the_window_succeeds() -> None:
    s = JSRLSchedule(JSRLConfig(horizon=40, stages=4, threshold=0.8, window=5))
    assert s.guide_steps == 40 and s.guide_acts(39) and not s.guide_acts(40)
    outcomes = [True, False, True, True, False]  # 3/5 < 0.8: stays
    assert not any(s.end_episode(o) for o in outcomes) and s.guide_steps == 40
    # The window slides: one more success leaves F T T F T (3/5), a second T T F T T (4/5): the move.
    assert [s.end_episode(True), s.end_episode(True)] == [False, True] and s.guide_steps == 30
    for _ in range(3):  # the window restarts after a move: each 5 successes move it 10 steps earlier, down to 0
        assert [s.end_episode(True) for _ in range(5)] == [False] * 4 + [True]
    assert s.guide_steps == 0 and not s.guide_acts(0)
    assert not s.end_episode(True)  # plain online RL from here
    assert s.history == [(7, 30), (12, 20), (17, 10), (22, 0)]


def test_rows_the_guide_acts_are_the_first_h_of_each_episode() -> None:
    s = JSRLSchedule(JSRLConfig(horizon=6, stages=3, threshold=1.0, window=1))
    assert [s.guide_acts(t) for t in range(8)] == [True] * 6 + [False] * 2
    s.end_episode(True)
    assert [s.guide_acts(t) for t in range(8)] == [True] * 4 + [False] * 4


@pytest.mark.parametrize("kw", [{"stages": 0}, {"threshold": 0.0}, {"window": 0}, {"horizon": -1}])
def test_bad_schedules_are_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="jsrl"):
        JSRLConfig(**kw)  # type: ignore[arg-type]
