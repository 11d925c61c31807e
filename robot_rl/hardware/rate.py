"""The fixed-rate control loop, kept importable here: it lives in :mod:`robot_rl.core.rate`.

`robot-rl actor` paces its env with it too, and the loop knows no robot driver.
"""

from robot_rl.core.rate import RateLoop, RateStats

__all__ = ["RateLoop", "RateStats"]
