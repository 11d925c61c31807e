"""`run.wandb=true`: a tiny `robot-rl train` in wandb's offline mode, read back from the run's .wandb transaction log
with wandb's own reader (`wandb leet inspect --json`) and compared with what TensorBoard got.

Checked: every TensorBoard scalar is in wandb at the same env step with the same value; the resolved config is the
run's config; the learning-curve PNG is logged (same bytes); the run id is the run directory's, and `--resume`
continues that id at later env steps.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("wandb", reason="run.wandb=true needs wandb: pip install wandb")

from robot_rl.cli import main
from robot_rl.viz.wandb_sink import wandb_run_id

TINY = ["loop.total_env_steps=600", "loop.eval_every_env_steps=300", "loop.eval_episodes=4", "loop.eval_num_envs=4",
        "run.progress=false", "task.num_envs=4", "algo.learning_starts=64", "algo.batch_size=32",
        "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]", "loop.log_every_s=0.2"]


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wandb_dir = tmp_path / "wandb_dir"
    wandb_dir.mkdir()
    for key, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true",
                       "WANDB_CONSOLE": "off", "WANDB_DISABLE_CODE": "true", "WANDB_DISABLE_GIT": "true"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    return wandb_dir


def read_wandb(run_file: Path) -> list[dict[str, Any]]:
    """The records of a .wandb transaction log, as wandb's own inspector prints them."""
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_file)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def tensorboard_scalars(tb_dir: Path) -> Counter[tuple[str, int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return Counter((tag, e.step, float(np.float32(e.value))) for tag in acc.Tags()["scalars"]
                   for e in acc.Scalars(tag))


def wandb_scalars(history: list[dict[str, Any]], tags: set[str]) -> Counter[tuple[str, int, float]]:
    return Counter((k, int(item["env_steps"]), float(np.float32(v))) for item in history for k, v in item.items()
                   if k in tags)


@pytest.mark.integration
def test_train_mirrors_tensorboard_config_and_curve_offline(tmp_path: Path, offline: Path) -> None:
    assert main(["train", "--name", "r1", f"run.root={tmp_path}", "run.wandb=true", *TINY]) == 0
    run = tmp_path / "r1"
    (run_file,) = offline.glob("wandb/offline-run-*-r1/run-r1.wandb")
    records = read_wandb(run_file)
    (start,) = [r["run"] for r in records if r["type"] == "run"]
    assert start["run_id"] == "r1" and start["project"] == "robot-rl"
    config = start["config"]["update"]
    assert config["loop"]["total_env_steps"] == 600 and config["algo"]["type"] == "sac"
    assert config["task"]["type"] == "reach" and config["run"]["wandb"] is True

    history = [r["history"]["item"] for r in records if r["type"] == "history"]
    tb = tensorboard_scalars(run / "tb")
    tags = {tag for tag, _, _ in tb}
    assert {"train/updates", "eval/success_rate", "eval/mean_return"} <= tags
    assert wandb_scalars(history, tags) == tb  # every scalar, at the same env step, with the same value

    (curve,) = [h for h in history if "learning_curve.path" in h]
    assert curve["learning_curve._type"] == "image-file" and curve["env_steps"] == 600
    png = run_file.parent / "files" / curve["learning_curve.path"]
    assert png.read_bytes() == (run / "learning_curve.png").read_bytes()
    assert curve["learning_curve.sha256"] == hashlib.sha256(png.read_bytes()).hexdigest()

    # Resume: the same wandb run id, continuing at later env steps.
    assert main(["train", "--resume", str(run), "loop.total_env_steps=900", "run.progress=false"]) == 0
    files = sorted(offline.glob("wandb/offline-run-*-r1/run-r1.wandb"))
    assert len(files) == 2
    resumed = read_wandb(next(f for f in files if f != run_file))
    (start2,) = [r["run"] for r in resumed if r["type"] == "run"]
    steps = [r["history"]["item"]["env_steps"] for r in resumed if r["type"] == "history"]
    assert start2["run_id"] == "r1" and min(steps) >= 600 and max(steps) >= 900


def test_run_id_and_missing_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert wandb_run_id(tmp_path / "reach-sac 2026:01") == "reach-sac-2026-01"
    monkeypatch.setitem(sys.modules, "wandb", None)
    from robot_rl.viz.wandb_sink import WandbSink

    with pytest.raises(ImportError, match=r"pip install 'robot-rl\[wandb\]'"):
        WandbSink(tmp_path, {})
