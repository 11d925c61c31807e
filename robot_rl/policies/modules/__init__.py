"""Building blocks shared by the whole models in ``robot_rl.policies``."""
