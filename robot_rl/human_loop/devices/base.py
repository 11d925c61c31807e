"""The teleop device contract, kept importable here: it lives in :mod:`robot_rl.hardware.teleop`.

The simulated arms' scripted persons build readings, and hardware may not import the human-in-the-loop package.
"""

from robot_rl.hardware.teleop import (
    EVENTS,
    TELEOP_DEVICES,
    AnswersRewardAudits,
    HearsHelpRequests,
    TeleopConfig,
    TeleopDevice,
    TeleopReading,
)

__all__ = ["EVENTS", "TELEOP_DEVICES", "AnswersRewardAudits", "HearsHelpRequests", "TeleopConfig", "TeleopDevice",
           "TeleopReading"]
