from dataclasses import dataclass
from pathlib import Path

import pytest

from robot_rl.config_io import apply_overrides, describe, from_dict, parse_override, save_yaml, to_dict
from robot_rl.core.config import ALGOS, TASKS, ConfigError
from robot_rl.core.registry import Registry, UnknownNameError
from robot_rl.loop.config import LoopConfig, TrainConfig, resolve_train_config


def test_registry_rejects_duplicates_and_lists_names():
    reg: Registry[type] = Registry("widget")

    @reg.register("a")
    class A:
        pass

    with pytest.raises(ValueError, match="already registered"):
        reg.register("a")(type("B", (), {}))
    with pytest.raises(UnknownNameError, match="valid widget names: a"):
        reg.get("zzz")
    assert reg.name_of(A()) == "a"


def test_default_config_is_sac_on_reach():
    cfg = resolve_train_config()
    assert TASKS.name_of(cfg.task) == "reach"
    assert ALGOS.name_of(cfg.algo) == "sac"


def test_unknown_task_and_algo_list_valid_names():
    with pytest.raises(UnknownNameError) as e:
        resolve_train_config(task="nope")
    assert "reach" in str(e.value) and "pendulum" in str(e.value)
    with pytest.raises(UnknownNameError) as e:
        resolve_train_config(algo="dqn")
    assert "sac" in str(e.value) and "ppo" in str(e.value)


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ConfigError) as e:
        resolve_train_config(overrides=["loop.total_env_stepz=5"])
    msg = str(e.value)
    assert "total_env_stepz" in msg and "total_env_steps" in msg and "valid keys" in msg
    with pytest.raises(ConfigError, match="unknown key"):
        resolve_train_config(overrides=["algo.not_a_field=1"])


def test_overrides_are_typed():
    cfg = resolve_train_config(overrides=["loop.total_env_steps=5e4", "run.seed=3", "loop.success_threshold=null"])
    assert cfg.loop.total_env_steps == 50_000 and isinstance(cfg.loop.total_env_steps, int)
    assert cfg.run.seed == 3
    assert cfg.loop.success_threshold is None
    with pytest.raises(ConfigError, match="expected an integer"):
        resolve_train_config(overrides=["run.seed=abc"])
    with pytest.raises(ConfigError, match=r"section\.key=value"):
        parse_override("run.seed")


def test_texts_only_yaml_1_1_reads_as_bools_or_ints_stay_text_for_string_fields():
    # `--name off` once wrote runs/False: YAML 1.1 reads off/on/yes/no as bools and 0755, 1:30 as ints.
    for text in ("off", "On", "yes", "n", "0755", "1:30"):
        assert resolve_train_config(overrides=[f"run.name={text}"]).run.name == text
    assert parse_override("a.b=true") == ("a.b", True) and parse_override("a.b=1_000") == ("a.b", 1000)
    cfg = resolve_train_config(overrides=["run.progress=off", "run.seed=0042"])
    assert cfg.run.progress is False and cfg.run.seed == 42
    assert resolve_train_config(overrides=["run.seed=0x10"]).run.seed == 16
    assert resolve_train_config(overrides=["run.progress=on"]).run.progress is True


def test_yaml_file_then_cli_override(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("algo: {type: ppo}\nloop: {total_env_steps: 1234, eval_episodes: 7}\n")
    cfg = resolve_train_config(config_file=f, overrides=["loop.eval_episodes=9"])
    assert ALGOS.name_of(cfg.algo) == "ppo"
    assert cfg.loop.total_env_steps == 1234
    assert cfg.loop.eval_episodes == 9
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_train_config(config_file=tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        resolve_train_config(config_file=bad)


def test_task_preset_applies_only_for_its_algo():
    reach = TASKS.get("reach")
    preset = reach.presets.get("ppo", {})
    assert "task.num_envs" in preset, "this test needs reach's ppo preset to set task.num_envs"
    cfg_ppo = resolve_train_config(task="reach", algo="ppo")
    cfg_sac = resolve_train_config(task="reach", algo="sac")
    assert cfg_ppo.task.num_envs == preset["task.num_envs"]
    assert cfg_sac.task.num_envs == reach.presets.get("sac", {}).get("task.num_envs", reach().num_envs)


def test_yaml_round_trip(tmp_path: Path):
    cfg = resolve_train_config(task="pendulum", algo="ppo", overrides=["run.seed=11"])
    save_yaml(cfg, tmp_path / "c.yaml")
    import yaml

    again = from_dict(TrainConfig, yaml.safe_load((tmp_path / "c.yaml").read_text()))
    assert to_dict(again) == to_dict(cfg)


def test_switching_type_resets_section():
    cfg = resolve_train_config(task="reach", algo="sac")
    cfg2 = apply_overrides(cfg, {"algo.type": "ppo"})
    assert ALGOS.name_of(cfg2.algo) == "ppo"


def test_describe_has_docs_for_every_loop_key():
    cfg = resolve_train_config()
    rows = {k: doc for k, _, doc in describe(cfg)}
    # The extensions' sections inside loop (loop.hil) are keys of their own, documented by their class.
    names = [n for n in LoopConfig.__dataclass_fields__ if n != "extensions"] + list(cfg.loop.extensions)
    assert "hil" in names
    for name in names:
        assert rows[f"loop.{name}"], f"loop.{name} has no docstring"
    assert rows["task.type"].startswith("one of:")


def test_from_dict_rejects_missing_type():
    @dataclass
    class Holder:
        x: int = 1

    with pytest.raises(ConfigError, match="needs 'type'"):
        from_dict(TrainConfig, {"task": {"num_envs": 3}})
    assert from_dict(Holder, {"x": "4"}).x == 4


def test_the_randomisation_yaml_in_the_docs_loads_with_config(tmp_path: Path) -> None:
    # docs/domain-randomization.md shows this file; an optional section that is off (randomize: null) and the
    # mapping entries under it (params.body_mass) must be created by the file's keys, not refused.
    doc = (Path(__file__).resolve().parents[1] / "docs" / "domain-randomization.md").read_text()
    block = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    f = tmp_path / "dr.yaml"
    f.write_text(block)
    cfg = resolve_train_config(config_file=f)
    r = cfg.task.randomize
    assert r is not None and r.params["dof_damping"].indices == [0, 1] and r.params["geom_friction"].mode == "add"
    assert r.action_delay == (0, 2) and r.obs_noise == {"state": 0.01}
    with pytest.raises(ConfigError, match="unknown key"):
        resolve_train_config(overrides=["algo.batch_sz.x=1"])
