"""Built-in tasks, pure torch and batched on any device; importing this package registers them.

Registered names: ``reach`` (the default), ``reach_pixels``, ``push``, ``pendulum``. Only torch is
imported here; tasks backed by optional simulators import them inside their config's ``make``.
"""

from robot_rl.sims import pendulum, push, reach, reach_pixels
from robot_rl.sims.torch_task import TorchTask

__all__ = ["TorchTask", "pendulum", "push", "reach", "reach_pixels"]
