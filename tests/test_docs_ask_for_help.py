"""docs/ask-for-help.md's workflow: every command resolves as typed, and the block runs (ROBOT_RL_SLOW_TESTS=1).

Each command is parsed exactly as typed (`robot-rl config VERB …` resolves options, overrides and registries
without connecting anything). With ROBOT_RL_SLOW_TESTS=1 the whole block runs as a user runs it (real processes,
Ctrl-C to stop), at 4x real time, and the robot must have asked, been answered, and stayed near its budget.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from docs_workflow import hil_cli_workflow

from robot_rl.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _workflow():
    return hil_cli_workflow()


def test_every_command_of_the_block_resolves(capsys: pytest.CaptureFixture[str]) -> None:
    cmds = _workflow().workflow_commands("help")
    assert [c.split()[1] for c in cmds] == ["record", "deploy", "deploy", "deploy"]
    _, learner, actor, _ = cmds
    assert "help.enabled=true" in learner and "help.enabled=true" in actor and "help.budget=0.1" in actor
    assert "--teleop pick_helper" in actor and "--help-log runs/help/help_scores.jsonl" in actor
    for cmd in cmds:
        argv = shlex.split(cmd)[1:]
        assert main(["config", *argv]) == 0, cmd
        out = capsys.readouterr().out
        if cmd in (learner, actor):
            row = next(line for line in out.splitlines() if "help.enabled " in line)
            assert "True" in row, row


@pytest.mark.skipif(os.environ.get("ROBOT_RL_SLOW_TESTS") != "1", reason="minutes of robot time: ROBOT_RL_SLOW_TESTS=1")
def test_the_documented_commands_ask_within_the_budget(tmp_path: Path) -> None:
    pytest.importorskip("mujoco")
    wf = _workflow()
    result = wf.run_once(tmp_path, minutes=1.5, scale=4.0, log=print, workflow="help")
    print(result)
    assert "help:" in result["actor"] and "0 unasked takeovers" in result["actor"]
    rows = [json.loads(x) for x in (tmp_path / "runs/help/help_scores.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "event" not in r]
    asked = sum(r["ask"] for r in steps) / len(steps)
    assert 0.03 <= asked <= 0.25, asked  # 10 % budget, short run: the tracker has not settled yet
    assert any(r.get("event") == "answered" for r in rows)
