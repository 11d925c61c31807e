"""Kinematic models of the LeRobot follower arms (SO-100, SO-101, Koch v1.1): FK and joint-limited IK.

:class:`ArmModelConfig` (and the ``ARM_MODELS`` registry: ``so100``, ``so101``, ``koch``) imports nothing heavy;
:class:`ArmKinematics` needs the ``kinematics`` extra (MuJoCo, mink and a QP solver), imported on first use.
See docs/kinematics.md.
"""

from __future__ import annotations

from robot_rl.hardware.kinematics.arm import INSTALL_HINT, ArmKinematics, IKResult
from robot_rl.hardware.kinematics.config import ARM_JOINTS, ARM_MODELS, ArmModelConfig, arm_model

__all__ = ["ARM_JOINTS", "ARM_MODELS", "INSTALL_HINT", "ArmKinematics", "ArmModelConfig", "IKResult", "arm_model"]
