"""The graded HIL schedule's configs, kept importable here: they live in :mod:`robot_rl.hil.config`."""

from robot_rl.hil.config import PHASES, HILConfig, HILPhase, HILSchedule

__all__ = ["PHASES", "HILConfig", "HILPhase", "HILSchedule"]
