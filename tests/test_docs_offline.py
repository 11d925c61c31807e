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


@pytest.mark.parametrize(("marker", "keys"), [
    ("jsrl.guide=offline", [r"jsrl.guide\s.*'offline'", r"jsrl.horizon\s.*\b50\b"]),
    ("jsrl.guide=scripted", [r"jsrl.guide\s.*'scripted'", r"task.action_scale\s.*\b0.05\b"]),
    ("--algo iql", [r"algo.expectile\s.*\b0.9\b", r"algo.type\s.*'iql'"]),
])
def test_each_scheme_command_resolves(marker: str, keys: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "offline-to-online.md").read_text()
    cmds = [c for b in re.findall(r"```bash\n(.*?)```", text, re.S) for c in b.splitlines() if marker in c]
    assert len(cmds) == 1
    assert main(["config", *shlex.split(cmds[0])[1:]]) == 0
    out = capsys.readouterr().out
    assert all(re.search(k, out) for k in keys), cmds[0]


def test_the_cal_ql_reference_command_resolves(capsys: pytest.CaptureFixture[str]) -> None:
    """The "Cal-QL as its authors run it" block, continuation lines joined as a shell joins them."""
    text = (ROOT / "docs" / "offline-to-online.md").read_text()
    block = text.split("## Cal-QL as its authors run it", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    cmd = block.replace("\\\n", " ").strip()
    assert main(["config", *shlex.split(cmd)[1:]]) == 0, cmd
    out = capsys.readouterr().out
    for key in (r"algo.actor_bc_updates\s.*\b2000\b", r"algo.backup_entropy\s.*\bFalse\b",
                r"algo.init_temperature\s.*\b0.01\b", r"algo.calql\s.*\bTrue\b"):
        assert re.search(key, out), key
