"""docs/offline-to-online.md: every `robot-rl train` command of its workflow resolves as typed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from robot_rl.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_workflow_commands_resolve(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "offline-to-online.md").read_text()
    block = re.findall(r"```bash\n(.*?)```", text, re.S)[0]
    cmds = [c for c in block.splitlines() if c.startswith("robot-rl")]
    assert [c.split()[1] for c in cmds] == ["train", "data", "train"]
    assert "--offline data/reach" in cmds[2] and "--out data/reach" in cmds[1]
    for cmd in (cmds[0], cmds[2]):
        assert main(["config", *shlex.split(cmd)[1:]]) == 0, cmd
    out = capsys.readouterr().out
    assert "offline.data" in out and "data/reach" in out
    with pytest.raises(SystemExit):  # the record step's options, as typed
        main(["data", "record", "--help"])
    assert "--stochastic" in capsys.readouterr().out


def test_the_jsrl_command_resolves(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "offline-to-online.md").read_text()
    jsrl = [c for b in re.findall(r"```bash\n(.*?)```", text, re.S) for c in b.splitlines() if "jsrl.guide" in c]
    assert len(jsrl) == 1
    assert main(["config", *shlex.split(jsrl[0])[1:]]) == 0
    out = capsys.readouterr().out
    assert re.search(r"jsrl.guide\s.*'offline'", out) and re.search(r"jsrl.horizon\s.*\b50\b", out)


def test_the_iql_command_resolves(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "offline-to-online.md").read_text()
    iql = [c for b in re.findall(r"```bash\n(.*?)```", text, re.S) for c in b.splitlines() if "--algo iql" in c]
    assert len(iql) == 1
    assert main(["config", *shlex.split(iql[0])[1:]]) == 0
    out = capsys.readouterr().out
    assert re.search(r"algo.expectile\s.*\b0.9\b", out) and re.search(r"algo.type\s.*'iql'", out)
