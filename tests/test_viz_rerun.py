"""The Rerun live view: what the sink writes, read back from the .rrd with Rerun's own reader, for a unit of steps,
a short `train` on `reach`, and `deploy` and `record` on the simulated arm (cameras, the scripted human).

Checked: entity paths, one row per step taken on the `env_step` timeline, the policy/human split equal to who acted,
camera frames equal to the observation, episode boundaries where the episodes ended.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rerun", reason="the Rerun live view needs the Rerun SDK: pip install rerun-sdk")

from robot_rl.viz import VizConfig, open_viz
from robot_rl.viz.read import read_rrd
from robot_rl.viz.rerun_sink import RerunSink, free_path, viewer_listening


def _sink(tmp_path: Path, **kw: object) -> RerunSink:
    sink = open_viz(VizConfig(sink="rerun", connect="off", **kw), tmp_path / "viz.rrd", "test")  # type: ignore[arg-type]
    assert isinstance(sink, RerunSink)
    return sink


def test_steps_round_trip_through_an_rrd_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    sink = _sink(tmp_path)
    sources = ["policy"] * 3 + ["human"] * 4 + ["policy", "hold", "policy"]
    frames, actions = [], []
    for t, source in enumerate(sources):
        img = rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)
        frames.append(img)
        actions.append(rng.random(7))
        sink.step(t, actions[-1], source=source, reward=0.5 * t, success=t == 9,
                  obs={"state": np.arange(4.0) + t, "image.front": img, "image.depth": np.zeros((6, 8), np.float32)},
                  proposal=np.ones(7) if source == "human" else None)
    sink.episode_end(9, index=0, outcome="success", ret=1.0, length=10)
    sink.note("hello", 4)
    assert sink.file == tmp_path / "viz.rrd" and "rerun " in sink.where
    sink.close()
    sink.close()  # idempotent

    s = read_rrd(tmp_path / "viz.rrd")
    assert {"/action/policy", "/action/human", "/action/hold", "/action/policy_proposal", "/reward", "/success",
            "/intervention", "/observation/state", "/camera/front", "/episode", "/episode/return",
            "/episode/length", "/notes"} == set(s)
    assert s["/action/human"].steps == [3, 4, 5, 6] == s["/action/policy_proposal"].steps
    assert s["/action/policy"].steps == [0, 1, 2, 7, 9] and s["/action/hold"].steps == [8]
    np.testing.assert_allclose(s["/action/human"].values[0], actions[3])
    assert s["/reward"].steps == list(range(10)) and s["/reward"].values[4] == [2.0]
    assert [v[0] for v in s["/intervention"].values] == [float(x == "human") for x in sources]
    assert [v[0] for v in s["/success"].values] == [0.0] * 9 + [1.0]
    assert s["/observation/state"].values[2] == [2.0, 3.0, 4.0, 5.0]
    assert len(s["/camera/front"]) == 10  # the float "image.depth" is not an 8-bit image: not shown
    assert bytes(s["/camera/front"].values[5][0]) == frames[5].tobytes()
    assert s["/episode"].steps == [9] and "success after 10 steps" in s["/episode"].values[0][0]
    assert s["/notes"].steps == [4] and s["/notes"].values[0] == ["hello"]


def test_every_and_camera_every_thin_the_steps(tmp_path: Path) -> None:
    sink = _sink(tmp_path, every=2, camera_every=3)
    for t in range(12):
        if sink.due(t):
            sink.step(t, [0.0], source="policy", reward=0.0, success=False,
                      obs={"image.c": np.zeros((2, 2, 1), np.uint8)} if sink.camera_due(t) else None)
    sink.close()
    s = read_rrd(tmp_path / "viz.rrd")
    assert s["/action/policy"].steps == [0, 2, 4, 6, 8, 10] and s["/camera/c"].steps == [0, 6]


@pytest.mark.integration
def test_an_existing_default_file_is_kept_and_the_viewer_probe(tmp_path: Path) -> None:
    (tmp_path / "viz.rrd").write_bytes(b"earlier")
    assert free_path(tmp_path / "viz.rrd") == tmp_path / "viz-2.rrd"
    sink = _sink(tmp_path)
    sink.close()
    assert sink.file == tmp_path / "viz-2.rrd" and (tmp_path / "viz.rrd").read_bytes() == b"earlier"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert viewer_listening(f"rerun+http://127.0.0.1:{port}/proxy")
    assert not viewer_listening(f"rerun+http://127.0.0.1:{port}/proxy")
    assert VizConfig(connect=False).connect == "off"  # type: ignore[arg-type]  # YAML reads `off` as false
    assert open_viz(VizConfig(), tmp_path / "x.rrd", "r") is None


def test_missing_sdk_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rerun", None)
    with pytest.raises(ImportError, match=r"pip install 'robot-rl\[viz\]'"):
        _sink(tmp_path)


@pytest.mark.integration
def test_train_on_reach_streams_sub_env_0(tmp_path: Path) -> None:
    from robot_rl.loop.config import resolve_train_config
    from robot_rl.loop.runner import InProcessRunner

    cfg = resolve_train_config("reach", "sac", None, [
        "loop.total_env_steps=800", "loop.eval_every_env_steps=400", "loop.eval_episodes=4", "loop.eval_num_envs=4",
        "run.progress=false", "task.num_envs=4", "algo.learning_starts=64", "algo.batch_size=32",
        "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]", "replay.persist=false", f"run.root={tmp_path}",
        "run.name=r", "viz.sink=rerun", "viz.connect=off"])
    runner = InProcessRunner(cfg)
    result = runner.train()
    steps = runner.actors[0].env_steps // 4  # sub-env 0's steps
    assert result.env_steps >= 800 and steps >= 200

    s = read_rrd(tmp_path / "r" / "viz.rrd")
    for entity in ("/action/policy", "/reward", "/success", "/intervention", "/observation/state"):
        assert s[entity].steps == list(range(steps)), entity
    assert "/action/human" not in s and not any(v[0] for v in s["/intervention"].values)  # nobody intervened
    # reach episodes last 50 steps: each ends where the last one ended plus its length.
    ends, lengths = s["/episode"].steps, [int(v[0]) for v in s["/episode/length"].values]
    assert len(ends) == steps // 50 and ends == list(np.cumsum(lengths) - 1)
    notes = [v[0] for v in s["/notes"].values]  # untrained, every 400 steps, and the final one
    assert len(notes) >= 3 and notes[0].startswith("eval @ 0 env steps") and all("eval @" in n for n in notes)
    assert notes[-1].startswith(f"eval @ {result.env_steps} env steps")


@pytest.fixture(scope="module")
def arm():
    from needs import need_mujoco_rendering

    need_mujoco_rendering()
    from robot_rl.hardware.sim_arm import SimulatedArmConfig

    return SimulatedArmConfig(cameras={"front": (24, 32)}, seed=5)


@pytest.mark.sim
@pytest.mark.integration
def test_deploy_on_the_simulated_arm_splits_policy_and_human(tmp_path: Path, arm) -> None:
    from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
    from robot_rl.hardware.sim_arm import PickIntervener
    from robot_rl.human_loop.deploy import DeployConfig, Deployer
    from robot_rl.human_loop.devices.scripted import ScriptedDevice

    cfg = DeployConfig(robot=arm, safety=SafetyConfig(control_hz=50.0, watchdog_timeout_s=0.5), episodes=2,
                       max_episode_steps=25, status=False, reward_source="keys")
    robot = cfg.robot.make()
    sink = _sink(tmp_path)
    with SafetyLayer(robot, cfg.safety) as safety:
        human = PickIntervener(robot, patience=3, takeover_steps=6, press_success=False)
        device = ScriptedDevice(human)
        device.connect()
        deployer = Deployer(cfg, safety, device, cfg.algo.build_policy(robot.features, "cpu", 0), viz=sink)
        deployer.collected = []  # every completed step, in order, with who acted
        report = deployer.run()
    sink.close()

    s = read_rrd(tmp_path / "viz.rrd")
    who = [bool(r["intervened"]) for r in deployer.collected]
    assert len(who) == report.steps == 50 and human.takeovers >= 1 and any(who) and not all(who)
    assert s["/action/human"].steps == [i for i, h in enumerate(who) if h] == s["/action/policy_proposal"].steps
    assert s["/action/policy"].steps == [i for i, h in enumerate(who) if not h]
    assert len(s["/action/human"]) == sum(e.intervened_steps for e in report.episodes)
    assert s["/reward"].steps == list(range(50)) == s["/camera/front"].steps
    assert bytes(s["/camera/front"].values[7][0]) == deployer.collected[7]["obs"]["image.front"].tobytes()
    np.testing.assert_allclose(s["/action/human"].values[0], deployer.collected[who.index(True)]["action"], atol=1e-6)
    assert s["/episode"].steps == [24, 49] and all("time_limit" in v[0] for v in s["/episode"].values)


@pytest.mark.sim
@pytest.mark.integration
def test_record_on_the_simulated_arm_marks_the_operators_steps(tmp_path: Path, arm, monkeypatch) -> None:
    from robot_rl.cli.record import RecordArgs, run_record
    from robot_rl.data.store import EpisodeStore
    from robot_rl.human_loop.devices.base import TeleopReading
    from robot_rl.human_loop.devices.scripted import ScriptedDevice

    monkeypatch.setattr("robot_rl.viz.rerun_sink.viewer_listening", lambda *a, **k: False)  # no viewer: a file
    events = {0: ("reset",), 16: ("reset",), 20: ("reset",), 30: ("failure",)}

    def script(i: int) -> TeleopReading:  # the operator holds the engage control on ticks 4-9 and 22-25
        return TeleopReading(0.0, delta=[0.2, 0, 0, 0, 0, 0], engage=4 <= i < 10 or 22 <= i < 26,
                             events=events.get(i, ()))

    args = RecordArgs(robot="sim_arm", teleop="scripted", out=tmp_path / "demos", format="episodes", hz=50.0,
                      episodes=2, min_free_mb=0.0, status=False, viz="rerun",
                      overrides=("safety.watchdog_timeout_s=0.5", "record.max_ticks=100"))
    assert run_record(args, robot=arm.make(), device=ScriptedDevice(script)) == 0

    s = read_rrd(tmp_path / "demos.rrd")  # the default: next to the recording
    episodes = list(EpisodeStore(tmp_path / "demos"))
    assert [len(e) for e in episodes] == [16, 11]  # ticks 0-15 and 20-30
    acting = np.concatenate([e.intervened for e in episodes])
    ticks = list(range(16)) + list(range(20, 31))
    assert s["/action/human"].steps == [t for t, a in zip(ticks, acting) if a] == [*range(4, 10), *range(22, 26)]
    assert s["/action/hold"].steps == [t for t, a in zip(ticks, acting) if not a]
    assert s["/camera/front"].steps == ticks and s["/intervention"].steps == ticks
    assert bytes(s["/camera/front"].values[-1][0]) == episodes[1].obs["image.front"][-1].tobytes()
    assert s["/episode"].steps == [15, 30] and "failure" in s["/episode"].values[1][0]


def test_the_viz_flags_of_train_deploy_and_record(tmp_path: Path, capsys, monkeypatch) -> None:
    import yaml

    from robot_rl.cli import main
    from robot_rl.cli.deploy import DeployArgs, open_deploy_viz, resolve_deploy_config
    from robot_rl.cli.record import RecordArgs, build_viz_config

    assert main(["config", "train", "--viz", "rerun", "--viz-file", "x.rrd", "--viz.every", "2", "--yaml"]) == 0
    viz = yaml.safe_load(capsys.readouterr().out)["viz"]
    assert viz["sink"] == "rerun" and viz["file"] == "x.rrd" and viz["every"] == 2
    cfg = resolve_deploy_config(DeployArgs(viz="rerun", overrides=("viz.camera_every=5",)))
    assert cfg.viz.sink == "rerun" and cfg.viz.camera_every == 5 and cfg.viz.file is None
    monkeypatch.setattr("robot_rl.viz.rerun_sink.viewer_listening", lambda *a, **k: False)
    sink = open_deploy_viz(cfg, tmp_path)
    sink.close()
    assert sink.file.parent == tmp_path and sink.file.name.startswith("deploy-") and sink.file.suffix == ".rrd"
    assert build_viz_config(RecordArgs(viz="rerun", viz_file=tmp_path / "r.rrd")).file == tmp_path / "r.rrd"
    assert open_deploy_viz(resolve_deploy_config(DeployArgs()), tmp_path) is None  # off by default
