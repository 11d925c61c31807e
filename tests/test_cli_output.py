"""What the CLI prints through rich, as a user sees it at 80 columns with no terminal (a pipe, a log, CI).

rich reads ``[name]`` as a style tag and drops it, so every text it renders from data must reach it as text,
not markup; and a line too long for the terminal must lose whole, lesser fields, never the step count.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from robot_rl.loop.progress import TrainProgress
from robot_rl.sims.extras import TaskInfo

ROBOT_RL = str(Path(sys.executable).with_name("robot-rl"))


def _run(args: list[str], columns: int, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([ROBOT_RL, *args], capture_output=True, text=True, timeout=300, env=env,
                          stdin=subprocess.DEVNULL, cwd=cwd)


def _fresh_catalog() -> list[TaskInfo]:
    """The CLI's own catalogue, from a fresh interpreter: tests in this one register tasks (robot_rl.testing's)."""
    code = ("import dataclasses, json; from robot_rl.sims.extras import task_catalog; "
            "print(json.dumps([dataclasses.asdict(r) for r in task_catalog()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return [TaskInfo(**{**row, "names": tuple(row["names"])}) for row in json.loads(out.stdout)]


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.integration
def test_tasks_keeps_the_install_extras_and_fits_80_columns(columns: int) -> None:
    run = _run(["tasks"], columns)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    catalog = _fresh_catalog()
    missing = [row for row in catalog if not row.installed]
    assert missing, "isaacgym (Python 3.8 only) is never installed here"
    for row in missing:
        for extra in re.findall(r"'robot-rl\[[^\]]+\]'", row.install):
            assert extra in out, (extra, out)  # was `pip install 'robot-rl'`: [isaacgym] read as markup
    for row in catalog:
        for name in row.names:
            assert re.search(rf"^ {re.escape(name)}\s", out, re.M), name  # whole names, one a line
    assert "…" not in out  # nothing cut short
    assert max(len(line) for line in out.splitlines()) <= columns


@pytest.mark.integration
def test_config_table_keeps_brackets_in_the_meanings() -> None:
    run = _run(["config", "--task", "reach", "--algo", "sac"], 80)
    assert run.returncode == 0, run.stderr
    row = next(line for line in run.stdout.splitlines() if "reward.policy_keys" in line)
    assert "``[state]``" in row, row  # was "e.g. ```` when only the reward models read the cameras"


def test_progress_line_keeps_steps_and_success_at_80_columns(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    metrics = {"return": -121.0, "success": "100%", "critic_loss": 1.83, "actor_loss": 106.0, "alpha": 0.511}
    with TrainProgress(3_000_000) as progress:
        progress.print("run directory: runs/[seed 1]")
        progress.update(9_984, metrics)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "run directory: runs/[seed 1]"  # a path is not markup either
    bar = lines[-1]
    assert "9,984/3,000,000 steps" in bar and "success 100%" in bar and "return -121" in bar, bar
    assert "…" not in bar and len(bar) <= 80, bar  # was `train ━━━  9,984/3,00…  …  return -121 …`


def test_fit_fields_drops_the_losses_before_success_and_return() -> None:
    from robot_rl.loop.progress import fit_fields

    fields = [("rate", "224 st/s"), ("return", "return -121"), ("success", "success 100%"),
              ("critic_loss", "critic_loss 1.83")]
    assert fit_fields(fields, 80) == "224 st/s  return -121  success 100%  critic_loss 1.83"
    assert fit_fields(fields, 36) == "224 st/s  return -121  success 100%"
    assert fit_fields(fields, 25) == "return -121  success 100%"  # order kept, whole fields only
    assert fit_fields(fields, 12) == "success 100%"
    assert fit_fields(fields, 5) == ""


@pytest.mark.integration
def test_a_fresh_train_run_starts_with_its_directory_and_fits_80_columns(tmp_path: Path) -> None:
    """The first line is the run directory (not the empty replay's INFO line); no line is cut or too long."""
    run = _run(["train", "--name", "t", "run.root=runs", "loop.total_env_steps=400",
                "loop.eval_every_env_steps=400", "loop.eval_episodes=4", "task.num_envs=4", "algo.learning_starts=64",
                "algo.batch_size=32", "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]", "loop.log_every_s=0"],
               80, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stderr.splitlines()
    assert lines[0] == "run directory: runs/t", lines[:3]
    assert not [line for line in lines if line.startswith("INFO")], lines
    bar = next(line for line in lines if line.startswith("train "))
    assert "400/400 steps" in bar and "success" in bar and "…" not in bar, bar
    out = run.stdout.splitlines()
    assert out[0].startswith("stopped (budget) after 400 env steps") and out[1].startswith("last eval: success"), out
    assert max(len(line) for line in lines + out) <= 80, lines + out


#: A machine without imageio, as Python's import system sees it.
NO_IMAGEIO = '''
import sys


class _NoImageio:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "imageio":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoImageio())
'''


@pytest.mark.integration
def test_eval_video_without_imageio_is_one_line(tmp_path: Path) -> None:
    """As `robot-rl export` does for its extra: one line naming it, before any episode is played."""
    from robot_rl.cli import main

    assert main(["train", "--name", "r", f"run.root={tmp_path}", "loop.total_env_steps=200",
                 "loop.eval_every_env_steps=200", "loop.eval_episodes=2", "run.progress=false", "task.num_envs=4",
                 "algo.learning_starts=64", "algo.batch_size=32", "algo.actor_hidden=[32,32]",
                 "algo.critic_hidden=[32,32]"]) == 0
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_IMAGEIO)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    video = tmp_path / "reach.mp4"
    run = subprocess.run([ROBOT_RL, "eval", str(tmp_path / "r"), "--episodes", "2", "--video", str(video)],
                         capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert run.returncode == 2, run.stderr[-3000:]
    assert run.stderr.splitlines() == ["robot-rl eval: error: saving a video needs imageio and imageio-ffmpeg "
                                       "(imageio is not installed): pip install 'robot-rl[video]'"], run.stderr
    assert not run.stdout and not video.exists()
