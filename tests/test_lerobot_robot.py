"""LeRobot robots and leader arms behind our contracts, against fakes of lerobot's real abstract classes.

Needs lerobot (CI: the .venv-lerobot step); skips without it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from waiting import wait_until

pytest.importorskip("lerobot")

from robot_rl.hardware.lerobot_robot import LeRobotRobot, LeRobotRobotConfig, make_lerobot_device
from robot_rl.hardware.robot import RobotError
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.human_loop.devices.base import TeleopReading
from robot_rl.human_loop.devices.leader_arm import LeaderArmConfig, LeaderArmDevice
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.record import DemoRecorder, RecordConfig
from robot_rl.human_loop.record_sinks import open_sink
from robot_rl.testing.fake_lerobot import (
    HOME,
    FakeFollower,
    FakeFollowerConfig,
    FakeLeader,
    FakeLeaderConfig,
)


def _cfg(tmp_path: Path, **options: object) -> LeRobotRobotConfig:
    return LeRobotRobotConfig(robot_type="robot_rl_fake_follower", port="/dev/fake", id="t",
                              calibration_dir=str(tmp_path / "calib"), options=dict(options))


def test_fakes_implement_lerobots_abstract_interface(tmp_path: Path) -> None:
    from lerobot.robots import Robot
    from lerobot.teleoperators import Teleoperator

    # Instantiation fails if any abstract method or property of lerobot's classes is missing.
    robot = make_lerobot_device("robot", "robot_rl_fake_follower", {"id": "a", "calibration_dir": tmp_path})
    leader = make_lerobot_device("teleoperator", "robot_rl_fake_leader", {"id": "b", "calibration_dir": tmp_path})
    assert isinstance(robot, Robot) and isinstance(robot, FakeFollower)
    assert isinstance(leader, Teleoperator) and isinstance(leader, FakeLeader)
    with pytest.raises(ValueError, match=r"unknown lerobot robot type 'nope'.*so101_follower"):
        make_lerobot_device("robot", "nope", {})


def test_features_units_and_applied_action(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, fake_cameras={"front": (24, 32)}, max_relative_target=5.0, max_speed=1000.0)
    cfg.cameras = {"front": (24, 32)}
    robot = cfg.make()
    spec = robot.features  # declared before connecting
    assert spec.observation["state"].shape == (6,) and spec.observation["image.front"].shape == (24, 32, 3)
    assert spec.action.shape == (6,) and not robot.is_connected
    with robot:
        obs = robot.observe()
        np.testing.assert_allclose(obs["state"][:5], np.radians([HOME[m] for m in robot.map.joint_names]), atol=1e-6)
        assert obs["state"][5] == pytest.approx(0.5) and obs["image.front"].dtype == np.uint8
        # ask for +30 deg on shoulder_pan: lerobot's max_relative_target clips it to +5 deg, and we report that
        want = np.radians(30.0)
        lo, hi = np.asarray(cfg.joint_low), np.asarray(cfg.joint_high)
        q = np.radians([HOME[m] for m in robot.map.joint_names])
        q[0] = want
        action = np.append(2 * (q - lo) / (hi - lo) - 1, 1.0).astype(np.float32)
        applied = robot.send_action(action)
        got_q = lo + (applied[:5] + 1) / 2 * (hi - lo)
        assert np.degrees(got_q[0]) == pytest.approx(5.0, abs=1e-3)
        assert applied[5] == pytest.approx(0.1, abs=1e-6)  # gripper 50 -> clipped to 55 of 100: opening 0.55
        # the fake servo moves at max_speed: wait until it has reached the applied goal
        wait_until(lambda: robot.measure().joints[0] == pytest.approx(np.radians(5.0), abs=1e-6), 5.0,
                   "shoulder_pan at the applied +5 deg", seen=lambda: np.degrees(robot.measure().joints[0]))
        sent = robot.lerobot.sent[-1]
        assert sent["shoulder_pan.pos"] == pytest.approx(5.0) and sent["gripper.pos"] == pytest.approx(55.0)
    assert not robot.is_connected and not robot.lerobot.torque  # lerobot disabled torque on disconnect


def test_safety_layer_on_lerobot_robot_and_hold(tmp_path: Path) -> None:
    robot = _cfg(tmp_path, max_speed=2000.0).make()
    layer = SafetyLayer(robot, SafetyConfig(control_hz=50.0, max_joint_speed=1.0, watchdog_timeout_s=0))
    with layer:
        assert np.isnan(robot.measure().ee_pose).all()  # no kinematics: the pose is unknown, not invented
        _, info = layer.step(np.array([1.0, 0, 0, 0, 0, 0.0], np.float32))
        assert "velocity" in info["safety_events"] or "change_limit" in info["safety_events"]
        q = robot.lerobot.goal["shoulder_pan"]
        assert abs(q - HOME["shoulder_pan"]) <= np.degrees(1.0 / 50.0) + 1e-3  # 1 rad/s for one step (float32)
        _, info = layer.step(np.array([np.nan] * 6, np.float32))
        assert info["safety_held"] and "nonfinite" in info["safety_events"]
        robot.lerobot.goal["elbow_flex"] = 80.0  # something else commanded a motion …
        robot.hold()  # … hold sends the present position as the goal: the arm stops short of 80
        held = robot.lerobot.goal["elbow_flex"]
        assert abs(held - HOME["elbow_flex"]) < 5.0  # where it was (a few ms of motion at most), not 80
        wait_until(lambda: np.degrees(robot.measure().joints[2]) == pytest.approx(held, abs=1e-6), 5.0,
                   "elbow_flex at the held goal", seen=lambda: np.degrees(robot.measure().joints[2]))


def test_unreachable_and_mismatched_robot(tmp_path: Path) -> None:
    with pytest.raises(RobotError, match=r"could not connect.*Could not connect on port"):
        _cfg(tmp_path, fail_connect=True).make().connect()
    with pytest.raises(ValueError, match="no motor"):
        LeRobotRobot(LeRobotRobotConfig(joint_names=["a", "b", "c", "d", "e"], arm=None),
                     robot=FakeFollower(FakeFollowerConfig(id="x", calibration_dir=tmp_path)))
    with pytest.raises(ValueError, match=r"ee_delta needs an arm model.*arm=so100, so101 or koch"):
        LeRobotRobotConfig(control_mode="ee_delta", robot_type="omx_follower")


def test_real_so101_type_resolves_and_fails_clearly(tmp_path: Path) -> None:
    # lerobot's own SO-101 follower: built through its factory; without the motor SDK, a calibration or the port,
    # a clear error.
    pytest.importorskip("mink", reason="the SO-101's arm model needs mink: bash scripts/install-lerobot.sh VENV")
    robot = LeRobotRobotConfig(robot_type="so101_follower", port="/dev/does-not-exist", id="t",
                               calibration_dir=str(tmp_path)).make()
    assert robot.features.action.shape == (6,) and robot.features.observation["state"].shape == (12,)
    with pytest.raises((ImportError, RobotError), match=r"feetech|lerobot-calibrate --robot.type=so101_follower"):
        robot.connect()
    cal = {m: {"id": i + 1, "drive_mode": 0, "homing_offset": 0, "range_min": 500, "range_max": 3500}
           for i, m in enumerate([*robot.config.joint_names, "gripper"])}
    (tmp_path / "t.json").write_text(json.dumps(cal))
    robot = LeRobotRobotConfig(robot_type="so101_follower", port="/dev/does-not-exist", id="t",
                               calibration_dir=str(tmp_path)).make()
    with pytest.raises((ImportError, RobotError), match=r"feetech|could not connect"):
        robot.connect()


def _leader(tmp_path: Path, blend: float = 0.3) -> tuple[LeaderArmDevice, FakeLeader]:
    fake = FakeLeader(FakeLeaderConfig(id="l", calibration_dir=tmp_path))
    events = {0: ("reset",), 40: ("success",)}
    controls = ScriptedDevice(lambda i: TeleopReading(0.0, events=events.get(i, ())))
    dev = LeaderArmDevice(LeaderArmConfig(poll_hz=200.0), teleop=fake, controls=controls)
    return dev, fake


def test_leader_arm_records_with_bumpless_takeover(tmp_path: Path) -> None:
    robot = _cfg(tmp_path, max_speed=3000.0).make()
    device, fake = _leader(tmp_path)
    fake.positions = {**HOME, "shoulder_pan": 40.0, "gripper": 100.0}  # the leader is 40 deg away at takeover
    hz = 100.0
    layer = SafetyLayer(robot, SafetyConfig(control_hz=hz, max_joint_speed=3.0, max_action_change=2.0,
                                            watchdog_timeout_s=0.5))
    with layer, device:
        sink = open_sink(tmp_path / "demos", "episodes", robot.features, hz, "follow", {})
        rec = DemoRecorder(layer, device, sink, RecordConfig(hz=hz, episodes=1, max_ticks=200, blend_s=0.2))
        assert "leader" in rec.status_line() or "hold" in rec.status_line()
        summary = rec.run()
        sink.close()
    assert summary.saved == 1 and summary.outcomes == ["success"]
    from robot_rl.data.store import EpisodeStore

    (ep,) = list(EpisodeStore(tmp_path / "demos"))
    pan = np.degrees(ep.obs["state"][:, 0])
    assert abs(pan[1] - HOME["shoulder_pan"]) < 2.0  # no jump at takeover: the follower starts where it was
    assert np.abs(np.diff(pan)).max() < 3.0 * 180 / np.pi / hz + 0.5  # never faster than the blend/speed limit
    assert pan[-1] == pytest.approx(40.0, abs=0.5)  # after the blend it follows the leader
    assert ep.intervened.all() and ep.success[-1]
    assert fake.reads > 10


def test_leader_arm_lost_counts_as_not_intervening(tmp_path: Path) -> None:
    device, fake = _leader(tmp_path)
    with device:
        r = device.read()
        assert r is not None and r.joints.shape == (5,) and r.engage and r.gripper == pytest.approx(0.0)
        fake.disconnect()  # the next poll raises: the reader stops, the device reads as disconnected
        wait_until(lambda: not device.is_connected, 5.0, "the leader arm to read as disconnected")
        assert device.error is not None


def test_leader_arm_listed_by_devices() -> None:
    from robot_rl.human_loop.devices.listing import list_devices

    (item,) = [d for d in list_devices() if d.kind == "leader_arm"]
    assert "leader joints" in item.controls and ("needs lerobot" not in item.note)


def test_leader_drives_only_while_engaged_in_controls_mode(tmp_path: Path) -> None:
    robot = _cfg(tmp_path, max_speed=3000.0).make()
    fake = FakeLeader(FakeLeaderConfig(id="l", calibration_dir=tmp_path))
    fake.positions = {**HOME, "shoulder_pan": 30.0}
    events = {0: ("reset",), 30: ("reset",)}
    controls = ScriptedDevice(lambda i: TeleopReading(0.0, engage=i >= 10, events=events.get(i, ())))
    device = LeaderArmDevice(LeaderArmConfig(engage_mode="controls", poll_hz=200.0), teleop=fake, controls=controls)
    hz = 100.0
    with SafetyLayer(robot, SafetyConfig(control_hz=hz, max_joint_speed=3.0, max_action_change=2.0,
                                         watchdog_timeout_s=0.5)) as layer, device:
        sink = open_sink(tmp_path / "d", "episodes", robot.features, hz, "", {})
        DemoRecorder(layer, device, sink, RecordConfig(hz=hz, episodes=1, max_ticks=100, blend_s=0.05)).run()
        sink.close()
    from robot_rl.data.store import EpisodeStore

    (ep,) = list(EpisodeStore(tmp_path / "d"))
    pan = np.degrees(ep.obs["state"][:, 0])
    np.testing.assert_array_equal(ep.intervened, np.arange(30) >= 10)
    assert np.abs(pan[:11] - HOME["shoulder_pan"]).max() < 0.5  # held while released
    assert pan[-1] == pytest.approx(30.0, abs=0.5)  # then blended onto the leader


# LeRobot's models and arms, in their own venv (.ci/run): seconds of CPU a test, not the unit tier.
pytestmark = pytest.mark.integration
