"""Autonomous practice: a task policy and a reset policy learned together, the person asked only when stuck.

`robot-rl deploy --mode practice` (docs/practice.md). :mod:`.controller` decides which policy acts and when the
robot is stuck; :mod:`.loop` runs both policies' deploy loops on one robot and relabels their shared experience.
"""

from robot_rl.human_loop.practice.config import PracticeConfig
from robot_rl.human_loop.practice.controller import Attempt, PracticeController, PracticeCounts

__all__ = ["Attempt", "PracticeConfig", "PracticeController", "PracticeCounts"]
