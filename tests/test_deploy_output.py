"""What `robot-rl deploy` writes when its output goes to a file, as a user runs it (no terminal, one stream).

The live status line is for a terminal; in a file its last frame once ran into the next message
(``…+2 morewarnings of this run``), and a run with nobody at the teleop still told the reader to hold a control.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_runs import untrained_sim_arm_run

pytest.importorskip("mujoco")  # the simulated arm
pytest.importorskip("msgpack")

pytestmark = [pytest.mark.sim, pytest.mark.slow]

EXE = str(Path(sys.executable).with_name("robot-rl"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return untrained_sim_arm_run(tmp_path_factory.mktemp("output") / "run")


def test_eval_with_nobody_at_the_teleop_to_a_file(run_dir: Path, tmp_path: Path) -> None:
    cmd = [EXE, "deploy", "--mode", "eval", "--run-dir", str(run_dir), "--teleop", "scripted", "--episodes", "2",
           "--max-episode-steps", "10", "robot.cameras={}", "robot.time_scale=4", "safety.control_hz=40",
           "safety.watchdog_timeout_s=1"]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                          timeout=240, cwd=tmp_path)  # `> out.log 2>&1`
    out = done.stdout
    assert done.returncode == 0, out[-3000:]
    assert "HOLD" not in out and "intervene control" not in out, out  # nobody to tell
    assert "deploy (eval): nobody takes over" in out
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("POLICY acting (nobody takes over) | ep 1"))
    frame, after = lines[first + 1], lines[first + 2]
    # The last frame counts the last episode too, ends its line, and the summary starts on its own.
    assert re.match(r"alone \d/2 \(\d+%\), helped 0/0 \| safety ", frame) and "warnings of this run" not in out, out
    assert after.startswith("2 episodes: success "), out
