"""A scripted demonstrator for ``mujoco/reach`` (state observations, ``ee_delta``).

A proportional controller on ``goal − grip``: it records the demonstrations of the co-training and twin examples
(:mod:`robot_rl.sims.mujoco.shifted`) and guides JSRL (``jsrl.guide=scripted``). Kept apart from the task
module so that the task can hand it out without importing what the shifted-world tools import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from robot_rl.core.algorithm import Policy

if TYPE_CHECKING:
    from robot_rl.core.transition import Obs

#: Where ``goal − grip`` sits in ``mujoco/reach``'s state: 16 arm numbers, then goal (3), then the offset.
REACH_OFFSET = slice(19, 22)


class ScriptedReachDemonstrator(Policy):
    """A proportional controller on ``goal − grip`` with optional Gaussian action noise (a teleoperator).

    ``action = clip(gain · (goal − grip) / action_scale + noise, −1, 1)``; works on ``mujoco/reach`` and
    ``mujoco/reach_shifted`` state observations (``ee_delta`` control).
    """

    def __init__(self, action_scale: float = 0.03, gain: float = 0.6, noise: float = 0.0, seed: int = 0) -> None:
        super().__init__()  # a Policy (no weights): it can act wherever a policy does, e.g. as JSRL's guide
        self.action_scale, self.gain, self.noise = action_scale, gain, noise
        self.generator = torch.Generator().manual_seed(seed)

    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Actions ``[N, 3]`` for a batch of reach observations (noise unless ``deterministic``)."""
        state = obs["state"]
        if state.shape[-1] != 25:
            raise ValueError(f"the scripted reach demonstrator reads mujoco/reach state [N, 25], got "
                             f"{list(state.shape)}")
        action = self.gain * state[:, REACH_OFFSET] / self.action_scale
        if self.noise > 0 and not deterministic:
            action = action + self.noise * torch.randn(action.shape, generator=self.generator).to(action.device)
        return action.clamp(-1.0, 1.0), {}
