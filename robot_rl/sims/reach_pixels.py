"""``reach_pixels``: the ``reach`` arm seen from above; the goal is visible only in the image.

Same dynamics, reward and termination as :mod:`robot_rl.sims.reach`. Observation:

- ``image.top``: uint8 ``[S, S, 3]`` top view of the whole workspace, rendered in torch for all
  sub-envs at once (``S = image_size``);
- ``state``: proprioception only, ``[cos q (2), sin q (2)]`` float32.

The default success radius is 5 cm rather than 2 cm: one pixel of a 64 × 64 view spans about
3.4 cm of the 2.2 m workspace, so 2 cm would ask for sub-pixel precision from the image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from robot_rl.core.config import TASKS
from robot_rl.core.specs import ArraySpec
from robot_rl.sims.reach import ReachConfig, ReachTask


@TASKS.register("reach_pixels")
@dataclass
class ReachPixelsConfig(ReachConfig):
    """Two-link reach from a top camera image plus joint proprioception (goal only in the image)."""

    # Not reach's: those were measured on states (PPO cannot take this task's image at all).
    presets: ClassVar[dict[str, dict[str, Any]]] = {}

    success_radius: float = 0.05
    """Success (and termination) when the end-effector is this close (m) to the goal."""
    image_size: int = 64
    """Side (px) of the square top-view image."""

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> ReachPixelsTask:
        """Build the batched pixel reach task."""
        return ReachPixelsTask(self, num_envs or self.num_envs, device, seed)


class ReachPixelsTask(ReachTask):
    """:class:`ReachTask` whose observation is a rendered image and joint proprioception."""

    def __init__(self, cfg: ReachPixelsConfig, num_envs: int, device: torch.device | str, seed: int) -> None:
        if cfg.image_size < 8:
            raise ValueError(f"image_size must be >= 8, got {cfg.image_size}")
        self.image_size = cfg.image_size
        observation = {
            "image.top": ArraySpec((cfg.image_size, cfg.image_size, 3), "uint8", low=0, high=255),
            "state": ArraySpec((4,), "float32"),
        }
        super().__init__(cfg, num_envs, device, seed, observation=observation)

    def _observe(self) -> dict[str, torch.Tensor]:
        image = self.render_rows(slice(0, self.num_envs), self.image_size)
        return {"image.top": image, "state": self._proprioception()}
