"""Safety layer: property tests over hostile action streams, workspace faces, limits, e-stop, weight checks."""

import math

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from robot_rl.hardware.robot import (  # noqa: E402
    Robot,
    RobotConfig,
    RobotState,
    action_to_target,
    hold_action,
    joint_target_to_action,
    robot_features,
)
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer  # noqa: E402
from robot_rl.hardware.weight_check import WeightCheckConfig, WeightGate, check_policy_update  # noqa: E402

LOW, HIGH = np.array([0.2, -0.3, 0.05]), np.array([0.6, 0.3, 0.5])


class PoseRobot(Robot):
    """A robot whose measured state the test sets; it records every physical target it is sent."""

    def __init__(self, mode="ee_delta", fk=False):
        self.config = RobotConfig(control_mode=mode, max_step_m=0.01, max_step_rad=0.05)
        self.state = RobotState(np.zeros(6), np.array([0.4, 0.0, 0.3, math.pi, 0, 0]), 0.5, 0.0)
        self.targets, self.holds, self._conn, self._fk = [], 0, False, fk

    @property
    def is_connected(self):
        return self._conn

    def connect(self):
        self._conn = True

    def disconnect(self):
        self._conn = False

    def measure(self):
        return self.state

    def _command(self, target, gripper):
        self.targets.append((target.copy(), gripper))

    def hold(self):
        self.holds += 1

    def forward_kinematics(self, joints):
        if not self._fk:
            return None
        return self.state.ee_pose + np.concatenate([0.5 * (joints[:3] - self.state.joints[:3]), np.zeros(3)])


def make(mode="ee_delta", fk=False, **kw):
    robot = PoseRobot(mode, fk)
    cfg = SafetyConfig(workspace_low=list(LOW), workspace_high=list(HIGH), watchdog_timeout_s=0, **kw)
    layer = SafetyLayer(robot, cfg)
    layer.connect()
    return robot, layer


hostile = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32),
                    st.sampled_from([np.nan, np.inf, -np.inf, 1e9, -1e9, 1.0, -1.0, 0.0]))
action_streams = st.lists(st.lists(hostile, min_size=7, max_size=7), min_size=1, max_size=15)
inside = st.tuples(*[st.floats(float(lo), float(hi)) for lo, hi in zip(LOW, HIGH)])


@settings(max_examples=80, deadline=None)
@given(stream=action_streams, start=inside)
def test_any_action_stream_stays_within_every_limit(stream, start):
    robot, layer = make(max_linear_speed=0.1, max_angular_speed=0.5)  # below the action scale: limits bite
    robot.state.ee_pose[:3] = start
    cfg, dt = layer.config, 1.0 / layer.config.control_hz
    prev = np.array([0, 0, 0, 0, 0, 0, 2 * robot.state.gripper - 1])
    nonfinite = 0
    for raw in stream:
        a = np.array(raw, dtype=np.float64)
        nonfinite += int(not np.isfinite(a).all())
        applied, info = layer.step(a)
        assert np.isfinite(applied).all() and np.abs(applied).max() <= 1.0 + 1e-6
        if not info["safety_held"]:  # a hold stops where the arm is measured; otherwise moves are rate-limited
            assert np.abs(applied - prev).max() <= layer.max_action_change + 1e-5  # 1st step: from the measured state
        target, _ = robot.targets[-1]
        move = target[:3] - robot.state.ee_pose[:3]
        assert np.linalg.norm(move) <= cfg.max_linear_speed * dt * (1 + 1e-6)  # float32 actions
        assert np.linalg.norm(target[3:] - robot.state.ee_pose[3:]) <= cfg.max_angular_speed * dt * (1 + 1e-6)
        assert (target[:3] >= LOW - 1e-9).all() and (target[:3] <= HIGH + 1e-9).all()
        if not np.isfinite(a).all():
            assert "nonfinite" in info["safety_events"] and np.allclose(applied[:6], 0)
        robot.state.ee_pose[:3] = target[:3]  # the arm follows exactly
        prev = applied
    assert layer.counts["nonfinite"] == nonfinite


FACES = [(axis, side) for axis in range(3) for side in (-1, 1)]


@settings(max_examples=60, deadline=None)
@given(face=st.sampled_from(FACES), overshoot=st.floats(0.0, 0.05), push=st.lists(
    st.floats(-1e9, 1e9, allow_nan=False), min_size=6, max_size=6), steps=st.integers(1, 8))
def test_adversarial_push_at_each_face_never_goes_further_out(face, overshoot, push, steps):
    axis, side = face
    robot, layer = make()
    pose = robot.state.ee_pose
    pose[axis] = (HIGH[axis] + overshoot) if side > 0 else (LOW[axis] - overshoot)
    a = np.array([*push, 0.0])
    a[axis] = side * 1e9  # straight out through the face
    for _ in range(steps):
        layer.step(a)
        target, _ = robot.targets[-1]
        if side > 0:
            assert target[axis] <= max(HIGH[axis], pose[axis]) + 1e-12
        else:
            assert target[axis] >= min(LOW[axis], pose[axis]) - 1e-12
        pose[:3] = target[:3]
    if overshoot > 0:
        assert layer.counts["workspace"] >= 1


@pytest.mark.parametrize("axis,side", FACES)
def test_commands_back_into_the_box_pass(axis, side):
    robot, layer = make()
    pose = robot.state.ee_pose
    pose[axis] = (HIGH[axis] + 0.03) if side > 0 else (LOW[axis] - 0.03)
    a = np.zeros(7)
    a[axis] = -side * 0.4  # back in
    applied, info = layer.step(a)
    assert "workspace" not in info["safety_events"]
    target, _ = robot.targets[-1]
    assert (target[axis] - pose[axis]) * side < 0 and math.isclose(applied[axis], -side * 0.4, rel_tol=1e-5)


def test_clamp_and_change_limit_counted_and_reported():
    _, layer = make()
    applied, info = layer.step(np.array([5.0, 0, 0, 0, 0, 0, 0]))
    assert info["safety_events"] == ("clamped", "change_limit")
    assert applied[0] == pytest.approx(0.5) and info["safety_held"] is False
    applied, info = layer.step(np.array([1.0, 0, 0, 0, 0, 0, 0]))
    assert applied[0] == pytest.approx(1.0) and info["safety_events"] == ()
    assert info["safety_counts"] == {"clamped": 1, "change_limit": 1}


def test_first_command_after_rearm_is_limited_relative_to_measured_state_in_joint_mode():
    robot, layer = make(mode="joint", max_joint_speed=100.0)
    robot.state.joints[:] = 0.0  # the middle of the joint range = action 0
    applied, _ = layer.step(np.array([0.3] * 6 + [0.0]))
    assert np.allclose(applied[:6], 0.3, atol=1e-6)
    layer.rearm()
    robot.state.joints[:] = -math.pi / 2  # moved by hand while held: action -0.5
    applied, info = layer.step(np.array([0.3] * 6 + [0.0]))
    assert "change_limit" in info["safety_events"]
    assert np.allclose(applied[:6], -0.5 + layer.max_action_change, atol=1e-5)


def test_joint_velocity_limit():
    robot, layer = make(mode="joint", max_action_change=2.0, max_joint_speed=0.5)
    layer.step(np.array([1.0] * 6 + [0.0]))
    target, _ = robot.targets[-1]
    assert np.allclose(target, 0.5 / layer.config.control_hz)
    assert layer.counts["velocity"] == 1


def test_joint_mode_workspace_uses_forward_kinematics_and_holds_without_it():
    robot, layer = make(mode="joint", fk=True, max_action_change=2.0, max_joint_speed=100.0)
    robot.state.ee_pose[0] = HIGH[0]  # at the +x face; FK says +q0 moves +x
    _, info = layer.step(np.array([0.5, 0, 0, 0, 0, 0, 0.0]))
    assert "workspace" in info["safety_events"] and np.allclose(robot.targets[-1][0], robot.state.joints)
    _, info = layer.step(np.array([-0.02, 0, 0, 0, 0, 0, 0.0]))  # back in
    assert "workspace" not in info["safety_events"] and robot.targets[-1][0][0] < 0
    robot2, layer2 = make(mode="joint", fk=False)
    robot2.state.ee_pose[2] = HIGH[2] + 0.01
    _, info = layer2.step(np.zeros(7))
    assert "workspace" in info["safety_events"] and np.allclose(robot2.targets[-1][0], robot2.state.joints)


def test_estop_latches_until_reset_and_rearm():
    robot, layer = make()
    layer.estop.trigger("test key")
    assert robot.holds == 1 and layer.latched == "estop"
    applied, info = layer.step(np.array([0.5, 0, 0, 0, 0, 0, 0]))
    assert info["safety_held"] and info["safety_events"] == ("latched",) and np.allclose(applied[:6], 0)
    with pytest.raises(RuntimeError, match="reset it"):
        layer.rearm()
    layer.estop.reset()
    layer.rearm()
    applied, info = layer.step(np.array([0.5, 0, 0, 0, 0, 0, 0]))
    assert not info["safety_held"] and applied[0] == pytest.approx(0.5)


def test_stale_sensor_holds_until_fresh():
    robot, layer = make()
    stale = ["camera front"]
    robot.stale_sensors = lambda: stale
    _, info = layer.step(np.array([0.5, 0, 0, 0, 0, 0, 0]))
    assert info["safety_held"] and "sensor_stale" in info["safety_events"] and robot.holds == 1
    stale.clear()
    _, info = layer.step(np.array([0.5, 0, 0, 0, 0, 0, 0]))
    assert not info["safety_held"]


def test_robot_rejects_nan_even_without_the_layer():
    robot = PoseRobot()
    robot.connect()
    with pytest.raises(ValueError, match="SafetyLayer"):
        robot.send_action(np.array([np.nan] * 7))
    target, _ = action_to_target(robot.config, np.zeros(7), robot.state)
    assert np.allclose(target, robot.state.ee_pose)


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="low < high"):
        SafetyConfig(workspace_low=[0, 0, 1], workspace_high=[1, 1, 0])
    with pytest.raises(ValueError, match="control_mode"):
        RobotConfig(control_mode="torque")


def _policy(scale=1.0, bias=0.0):
    return lambda obs: np.tanh(obs["state"][:, :2] * scale) + bias


def test_weight_gate_accepts_close_policies_and_rejects_bad_ones():
    obs = {"state": np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)}
    gate = WeightGate(obs, WeightCheckConfig(max_deviation=0.2))
    assert gate.offer(_policy(), 1).ok and gate.version == 1
    assert gate.offer(_policy(1.05), 2).ok and gate.version == 2
    nan = gate.offer(lambda o: np.full((64, 2), np.nan), 3)
    assert not nan.ok and "non-finite" in nan.reason
    out = gate.offer(_policy(bias=0.5), 4)  # tanh + 0.5 exceeds 1
    assert not out.ok and "outside" in out.reason
    far = gate.offer(_policy(-1.0), 5)
    assert not far.ok and far.max_deviation > 0.2 and "deviation" in far.reason
    crash = gate.offer(lambda o: 1 / 0, 6)
    assert not crash.ok and "ZeroDivisionError" in crash.reason
    assert gate.version == 2 and gate.counts == {"accepted": 2, "rejected": 4}
    assert not check_policy_update(_policy(), None, {"state": np.zeros((0, 4))}).ok


@pytest.mark.integration
def test_watchdog_counts_from_the_first_command_and_its_latch_says_what_to_change():
    import time

    from waiting import wait_until

    robot = PoseRobot()
    layer = SafetyLayer(robot, SafetyConfig(workspace_low=list(LOW), workspace_high=list(HIGH),
                                            watchdog_timeout_s=0.05))
    with layer:
        layer.connect()
        # A slow start (a first camera render, a policy loading) is not a stalled stream: no command yet, no trip.
        time.sleep(0.25)
        assert layer.latched is None and robot.holds == 0
        layer.step(np.zeros(7))  # the stream starts, then stalls
        wait_until(lambda: layer.latched == "watchdog", 5.0, "the watchdog to latch after the stream stalled")
        detail = layer.latch_detail
        assert detail is not None and "safety.watchdog_timeout_s=0.05" in detail
        suggested = float(detail.split("set safety.watchdog_timeout_s=")[1].split()[0])
        assert suggested >= 2 * layer.watchdog.last_trip_delay_s and suggested >= 0.1
        # Re-armed, the deadline again waits for the next command.
        layer.rearm()
        time.sleep(0.2)
        assert layer.latched is None


def test_the_watchdog_line_names_the_stall_when_the_loop_rearms_before_it_is_logged(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under load the watchdog thread lost the CPU between latching and logging, the loop re-armed for its next
    episode, and the log said ``safety: None`` instead of the stall and the setting to change."""
    import logging

    from waiting import wait_until

    robot = PoseRobot()
    layer = SafetyLayer(robot, SafetyConfig(workspace_low=list(LOW), workspace_high=list(HIGH),
                                            watchdog_timeout_s=0.05))
    latch = layer._latch

    def latch_then_rearm(reason: str) -> None:
        latch(reason)
        if reason == "watchdog":
            layer.rearm()  # the loop's new episode, before the watchdog thread logs

    monkeypatch.setattr(layer, "_latch", latch_then_rearm)
    with caplog.at_level(logging.ERROR, logger="robot_rl.hardware.safety"), layer:
        layer.connect()
        layer.step(np.zeros(7))
        wait_until(lambda: layer.watchdog is not None and layer.watchdog.trips == 1, 5.0, "the watchdog to trip")
        wait_until(lambda: len(caplog.records) >= 2, 5.0, "the watchdog's log lines")
    errors = [r.getMessage() for r in caplog.records]
    assert "None" not in errors, errors
    assert any("no command for" in e and "safety.watchdog_timeout_s=0.05" in e for e in errors), errors


# ---------------------------------------------------------------- joint_delta (any robot, no LeRobot)


def test_joint_delta_maps_actions_to_steps_from_the_measured_joints():
    cfg = RobotConfig(control_mode="joint_delta", max_step_joint_rad=0.1)
    measured = RobotState(np.array([0.2, -0.4, 0.0, 1.0, 0.0, -3.0]), np.zeros(6), 0.25, 0.0)
    target, grip = action_to_target(cfg, np.array([0.5, -1.0, 0.0, 0.0, 0.0, 0.25, 0.5]), measured)
    np.testing.assert_allclose(target, [0.25, -0.5, 0.0, 1.0, 0.0, -2.975])  # measured + action * 0.1 rad
    assert grip == pytest.approx(0.75)  # absolute, as in the other modes
    np.testing.assert_array_equal(hold_action(cfg, measured), [0, 0, 0, 0, 0, 0, -0.5])  # stay = no step
    np.testing.assert_allclose(joint_target_to_action(cfg, target, measured), [0.5, -1, 0, 0, 0, 0.25], atol=1e-6)
    assert cfg.action_dim == 7 and robot_features(cfg).extras["control_mode"] == "joint_delta"
    with pytest.raises(ValueError, match="max_step_joint_rad"):
        RobotConfig(control_mode="joint_delta", max_step_joint_rad=0.0)


def test_joint_delta_through_the_safety_layer_speed_limits_and_nan():
    robot, layer = make(mode="joint_delta", max_action_change=2.0, max_joint_speed=0.5)
    robot.config.max_step_joint_rad = 0.1
    robot.state.joints[:] = [0.3, 0, 0, 0, 0, 0]
    applied, info = layer.step(np.array([1.0, -0.2, 0, 0, 0, 0, 1.0]))  # asks 0.1 rad; 0.5 rad/s at 20 Hz allows 0.025
    target, _ = robot.targets[-1]
    np.testing.assert_allclose(target, [0.325, -0.02, 0, 0, 0, 0])
    np.testing.assert_allclose(applied[:6], [0.25, -0.2, 0, 0, 0, 0], atol=1e-6)  # the step actually taken
    assert info["safety_events"] == ("velocity",)
    applied, info = layer.step(np.array([np.nan] * 7))
    assert info["safety_held"] and np.array_equal(applied[:6], np.zeros(6))
    np.testing.assert_array_equal(robot.targets[-1][0], robot.state.joints)  # the hold is the measured joints


def test_joint_delta_joint_limits_cut_outward_steps_only():
    robot, layer = make(mode="joint_delta", max_action_change=2.0, max_joint_speed=100.0)
    robot.state.joints[:] = [math.pi - 0.01, -math.pi - 0.02, 0, 0, 0, 0]  # near one limit, past the other
    _, info = layer.step(np.array([1.0, -1.0, 0, 0, 0, 0, 0]))
    target, _ = robot.targets[-1]
    assert target[0] == pytest.approx(math.pi) and target[1] == pytest.approx(-math.pi - 0.02)  # no further out
    assert "workspace" in info["safety_events"]
    layer.step(np.array([0.0, 1.0, 0, 0, 0, 0, 0]))  # back in passes
    assert robot.targets[-1][0][1] == pytest.approx(-math.pi - 0.02 + 0.05)


@settings(max_examples=60, deadline=None)
@given(stream=action_streams)
def test_any_joint_delta_stream_stays_within_speed_and_joint_limits(stream):
    robot, layer = make(mode="joint_delta", fk=True, max_joint_speed=0.5)
    robot.config.max_step_joint_rad = 0.2
    qmax = layer.config.max_joint_speed / layer.config.control_hz
    hi = np.asarray(robot.config.joint_high)
    robot.state.joints[:] = hi - 0.01
    for raw in stream:
        applied, _ = layer.step(np.array(raw, dtype=np.float64))
        assert np.isfinite(applied).all() and np.abs(applied).max() <= 1.0 + 1e-6
        target, _ = robot.targets[-1]  # from the float32 action the robot receives: within 1e-8 rad of exact
        assert np.abs(target - robot.state.joints).max() <= qmax + 1e-7
        assert (target <= hi + 1e-7).all()
        assert (robot.forward_kinematics(target)[:3] <= np.maximum(HIGH, robot.state.ee_pose[:3]) + 1e-7).all()
        robot.state.ee_pose[:] = robot.forward_kinematics(target)
        robot.state.joints[:] = target


# ---------------------------------------------------------------- workspace boxes sized per arm


class ArmRobot(PoseRobot):
    """A robot that says which arm model it is (robot_rl.hardware.robot.ArmModelRobot)."""

    arm_model_name = "so101"


def test_workspace_box_from_an_arm_preset_the_robots_arm_or_the_default():
    from robot_rl.hardware.kinematics import arm_model

    koch, so101 = arm_model("koch"), arm_model("so101")
    np.testing.assert_allclose(SafetyConfig(workspace_preset="koch").workspace_box()[1], koch.workspace_high)
    low, high = SafetyConfig(workspace_preset="koch", workspace_high=[0.2, 0.1, 0.15]).workspace_box()
    np.testing.assert_allclose(low, koch.workspace_low)  # a corner given overrides the preset's
    np.testing.assert_allclose(high, [0.2, 0.1, 0.15])
    np.testing.assert_allclose(SafetyConfig().workspace_box()[1], [0.65, 0.35, 0.55])  # tabletop default
    layer = SafetyLayer(ArmRobot(), SafetyConfig(watchdog_timeout_s=0))
    np.testing.assert_allclose(layer._high, so101.workspace_high)  # the robot's own arm, when nothing is set
    layer = SafetyLayer(ArmRobot(), SafetyConfig(watchdog_timeout_s=0, workspace_preset="koch"))
    np.testing.assert_allclose(layer._high, koch.workspace_high)
    with pytest.raises(ValueError, match="not an arm model; known: koch, so100, so101"):
        SafetyConfig(workspace_preset="ur5")


def test_inverted_joint_limits_name_the_joint():
    with pytest.raises(ValueError, match=r"joint 2: joint_low 1 is not below joint_high -1.*swapped"):
        RobotConfig(joint_low=[-1, -1, 1, -1, -1, -1], joint_high=[1, 1, -1, 1, 1, 1])


def test_the_change_limit_defaults_to_one_on_arms_with_a_kinematic_model() -> None:
    from robot_rl.hardware.safety import ACTION_CHANGE, ARM_ACTION_CHANGE

    class So101PoseRobot(PoseRobot):
        arm_model_name = "so101"  # what the LeRobot driver reports for an SO-101 (ArmModelRobot)

    _, plain = make()
    assert plain.max_action_change == ACTION_CHANGE == 0.5
    arm = So101PoseRobot()
    assert SafetyLayer(arm, SafetyConfig()).max_action_change == ARM_ACTION_CHANGE == 1.0
    assert SafetyLayer(arm, SafetyConfig(max_action_change=0.3)).max_action_change == 0.3
    arm.state.joints[:] = 0.0
    layer = SafetyLayer(arm, SafetyConfig(workspace_low=list(LOW), workspace_high=list(HIGH), watchdog_timeout_s=0))
    layer.connect()
    _, info = layer.step(np.array([1.0, 0, 0, 0, 0, 0, 0.0]))  # from rest: a change of 1 passes, a 0.5 limit bit
    assert "change_limit" not in info["safety_events"]
    with pytest.raises(ValueError, match="max_action_change must be positive"):
        SafetyConfig(max_action_change=0.0)


def test_one_warning_per_kind_of_event_the_rest_counted(caplog: pytest.LogCaptureFixture) -> None:
    """200 workspace warnings in 20 demos flooded the terminal: the first of each kind warns, the next are counted
    (INFO at most once per log_interval_s, here every one) and the counts read by kind."""
    import logging

    from robot_rl.hardware.safety import counts_text

    robot, layer = make(log_interval_s=0.0)
    robot.state.ee_pose[0] = HIGH[0]  # at the +x face: every push out is cut
    with caplog.at_level(logging.INFO, logger="robot_rl.hardware.safety"):
        for _ in range(30):
            layer.step(np.array([1.0, 0, 0, 0, 0, 0, 1.0]))
        layer.step(np.array([5.0, 0, 0, 0, 0, 0, 1.0]))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == len({w.split(":")[1] for w in warnings}) == 3, warnings  # change_limit, workspace, clamped
    assert all("further ones are counted on the status line and in the summary" in w for w in warnings)
    assert layer.counts["workspace"] == 31 and layer.counts["clamped"] == 1
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert sum(m.startswith("safety: workspace:") for m in infos) == 30, infos  # not the box line at construction
    assert counts_text(layer.counts) == "change_limit 31, workspace 31, clamped 1"  # most first, ties by name
    assert counts_text({}) == counts_text({"velocity": 0}) == "none"
