"""The graded HIL schedule, kept importable here: it lives in :mod:`robot_rl.hil.schedule`.

The training loop runs it, and this package (deploy, record) builds on the loop: the schedule moved out of it so
that the loop never imports this package.
"""

from robot_rl.hil.schedule import (
    PHASES,
    HILConfig,
    HILController,
    HILPhase,
    HILSchedule,
    ReturnAndExplore,
    StateRestorable,
    demo_buffer,
    run_offline_phase,
)

__all__ = ["PHASES", "HILConfig", "HILController", "HILPhase", "HILSchedule", "ReturnAndExplore", "StateRestorable",
           "demo_buffer", "run_offline_phase"]
