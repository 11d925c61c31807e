"""Distillation: a large teacher policy into a small student that exports to C (`robot-rl distill`).

The student learns from the teacher's own rollouts, then from DAgger rounds in which it drives (mixed with the
teacher at a decaying rate) and the teacher labels every observation it visits; it is scored next to the teacher
on the same episodes, saved as a SAC run directory and exported with `robot-rl export`'s exporter.
See docs/distill.md.

- :mod:`.config`: :class:`DistillConfig`, :class:`StudentConfig`, :class:`DaggerConfig`
- :mod:`.teacher`: :func:`load_teacher`, :class:`Teacher` (which kinds can teach)
- :mod:`.lerobot_teacher`: a LeRobot SmolVLA / pi0 / pi0.5 checkpoint as the teacher (one fixed instruction)
- :mod:`.student`: the small SAC student, its C sizes and budget check, saving it as a run
- :mod:`.dagger`: the data set, the β-mixture rollouts, the loss and the fit
- :mod:`.run`: :func:`distill`, :class:`DistillReport`
"""

from robot_rl.distill.config import DaggerConfig, DistillConfig, DistillError, StudentConfig
from robot_rl.distill.run import DistillReport, distill
from robot_rl.distill.student import StudentNotExportableError
from robot_rl.distill.teacher import Teacher, UnsupportedTeacherError, load_teacher

__all__ = ["DaggerConfig", "DistillConfig", "DistillError", "DistillReport", "StudentConfig",
           "StudentNotExportableError", "Teacher", "UnsupportedTeacherError", "distill", "load_teacher"]
