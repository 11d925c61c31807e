"""Who acts this step, kept importable here: the controller lives in :mod:`robot_rl.hardware.intervention`.

It sits beside the safety layer, between the policy and the robot, so that the graded HIL schedule of `robot-rl
train` (:mod:`robot_rl.hil`) uses it without importing the deploy and record loops of this package.
"""

from robot_rl.hardware.intervention import (
    EpisodeInterventions,
    InterventionConfig,
    InterventionController,
    InterventionStep,
    check_device_mode,
    check_leader_kinematics,
    leader_ee_step,
)

__all__ = ["EpisodeInterventions", "InterventionConfig", "InterventionController", "InterventionStep",
           "check_device_mode", "check_leader_kinematics", "leader_ee_step"]
