"""The ``demos`` extension (issue 51): its section, the old ``loop.demos_*`` keys that still load, same behaviour."""

import logging
from pathlib import Path

import pytest
import torch
import yaml

import robot_rl.testing  # noqa: F401 - registers the "fake" task
from robot_rl.config_io import from_dict, save_yaml, to_dict
from robot_rl.core.config import ConfigError
from robot_rl.core.extension import EXTENSIONS, moved_keys
from robot_rl.data.demos_extension import DemosConfig
from robot_rl.loop.config import TrainConfig, resolve_train_config
from robot_rl.loop.run_context import load_run_config
from robot_rl.testing.fake_env import record_random_store

OLD = {"loop.demos_path": "demos.path", "loop.demos_correction_weight": "demos.correction_weight",
       "loop.demos_rewind_weight": "demos.rewind_weight"}


def _old_layout(cfg: TrainConfig) -> dict:
    """``cfg`` as a config.yaml written before the extension: the three keys in ``loop``, no ``demos`` section."""
    tree = to_dict(cfg)
    demos = tree.pop("demos")
    tree["loop"].update(demos_path=demos["path"], demos_correction_weight=demos["correction_weight"],
                        demos_rewind_weight=demos["rewind_weight"])
    return tree


def test_the_section_is_registered_with_the_keys_it_replaced():
    spec = EXTENSIONS.get("demos")
    assert spec.config is DemosConfig and spec.parent == "" and spec.order < min(
        EXTENSIONS.get(n).order for n in EXTENSIONS.names() if n != "demos")  # the buffer is full before the others
    assert {k: v for k, v in moved_keys().items() if k in OLD} == OLD
    cfg = TrainConfig()
    assert cfg.demos == DemosConfig() and EXTENSIONS.get("demos").build(cfg.demos, cfg) is None  # off by default
    assert "demos_path" not in to_dict(cfg)["loop"] and to_dict(cfg)["demos"]["path"] is None


def test_an_old_config_yaml_loads_as_the_new_section(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    new = resolve_train_config("fake", "sac", overrides=["demos.path=/data/demos", "demos.correction_weight=3",
                                                          "demos.rewind_weight=0"])
    run = tmp_path / "old_run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(_old_layout(new), sort_keys=False))
    with caplog.at_level(logging.WARNING, logger="robot_rl.config_io"):
        resumed = load_run_config(run)  # `robot-rl train --resume` of a run written by the old code
    assert resumed == new
    assert "loop.demos_path is now demos.path" in caplog.text
    # The same file as --config, and the old keys as overrides or flags: the same config again.
    assert resolve_train_config(config_file=run / "config.yaml") == new
    assert resolve_train_config("fake", "sac", overrides=["loop.demos_path=/data/demos",
                                                          "loop.demos_correction_weight=3",
                                                          "loop.demos_rewind_weight=0"]) == new
    # Saved again, it has the new layout only.
    save_yaml(resumed, tmp_path / "again.yaml")
    again = yaml.safe_load((tmp_path / "again.yaml").read_text())
    assert again["demos"]["path"] == "/data/demos" and not any(k.startswith("demos_") for k in again["loop"])


def test_an_old_key_wins_over_the_new_default_and_a_bad_one_is_refused(tmp_path: Path):
    # apply_overrides writes the new key back at its default beside an old key set later: the old one is the user's.
    cfg = resolve_train_config("fake", "sac", overrides=["demos.path=/a"])
    assert resolve_train_config("fake", "sac", overrides=["demos.path=/a", "loop.demos_path=/b"]).demos.path == \
        Path("/b")
    assert cfg.demos.path == Path("/a")
    with pytest.raises(ConfigError, match="demos"):
        from_dict(TrainConfig, {"loop": {"demos_path": "/x"}, "demos": 3})
    with pytest.raises(ConfigError, match="unknown key"):
        from_dict(TrainConfig, {"loop": {"demos_paths": "/x"}})


@pytest.mark.integration  # builds two runners and trains a little
def test_old_and_new_keys_fill_the_same_demo_buffer_and_train_the_same(tmp_path: Path):
    from robot_rl.loop.runner import InProcessRunner

    store = record_random_store(tmp_path / "demos", episodes=3)
    base = [f"run.root={tmp_path}", "run.progress=false", "loop.eval_episodes=2", "algo.demo_ratio=0.5",
            "algo.actor_hidden=[16,16]", "algo.critic_hidden=[16,16]", "algo.batch_size=16"]
    out = {}
    for name, keys in (("old", ["loop.demos_path", "loop.demos_rewind_weight"]),
                       ("new", ["demos.path", "demos.rewind_weight"])):
        runner = InProcessRunner(resolve_train_config("fake", "sac", overrides=[
            *base, f"run.name={name}", f"{keys[0]}={store}", f"{keys[1]}=0"]))
        try:
            demos = runner.learner.storage.buffers["demos"]
            gen = torch.Generator().manual_seed(0)
            rows = demos.sample(len(demos), torch.Generator().manual_seed(0))
            losses = [runner.algo.update(demos.sample(16, gen))["critic_loss"] for _ in range(2)]
            out[name] = (len(demos), rows.action, rows.obs["state"], losses)
        finally:
            runner.close()
    assert out["old"][0] == out["new"][0] == 30
    torch.testing.assert_close(out["old"][1:3], out["new"][1:3], rtol=0, atol=0)
    assert out["old"][3] == out["new"][3]
