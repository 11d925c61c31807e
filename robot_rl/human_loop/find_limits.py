"""The loops of `robot-rl robot find-limits`: the arm moved by hand (motors off) or by a teleop device.

By hand the robot must be :class:`~robot_rl.hardware.limits.Compliant`; nothing is commanded until the end,
when the goal is set to where the arm is and the motors hold again. With a device (a leader arm in
``joint_delta``, a keyboard or SpaceMouse in ``ee_delta``) every step goes through the safety layer as in
`record`, so the current safety box bounds what can be reached: widen ``safety.workspace_*`` to explore further.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from robot_rl.core.config import ConfigError
from robot_rl.core.rate import RateLoop
from robot_rl.hardware.intervention import InterventionConfig, InterventionController
from robot_rl.hardware.limits import Compliant, LimitsRecorder
from robot_rl.hardware.robot import Robot, hold_action, measures_pose
from robot_rl.hardware.safety import SafetyLayer
from robot_rl.hardware.teleop import TeleopDevice

log = logging.getLogger(__name__)

Progress = Callable[[LimitsRecorder, float], None]
"""Called every tick with the recorder and the seconds left."""


def by_hand(robot: Robot, seconds: float, hz: float, stop: threading.Event | None = None,
            progress: Progress | None = None) -> LimitsRecorder:
    """Motors off for ``seconds`` (or until ``stop``) while a person moves the arm; holding again after."""
    if not isinstance(robot, Compliant):
        raise ConfigError(f"{type(robot).__name__} cannot switch its motors off to be moved by hand: pass a teleop "
                          "device (--teleop leader_arm, keyboard, …) to move it instead")
    rec = LimitsRecorder()
    stop = stop or threading.Event()
    has_pose = measures_pose(robot)
    loop = RateLoop(hz)
    end = time.monotonic() + seconds
    robot.set_compliant(True)
    try:
        while not stop.is_set() and time.monotonic() < end:
            loop.wait()
            rec.add(robot.measure(), has_pose)
            if progress is not None:
                progress(rec, end - time.monotonic())
    finally:
        robot.set_compliant(False)  # goal := where the arm is, then torque: it holds there, no swing
    return rec


def by_device(layer: SafetyLayer, device: TeleopDevice, seconds: float, stop: threading.Event | None = None,
              progress: Progress | None = None) -> LimitsRecorder:
    """The device moves the arm through the safety layer for ``seconds``; the arm holds when nobody engages."""
    robot = layer.robot
    controller = InterventionController(device, InterventionConfig(), robot.control_mode,
                                        joint_step_rad=robot.config.max_step_joint_rad)
    rec = LimitsRecorder()
    stop = stop or threading.Event()
    has_pose = measures_pose(robot)
    loop = RateLoop(layer.config.control_hz)
    end = time.monotonic() + seconds
    while not stop.is_set() and time.monotonic() < end:
        loop.wait()
        layer.observe()  # what a scripted device watches (record's loop does the same)
        state = robot.measure()
        rec.add(state, has_pose)
        step = controller.step(hold_action(robot.config, state), measured_joints=state.joints)
        _, info = layer.step(step.action)
        if info["safety_latched"] is not None:
            log.warning("find-limits: the safety layer latched (%s); the limits so far are kept",
                        info["safety_latched"])
            break
        if progress is not None:
            progress(rec, end - time.monotonic())
    robot.hold()
    return rec
