"""The wait helper: returns what the condition returned, fails loudly (what it waited for, what it saw)."""

import itertools

import pytest
from waiting import wait_until


def test_returns_the_first_truthy_value():
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "ready", 5.0, "the counter to reach 3", poll_s=0.0) == "ready"


def test_fails_at_the_deadline_saying_what_it_waited_for_and_saw():
    with pytest.raises(pytest.fail.Exception, match=r"waited 0.05 s for the door to open; last saw: 'closed'"):
        wait_until(lambda: False, 0.05, "the door to open", seen=lambda: "closed")
    with pytest.raises(pytest.fail.Exception, match=r"last saw: 0$"):
        wait_until(lambda: 0, 0.01, "a non-zero count")
