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
    assert [c.split()[1] for c in cmds] == ["record", "record", "record", "reward", "deploy", "deploy",
                                              "deploy"]
    for cmd in cmds:
        argv = shlex.split(cmd)[1:]
        assert main(["config", *argv]) == 0, cmd
        out = capsys.readouterr().out
        if argv[0] == "deploy":
            assert "sim_so101" in out and "object_in_state" in out, cmd


def test_the_block_is_consistent() -> None:
    record, fumble, wander, train, learner, actor, evaluate = _commands()
    robot = "robot.object_in_state=true 'robot.cameras={front: [128, 128], wrist: [128, 128]}'"
    for cmd in (record, fumble, wander, learner, actor, evaluate):
        assert robot in cmd, cmd  # one robot config everywhere: the same spec for demos, learner, actor, eval
    for cmd in (learner, actor, evaluate):
        assert "'policy_keys=[state]'" in cmd and "--max-episode-steps 60" in cmd
    assert "--out demos/so101" in record and "--append" in fumble and "demos/so101" in train
    assert "--teleop pick_wanderer" in wander and "--append" in wander and "--out demos/so101" in wander
    assert "classifier=runs/so101_clf" in learner and "classifier=runs/so101_clf" in actor
    assert "--out runs/so101_clf" in train


def _real_arm_commands() -> list[str]:
    """Every `robot-rl deploy` / `record` command of the page's bash blocks, continuation lines joined."""
    import re

    text = (ROOT / "docs" / "so101.md").read_text()
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for cmd in block.replace("\\\n", " ").splitlines():
            if cmd.startswith(("robot-rl deploy", "robot-rl record")) and "sim_so101" not in cmd:
                cmds.append(cmd.replace("'robot.options={cameras: {…as in step 4…}}'", ""))
    return cmds


def test_the_real_arm_commands_resolve_the_leader_arm_included(capsys: pytest.CaptureFixture[str]) -> None:
    from robot_rl.human_loop.operator import make_teleop

    cmds = _real_arm_commands()
    leader = [c for c in cmds if c.startswith("robot-rl deploy") and "--teleop leader_arm" in c]
    assert leader, "docs/so101.md shows a deploy with the leader arm"
    for cmd in cmds:
        argv = [a for a in shlex.split(cmd)[1:] if a != "--config" and not a.endswith("limits.yaml")]
        assert main(["config", *argv]) == 0, cmd
    capsys.readouterr()
    device = make_teleop("leader_arm", None, settings={"port": "/dev/ttyACM1", "id": "my_leader",
                                                       "engage_mode": "controls"})
    assert device.config.port == "/dev/ttyACM1" and device.config.id == "my_leader"
    with pytest.raises(ValueError, match="portt"):
        make_teleop("leader_arm", None, settings={"portt": "/dev/ttyACM1"})
