"""Extensions (robot_rl.core.extension): a third-party feature as docs/contributing.md shows it, in a tiny `train`."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from robot_rl.checkpoint import list_checkpoints
from robot_rl.config_io import from_dict, to_dict
from robot_rl.core.config import ConfigError
from robot_rl.core.extension import EXTENSIONS, Extension, extension_order
from robot_rl.loop.config import TrainConfig, resolve_train_config
from robot_rl.loop.runner import train

DOC = Path(__file__).resolve().parents[1] / "docs" / "contributing.md"
TINY = ["loop.total_env_steps=400", "loop.eval_every_env_steps=400", "loop.eval_episodes=2", "loop.eval_num_envs=2",
        "task.num_envs=4", "algo.actor_hidden=[16,16]", "algo.critic_hidden=[16,16]", "run.progress=false",
        "replay.persist=false", "loop.success_threshold=null"]


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """The doc's example extension, registered for one test (its code block, run as a module)."""
    block = re.search(r"```python\n(# my_pkg/counter\.py.*?)```", DOC.read_text(), re.S)
    assert block, "docs/contributing.md lost its extension example"
    module = types.ModuleType("my_pkg_counter")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look their module up
    exec(compile(block.group(1), str(DOC), "exec"), module.__dict__)
    try:
        yield module
    finally:
        EXTENSIONS.unregister("counter")


def test_a_registered_extension_gets_a_config_section(counter: types.ModuleType) -> None:
    cfg = resolve_train_config(overrides=["counter.every=3"])
    assert cfg.counter.every == 3 and cfg.section("counter") is cfg.extensions["counter"]
    tree = to_dict(cfg)
    assert tree["counter"] == {"every": 3} and tree["viz"]["sink"] == "none"  # top-level sections, as in YAML
    assert from_dict(TrainConfig, tree) == cfg
    assert from_dict(TrainConfig, {k: v for k, v in tree.items() if k != "counter"}).counter.every == 0  # old files
    with pytest.raises(ConfigError, match=r"valid keys:.*counter"):
        from_dict(TrainConfig, {**tree, "countr": {}})
    off = EXTENSIONS.get("counter").build(TrainConfig().counter, TrainConfig())
    on = EXTENSIONS.get("counter").build(cfg.counter, cfg)
    assert off is None and isinstance(on, Extension)


@pytest.mark.integration  # trains for seconds (actor thread + learner)
def test_a_tiny_train_runs_the_extension_and_checkpoints_its_state(counter: types.ModuleType, tmp_path: Path) -> None:
    cfg = resolve_train_config(overrides=[*TINY, f"run.root={tmp_path}", "run.name=r", "counter.every=1"])
    result = train(cfg)
    assert result.env_steps >= 400
    assert yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())["counter"] == {"every": 1}
    meta = json.loads((list_checkpoints(tmp_path / "r")[-1] / "meta.json").read_text())
    assert meta["counter"] >= 400 // 4  # one count per step of actor 0 (4 sub-envs)


def test_an_extension_section_inside_loop_is_null_while_off() -> None:
    # The HIL schedule's section is registered with parent "loop": its keys stay loop.hil.*, null switches it off.
    cfg = resolve_train_config()
    assert cfg.loop.hil is None and to_dict(cfg)["loop"]["hil"] is None and "hil" not in to_dict(cfg)
    assert [type(e).__name__ for e in cfg.build_extensions()] == []
    on = resolve_train_config(overrides=["loop.hil={}"])
    assert on.loop.hil.offline_updates == 1000 and on.section("hil") is on.loop.hil  # {} = on, with the defaults
    assert [type(e).__name__ for e in on.build_extensions()] == ["HILExtension"]
    assert resolve_train_config(overrides=["loop.hil.return_steps=7"]).loop.hil.return_steps == 7
    assert from_dict(TrainConfig, to_dict(on)) == on and from_dict(TrainConfig, to_dict(cfg)) == cfg
    with pytest.raises(ConfigError, match=r"unknown key\(s\) hil for TrainConfig"):
        resolve_train_config(overrides=["hil.return_steps=7"])  # not a top-level section


def test_features_are_called_in_their_order() -> None:
    # Rewards wrap the env first; co-training's SFT runs before the offline phase; a human's action wins over a guide's.
    assert extension_order(["viz", "twin", "reward", "offline", "jsrl", "hil", "cotrain"]) == [
        "reward", "cotrain", "offline", "jsrl", "twin", "viz", "hil"]


def test_an_extension_runs_in_deploys_loop_too(counter: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    # The doc's counter is registered for deploy too: its section is in deploy's config, and deploy's actor loop
    # (a robot, mode learn) calls its step hooks; a second extension doubles the stored reward.
    from test_deploy import FakeEndpoint, fast, make, push_script

    from robot_rl.cli.deploy import deploy_sections
    from robot_rl.config_io import apply_overrides
    from robot_rl.core.extension import BaseExtension, StepHook, register_extension

    class Double(BaseExtension, StepHook):
        def step_hook(self, index: int, actor: object) -> StepHook:
            return self

        def reward(self, reward):  # type: ignore[no-untyped-def]
            return 2 * reward

    @dataclasses.dataclass
    class DoubleConfig:
        on: bool = False

    register_extension("double", DoubleConfig, loops=("deploy",))(lambda s, _cfg: Double() if s.on else None)
    try:
        assert "counter" in deploy_sections() and "double" in deploy_sections()
        assert "double" not in TrainConfig().extensions  # a deploy-only feature has no section in a run
        cfg = apply_overrides(fast(episodes=2, max_episode_steps=30, mode="learn"), {"counter.every": 1,
                                                                                    "double.on": True})
        assert cfg.counter.every == 1 and cfg.double.on
        endpoint = FakeEndpoint()
        deployer, _ = make(cfg, push_script(engage_from=3), endpoint=endpoint, version=1)
        report = deployer.run()
    finally:
        EXTENSIONS.unregister("double")
    steps = [e.steps for e in report.episodes]  # 9, then 6: the scripted person pushes from the start
    assert [e.extensions for e in report.episodes] == [{"counter/count": steps[0]}, {"counter/count": sum(steps)}]
    rewards = torch.cat([b.reward for b in endpoint.sent])
    assert len(rewards) == sum(steps) and sorted(rewards.tolist())[-2:] == [2.0, 2.0]  # each success, doubled


def test_deploy_without_extensions_records_as_before() -> None:
    from test_deploy import fast, make, push_script

    deployer, _ = make(fast(episodes=1, max_episode_steps=30), push_script(engage_from=3))
    deployer.collected = []
    report = deployer.run()
    assert not deployer.hooks.extensions and report.episodes[0].extensions == {}
    assert [r["reward"] for r in deployer.collected][-1] == 1.0 and report.episodes[0].steps == 9


@pytest.mark.integration  # the HIL learner binds a ZeroMQ socket
def test_deploys_learner_attaches_the_extensions_and_checkpoints_their_state(tmp_path: Path) -> None:
    pytest.importorskip("msgpack")
    from robot_rl.core.extension import BaseExtension, register_extension
    from robot_rl.hardware.sim_arm import SimulatedArmConfig
    from robot_rl.human_loop.deploy import DeployConfig
    from robot_rl.human_loop.hil_learner import HILLearner
    from robot_rl.policies.sac import SACConfig
    from robot_rl.transport.config import ZmqTransportConfig

    seen: list[tuple[str, object]] = []

    class Probe(BaseExtension):
        def attach(self, run):  # type: ignore[no-untyped-def]
            seen.append(("attach", (run.remote, run.learner is not None, run.algo is not None, run.resumed)))

        def state(self):  # type: ignore[no-untyped-def]
            return {"n": 3}

        def load_state(self, state):  # type: ignore[no-untyped-def]
            seen.append(("load_state", state))

        def close(self) -> None:
            seen.append(("close", None))

    @dataclasses.dataclass
    class ProbeConfig:
        on: bool = False

    register_extension("probe", ProbeConfig, loops=("deploy",))(lambda s, _cfg: Probe() if s.on else None)
    try:
        cfg = DeployConfig(robot=SimulatedArmConfig(cameras={}),
                           algo=SACConfig(demo_ratio=0.5, actor_hidden=(16,), critic_hidden=(16,)),
                           transport=ZmqTransportConfig(address="tcp://127.0.0.1:*"), status=False,
                           extensions={"probe": ProbeConfig(on=True)})
        learner = HILLearner(cfg, tmp_path / "run")
        try:
            checkpoint = learner.checkpoint()
        finally:
            learner.close()
        assert json.loads((checkpoint / "meta.json").read_text())["probe"] == {"n": 3}
        resumed = HILLearner(cfg, tmp_path / "run", resume=True)
        resumed.close()
    finally:
        EXTENSIONS.unregister("probe")
    assert seen == [("attach", (True, True, True, False)), ("close", None),
                    ("attach", (True, True, True, True)), ("load_state", {"n": 3}), ("close", None)]
