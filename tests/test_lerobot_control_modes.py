"""ee_delta and joint_delta on LeRobot arms: lerobot's own SO-101 and Koch followers on fake motors.

The robots are lerobot's ``SO101Follower`` and ``KochFollower`` with their real Feetech/Dynamixel buses; only the
serial link underneath is fake (robot_rl/testing/fake_motor_bus.py), so lerobot's calibration check, unit
conversion and tick rounding all run. Expected goals are computed here from lerobot 0.4.4's formulas
(degrees: ``ticks = int(deg * 4095 / 360 + mid)``; -100..100: ``ticks = int((v + 100) / 200 * (max - min) + min)``)
and the arm model's IK. Needs the LeRobot venv (CI: .venv-lerobot) with the motor SDKs and mink.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("lerobot", reason="needs lerobot 0.4.x: bash scripts/install-lerobot.sh VENV")
pytest.importorskip("mink", reason="the arm models need mink: bash scripts/install-lerobot.sh VENV")
pytest.importorskip("scservo_sdk", reason="lerobot's SO followers need feetech-servo-sdk: "
                    "bash scripts/install-lerobot.sh VENV")

from robot_rl.hardware.kinematics import ArmKinematics
from robot_rl.hardware.lerobot_arm import CalibrationError
from robot_rl.hardware.lerobot_robot import LeRobotRobot, LeRobotRobotConfig
from robot_rl.hardware.safety import ARM_ACTION_CHANGE, SafetyConfig, SafetyLayer
from robot_rl.testing.fake_motor_bus import FakeMotors, attach_fake_motors

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"]
# Calibrated ranges (ticks) like lerobot-calibrate writes them, and a start pose in front of the arm.
SO_RANGES = {"shoulder_pan": (750, 3350), "shoulder_lift": (800, 3300), "elbow_flex": (850, 3100),
             "wrist_flex": (800, 3200), "wrist_roll": (0, 4095), "gripper": (2000, 3400)}
SO_START = {"shoulder_pan": 2100, "shoulder_lift": 1820, "elbow_flex": 2330, "wrist_flex": 2110, "wrist_roll": 2048,
            "gripper": 2700}
KOCH_RANGES = {"shoulder_pan": (0, 4095), "shoulder_lift": (1100, 3000), "elbow_flex": (1000, 3100),
               "wrist_flex": (1000, 3000), "wrist_roll": (0, 4095), "gripper": (2000, 3000)}
KOCH_START = {"shoulder_pan": 2000, "shoulder_lift": 2300, "elbow_flex": 1750, "wrist_flex": 2150,
              "wrist_roll": 2048, "gripper": 2500}


def _write_calibration(directory: Path, ranges: dict[str, tuple[int, int]], robot_id: str = "t") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    cal = {m: {"id": i + 1, "drive_mode": 0, "homing_offset": 0, "range_min": lo, "range_max": hi}
           for i, (m, (lo, hi)) in enumerate(ranges.items())}
    (directory / f"{robot_id}.json").write_text(json.dumps(cal))
    return directory


def _mid(ranges: dict[str, tuple[int, int]], m: str) -> float:
    return (ranges[m][0] + ranges[m][1]) / 2


def _deg(ranges: dict[str, tuple[int, int]], ticks: dict[str, int]) -> np.ndarray:
    """lerobot's DEGREES reading of present positions in ticks."""
    return np.array([(ticks[m] - _mid(ranges, m)) * 360 / 4095 for m in JOINTS])


def _ticks(ranges: dict[str, tuple[int, int]], deg: np.ndarray) -> list[int]:
    """lerobot's goal ticks for degrees (it truncates with int())."""
    return [int(d * 4095 / 360 + _mid(ranges, m)) for m, d in zip(JOINTS, deg)]


def _so101(tmp_path: Path, ranges: dict[str, tuple[int, int]] | None = SO_RANGES, start: dict[str, int] = SO_START,
           **cfg: Any) -> tuple[LeRobotRobot, FakeMotors]:
    """lerobot's SO-101 follower on fake motors at ``start`` (ticks), calibrated with ``ranges`` (None: no file)."""
    from lerobot.robots.so_follower import SO101Follower, SO101FollowerConfig

    calib = _write_calibration(tmp_path / "calib", ranges) if ranges is not None else tmp_path / "calib"
    so101 = SO101Follower(SO101FollowerConfig(port="/dev/fake-so101", id="t", calibration_dir=calib))
    motors = attach_fake_motors(so101.bus, start)
    config = LeRobotRobotConfig(robot_type="so101_follower", port="/dev/fake-so101", id="t",
                                calibration_dir=str(calib), **cfg)
    return LeRobotRobot(config, robot=so101), motors


def _goals(motors: FakeMotors) -> list[int]:
    return [motors.goal_ticks(m) for m in JOINTS]


def test_ee_delta_step_of_one_centimetre_writes_the_ik_joint_goals(tmp_path: Path) -> None:
    robot, motors = _so101(tmp_path, control_mode="ee_delta", max_step_m=0.01)
    assert robot.features.action.shape == (7,) and robot.features.observation["state"].shape == (12,)
    kin = ArmKinematics("so101")
    q_deg = _deg(SO_RANGES, SO_START)
    with robot:
        measured = robot.measure()
        np.testing.assert_allclose(np.degrees(measured.joints), q_deg, atol=1e-9)
        pos0, _ = kin.fk(q_deg)
        np.testing.assert_allclose(measured.ee_pose[:3], pos0, atol=1e-12)  # the pose is FK of the reading
        np.testing.assert_allclose(robot.observe()["state"][5:8], pos0, atol=1e-6)
        applied = robot.send_action(np.array([1.0, 0, 0, 0, 0, 0, 0.0], np.float32))  # +1 cm in x
    step = kin.ik_delta(q_deg, [0.01, 0.0, 0.0], [0.0, 0.0, 0.0])
    assert step.converged and not step.clipped
    want = _ticks(SO_RANGES, step.q)
    assert _goals(motors) == want
    assert want != [SO_START[m] for m in JOINTS]  # it did move
    lo, hi = SO_RANGES["gripper"]
    assert motors.goal_ticks("gripper") == int(50.0 / 100 * (hi - lo) + lo)  # action 0 = half open = 50
    moved, _ = kin.fk(_deg(SO_RANGES, dict(zip(JOINTS, want))))
    # 1 cm, up to whole ticks: a tick is 0.088°, about 0.5 mm of tool motion per joint at this reach.
    np.testing.assert_allclose(moved - pos0, [0.01, 0.0, 0.0], atol=1.5e-3)
    # What was applied is the FK of the goals sent (lerobot's floats, before ticks): the step within the IK's 0.1 mm
    # tolerance (0.01 of a 1 cm action), and the small turn a five-joint arm cannot avoid (0.14° of yaw: the pan
    # turns to keep the tool on its line) reported instead of hidden.
    np.testing.assert_allclose(applied[:3], [1.0, 0.0, 0.0], atol=0.01)
    assert 0 < np.abs(applied[3:6]).max() < 0.1


def test_joint_delta_moves_each_joint_by_action_times_max_step_from_the_measured_joints(tmp_path: Path) -> None:
    robot, motors = _so101(tmp_path, control_mode="joint_delta", max_step_joint_rad=0.1)
    action = np.array([0.5, 0.0, -0.5, 0.0, 0.25, 1.0], np.float32)
    with robot:
        applied = robot.send_action(action)
        q_deg = _deg(SO_RANGES, SO_START) + np.degrees(action[:5].astype(np.float64) * 0.1)
        want = _ticks(SO_RANGES, q_deg)
        # 0.05 rad = 2.865° = 32.6 ticks at 4095/360 ticks per degree; lerobot truncates (2132.59 -> 2132)
        assert want[0] == SO_START["shoulder_pan"] + 32 and want[2] == SO_START["elbow_flex"] - 33
        assert _goals(motors) == [*want[:1], SO_START["shoulder_lift"], want[2], SO_START["wrist_flex"], want[4]]
        assert motors.goal_ticks("gripper") == SO_RANGES["gripper"][1]  # +1 = open = 100
        np.testing.assert_allclose(applied, action, atol=1e-6)
        np.testing.assert_allclose(robot.measure().joints, np.radians(_deg(SO_RANGES, dict(zip(JOINTS, want)))),
                                   atol=1e-12)  # the fake servos reached the goals


def test_staying_put_never_creeps_by_a_tick(tmp_path: Path) -> None:
    # lerobot truncates goals to whole ticks: a goal that comes back from radians (or a float32 opening) a hair
    # low would move the arm a tick a step while it is told to stay. These positions did creep that way.
    creep = {"shoulder_pan": 887, "shoulder_lift": 931, "elbow_flex": 1022, "wrist_flex": 925, "wrist_roll": 192}
    for mode, n, gripper in (("joint_delta", 6, 3184), ("ee_delta", 7, 3221)):
        robot, motors = _so101(tmp_path / mode, start={**creep, "gripper": gripper}, control_mode=mode)
        start = [*creep.values(), gripper]
        with robot:
            for _ in range(20):
                hold = np.zeros(n, np.float32)
                hold[-1] = 2 * robot.measure().gripper - 1
                robot.send_action(hold)
            assert [*_goals(motors), motors.goal_ticks("gripper")] == start, mode
            assert [*(motors.present_ticks(m) for m in JOINTS), motors.present_ticks("gripper")] == start, mode


def test_safety_layer_refuses_nan_inf_and_huge_actions_before_any_motor_moves(tmp_path: Path) -> None:
    robot, motors = _so101(tmp_path, control_mode="ee_delta", max_step_m=0.01)
    start = [SO_START[m] for m in JOINTS]
    with SafetyLayer(robot, SafetyConfig(control_hz=20.0, watchdog_timeout_s=0)) as layer:
        for bad in (np.nan, np.inf, -np.inf):
            applied, info = layer.step(np.array([bad, 0, 0, 0, 0, 0, 0.0]))
            assert "nonfinite" in info["safety_events"] and info["safety_held"]
            assert np.allclose(applied[:6], 0.0) and _goals(motors) == start  # held where it is, to the tick
        pos0 = robot.measure().ee_pose[:3]
        applied, info = layer.step(np.array([1e9, -1e9, 1e9, 0, 0, 0, 0.0]))
        assert "clamped" in info["safety_events"] and np.abs(applied).max() <= 1.0
        moved = robot.measure().ee_pose[:3] - pos0
        limit = layer.config.max_linear_speed / layer.config.control_hz
        assert 0 < np.linalg.norm(moved) <= limit + 5e-4  # rate-limited step, within a tick of IK error
        assert layer.max_action_change == ARM_ACTION_CHANGE  # the SO-101's default, wider than other robots'
        applied, info = layer.step(np.array([-1e9, 1e9, -1e9, 0, 0, 0, 0.0]))  # full reversal: a change > 1
        assert {"clamped", "change_limit"} <= set(info["safety_events"])
    assert layer.counts["nonfinite"] == 3


def test_the_so101_box_comes_from_its_preset_and_is_checked_on_the_measured_pose(tmp_path: Path) -> None:
    robot, _ = _so101(tmp_path, control_mode="ee_delta", max_step_m=0.01)
    cfg = SafetyConfig(control_hz=20.0, watchdog_timeout_s=0, max_action_change=2.0)
    with SafetyLayer(robot, cfg) as layer:
        np.testing.assert_allclose(layer._high, [0.36, 0.22, 0.30])  # the so101 preset, not the xArm-sized box
        for _ in range(6):  # from x = 0.335 m: +1 cm a step towards the face at 0.36 m
            _, info = layer.step(np.array([1.0, 0, 0, 0, 0, 0, 0.0]))
        assert "workspace" in info["safety_events"]
        x = robot.measure().ee_pose[0]
        assert 0.355 < x <= 0.36 + 5e-4
    assert layer.counts["workspace"] >= 3


def test_koch_in_lerobots_minus100_100_range_is_converted_through_the_calibration(tmp_path: Path) -> None:
    pytest.importorskip("dynamixel_sdk", reason="lerobot's Koch follower needs dynamixel-sdk: "
                        "bash scripts/install-lerobot.sh VENV")
    from lerobot.robots.koch_follower import KochFollower, KochFollowerConfig

    calib = _write_calibration(tmp_path / "calib", KOCH_RANGES)
    assert LeRobotRobotConfig(robot_type="koch_follower").lerobot_fields()["use_degrees"] is True  # passed on
    koch = KochFollower(KochFollowerConfig(port="/dev/fake-koch", id="t", calibration_dir=calib, use_degrees=False))
    motors = attach_fake_motors(koch.bus, KOCH_START)
    with pytest.raises(ValueError, match=r"set robot\.degrees=false"):  # lerobot reports -100..100: say so
        LeRobotRobot(LeRobotRobotConfig(robot_type="koch_follower"), robot=koch)
    cfg = LeRobotRobotConfig(robot_type="koch_follower", port="/dev/fake-koch", id="t", calibration_dir=str(calib),
                             degrees=False, control_mode="joint_delta", max_step_joint_rad=0.1)
    robot = LeRobotRobot(cfg, robot=koch)
    with robot:
        measured = robot.measure()
        np.testing.assert_allclose(np.degrees(measured.joints), _deg(KOCH_RANGES, KOCH_START), atol=1e-9)
        pos, _ = ArmKinematics("koch").fk(_deg(KOCH_RANGES, KOCH_START))
        np.testing.assert_allclose(measured.ee_pose[:3], pos, atol=1e-9)
        robot.send_action(np.array([0.5, 0, 0, -0.5, 0, 0.0], np.float32))
    for m, sign, i in (("shoulder_pan", 1, 0), ("wrist_flex", -1, 3)):
        lo, hi = KOCH_RANGES[m]
        deg = _deg(KOCH_RANGES, KOCH_START)[i] + sign * np.degrees(0.05)
        value = deg / ((hi - lo) / 200 * 360 / 4095)  # lerobot's -100..100
        assert motors.goal_ticks(m) == int((value + 100) / 200 * (hi - lo) + lo)
    assert motors.goal_ticks("elbow_flex") == KOCH_START["elbow_flex"]


def _refused(motors: FakeMotors) -> None:
    assert not motors.opened and motors.writes == []  # nothing reached the bus


def test_a_motor_the_arm_lacks_is_refused_naming_the_fix(tmp_path: Path) -> None:
    names = [*JOINTS[:4], "wrist_twist"]
    with pytest.raises(ValueError, match=r"names \['wrist_twist'\], which it lacks.*or arm=null"):
        LeRobotRobotConfig(robot_type="so101_follower", joint_names=names)
    robot, motors = _so101(tmp_path)
    with pytest.raises(ValueError, match=r"no motor\(s\) \['wrist_twist'\].*set joint_names"):
        LeRobotRobot(LeRobotRobotConfig(robot_type="so101_follower", joint_names=names, arm=None),
                     robot=robot.lerobot)
    _refused(motors)


def test_an_inverted_joint_range_is_refused_naming_the_fix(tmp_path: Path) -> None:
    low, high = [-1.0] * 5, [1.0] * 5
    low[2], high[2] = 1.0, -1.0
    with pytest.raises(ValueError, match=r"joint 'elbow_flex': joint_low 1 is not below joint_high -1.*swap"):
        LeRobotRobotConfig(robot_type="so101_follower", joint_low=low, joint_high=high)
    robot, motors = _so101(tmp_path, dict(SO_RANGES, elbow_flex=(3100, 850)))  # an inverted range in the file
    with pytest.raises(CalibrationError, match=r"'elbow_flex' has range_min 3100 >= range_max 850.*lerobot-calibrate"):
        robot.connect()
    _refused(motors)


def test_a_missing_calibration_file_is_refused_naming_the_command(tmp_path: Path) -> None:
    robot, motors = _so101(tmp_path, None, control_mode="joint_delta")
    with pytest.raises(CalibrationError, match=r"t.json does not exist.*lerobot-calibrate --robot.type=so101_follower "
                       r"--robot.port=/dev/fake-so101 --robot.id=t"):
        robot.connect()
    _refused(motors)
    assert not robot.is_connected


def test_recording_with_a_relative_device_drives_the_so101_in_ee_delta(tmp_path: Path) -> None:
    # The path `robot-rl record --robot lerobot --teleop spacemouse robot.control_mode=ee_delta` takes, with a
    # scripted device: +x held for steps 1..10, then success.
    from robot_rl.data.store import EpisodeStore
    from robot_rl.human_loop.devices.base import TeleopReading
    from robot_rl.human_loop.devices.scripted import ScriptedDevice
    from robot_rl.human_loop.record import DemoRecorder, RecordConfig
    from robot_rl.human_loop.record_sinks import open_sink

    robot, _ = _so101(tmp_path, control_mode="ee_delta", max_step_m=0.01)
    events = {0: ("reset",), 12: ("success",)}
    push = ScriptedDevice(lambda i: TeleopReading(0.0, delta=[1.0 if 1 <= i <= 10 else 0.0, 0, 0, 0, 0, 0],
                                                  engage=1 <= i <= 10, events=events.get(i, ())))
    hz = 20.0
    with SafetyLayer(robot, SafetyConfig(control_hz=hz, watchdog_timeout_s=0.5, max_action_change=2.0)) as layer, \
            push:
        sink = open_sink(tmp_path / "demos", "episodes", robot.features, hz, "push", {})
        summary = DemoRecorder(layer, push, sink, RecordConfig(hz=hz, episodes=1, max_ticks=40)).run()
        sink.close()
    assert summary.saved == 1
    (ep,) = list(EpisodeStore(tmp_path / "demos"))
    x = ep.obs["state"][:, 5]  # state = 5 joints, x y z roll pitch yaw, gripper
    assert ep.obs["state"].shape[1] == 12 and ep.intervened[1:11].all() and not ep.intervened[0]
    np.testing.assert_allclose(np.diff(x[1:4]), [0.01, 0.01], atol=1e-3)  # 1 cm per step, measured by FK
    assert x[-1] == pytest.approx(0.36, abs=5e-4)  # then stopped at the so101 box's +x face
    np.testing.assert_allclose(ep.action[1:3, 0], 1.0, atol=0.02)  # what was applied, as recorded
    np.testing.assert_allclose(ep.action[4:11, 0], 0.0, atol=0.02)  # pushing on at the face moves nothing


def test_find_limits_by_hand_turns_torque_off_and_holds_where_the_arm_was_left(tmp_path: Path) -> None:
    """`robot-rl robot find-limits` without a device: motors off, the person's motion recorded, then a hold there."""
    import threading

    from robot_rl.human_loop.find_limits import by_hand

    robot, motors = _so101(tmp_path, control_mode="joint_delta")
    moved = {"shoulder_pan": SO_START["shoulder_pan"] + 400, "elbow_flex": SO_START["elbow_flex"] - 300}
    with robot:
        def person() -> None:  # turns two joints once the motors are off
            for _ in range(200):
                if not motors.torque_on("shoulder_pan"):
                    for m, t in moved.items():
                        motors.move_by_hand(m, t)
                    return
                threading.Event().wait(0.005)

        hand = threading.Thread(target=person)
        hand.start()
        rec = by_hand(robot, seconds=0.4, hz=50.0)
        hand.join()
        assert all(motors.torque_on(m) for m in (*JOINTS, "gripper"))  # holding again
        writes = motors.writes
        torque = [(i, v) for i, (reg, _, v) in enumerate(writes) if reg == "Torque_Enable"]
        off = max(i for i, v in torque if v == 0)
        back_on = min(i for i, v in torque if v == 1 and i > off)
        # Between torque off and on again, the goals were set to where the person left the arm: no swing back.
        goals = {m: v for reg, m, v in writes[off:back_on] if reg == "Goal_Position"}
        assert goals["shoulder_pan"] == moved["shoulder_pan"] and goals["elbow_flex"] == moved["elbow_flex"]
        assert motors.present_ticks("shoulder_pan") == moved["shoulder_pan"]
    span = np.degrees(rec.joint_high - rec.joint_low)
    np.testing.assert_allclose(span[[0, 2]], [400 * 360 / 4095, 300 * 360 / 4095], atol=0.1)
    assert span[1] == span[3] == span[4] == 0.0
    found = rec.result(margin_deg=2.0)
    assert found.workspace_low is not None and len(found.joint_low) == 5


# LeRobot's models and arms, in their own venv (.ci/run): seconds of CPU a test, not the unit tier.
pytestmark = pytest.mark.integration
