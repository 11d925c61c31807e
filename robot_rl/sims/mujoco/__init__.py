"""MuJoCo arm tasks (``mujoco/reach``, ``mujoco/push``, ``mujoco/pick_cube``, ``mujoco/peg_insert``).

``mujoco/reach_shifted`` is the co-training "real robot" stand-in (robot_rl/sims/mujoco/shifted.py).

Importing this package registers the task configs; MuJoCo itself (and JAX for ``backend=mjx``, Warp for
``backend=warp``) is imported only when a config's ``make`` builds an env. See docs/sims-mujoco.md.
"""

from robot_rl.sims.mujoco.shifted import MujocoReachShiftedConfig
from robot_rl.sims.mujoco.tasks import (
    MujocoPegInsertConfig,
    MujocoPickCubeConfig,
    MujocoPushConfig,
    MujocoReachConfig,
    MujocoTaskConfig,
)

__all__ = [
    "MujocoPegInsertConfig",
    "MujocoPickCubeConfig",
    "MujocoPushConfig",
    "MujocoReachConfig",
    "MujocoReachShiftedConfig",
    "MujocoTaskConfig",
]
