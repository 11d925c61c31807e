"""robot_rl's tasks for other libraries: gymnasium, stable-baselines3 and rsl_rl (docs/gym-interop.md).

- :func:`make_vec` (``robot_rl/gym/vector_env.py``): a task as a ``gymnasium.vector.VectorEnv``, numpy in and
  out, same-step auto-reset; :class:`RobotRLEnv` (``single_env.py``): one sub-env as a ``gymnasium.Env``.
- Importing this package registers ``robot_rl/<Task>-v0`` ids for ``gymnasium.make`` / ``gymnasium.make_vec``
  (``registration.py``) when gymnasium is installed.
- ``robot_rl.gym.sb3``: a task as a stable-baselines3 ``VecEnv``; ``robot_rl.gym.rsl_rl``: as an rsl_rl
  ``VecEnv`` (torch on the task's device; it needs no gymnasium).

This layer builds tasks through the task registry and converts their arrays; it never imports the training
loop, the transports, the algorithms or the hardware (tests/test_architecture.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from robot_rl.sims.extras import installed, require

if TYPE_CHECKING:
    from robot_rl.gym.registration import gym_id, register_tasks
    from robot_rl.gym.single_env import RobotRLEnv
    from robot_rl.gym.vector_env import RobotRLVectorEnv, make_vec

__all__ = ["RobotRLEnv", "RobotRLVectorEnv", "gym_id", "make_vec", "register_tasks"]

# The names above live in modules that import gymnasium, loaded at first use so that the rsl_rl adapter
# works without it (PEP 562).
_LAZY = {"RobotRLEnv": "single_env", "RobotRLVectorEnv": "vector_env", "make_vec": "vector_env",
         "gym_id": "registration", "register_tasks": "registration"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'robot_rl.gym' has no attribute {name!r}")
    require("gymnasium", "gym", f"robot_rl.gym.{name}")
    return getattr(importlib.import_module(f"robot_rl.gym.{_LAZY[name]}"), name)


if installed("gym"):
    importlib.import_module("robot_rl.gym.registration").register_tasks()
