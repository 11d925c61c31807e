"""Recordings say which task settings they were made under; a run that learns from them under others warns."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from robot_rl.checkpoint import save_checkpoint
from robot_rl.cli import main
from robot_rl.config_io import save_yaml
from robot_rl.data.provenance import task_differences, task_settings, warn_if_task_differs
from robot_rl.data.store import EpisodeStore
from robot_rl.loop.config import resolve_train_config
from robot_rl.testing.fake_env import record_random_store

SMALL = ["algo.actor_hidden=[16,16]", "algo.critic_hidden=[16,16]"]


def test_the_differences_name_each_setting_and_ignore_how_the_task_is_run() -> None:
    sac = resolve_train_config(task="mujoco/pick_cube").task  # the SAC preset: 5 cm steps, 50-step episodes
    plain = resolve_train_config(task="mujoco/pick_cube", algo="ppo").task  # the task's defaults: 3 cm, 80
    plain.num_envs, plain.num_threads = 7, 3  # how it runs, not what its numbers mean
    diffs = task_differences(task_settings(plain), task_settings(sac))
    assert diffs == ["task.action_scale: 0.03 in the data, 0.05 in this run",
                     "task.max_episode_steps: 80 in the data, 50 in this run"]
    assert task_differences(task_settings(sac), task_settings(sac)) == []
    other = resolve_train_config(task="mujoco/reach").task
    assert "task.type: 'mujoco/reach' in the data, 'mujoco/pick_cube' in this run" in \
        task_differences(task_settings(other), task_settings(sac))


def test_data_record_writes_the_task_settings_and_a_run_under_others_warns(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = resolve_train_config("fake", "sac", overrides=[*SMALL, "task.episode_length=6"])
    run = tmp_path / "run"
    run.mkdir()
    save_yaml(cfg, run / "config.yaml")
    env = cfg.task.make("cpu", 0)
    save_checkpoint(run, 0, {"algo": cfg.algo.build(env.spec, "cpu", 0).state_dict()}, {})
    env.close()
    out = tmp_path / "demos"
    assert main(["data", "record", str(run), "--out", str(out), "--episodes", "4", "--num-envs", "2"]) == 0
    assert EpisodeStore(out).meta["source"]["task_config"] == task_settings(cfg.task)

    base = ["run.progress=false", "loop.eval_episodes=2", "loop.eval_every_env_steps=100", "loop.total_env_steps=40",
            "loop.success_threshold=null", *SMALL, "algo.learning_starts=16", "algo.batch_size=8",
            f"loop.demos_path={out}", "algo.demo_ratio=0.5", f"run.root={tmp_path}"]
    with caplog.at_level(logging.WARNING, logger="robot_rl.data.provenance"):
        assert main(["train", "--task", "fake", "--name", "same", *base, "task.episode_length=6"]) == 0
        assert not [r for r in caplog.records if r.name == "robot_rl.data.provenance"]
        assert main(["train", "--task", "fake", "--name", "other", *base, "task.episode_length=9"]) == 0
    warned = [r.getMessage() for r in caplog.records if r.name == "robot_rl.data.provenance"]
    assert len(warned) == 1 and "task.episode_length: 6 in the data, 9 in this run" in warned[0]
    assert "the demos (" in warned[0] and "task.KEY=VALUE" in warned[0]


def test_stores_that_do_not_say_are_not_second_guessed(tmp_path: Path) -> None:
    record_random_store(tmp_path / "s", episodes=2)  # written without source.task_config
    cfg = resolve_train_config("fake", "sac")
    assert warn_if_task_differs(tmp_path / "s", cfg.task, "the demos") == []
    assert warn_if_task_differs(tmp_path / "nowhere", cfg.task, "the demos") == []
