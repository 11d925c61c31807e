"""docs/so101.md's simulated block: every command resolves to a valid config, and the block is consistent.

Running it end to end takes minutes of robot time (`python benchmarks/hil_cli_workflow.py --workflow so101`);
here each command is parsed exactly as typed (`robot-rl config VERB …`, which resolves options, overrides and
registries without connecting anything), so a renamed option or key breaks this test, not a reader's session.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from docs_workflow import hil_cli_workflow

pytest.importorskip("mujoco")  # sim_so101
pytest.importorskip("mink")

from robot_rl.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    return hil_cli_workflow().workflow_commands("so101")


def test_every_command_of_the_simulated_block_resolves(capsys: pytest.CaptureFixture[str]) -> None:
    cmds = _commands()
    assert [c.split()[1] for c in cmds] == ["record", "record", "reward", "deploy", "deploy", "deploy"]
    for cmd in cmds:
        argv = shlex.split(cmd)[1:]
        assert main(["config", *argv]) == 0, cmd
        out = capsys.readouterr().out
        if argv[0] == "deploy":
            assert "sim_so101" in out and "object_in_state" in out, cmd


def test_the_block_is_consistent() -> None:
    record, fumble, train, learner, actor, evaluate = _commands()
    robot = "robot.object_in_state=true 'robot.cameras={front: [128, 128]}'"
    for cmd in (record, fumble, learner, actor, evaluate):
        assert robot in cmd, cmd  # one robot config everywhere: the same spec for demos, learner, actor, eval
    for cmd in (learner, actor, evaluate):
        assert "'policy_keys=[state]'" in cmd and "--max-episode-steps 60" in cmd
    assert "--out demos/so101" in record and "--append" in fumble and "demos/so101" in train
    assert "classifier=runs/so101_clf" in learner and "classifier=runs/so101_clf" in actor
    assert "--out runs/so101_clf" in train
