"""`robot-rl config VERB …`: each verb that takes a config prints the one it would run with; its YAML loads back."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from robot_rl.cli import main
from robot_rl.cli.deploy import DeployArgs, resolve_deploy_config
from robot_rl.cli.record import RecordArgs, build_configs, build_viz_config
from robot_rl.config_io import to_dict


def _yaml_of(capsys, *argv: str) -> dict:
    assert main(["config", *argv, "--yaml"]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_deploy_config_reflects_flags_and_overrides_and_loads_back(tmp_path: Path, capsys):
    argv = ["deploy", "--mode", "learn", "--episodes", "7", "robot.type=sim_arm", "safety.control_hz=10",
            "algo.utd_ratio=4"]
    assert main(["config", *argv]) == 0
    table = capsys.readouterr().out
    assert "safety.control_hz" in table and "intervention.mode" in table and "algo.utd_ratio" in table
    data = _yaml_of(capsys, *argv)
    assert data["mode"] == "learn" and data["episodes"] == 7
    assert data["safety"]["control_hz"] == 10 and data["algo"]["utd_ratio"] == 4 and data["robot"]["type"] == "sim_arm"
    # The printed YAML is a file `deploy --config` takes, and resolves to the same config.
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    again = resolve_deploy_config(DeployArgs(config=path, mode="learn", episodes=7))
    assert to_dict(again) == data


def test_record_config_has_its_five_sections_and_loads_back(tmp_path: Path, capsys):
    data = _yaml_of(capsys, "record", "--robot", "sim_arm", "--hz", "12.5", "--episodes", "3", "--viz", "rerun",
                    "robot.latency_s=0.02")
    assert list(data) == ["robot", "device", "safety", "record", "viz"]
    assert data["safety"]["control_hz"] == 12.5 and data["robot"]["latency_s"] == 0.02
    assert data["record"]["episodes"] == 3 and data["device"]["type"] == "keyboard" and data["viz"]["sink"] == "rerun"
    path = tmp_path / "record.yaml"
    path.write_text(yaml.safe_dump(data))
    args = RecordArgs(robot="sim_arm", config=path, hz=12.5, episodes=3)
    again = [*build_configs(args), build_viz_config(args)]
    assert [to_dict(c) for c in again] == list(data.values())


def test_reward_and_flow_sft_and_distributed_verbs(capsys):
    clf = _yaml_of(capsys, "reward", "train-classifier", "demos", "--out", "clf", "--target-precision", "0.9",
                   "--cameras", "top")
    assert clf["target_precision"] == 0.9 and clf["cameras"] == ["top"]
    assert _yaml_of(capsys, "reward", "train-prm", "demos", "--out", "prm", "--steps", "50")["steps"] == 50
    flow = _yaml_of(capsys, "flow-sft", "demos", "task.image_size=32", "--sft.steps", "11")
    assert flow["task"]["type"] == "lang_reach" and flow["task"]["image_size"] == 32 and flow["sft"]["steps"] == 11
    learner = _yaml_of(capsys, "learner", "--bind", "tcp://10.0.0.2:7001", "--algo", "ppo")
    assert learner["transport"]["type"] == "zmq" and learner["transport"]["address"] == "tcp://10.0.0.2:7001"
    assert learner["algo"]["type"] == "ppo"
    train = _yaml_of(capsys, "train", "--task", "push", "--loop.total-env-steps", "5000")
    assert train["task"]["type"] == "push" and train["loop"]["total_env_steps"] == 5000


def test_verbs_without_a_config_say_so_and_bad_overrides_fail_clearly(capsys):
    assert main(["config", "reward", "serve", "--model", "m"]) == 0
    assert "robot-rl reward serve takes no config" in capsys.readouterr().out
    assert main(["config", "deploy", "robot.no_such_key=1"]) == 2
    assert "no_such_key" in capsys.readouterr().err
    assert main(["config", "flow-sft", "demos", "algo.lr=1"]) == 2
    assert "task.KEY=VALUE" in capsys.readouterr().err


@pytest.mark.slow
def test_console_script_prints_deploy_yaml_without_a_terminal():
    exe = Path(sys.executable).with_name("robot-rl")
    cmd = [str(exe), "config", "deploy", "--yaml", "robot.type=sim_arm", "safety.control_hz=10"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=True).stdout
    assert yaml.safe_load(out)["safety"]["control_hz"] == 10
