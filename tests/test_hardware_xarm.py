"""The xArm driver against the fake SDK, through the Robot contract and the safety layer."""

import inspect

import numpy as np
import pytest

from robot_rl.hardware.robot import ROBOTS, NotConnectedError, RobotError, joints_to_action
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.xarm import XArmRobot, XArmRobotConfig
from robot_rl.testing.fake_xarm import HOME_POSE, FakeXArmAPI


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def make(mode="ee_delta", **fake_kw):
    clock = Clock()
    fakes = []

    def sdk(ip):
        fakes.append(FakeXArmAPI(ip, is_radian=True, clock=clock, **fake_kw))
        return fakes[-1]

    return XArmRobot(XArmRobotConfig(control_mode=mode), sdk=sdk), clock, fakes


def test_features_before_connect_and_connect_sequence():
    robot, _, fakes = make()
    assert robot.features.action.shape == (7,) and robot.features.observation["state"].shape == (13,)
    assert isinstance(ROBOTS.get("xarm")().make(), XArmRobot)
    with pytest.raises(NotConnectedError):
        robot.observe()
    with robot:
        arm = fakes[0]
        assert arm.mode == 1 and arm.state == 0 and arm.motion_enabled and arm.gripper_enabled
        obs = robot.observe()
        assert obs["state"].shape == (13,) and obs["state"].dtype == np.float32
        assert np.allclose(obs["state"][6:9], HOME_POSE[:3] / 1000)  # metres
    assert not robot.is_connected and arm.state == 4  # held, then disconnected


def test_fake_integrates_motion_with_speed_limits():
    robot, clock, _fakes = make(max_tcp_speed=100.0)  # 0.1 m/s
    with robot:
        start = robot.measure().ee_pose
        applied = robot.send_action(np.array([1, 0, 0, 0, 0, 0, -1.0]))  # 1 cm and close
        assert applied[0] == 1.0
        clock.t += 0.05  # 5 mm possible at 0.1 m/s
        mid = robot.measure()
        assert mid.ee_pose[0] - start[0] == pytest.approx(0.005, abs=1e-6)
        clock.t += 1.0
        end = robot.measure()
        assert end.ee_pose[0] - start[0] == pytest.approx(0.01, abs=1e-6)  # reaches the target, not beyond
        assert end.gripper == pytest.approx(0.0)  # gripper closed at its own speed


def test_joint_mode_limits_and_hold_then_resume():
    robot, clock, fakes = make(mode="joint", max_joint_speed=1.0)
    with robot:
        q0 = robot.measure().joints
        target_action = np.append(joints_to_action(robot.config, np.zeros(6)), 1.0)  # all joints to 0 rad
        robot.send_action(target_action)
        clock.t += 0.1
        q1 = robot.measure().joints
        assert np.abs(q1 - q0).max() == pytest.approx(0.1, abs=1e-6)  # 1 rad/s for 0.1 s
        robot.hold()
        clock.t += 1.0
        assert np.allclose(robot.measure().joints, q1)  # held: no motion
        robot.send_action(target_action)  # resumes servo mode
        assert fakes[0].state == 1
        clock.t += 5.0
        assert np.allclose(robot.measure().joints, 0.0, atol=1e-6)


def test_controller_error_is_reported_not_ignored():
    robot, _clock, fakes = make()
    with robot:
        fakes[0].inject_error(22)
        with pytest.raises(RobotError, match="22"):
            robot.measure()


def test_safety_layer_over_the_driver_keeps_the_measured_pose_in_the_box():
    robot, clock, _fakes = make()
    cfg = SafetyConfig(workspace_low=[0.2, -0.3, 0.1], workspace_high=[0.45, 0.3, 0.5], watchdog_timeout_s=0)
    with SafetyLayer(robot, cfg) as layer:
        for _ in range(40):  # push +x at full speed
            layer.step(np.array([1.0, 0, 0, 0, 0, 0, 1.0]))
            clock.t += 0.05
        x = robot.measure().ee_pose[0]
        assert x == pytest.approx(0.45, abs=1e-6) and layer.counts["workspace"] > 0
        layer.step(np.array([-1.0, 0, 0, 0, 0, 0, 1.0]))
        clock.t += 0.05
        assert robot.measure().ee_pose[0] < x


def test_joint_mode_safety_uses_controller_forward_kinematics():
    robot, clock, fakes = make(mode="joint")
    high = [HOME_POSE[0] / 1000 + 0.01, 0.5, 0.6]  # 1 cm of room in +x from the start
    with SafetyLayer(robot, SafetyConfig(workspace_low=[0.1, -0.5, 0.0], workspace_high=high,
                                         watchdog_timeout_s=0, max_joint_speed=0.5)) as layer:
        q = robot.measure().joints
        a = np.append(2 * (q - np.array(robot.config.joint_low)) / (np.array(robot.config.joint_high)
                                                                   - np.array(robot.config.joint_low)) - 1, 1.0)
        a[1] += 0.3  # +q1 moves +x (250 mm/rad) beyond the box
        for _ in range(20):
            layer.step(a)
            clock.t += 0.05
        assert robot.measure().ee_pose[0] <= high[0] + 1e-6 and layer.counts["workspace"] > 0
        assert "get_forward_kinematics" in fakes[0].calls


@pytest.mark.integration
def test_fake_matches_the_real_sdk_signatures():
    xarm = pytest.importorskip("xarm.wrapper")
    real = xarm.XArmAPI
    for name, fn in inspect.getmembers(FakeXArmAPI, inspect.isfunction):
        if name.startswith("_") or name in ("fk", "ik", "inject_error"):
            continue
        real_params = list(inspect.signature(getattr(real, name)).parameters)
        fake_params = [p for p in inspect.signature(fn).parameters if p not in ("clock",)]
        missing = [p for p in real_params if p not in fake_params and p not in ("kwargs",)]
        assert not missing, f"{name}: fake lacks {missing}"
