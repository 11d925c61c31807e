"""`robot-rl record`: teleoperated demos through the safety layer into the episode store and LeRobot, RaC labels."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from robot_rl.cli.record import RecordArgs, build_configs, run_record
from robot_rl.data.demos import RaCWeights, load_demos, rac_weights
from robot_rl.data.episode import SEGMENT_CORRECTION, SEGMENT_NONE, SEGMENT_REWIND, Episode, to_transitions
from robot_rl.data.store import EpisodeStore
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.xarm import XArmRobot, XArmRobotConfig
from robot_rl.human_loop.devices.base import TeleopReading
from robot_rl.human_loop.devices.leader_arm import JointBlend
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.record import DemoRecorder, RecordConfig, Segmenter
from robot_rl.human_loop.record_sinks import open_sink, staging_path
from robot_rl.testing.fake_xarm import FakeXArmAPI

HZ = 200.0  # fast ticks keep the test short; the loop is the same at 20 Hz


def _robot() -> XArmRobot:
    return XArmRobot(XArmRobotConfig(), sdk=FakeXArmAPI)


def _safety() -> SafetyConfig:
    return SafetyConfig(control_hz=HZ, workspace_low=[0.1, -0.5, 0.0], workspace_high=[0.8, 0.5, 0.7],
                        watchdog_timeout_s=0.5)


def _script(events: dict[int, tuple[str, ...]], engage_from: int = 0) -> ScriptedDevice:
    def script(i: int) -> TeleopReading:
        return TeleopReading(0.0, delta=[0.3, 0, 0, 0, 0, 0], engage=i >= engage_from, events=events.get(i, ()))
    return ScriptedDevice(script)


def _record(tmp_path: Path, events: dict[int, tuple[str, ...]], **cfg: object) -> tuple[EpisodeStore, object]:
    robot = _robot()
    device = _script(events, engage_from=int(cfg.pop("engage_from", 0)))  # type: ignore[call-overload]
    rcfg = RecordConfig(hz=HZ, **cfg)  # type: ignore[arg-type]
    with SafetyLayer(robot, _safety()) as layer, device:
        sink = open_sink(tmp_path / "demos", "episodes", robot.features, HZ, "push", {})
        summary = DemoRecorder(layer, device, sink, rcfg).run()
        sink.close()
    return EpisodeStore(tmp_path / "demos"), summary


def test_episodes_success_failure_discard_and_rac_labels(tmp_path: Path) -> None:
    events = {0: ("reset",), 5: ("rewind",), 10: ("correct",), 15: ("correct",), 20: ("success",),
              22: ("reset",), 25: ("toggle",), 27: ("reset",), 30: ("failure",)}
    store, s = _record(tmp_path, events, episodes=2, max_ticks=200, engage_from=3)
    assert s.saved == 2 and s.discarded == 1 and s.outcomes == ["success", "failure"]  # type: ignore[attr-defined]
    assert s.stop_reason == "2 episodes saved"  # type: ignore[attr-defined]
    ep1, ep2 = list(store)
    assert len(ep1) == 21 and len(ep2) == 4  # ticks 0..20 and 27..30: success/failure end the episode at that step
    want = np.zeros(21, np.int8)
    want[5:10], want[10:15] = SEGMENT_REWIND, SEGMENT_CORRECTION
    np.testing.assert_array_equal(ep1.segment, want)
    np.testing.assert_array_equal(ep1.success, np.arange(21) == 20)  # labelled at the step it happened
    assert ep1.terminated[-1] and not ep1.truncated.any() and ep1.reward.sum() == 1.0
    np.testing.assert_array_equal(ep1.intervened, np.arange(21) >= 3)
    assert (ep1.action[:3, :6] == 0).all() and (ep1.action[3:, 0] > 0).all()  # held until engaged, then pushed
    assert not ep2.success.any() and ep2.terminated[-1] and ep2.meta["outcome"] == "failure"
    assert ep1.final_obs is not None and ep1.obs["state"].shape == (21, 13)
    # the x the arm reached grows while the operator pushes +x: the applied actions really moved it
    assert ep1.obs["state"][-1, 6] > ep1.obs["state"][3, 6] + 0.01


def test_success_flag_per_step_without_ending_and_max_steps(tmp_path: Path) -> None:
    store, _ = _record(tmp_path, {0: ("reset",), 4: ("success",), 9: ("reset",), 10: ("reset",)},
                       episodes=2, max_ticks=100, end_on_success=False, max_episode_steps=12)
    ep1, ep2 = list(store)
    # the stop key ends the episode before its tick is recorded: ticks 0..8
    np.testing.assert_array_equal(ep1.success, np.arange(9) >= 4)  # from the step it happened on
    assert ep1.truncated[-1] and not ep1.terminated.any() and ep1.is_success and ep1.meta["outcome"] == "stopped"
    assert len(ep2) == 12 and ep2.meta["outcome"] == "max_steps" and ep2.truncated[-1] and not ep2.success.any()


def test_device_lost_holds_and_estop_discards(tmp_path: Path) -> None:
    device = _script({0: ("reset",)})
    robot = _robot()
    with SafetyLayer(robot, _safety()) as layer, device:
        sink = open_sink(tmp_path / "d", "episodes", robot.features, HZ, "", {})
        rec = DemoRecorder(layer, device, sink, RecordConfig(hz=HZ, episodes=1, max_ticks=30, stale_after_s=0.02))
        orig = device.read

        def read() -> TeleopReading | None:  # the driver hangs after 5 reads, then comes back
            if device.steps == 5:
                device.freeze()
            if device.steps == 5 and device._frozen is not None and rec.summary.ticks > 15:
                device.unfreeze()
            return orig()
        device.read = read  # type: ignore[method-assign]
        s = rec.run()
        sink.close()
    assert s.device_lost_steps > 0 and s.saved == 0
    assert "max_ticks" in s.stop_reason
    # e-stop: latches the layer, discards the episode in flight, ends the session
    device = _script({0: ("reset",), 3: ("estop",)})
    with SafetyLayer(_robot(), _safety()) as layer, device:
        sink = open_sink(tmp_path / "e", "episodes", layer.robot.features, HZ, "", {})
        s = DemoRecorder(layer, device, sink, RecordConfig(hz=HZ, max_ticks=50)).run()
        assert layer.latched == "estop"
    assert s.discarded == 1 and s.saved == 0 and "latched" in s.stop_reason
    assert len(EpisodeStore(tmp_path / "e").entries) == 0


def test_held_steps_while_lost_are_not_intervened(tmp_path: Path) -> None:
    calls = {"n": 0}

    def script(i: int) -> TeleopReading:
        calls["n"] += 1
        return TeleopReading(0.0, delta=[0.5, 0, 0, 0, 0, 0], engage=True, events=("reset",) if i in (0, 12) else ())
    device = ScriptedDevice(script)
    with SafetyLayer(_robot(), _safety()) as layer, device:
        sink = open_sink(tmp_path / "d", "episodes", layer.robot.features, HZ, "", {})
        rec = DemoRecorder(layer, device, sink, RecordConfig(hz=HZ, episodes=1, max_ticks=40))
        orig = device.read

        def read() -> TeleopReading | None:
            r = orig()
            if r is not None and 4 <= device.steps <= 8:
                r.timestamp -= 1.0  # a stale reading: older than stale_after_s
            return r
        device.read = read  # type: ignore[method-assign]
        rec.run()
    (ep,) = list(EpisodeStore(tmp_path / "d"))
    lost = np.arange(len(ep))
    lost = (lost >= 3) & (lost <= 7)
    assert not ep.intervened[lost].any() and ep.intervened[~lost].all()
    assert (ep.action[lost, :6] == 0).all()  # held: zero delta


def test_segmenter_switches_and_ends() -> None:
    s = Segmenter()
    for ev, want in (("rewind", 1), ("correct", 2), ("rewind", 1), ("rewind", 0), ("correct", 2), ("correct", 0)):
        s.on_event(ev)
        assert s.label == want


def test_rac_weights_rows_and_demo_loader(tmp_path: Path) -> None:
    seg = np.array([0, 1, 2, 2, 0, 1])
    np.testing.assert_array_equal(rac_weights(seg, correction_weight=3, rewind_weight=0, base_weight=1),
                                  [1, 0, 3, 3, 1, 0])
    with pytest.raises(ValueError, match="unknown RaC segment"):
        rac_weights(np.array([0, 5]))
    with pytest.raises(ValueError, match="whole number"):
        RaCWeights(correction_weight=1.5)  # type: ignore[arg-type]
    events = {0: ("reset",), 2: ("rewind",), 4: ("correct",), 7: ("correct",), 9: ("reset",)}
    store, _ = _record(tmp_path, events, episodes=1, max_ticks=50)
    (ep,) = list(store)
    spec = store.spec
    plain = load_demos(tmp_path / "demos", spec)
    assert "segment" not in plain.extras and len(plain) == len(ep)  # final_obs present: every step kept
    weighted = load_demos(tmp_path / "demos", spec, rac=RaCWeights(correction_weight=3, rewind_weight=0))
    seg_rows = to_transitions([ep])[0].extras["segment"].numpy()
    reps = np.where(seg_rows == SEGMENT_CORRECTION, 3, np.where(seg_rows == SEGMENT_REWIND, 0, 1))
    assert len(ep) == 9 and len(weighted) == reps.sum() == 4 + 0 + 3 * 3  # 4 none, 2 rewind, 3 correction
    want_rows = np.repeat(np.arange(len(ep)), reps)
    np.testing.assert_array_equal(weighted.action.numpy(), plain.action.numpy()[want_rows])
    np.testing.assert_array_equal(weighted.obs["state"].numpy(), plain.obs["state"].numpy()[want_rows])
    assert seg_rows[want_rows].tolist().count(SEGMENT_NONE) == 4


def test_joint_blend_fades_the_gap() -> None:
    t = [0.0]
    b = JointBlend(1.0, clock=lambda: t[0])
    b.start(follower=np.array([0.5, 0.0]), leader=np.array([0.0, 0.2]), follower_grip=1.0, leader_grip=-1.0)
    q, g = b.target(np.array([0.0, 0.2]), -1.0)
    np.testing.assert_allclose(q, [0.5, 0.0])  # at takeover the target is where the follower is
    assert g == 1.0 and b.blending
    t[0] = 0.5
    q, _ = b.target(np.array([0.0, 0.2]), -1.0)
    np.testing.assert_allclose(q, [0.25, 0.1])  # smoothstep(0.5) = 0.5
    t[0] = 1.0
    q, g = b.target(np.array([0.1, 0.3]), -1.0)
    np.testing.assert_allclose(q, [0.1, 0.3])  # fully on the leader
    assert g == -1.0 and not b.blending
    assert "of 28.6°" in b.gap_text()


def _args(tmp_path: Path, **kw: object) -> RecordArgs:
    base: dict[str, object] = {"robot": "xarm", "teleop": "scripted", "out": tmp_path / "out", "format": "episodes",
                               "hz": HZ, "episodes": 1, "min_free_mb": 0.0, "status": False,
                               "overrides": ("safety.watchdog_timeout_s=0.5", "safety.workspace_low=[0.1,-0.5,0.0]",
                                             "safety.workspace_high=[0.8,0.5,0.7]")}
    base.update(kw)
    return RecordArgs(**base)  # type: ignore[arg-type]


def test_run_record_end_to_end_and_configs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _args(tmp_path, overrides=(*_args(tmp_path).overrides, "robot.ip=10.0.0.7", "record.auto_start=true"))
    robot_cfg, _dev, safety_cfg, rec_cfg = build_configs(args)
    assert robot_cfg.ip == "10.0.0.7" and safety_cfg.control_hz == HZ and rec_cfg.auto_start and rec_cfg.episodes == 1
    device = _script({6: ("success",)})
    assert run_record(args, robot=_robot(), device=device) == 0
    out = capsys.readouterr().out
    assert "1 episode(s) saved" in out and "1 success" in out
    (ep,) = list(EpisodeStore(tmp_path / "out"))
    assert len(ep) == 7 and ep.is_success


def test_run_record_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    # output exists: refused before the robot is touched
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("keep me")
    robot = _robot()
    assert run_record(_args(tmp_path), robot=robot, device=_script({})) == 2
    assert "already exists" in capsys.readouterr().err and robot._arm is None
    assert (tmp_path / "out" / "x").read_text() == "keep me"
    # not enough free disk
    assert run_record(_args(tmp_path, out=tmp_path / "o2", min_free_mb=1e12), robot=_robot(), device=_script({})) == 2
    assert "MB free" in capsys.readouterr().err
    # missing device: the robot is never connected
    robot = _robot()
    assert run_record(_args(tmp_path, out=tmp_path / "o3", teleop="gamepad"), robot=robot) == 2
    assert "not available" in capsys.readouterr().err and robot._arm is None
    # robot not reachable
    unreachable = XArmRobot(XArmRobotConfig(), sdk=lambda ip: FakeXArmAPI(ip, do_not_open=True))
    assert run_record(_args(tmp_path, out=tmp_path / "o4"), robot=unreachable, device=_script({})) == 2
    assert "not reachable" in capsys.readouterr().err
    # unknown robot name: the registry lists the valid ones
    with pytest.raises(Exception, match="xarm"):
        build_configs(_args(tmp_path, robot="nope"))


def test_disk_full_mid_session_keeps_committed_episodes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import robot_rl.data.store as store_mod
    from robot_rl.replay.durable import DiskFullError

    real = store_mod._write_durable

    def write(path: Path, data: bytes) -> None:
        if path.name == "ep_000001.npz":
            raise DiskFullError(f"no space left writing {path}")
        real(path, data)
    monkeypatch.setattr(store_mod, "_write_durable", write)
    events = {0: ("reset",), 3: ("reset",), 4: ("reset",), 7: ("reset",)}
    assert run_record(_args(tmp_path, episodes=3), robot=_robot(), device=_script(events)) == 2
    assert "disk full" in capsys.readouterr().err
    store = EpisodeStore(tmp_path / "out")
    assert [len(e) for e in store] == [3]  # the first episode (ticks 0..2) is committed and intact
    assert store.orphans == []


def test_lerobot_format_round_trip_with_labels(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")  # the datasets extra; LeRobot itself is not needed to write
    from robot_rl.data.lerobot_io import SEGMENT, LeRobotReader

    events = {0: ("reset",), 2: ("rewind",), 4: ("correct",), 6: ("success",), 8: ("reset",), 11: ("failure",)}
    assert run_record(_args(tmp_path, format="lerobot", episodes=2), robot=_robot(), device=_script(events)) == 0
    reader = LeRobotReader(tmp_path / "out")
    assert SEGMENT in reader.features and reader.num_episodes == 2
    assert reader.info["robot_type"] == "xarm"  # the robot config's robot_type, else the --robot name
    assert EpisodeStore(staging_path(tmp_path / "out")).meta["source"]["robot_type"] == "xarm"
    staged = list(EpisodeStore(staging_path(tmp_path / "out")))
    for got, want in zip(reader, staged):
        np.testing.assert_array_equal(got.segment, want.segment)
        np.testing.assert_array_equal(got.success, want.success)
        np.testing.assert_array_equal(got.intervened, want.intervened)
        np.testing.assert_allclose(got.action, want.action)
    assert staged[0].segment.tolist() == [0, 0, 1, 1, 2, 2, 2] and staged[0].success.tolist()[-1]
    # `robot-rl data export` of the staging store keeps the labels too
    from robot_rl.data.lerobot_io import write_lerobot

    write_lerobot(staged, EpisodeStore(staging_path(tmp_path / "out")).spec, tmp_path / "again", HZ)
    assert [e.segment.tolist() for e in LeRobotReader(tmp_path / "again")] == [e.segment.tolist() for e in staged]


def test_status_line_shows_who_acts_segment_success_and_safety(tmp_path: Path) -> None:
    lines: list[str] = []
    device = _script({0: ("reset",), 2: ("rewind",)})
    with SafetyLayer(_robot(), _safety()) as layer, device:
        sink = open_sink(tmp_path / "d", "episodes", layer.robot.features, HZ, "", {})
        rec = DemoRecorder(layer, device, sink, RecordConfig(hz=HZ, max_ticks=5), status=lines.append)
        rec.run()
        assert lines and lines[0].startswith("ep 1/10 REC")
        final = rec.status_line()
    assert "idle" in final and "discarded 1" in final  # max_ticks ended the session mid-episode
    assert "human" in lines[0] and "safety events" in lines[0] and "success -" in lines[0]


@pytest.mark.integration
def test_recorded_demos_preload_the_deploy_learner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What `robot-rl record` writes is what `robot-rl deploy --role learner --demos` reads."""
    from robot_rl.cli import main

    args = _args(tmp_path, overrides=(*_args(tmp_path).overrides, "record.auto_start=true"))
    assert run_record(args, robot=_robot(), device=_script({6: ("success",)})) == 0
    (ep,) = list(EpisodeStore(tmp_path / "out"))
    code = main(["deploy", "--role", "learner", "--run-dir", str(tmp_path / "run"), "--demos", str(tmp_path / "out"),
                 "--connect", "tcp://127.0.0.1:*", "--max-s", "0.5", "robot.type=xarm"])
    assert code == 0
    assert f"{len(ep)} demos" in capsys.readouterr().out


@pytest.mark.integration
def test_deploy_learner_weights_rac_labelled_demos(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from robot_rl.cli import main

    events = {0: ("reset",), 2: ("rewind",), 4: ("correct",), 7: ("correct",), 9: ("reset",)}
    store, _ = _record(tmp_path, events, episodes=1, max_ticks=50)
    (ep,) = list(store)
    assert np.bincount(ep.segment, minlength=3).tolist() == [4, 2, 3]
    code = main(["deploy", "--role", "learner", "--run-dir", str(tmp_path / "run"), "--demos", str(tmp_path / "demos"),
                 "--connect", "tcp://127.0.0.1:*", "--max-s", "0.3", "robot.type=xarm",
                 "demos_correction_weight=3", "demos_rewind_weight=0"])
    assert code == 0
    assert f"{4 + 0 * 2 + 3 * 3} demos" in capsys.readouterr().out  # corrections thrice, rewinds left out


@pytest.mark.sim
@pytest.mark.integration
def test_cli_records_scripted_pick_demos_without_a_keyboard(tmp_path: Path) -> None:
    """`robot-rl record --teleop pick_demonstrator` as a user runs it with no terminal: it starts each episode
    itself on a freshly reset task and saves successes; the existing directory then gets a clear refusal."""
    import subprocess
    import sys

    pytest.importorskip("mujoco")
    exe = str(Path(sys.executable).with_name("robot-rl"))
    out = tmp_path / "demos"
    # At 4x real time, the rate and the speed limits scaled with it (the same robot time per step), as the docs'
    # workflow test runs it.
    cmd = [exe, "record", "--robot", "sim_arm", "--teleop", "pick_demonstrator", "--out", str(out),
           "--format", "episodes", "--episodes", "3", "--no-status", "robot.cameras={}", "safety.watchdog_timeout_s=1",
           "robot.time_scale=4", "safety.control_hz=40", "safety.max_linear_speed=1", "safety.max_angular_speed=4"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 episode(s) saved" in done.stdout and "3 success" in done.stdout
    episodes = list(EpisodeStore(out))
    assert len(episodes) == 3 and all(ep.is_success for ep in episodes)
    # The simulated arm knows its task: rewards are its dense ones (what deploy learns from), success ends it.
    assert all(ep.reward[-1] == 5.0 and (ep.reward[:-1] < 5.0).all() and ep.terminated[-1] for ep in episodes)
    cubes = [ep.obs["state"][0, 13:16] for ep in episodes]  # the cube where each episode began
    assert min(np.linalg.norm(a - b) for i, a in enumerate(cubes) for b in cubes[i + 1:]) > 1e-3
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert again.returncode == 2 and str(out) in again.stderr and "--append" in again.stderr
    one_more = [("1" if a == "3" else a) for a in cmd] + ["--append"]
    more = subprocess.run(one_more, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert more.returncode == 0, more.stderr[-2000:]
    assert len(EpisodeStore(out)) == 4


@pytest.mark.integration
def test_a_slow_episode_write_holds_the_arm_without_latching_the_watchdog(tmp_path: Path) -> None:
    """A write that outlasts the watchdog (a slow disk, PNG frames under load) pauses it; the next episode runs."""
    robot = _robot()
    device = _script({0: ("reset",), 6: ("success",), 8: ("reset",), 14: ("success",)})
    with SafetyLayer(robot, _safety()) as layer, device:
        sink = open_sink(tmp_path / "demos", "episodes", robot.features, HZ, "", {})
        write = sink.write

        def slow_write(ep: Episode) -> None:
            time.sleep(3 * layer.config.watchdog_timeout_s)
            write(ep)

        sink.write = slow_write  # type: ignore[method-assign]
        summary = DemoRecorder(layer, device, sink, RecordConfig(hz=HZ, episodes=2, max_ticks=200)).run()
        sink.close()
        assert layer.latched is None and layer.watchdog is not None and layer.watchdog.armed
    assert summary.saved == 2 and summary.stop_reason == "2 episodes saved", summary.stop_reason
    assert summary.safety_counts.get("watchdog", 0) == 0


@pytest.mark.sim
@pytest.mark.slow
def test_cli_record_warns_once_per_kind_of_safety_event_and_counts_the_rest(tmp_path: Path) -> None:
    """20 expert demos pushing at the workspace box printed 200 safety WARNING lines: now one per kind of event, with
    the counts by kind in the summary (``safety.log_interval_s=0`` logs every later event: a long session's worth)."""
    import re
    import subprocess
    import sys

    pytest.importorskip("mujoco")
    exe = str(Path(sys.executable).with_name("robot-rl"))
    cmd = [exe, "record", "--robot", "sim_arm", "--teleop", "pick_demonstrator", "--out", str(tmp_path / "demos"),
           "--format", "episodes", "--episodes", "2", "--max-episode-steps", "30", "robot.cameras={}",
           "robot.time_scale=4", "safety.control_hz=40", "safety.watchdog_timeout_s=1", "safety.log_interval_s=0",
           "safety.workspace_low=[0.15,-0.35,0.1]"]  # the floor above the cube: the expert's reach down is cut
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    warned = re.findall(r"WARNING robot_rl.hardware.safety: safety: (\w+)", done.stderr)
    counted = dict(re.findall(r"(\w+) (\d+)", done.stdout.split("safety events: ")[1].split(";")[0]))
    assert "workspace" in warned and sorted(warned) == sorted(set(warned)) == sorted(counted), done.stderr
    assert int(counted["workspace"]) > 1, done.stdout
    assert "further ones are counted on the status line and in the summary" in done.stderr
