"""The fixed-rate loop: period statistics and overruns without catch-up bursts."""

import time

import pytest

from robot_rl.hardware.rate import RateLoop


def test_loop_holds_its_period():
    loop = RateLoop(50.0, max_ticks=20)
    start = time.perf_counter()
    ticks = list(loop)
    wall = time.perf_counter() - start
    stats = loop.stats()
    assert ticks == list(range(20)) and stats.ticks == 20
    # Never faster than the period; slower only by what a loaded 2-core machine costs (generous: a loop that
    # ignored its period would take ~0 s, one that slept twice 2x).
    assert 0.95 * 19 * 0.02 <= wall < 1.6 * 19 * 0.02, wall
    assert 0.019 <= stats.p50_s < 0.03, stats.p50_s
    assert "50 Hz" in stats.summary()


@pytest.mark.integration
def test_overrun_is_counted_and_not_followed_by_a_burst():
    loop = RateLoop(20.0, max_ticks=6)
    for tick in loop:
        if tick == 2:
            time.sleep(0.12)  # what is tested: a tick that overruns by 2.4 periods
    stats = loop.stats()
    assert stats.overruns >= 1  # the stall (a loaded machine may make another tick 10 % late as well)
    periods = list(loop.periods)
    # No catch-up tick after the stall: the next comes a whole period later (those after it keep the schedule, and
    # on a loaded machine one woken late is followed by a shorter one, as a fixed schedule does).
    assert periods[2] >= 0.12 and periods[3] >= 0.049
    assert stats.max_s >= 0.12


def test_rate_outside_range_is_refused():
    with pytest.raises(ValueError, match="Hz"):
        RateLoop(0.0)



def test_a_pause_is_neither_a_period_nor_an_overrun(monkeypatch):
    import robot_rl.core.rate as rate

    class Clock:  # the loop's clock, advanced by hand: no real sleep
        now = 0.0

        @staticmethod
        def perf_counter() -> float:
            return Clock.now

        @staticmethod
        def sleep(s: float) -> None:
            Clock.now += s

    monkeypatch.setattr(rate, "time", Clock)

    def run(pause: bool) -> RateLoop:
        loop = RateLoop(10.0)
        loop.wait()
        Clock.now += 0.1
        loop.wait()
        if pause:
            loop.pause()  # held between episodes, waiting for the learner
        Clock.now += 5.0
        loop.wait()
        Clock.now += 0.1
        loop.wait()
        return loop

    stalled, paused = run(pause=False), run(pause=True)
    assert stalled.overruns == 1 and [round(p, 6) for p in stalled.periods] == [0.1, 5.0, 0.1]
    assert paused.overruns == 0 and [round(p, 6) for p in paused.periods] == [0.1, 0.1]



def test_after_an_overrun_the_schedule_restarts_from_the_tick_itself(monkeypatch):
    import robot_rl.core.rate as rate

    class Clock:  # a loaded machine: the OS runs something else for 45 ms between the overrun's check and its tick
        now, reads, preempted_at = 0.0, 0, 4

        @staticmethod
        def perf_counter() -> float:
            Clock.reads += 1
            if Clock.reads == Clock.preempted_at:
                Clock.now += 0.045
            return Clock.now

        @staticmethod
        def sleep(s: float) -> None:
            Clock.now += s

    monkeypatch.setattr(rate, "time", Clock)
    loop = RateLoop(20.0)
    loop.wait()
    Clock.now += 0.2  # the caller's work overran
    loop.wait()
    loop.wait()
    # The overrun's period includes the 45 ms; the next is a whole period, not the 5 ms left to a deadline counted
    # from before them (a catch-up tick).
    assert [round(p, 6) for p in loop.periods] == [0.245, 0.05] and loop.overruns == 1
