"""LeRobot arms without LeRobot: the driver's config checks, arm inference, pose conventions and IK steps.

Runs in the core venv (lerobot is never imported); the IK parts need mink (the kinematics extra) and skip without.
tests/test_lerobot_control_modes.py drives the same code against lerobot's own SO-101 and Koch classes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from robot_rl.hardware.lerobot_arm import infer_arm, matrix_to_rpy, rotation_vector, rpy_to_matrix
from robot_rl.hardware.lerobot_robot import LeRobotRobotConfig


def test_the_arm_model_is_inferred_from_lerobots_robot_type():
    assert LeRobotRobotConfig().arm_name == "so101"
    assert LeRobotRobotConfig(robot_type="so100_follower").arm_name == "so100"
    assert LeRobotRobotConfig(robot_type="koch_follower").arm_name == "koch"
    assert LeRobotRobotConfig(robot_type="omx_follower").arm_name is None
    assert LeRobotRobotConfig(robot_type="so101_follower", arm=None).arm_name is None
    assert LeRobotRobotConfig(robot_type="my_plugin_arm", arm="so100").arm_name == "so100"
    assert infer_arm("so101_follower", "null") is None
    with pytest.raises(ValueError, match="unknown arm model 'ur5'; known: koch, so100, so101"):
        LeRobotRobotConfig(arm="ur5")


def test_config_refusals_name_the_fix():
    with pytest.raises(ValueError, match=r"ee_delta needs an arm model.*set arm=so100, so101 or koch"):
        LeRobotRobotConfig(robot_type="omx_follower", control_mode="ee_delta")
    with pytest.raises(ValueError, match=r"max_step_m\*√3 = 0.05196.* m.*beyond the IK.s 0.05 m"):
        LeRobotRobotConfig(control_mode="ee_delta", max_step_m=0.03)
    with pytest.raises(ValueError, match=r"options\.use_degrees=False contradicts degrees=True"):
        LeRobotRobotConfig(options={"use_degrees": False})
    with pytest.raises(ValueError, match="control_mode 'torque'; valid: ee_delta, joint, joint_delta"):
        LeRobotRobotConfig(control_mode="torque")


def test_use_degrees_is_passed_to_lerobots_so_and_koch_followers_only():
    assert LeRobotRobotConfig(robot_type="koch_follower", degrees=False).lerobot_fields()["use_degrees"] is False
    assert LeRobotRobotConfig(robot_type="so100_follower").lerobot_fields()["use_degrees"] is True
    assert "use_degrees" not in LeRobotRobotConfig(robot_type="robot_rl_fake_follower").lerobot_fields()


def test_rpy_convention_and_rotation_vector():
    rpy = np.array([0.3, -0.4, 2.5])
    m = rpy_to_matrix(rpy)
    np.testing.assert_allclose(m.T @ m, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(matrix_to_rpy(m), rpy, atol=1e-12)
    # Rz(yaw) Ry(pitch) Rx(roll): a pure yaw of 90° turns x onto y.
    np.testing.assert_allclose(rpy_to_matrix([0, 0, math.pi / 2]) @ [1, 0, 0], [0, 1, 0], atol=1e-12)
    np.testing.assert_allclose(rotation_vector(rpy_to_matrix([0, 0, math.pi / 2])), [0, 0, math.pi / 2], atol=1e-12)
    np.testing.assert_allclose(rotation_vector(rpy_to_matrix([0.02, 0, 0])), [0.02, 0, 0], atol=1e-12)
    np.testing.assert_allclose(rotation_vector(np.eye(3)), np.zeros(3))


def test_driver_declares_the_pose_and_the_arm_before_connecting():
    pytest.importorskip("mink", reason="the arm models need mink: pip install 'robot-rl[kinematics]'")
    from robot_rl.hardware.robot import ArmModelRobot

    robot = LeRobotRobotConfig(control_mode="ee_delta").make()
    spec = robot.features
    assert spec.observation["state"].shape == (12,) and spec.action.shape == (7,)
    assert spec.extras["control_mode"] == "ee_delta" and not robot.is_connected
    assert isinstance(robot, ArmModelRobot) and robot.arm_model_name == "so101"
    plain = LeRobotRobotConfig(robot_type="omx_follower", control_mode="joint_delta").make()
    assert plain.features.observation["state"].shape == (6,) and plain.arm_model_name is None


def test_ik_steps_stay_exact_move_one_centimetre_and_cap_a_joint_swing():
    pytest.importorskip("mink", reason="the arm models need mink: pip install 'robot-rl[kinematics]'")
    from robot_rl.hardware.lerobot_arm import ArmSteps

    steps = ArmSteps("so101", max_joint_step_rad=0.1)
    q = np.radians([4.0, -20.0, 30.0, 10.0, 0.0])
    pose = steps.pose(q)
    assert steps.step(q, pose, pose.copy()) is not q and np.array_equal(steps.step(q, pose, pose.copy()), q)
    target = pose + np.array([0.01, 0, 0, 0, 0, 0])
    goal = steps.step(q, pose, target)
    np.testing.assert_allclose(steps.pose(goal)[:3], target[:3], atol=1e-4)  # the IK's 0.1 mm tolerance
    assert steps.scaled_steps == 0
    tight = ArmSteps("so101", max_joint_step_rad=1e-3)
    goal = tight.step(q, pose, target)
    assert np.abs(goal - q).max() == pytest.approx(1e-3) and tight.scaled_steps == 1
