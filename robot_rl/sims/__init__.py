"""Built-in tasks; importing this package registers them in ``robot_rl.config.TASKS``.

Registered names: ``reach`` (the default), ``reach_pixels``, ``push``, ``pendulum`` (pure torch,
batched on any device) and ``gym`` (any gymnasium id). Only torch and numpy are imported here;
tasks backed by optional simulators (gymnasium included) import them inside their config's ``make``.
"""

from robot_rl.sims import gymnasium, pendulum, push, reach, reach_pixels
from robot_rl.sims.torch_task import TorchTask

__all__ = ["TorchTask", "gymnasium", "pendulum", "push", "reach", "reach_pixels"]
