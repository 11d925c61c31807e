"""One LeRobot install recipe: `bash scripts/install-lerobot.sh VENV`, what every page says and what CI runs.

lerobot 0.4.4 pins an older torch than ours, so a `pip install` of lerobot (or of an extra that holds it) either
fails or swaps torch; the script is the recipe CI tests. No page, error message or CI step may give another.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install-lerobot.sh"
RECIPE = re.compile(r"bash scripts/install-lerobot\.sh (\S+)")
PIP_ARGS = re.compile(r"pip install([^`\"#;&)\n]*)")
LEROBOT = re.compile(r"^(lerobot([=<>\[~!].*)?|.*\[([^]]*,)?lerobot[],].*)$")


def _installs_lerobot(line: str) -> bool:
    """Whether a `pip install` on ``line`` names lerobot, or an extra of ours called lerobot."""
    return any(LEROBOT.match(arg.strip("'\"")) for m in PIP_ARGS.finditer(line) for arg in m.group(1).split())


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def _outside_transcripts(text: str) -> str:
    """The page without its ```text blocks (copies of what a terminal printed, such as a failing command)."""
    return re.sub(r"^```text\n.*?^```", "", text, flags=re.M | re.S)


def test_no_page_or_message_installs_lerobot_another_way() -> None:
    sources = [*_pages(), *sorted((ROOT / "robot_rl").glob("**/*.py")), *sorted((ROOT / "tests").glob("*.py"))]
    for path in sources:
        if path == Path(__file__):
            continue
        text = _outside_transcripts(path.read_text())
        for line in text.splitlines():
            assert not _installs_lerobot(line), f"{path.relative_to(ROOT)}: {line.strip()}"


def test_the_pages_that_install_lerobot_use_the_script() -> None:
    using = {p.relative_to(ROOT).as_posix() for p in _pages() if RECIPE.search(p.read_text())}
    for page in ("docs/so101.md", "docs/datasets.md", "docs/hardware.md", "docs/troubleshooting.md",
                 "docs/recording.md", "docs/distill.md", "docs/flow-vla-lerobot.md", "docs/testing.md"):
        assert page in using, page
    for page in _pages():
        for line in page.read_text().splitlines():
            if "bash scripts/install-lerobot" in line:
                assert RECIPE.search(line), f"{page.relative_to(ROOT)}: {line.strip()}"


def test_ci_runs_the_documented_line() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "bash scripts/install-lerobot.sh .venv-lerobot" in ci
    datasets_page = (ROOT / "docs" / "datasets.md").read_text().splitlines()
    assert "bash scripts/install-lerobot.sh .venv-lerobot" in datasets_page
    assert not any(_installs_lerobot(line) for line in ci)


def test_what_counts_as_another_recipe() -> None:
    for line in ("pip install torch==2.10.0 && pip install -e '.[lerobot]'", "pip install 'lerobot[smolvla]'",
                 ".venv-lerobot/bin/pip install -q --no-deps lerobot==0.4.4 torchcodec==0.14.0",
                 "`pip install 'robot-rl[datasets,lerobot]'`", "pip install lerobot"):
        assert _installs_lerobot(line), line
    for line in ("\"pip install 'robot-rl[datasets]' to read the files; only the backend='lerobot' writer\"",
                 "pip install -e '.[datasets]'  # LeRobot's datasets", "bash scripts/install-lerobot.sh .venv"):
        assert not _installs_lerobot(line), line


def test_no_extra_holds_lerobot() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not [name for name, reqs in extras.items() if any(r.startswith("lerobot") for r in reqs)]


@pytest.mark.integration
def test_the_script_runs_from_anywhere_into_the_venv_it_is_given(tmp_path: Path) -> None:
    """A venv whose pip records its arguments: the script's steps, in order, into that venv, the repo by path."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "pip.log"
    for tool in ("python", "pip"):
        stub = venv / "bin" / tool
        stub.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
        stub.chmod(0o755)
    done = subprocess.run(["bash", str(SCRIPT), str(venv)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": os.environ.get("PATH", "")})
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "install torch==2.14.1 torchvision==0.29.1"
    assert calls[1].startswith(f"install -e {ROOT}[datasets]")
    assert calls[2] == "install --no-deps lerobot==0.4.4 torchcodec==0.14.0"
    rest = " ".join(calls[3:])
    for package in ("'numpy<2.4'", "transformers", "opencv-python-headless", "feetech-servo-sdk", "dynamixel-sdk",
                    "mink", "daqp"):
        assert package.strip("'") in rest, package
    usage = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "usage: bash scripts/install-lerobot.sh VENV" in usage.stderr
