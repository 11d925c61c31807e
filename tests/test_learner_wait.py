"""An actor with no learner says at once where it waits and for how long, in the status line and in plain logs.

It used to be silent for the whole ``max_wait_s`` (60 s) and only then fail: the user could not tell a slow start
from a wrong address. The commands run as a user types them, output to a pipe (no terminal), at a port the OS
chose with nothing listening; the test reads the first lines, then stops the process.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from waiting import wait_until

from robot_rl.core.transport import LearnerWaitNotice
from robot_rl.human_loop.status import StatusLine

EXE = str(Path(sys.executable).with_name("robot-rl"))


def _nobody_listening() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _first_lines_naming(cmd: list[str], address: str, timeout_s: float, cwd: Path) -> list[str]:
    """Start ``cmd``, collect its stderr until a line names ``address`` (or it exits), stop it; the lines so far."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            cwd=cwd)
    lines: list[str] = []
    stream = proc.stderr
    assert stream is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(stream.readline, "")), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any(address in line for line in lines) or proc.poll() is not None, timeout_s,
                   f"a line naming {address}", seen=lambda: lines[-5:])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        reader.join(10)
    return lines


def test_the_notice_says_it_at_once_then_every_ten_seconds_and_the_status_line_counts() -> None:
    said: list[str] = []
    notice = LearnerWaitNotice("tcp://10.0.0.2:5555", 60.0, said.append)
    status = StatusLine(enabled=False)
    on_wait = status.waiting(notice)
    for waited in (0.0, 0.25, 0.5, 9.9, 10.1, 12.0, 19.0, 20.3, 20.6):
        on_wait(waited)
    assert said == ["waiting for the learner at tcp://10.0.0.2:5555: 0s of 60s",
                    "waiting for the learner at tcp://10.0.0.2:5555: 10s of 60s",
                    "waiting for the learner at tcp://10.0.0.2:5555: 20s of 60s"]
    first, _ = status.text().split("\n")
    assert first.startswith("waiting for the learner at tcp://10.0.0.2:5555: 21s of 60s | ep 0 step 0")
    status.update(waiting="")  # the first weights came: the line says who acts again
    assert status.text().startswith("POLICY acting")
    late = LearnerWaitNotice("tcp://10.0.0.2:5555", 60.0, said.append, quiet_s=10.0)
    assert late(3.0).endswith("3s of 60s") and len(said) == 3  # a short wait (a next rollout's weights) says nothing
    late(10.0)
    assert len(said) == 4


def test_plain_output_gets_the_last_status_frame_as_whole_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """With stderr a file the frame was never ended: ``…+2 morewarnings of this run``; the next message's own line."""
    status = StatusLine(enabled=True)  # stderr is captured: no terminal
    with status:
        status.update(safety_counts={"change_limit": 5, "workspace": 3, "velocity": 2, "clamped": 1}, episodes=1)
    print("next message", file=sys.stderr)
    err = capsys.readouterr().err
    assert err.endswith("\nnext message\n") and err.count("\n") == 3, err
    assert "warnings of this run" not in err  # nothing was diverted: no terminal to keep clear


@pytest.mark.slow
def test_actor_without_a_learner_says_where_it_waits_at_once(tmp_path: Path) -> None:
    address = _nobody_listening()
    lines = _first_lines_naming([EXE, "actor", "--connect", address, "loop.max_wait_s=20"], address, 15.0, tmp_path)
    waiting = [line for line in lines if address in line]
    assert waiting and "waiting for the learner at" in waiting[0] and "0s of 20s" in waiting[0], lines


@pytest.mark.sim
@pytest.mark.slow
def test_deploy_learn_without_a_learner_says_where_it_waits_at_once(tmp_path: Path) -> None:
    pytest.importorskip("mujoco")
    address = _nobody_listening()
    lines = _first_lines_naming([EXE, "deploy", "--mode", "learn", "--teleop", "scripted", "--connect", address,
                                 "robot.cameras={}", "max_wait_s=20"], address, 15.0, tmp_path)
    waiting = [line for line in lines if address in line]
    assert waiting and "waiting for the learner at" in waiting[0] and "0s of 20s" in waiting[0], lines
