"""A scripted demonstrator for ``mujoco/pick_cube`` (state observations, ``ee_delta`` + gripper).

It stands in for a teleoperator: the source of demonstrations for reward models (success classifier,
process reward model), co-training and benchmarks. Stateless and batched: each row's phase follows
from its observation, so it works across auto-resets without bookkeeping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from robot_rl.core.algorithm import Policy

if TYPE_CHECKING:
    from robot_rl.core.transition import Obs

#: ``mujoco/pick_cube`` state layout: 16 arm numbers (6 joints, 6 velocities, opening, grip xyz), then
#: cube position (3) and quaternion (4), cube − grip (3), goal (3), goal − cube (3), magnified (3).
OPENING, GRIP, CUBE, GOAL = 12, slice(13, 16), slice(16, 19), slice(26, 29)
PICK_STATE_DIM = 35


class ScriptedPickDemonstrator(Policy):
    """Above the cube with the gripper open, down, close, then carry the cube to the goal.

    ``noise`` adds Gaussian noise to the motion part of the action (not the gripper), so demos cover
    near-misses and recoveries as a human's do; ``gain`` scales the motion toward each phase's target.
    """

    def __init__(self, action_scale: float = 0.05, gain: float = 1.0, noise: float = 0.0, seed: int = 0) -> None:
        super().__init__()  # a Policy (no weights): it can act wherever a policy does, e.g. as JSRL's guide
        self.action_scale, self.gain, self.noise = action_scale, gain, noise
        self.generator = torch.Generator().manual_seed(seed)

    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Actions ``[N, 4]`` (xyz move, gripper: +1 open, −1 closed) for a batch of pick observations."""
        state = obs["state"]
        if state.shape[-1] != PICK_STATE_DIM:
            raise ValueError(f"the scripted pick demonstrator reads mujoco/pick_cube state [N, {PICK_STATE_DIM}] "
                             f"(task.obs=state or state_pixels), got {list(state.shape)}")
        grip, cube, goal, opening = state[:, GRIP], state[:, CUBE], state[:, GOAL], state[:, OPENING]
        off = cube - grip
        horizontal = torch.linalg.vector_norm(off[:, :2], dim=-1)
        on_table = cube[:, 2] < 0.04
        above = (horizontal > 0.012) & on_table
        descend = ~above & (grip[:, 2] - cube[:, 2] > 0.008) & (opening > 0.8) & on_table
        close = ~above & ~descend & (opening > 0.7)
        carry = ~above & ~descend & ~close
        # Targets per phase: hover 6 cm over the cube, the cube itself, stay, the goal (moving the cube).
        hover = torch.cat([cube[:, :2], cube[:, 2:] + 0.06], dim=-1)
        target = torch.where(above[:, None], hover, grip)
        target = torch.where(descend[:, None], cube, target)
        target = torch.where(carry[:, None], grip + (goal - cube), target)
        move = self.gain * (target - grip) / self.action_scale
        if self.noise > 0 and not deterministic:
            move = move + self.noise * torch.randn(move.shape, generator=self.generator).to(move.device)
        gripper = torch.where(above | descend, 1.0, -1.0).to(state.dtype)[:, None]
        return torch.cat([move.clamp(-1.0, 1.0), gripper], dim=-1), {}
