"""interrupts_held: Ctrl-C and SIGTERM inside the block arrive after it, as the handler in force delivers them."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from robot_rl.core.interrupts import interrupts_held


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Python's own Ctrl-C handler, whatever the runner started with (a background job starts with SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_inside_waits_for_the_end_of_the_block() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("written")
            done.append("counted")
    assert done == ["written", "counted"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_ctrl_c_stays_ignored() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        done = []
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("written")
        assert done == ["written"]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sigterm_goes_to_the_verbs_handler_after_the_block() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
    try:
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGTERM)
            assert seen == []
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_a_second_stop_inside_interrupts_at_once() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            done.append("never")
    assert done == []
