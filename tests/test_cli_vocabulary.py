"""One vocabulary across `robot-rl` verbs: config flags from the config, shared flag names, help from the registries,
old spellings with a warning, and user errors (one line, exit 2) apart from bugs (a traceback)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from robot_rl.cli import VERBS, main, normalized_argv
from robot_rl.cli.base import Command
from robot_rl.cli.info import TasksArgs
from robot_rl.cli.vocabulary import sections_of
from robot_rl.core.config import ALGOS
from robot_rl.core.extension import extension_sections
from robot_rl.hardware.robot import ROBOTS
from robot_rl.hardware.teleop import TELEOP_DEVICES
from robot_rl.loop.config import TrainConfig

ROBOT_RL = str(Path(sys.executable).with_name("robot-rl"))


def _leaf_verbs() -> dict[str, type[Command]]:
    """Every verb that runs itself, by the words that name it (`robot find-limits`)."""
    out: dict[str, type[Command]] = {}
    todo = list(VERBS.items())
    while todo:
        name, cls = todo.pop()
        if cls.sub_verbs:
            todo += [(f"{name} {sub}", c) for sub, c in cls.sub_verbs.items()]
        else:
            out[name] = cls
    return out


def _yaml(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict, str]:
    """The YAML `robot-rl config VERB …` prints, and its stderr."""
    assert main(["config", *argv, "--yaml"]) == 0
    out, err = capsys.readouterr()
    return yaml.safe_load(out), err


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # rich wraps at the terminal's width


def test_config_train_takes_a_flag_for_every_section_of_the_run_config(capsys):
    # offline, twin and jsrl were refused while the CLI kept its own list of sections.
    data, _ = _yaml(capsys, "train", "--offline.updates", "5", "--twin.file", "twin.json", "--jsrl.guide=offline",
                 "--cotrain.weight", "0.1", "--loop.total-env-steps", "1000")
    assert data["offline"]["updates"] == 5 and data["twin"]["file"] == "twin.json"
    assert data["jsrl"]["guide"] == "offline" and data["cotrain"]["weight"] == 0.1
    assert data["loop"]["total_env_steps"] == 1000
    own = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name != "extensions")
    assert VERBS["train"].config_sections() == (*own, *extension_sections())  # the extensions' sections too


def test_deploy_takes_a_flag_for_every_section_of_its_config_and_the_shared_robot_flag(capsys):
    data, _ = _yaml(capsys, "deploy", "--robot", "sim_arm", "--safety.control-hz", "12", "--help.enabled", "true",
                 "--intervention.mode", "toggle", "--mode", "learn")
    assert data["robot"]["type"] == "sim_arm" and data["safety"]["control_hz"] == 12
    assert data["help"]["enabled"] is True and data["intervention"]["mode"] == "toggle"
    assert set(VERBS["deploy"].config_sections()) >= {"robot", "safety", "intervention", "help", "audit", "algo",
                                                      "transport", "replay", "viz", "device"}
    # --robot NAME is robot.type=NAME; naming two robots is a mistake, said in one line.
    assert main(["config", "deploy", "--robot", "xarm", "robot.type=sim_arm"]) == 2
    assert "name two robots" in capsys.readouterr().err


@dataclasses.dataclass
class NewFeatureConfig:
    strength: float = 1.0


@dataclasses.dataclass
class WithNewFeature(TrainConfig):
    new_feature: NewFeatureConfig | None = None  # an optional section is a section too
    plain: int = 0  # a value, not a section


def test_sections_are_derived_so_a_new_section_needs_no_cli_edit():
    assert sections_of(WithNewFeature) == (*sections_of(TrainConfig), "new_feature")


def test_every_verb_that_takes_overrides_takes_them_as_flags():
    for name, cls in _leaf_verbs().items():
        takes_overrides = "overrides" in {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        assert bool(cls.config_sections()) == takes_overrides, name
    argv, _ = normalized_argv(["robot", "find-limits", "--robot.port", "/dev/ttyACM0", "--out", "l.yaml"])
    assert argv == ["robot", "find-limits", "--out", "l.yaml", "robot.port=/dev/ttyACM0"]


def test_old_spellings_still_work_with_a_one_line_warning(capsys):
    data, err = _yaml(capsys, "record", "--robot", "sim_arm", "--device", "scripted", "--quiet")
    assert data["device"]["type"] == "scripted"
    warnings = [line for line in err.splitlines() if "deprecated" in line]
    assert len(warnings) == 2 and "--device is deprecated, use --teleop" in warnings[0]
    assert "--quiet is deprecated, use --no-status" in warnings[1]
    argv, notes = normalized_argv(["robot", "find-limits", "--device=leader_arm"])
    assert argv == ["robot", "find-limits", "--teleop=leader_arm"] and len(notes) == 1
    assert normalized_argv(["record", "--teleop", "scripted", "--no-status"]) == (
        ["record", "--teleop", "scripted", "--no-status"], [])


@pytest.mark.parametrize("verb", ["train", "learner", "actor", "launch", "config"])
def test_algo_help_lists_every_registered_algorithm(verb, capsys):
    text = _help(capsys, verb)
    assert "sac or ppo" not in text
    missing = [name for name in ALGOS.names() if name not in text]
    assert not missing, (missing, text)


def test_robot_teleop_and_status_read_the_same_on_record_and_deploy(capsys):
    for verb in ("record", "deploy"):
        text = _help(capsys, verb)
        assert all(name in text for name in ROBOTS.names()), (verb, text)
        assert all(name in text for name in TELEOP_DEVICES.names()), (verb, text)
        assert "--robot NAME" in text and "--teleop NAME" in text and "--status, --no-status" in text
        assert "--no-no-status" not in text and "--viz {none,rerun}" in text and "None,none" not in text


def test_a_user_error_is_one_line_and_a_bug_keeps_its_traceback(capsys, monkeypatch):
    assert main(["train", "--task", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("robot-rl: error: unknown task 'nope'")
    # A config's own check of a value (SafetyConfig.__post_init__) is the user's mistake too.
    assert main(["config", "deploy", "safety.control_hz=0"]) == 2
    assert capsys.readouterr().err.strip() == "robot-rl: error: control_hz must be positive"

    def broken(self: TasksArgs) -> int:
        raise ValueError("a bug deep inside")

    monkeypatch.setattr(TasksArgs, "run", broken)
    with pytest.raises(ValueError, match="a bug deep inside"):
        main(["tasks"])


@pytest.mark.integration
def test_as_typed_a_user_error_is_one_line_and_a_bug_a_traceback():
    env = {**os.environ, "COLUMNS": "120"}
    user = subprocess.run([ROBOT_RL, "train", "--algo", "dqn"], capture_output=True, text=True, timeout=120,
                          env=env, stdin=subprocess.DEVNULL)
    assert user.returncode == 2, user.stderr
    lines = user.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("robot-rl: error: unknown algorithm 'dqn'"), user.stderr
    code = ("import sys; from robot_rl.cli import main; from robot_rl.cli.info import TasksArgs; "
            "TasksArgs.run = lambda self: int('not a number'); sys.exit(main(['tasks']))")
    bug = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                         stdin=subprocess.DEVNULL)
    assert bug.returncode == 1, bug.stderr
    assert "Traceback (most recent call last)" in bug.stderr and "ValueError: invalid literal" in bug.stderr
    assert "robot-rl: error" not in bug.stderr
