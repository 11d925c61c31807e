"""docs/deploy.md's HIL-SERL workflow, run as written: the docs and the behaviour cannot drift apart.

The four commands are read from the docs' shell block and run as a user runs them (real processes, no
terminal, Ctrl-C to stop the learner and the actor), with the simulated arm at 4x real time so that 1.5
minutes of wall clock are 6 minutes of robot time; the policy alone must then reach the docs' bar.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_workflow import hil_cli_workflow

pytest.importorskip("mujoco")  # the simulated arm
pytest.importorskip("msgpack")

pytestmark = [pytest.mark.sim, pytest.mark.slow]

def _workflow():
    return hil_cli_workflow()


def test_the_docs_block_is_what_runs():
    cmds = _workflow().workflow_commands()
    assert [c.split()[1] for c in cmds] == ["record", "deploy", "deploy", "deploy"]
    assert "--device pick_demonstrator" in cmds[0] and "--role learner" in cmds[1] and "--mode learn" in cmds[2]
    assert "--mode eval" in cmds[3] and "--teleop scripted" in cmds[3]


def test_the_documented_commands_learn_the_pick(tmp_path: Path):
    wf = _workflow()
    result = wf.run_once(tmp_path, minutes=1.5, scale=4.0, log=print)
    print(result)
    assert result["episodes"] == 20
    # The docs' bar is 80 % alone after 10 minutes of robot time at real-time pace; here 6 minutes at 4x on a
    # shared CI machine, where the learner gets fewer updates per robot step: the same bar.
    assert result["alone_success"] >= wf.TARGET, result
