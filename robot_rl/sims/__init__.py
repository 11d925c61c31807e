"""Built-in tasks; importing this package registers them in ``robot_rl.core.config.TASKS``.

Registered names: ``reach`` (the default), ``reach_pixels``, ``lang_reach``, ``lang_push``, ``push``, ``pendulum``
(pure torch, batched on any device), ``gym`` / ``gymnasium`` (any gymnasium id), ``maniskill`` (any ManiSkill3 id),
``isaacgym`` (Isaac Gym tensor API) and ``mujoco/reach|push|pick_cube|peg_insert``. Only torch and
numpy are imported here; tasks backed by optional simulators (gymnasium included) import them inside
their config's ``make``.
"""

from robot_rl.sims import (
    gymnasium,
    isaacgym,
    lang_push,
    lang_reach,
    maniskill,
    mujoco,
    pendulum,
    push,
    reach,
    reach_pixels,
)
from robot_rl.sims.torch_task import TorchTask

__all__ = ["TorchTask", "gymnasium", "isaacgym", "lang_push", "lang_reach", "maniskill", "mujoco", "pendulum", "push",
           "reach", "reach_pixels"]
