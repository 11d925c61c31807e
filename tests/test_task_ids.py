"""Task ids with a backend prefix, `robot-rl tasks`, and the install hints of missing extras."""

import re
import sys

import pytest
import yaml

from robot_rl.cli import main
from robot_rl.config_io import from_dict, load_yaml, save_yaml, to_dict
from robot_rl.core.config import TASKS, ConfigError, resolve_task_id, task_id
from robot_rl.core.registry import UnknownNameError
from robot_rl.loop.config import TrainConfig, resolve_train_config
from robot_rl.sims.extras import install_hint, installed, require, task_catalog
from robot_rl.sims.gymnasium import GymnasiumTaskConfig
from robot_rl.sims.isaacgym import IsaacGymTaskConfig
from robot_rl.sims.reach import ReachConfig


def test_exact_names_win_and_prefixes_set_the_id_field():
    assert resolve_task_id("reach") == (ReachConfig, {})
    assert resolve_task_id("gym") == (GymnasiumTaskConfig, {})
    assert resolve_task_id("gymnasium/Pendulum-v1") == (GymnasiumTaskConfig, {"env_id": "Pendulum-v1"})
    # The rest may itself hold slashes (a gymnasium namespace).
    assert resolve_task_id("gymnasium/gym_hil/PandaPickCubeBase-v0") == (
        GymnasiumTaskConfig, {"env_id": "gym_hil/PandaPickCubeBase-v0"})
    assert resolve_task_id("isaacgym/cartpole") == (IsaacGymTaskConfig, {"env_id": "cartpole"})
    for name in TASKS.names():  # every registered name, "mujoco/reach" included, resolves to itself
        assert resolve_task_id(name) == (TASKS.get(name), {})


def test_unknown_ids_list_the_known_ones():
    with pytest.raises(UnknownNameError) as e:
        resolve_task_id("nope/thing")
    msg = str(e.value)
    assert "reach" in msg and "gymnasium/<env_id>" in msg and "isaacgym/<env_id>" in msg and "robot-rl tasks" in msg
    with pytest.raises(UnknownNameError, match="'reach' takes no id"):
        resolve_task_id("reach/foo")


def test_cli_flag_yaml_type_and_override_give_the_same_config(tmp_path):
    by_flag = resolve_train_config(task="gymnasium/MountainCarContinuous-v0")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"task": {"type": "gymnasium/MountainCarContinuous-v0", "num_envs": 1}}))
    by_file = resolve_train_config(config_file=path)
    by_override = resolve_train_config(overrides=["task.type=gymnasium/MountainCarContinuous-v0"])
    for cfg in (by_flag, by_file, by_override):
        assert isinstance(cfg.task, GymnasiumTaskConfig)
        assert cfg.task.env_id == "MountainCarContinuous-v0"
        assert task_id(cfg.task) == "gym/MountainCarContinuous-v0"
    assert to_dict(by_flag) == to_dict(by_file) == to_dict(by_override)
    assert task_id(resolve_train_config(task="reach").task) == "reach"


def test_saved_config_round_trips_for_resume(tmp_path):
    cfg = resolve_train_config(task="isaacgym/cartpole", overrides=[
        "task.num_envs=16", "task.randomize={params: {dof_damping: {low: 0.5, high: 2.0, indices: [1]}}, "
        "obs_noise: {state: 0.01}, action_delay: [0, 2]}"])
    save_yaml(cfg, tmp_path / "config.yaml")
    saved = load_yaml(tmp_path / "config.yaml")
    assert saved["task"]["type"] == "isaacgym" and saved["task"]["env_id"] == "cartpole"
    assert saved["task"]["randomize"]["params"]["dof_damping"] == {"low": 0.5, "high": 2.0, "mode": "scale",
                                                                   "indices": [1]}
    again = from_dict(TrainConfig, saved)
    assert again == cfg
    # The id form is accepted in a saved file too, and must agree with an explicit env_id.
    saved["task"]["type"] = "isaacgym/cartpole"
    assert from_dict(TrainConfig, saved) == cfg
    saved["task"]["env_id"] = "other.urdf"
    with pytest.raises(ConfigError, match="sets env_id='cartpole'"):
        from_dict(TrainConfig, saved)


def test_a_yaml_file_cannot_name_two_ids(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"task": {"type": "gymnasium/Pendulum-v1", "env_id": "CartPole-v1"}}))
    with pytest.raises(ConfigError, match="env_id"):
        resolve_train_config(config_file=path)


def test_bad_randomize_ranges_are_config_errors():
    with pytest.raises(ConfigError, match="low <= high"):
        resolve_train_config(overrides=["task.randomize={params: {link_length: {low: 1.2, high: 0.8}}}"])
    with pytest.raises(ConfigError, match="action_delay"):
        resolve_train_config(overrides=["task.randomize={action_delay: [3, 1]}"])


def test_tasks_verb_lists_backends_and_install_hints(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    for name in ("reach", "push", "pendulum", "gym", "gymnasium", "isaacgym"):  # aliases one a line
        assert re.search(rf"^ {name}\s", out, re.M), name
    rows = {r.names[0]: r for r in task_catalog()}
    assert rows["reach"].backend == "torch" and rows["reach"].installed and rows["reach"].install == ""
    gym_row = rows["gym"]
    assert gym_row.names == ("gym", "gymnasium") and gym_row.backend == "gym"
    assert "gymnasium/<env_id>" in gym_row.id_hint
    isaac = rows["isaacgym"]
    assert isaac.backend == "isaacgym" and isaac.installed == installed("isaacgym")
    assert "pip install 'robot-rl[isaacgym]'" in isaac.install
    assert main(["tasks", "--missing"]) == 0
    missing = capsys.readouterr().out
    assert "reach" not in missing.split("┃")[-1]  # built-in tasks are never missing


def test_unknown_task_on_the_command_line_is_a_clean_error(capsys):
    assert main(["config", "--task", "nope"]) == 2
    assert "valid task names" in capsys.readouterr().err


def test_require_names_the_extra(monkeypatch, tmp_path):
    assert require("yaml", "gym") is yaml
    monkeypatch.setitem(sys.modules, "some_simulator", None)
    with pytest.raises(ImportError, match=r"not installed: pip install 'robot-rl\[mujoco\]'"):
        require("some_simulator", "mujoco", "the 'x' task")
    # Installed but broken (a missing system library, say): the original error is kept.
    (tmp_path / "broken_sim.py").write_text("raise ImportError('libGL.so.1: cannot open shared object file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match=r"installed but failed to import.*libGL"):
        require("broken_sim", "mujoco")
    assert install_hint("maniskill").startswith("pip install 'robot-rl[maniskill]'; ")


def test_missing_isaacgym_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "isaacgym", None)  # absent, even where Isaac Gym is installed
    with pytest.raises(ImportError, match=r"pip install 'robot-rl\[isaacgym\]'"):
        IsaacGymTaskConfig(num_envs=2).make("cpu", seed=0)
