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


def test_the_fleet_commands_and_file_resolve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from robot_rl.human_loop.fleet import load_fleet

    text = (ROOT / "docs" / "ask-for-help.md").read_text()
    section = text.split("## One operator, several robots", 1)[1].split("\n## ", 1)[0]
    cmds = [c for c in re.findall(r"```bash\n(.*?)```", section, re.S)[0].splitlines() if c.startswith("robot-rl")]
    assert len(cmds) == 2 and "--fleet 3" in cmds[1] and "help.enabled=true" in cmds[0]
    for cmd in cmds:
        assert main(["config", *shlex.split(cmd)[1:]]) == 0, cmd
    capsys.readouterr()
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(re.findall(r"```yaml\n(.*?)```", section, re.S)[0])
    robots = load_fleet(str(fleet))
    assert [r.name for r in robots] == ["left", "right", "twin"]
    assert all(r.teleop in ("leader_arm", "pick_helper") for r in robots), "the fleet file names real devices"
    pytest.importorskip("mujoco")  # sim_so101's spec
    from robot_rl.cli.deploy import DeployArgs, device_settings
    from robot_rl.cli.deploy_fleet import member_args
    from robot_rl.human_loop.fleet import check_fleet, member_configs

    args = DeployArgs(mode="learn", overrides=("help.enabled=true", "robot.cameras={}"))
    members = [member_args(args, r, tmp_path) for r in robots]
    check_fleet(robots, member_configs(args.resolved_config(), robots), learn=True,
                devices=[device_settings(m) for m in members])
    assert [device_settings(m).get("port") for m in members] == ["/dev/ttyACM1", "/dev/ttyACM3", None]
