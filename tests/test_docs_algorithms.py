"""docs/algorithms.md: every `robot-rl train` command it shows resolves as typed (registered algorithm, real keys)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from robot_rl.cli import main

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "docs" / "algorithms.md").read_text()
COMMANDS = [c for block in re.findall(r"```bash\n(.*?)```", TEXT, re.S) for c in block.splitlines()
            if c.startswith("robot-rl train") and "--config" not in c]  # a --config names the user's own file


def test_the_page_shows_the_new_learners() -> None:
    shown = " ".join(COMMANDS)
    assert "--algo iql" in shown and "--algo fasttd3" in shown


@pytest.mark.parametrize("cmd", COMMANDS)
def test_each_train_command_resolves(cmd: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", *shlex.split(cmd)[1:]]) == 0, cmd
    out = capsys.readouterr().out
    algo = re.search(r"--algo (\S+)", cmd)
    if algo:
        assert re.search(rf"algo\.type\s.*'{algo.group(1)}'", out), cmd
