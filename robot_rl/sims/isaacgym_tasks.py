"""The built-in Isaac Gym tasks, each filling the hooks of :class:`~robot_rl.sims.isaacgym_env.IsaacGymTask`.

:class:`CartpoleTask` is ``isaacgym/cartpole``; :class:`JointTargetTask` is ``isaacgym/<path>.urdf`` (any
fixed-base arm reaching random joint targets). Each says which DOFs the action drives, how episodes start,
what it observes and how it is rewarded.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np
import torch

from robot_rl.sims.isaacgym_env import IsaacGymTask

#: The built-in cart-pole: a cart on a rail (prismatic, x) with a free pole (revolute about y,
#: upright at 0; centre of mass 0.5 m above the hinge).
CARTPOLE_URDF = """<?xml version="1.0"?>
<robot name="cartpole">
  <link name="slider">
    <visual><geometry><box size="8 0.03 0.03"/></geometry></visual>
    <collision><geometry><box size="8 0.03 0.03"/></geometry></collision>
    <inertial><mass value="1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial>
  </link>
  <joint name="slider_to_cart" type="prismatic">
    <parent link="slider"/><child link="cart"/><axis xyz="1 0 0"/><origin xyz="0 0 0"/>
    <limit lower="-4" upper="4" effort="1000" velocity="100"/>
  </joint>
  <link name="cart">
    <visual><geometry><box size="0.5 0.5 0.2"/></geometry></visual>
    <collision><geometry><box size="0.5 0.5 0.2"/></geometry></collision>
    <inertial><mass value="1"/><inertia ixx="0.02" ixy="0" ixz="0" iyy="0.02" iyz="0" izz="0.04"/></inertial>
  </link>
  <joint name="cart_to_pole" type="continuous">
    <parent link="cart"/><child link="pole"/><axis xyz="0 1 0"/><origin xyz="0 0 0"/>
    <limit effort="1000" velocity="100"/>
  </joint>
  <link name="pole">
    <visual><origin xyz="0 0 0.5"/><geometry><box size="0.04 0.04 1.0"/></geometry></visual>
    <collision><origin xyz="0 0 0.5"/><geometry><box size="0.04 0.04 1.0"/></geometry></collision>
    <inertial><origin xyz="0 0 0.5"/><mass value="0.1"/>
      <inertia ixx="0.0083" ixy="0" ixz="0" iyy="0.0083" iyz="0" izz="0.0001"/></inertial>
  </link>
</robot>
"""


class CartpoleTask(IsaacGymTask):
    """Balance a pole on a cart (as IsaacGymEnvs' Cartpole): force on the cart, 4-d state.

    Observation ``state``: ``[cart position, cart velocity, pole angle, pole angular velocity]``.
    Reward ``1 - θ² - 0.01 |ẋ| - 0.005 |θ̇|``, and -2 when the pole passes 90° or the cart leaves
    ±3 m, which terminates the episode. Success: the pole is still up (``|θ| < 0.2``) and the cart on
    the rail; an episode that lasts until truncation with the pole up is a success.
    """

    reset_dist: ClassVar[float] = 3.0

    def _configure(self, props: np.ndarray) -> list[int]:
        if self.num_dofs != 2:
            raise ValueError(f"cartpole needs 2 DOFs (cart, pole), the asset has {self.num_dofs}")
        return [0]

    def _sample_reset(self) -> tuple[torch.Tensor, torch.Tensor]:
        n, d = self.num_envs, self.num_dofs
        return 0.2 * (self.rand(n, d) - 0.5), 0.5 * (self.rand(n, d) - 0.5)

    def _observe(self) -> dict[str, torch.Tensor]:
        return {"state": torch.stack([self.dof_pos[:, 0], self.dof_vel[:, 0], self.dof_pos[:, 1],
                                      self.dof_vel[:, 1]], dim=-1).clone()}

    def _reward_and_status(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, xd, th, thd = self.dof_pos[:, 0], self.dof_vel[:, 0], self.dof_pos[:, 1], self.dof_vel[:, 1]
        failed = (x.abs() > self.reset_dist) | (th.abs() > math.pi / 2)
        reward = 1.0 - th * th - 0.01 * xd.abs() - 0.005 * thd.abs()
        reward = torch.where(failed, torch.full_like(reward, -2.0), reward)
        success = ~failed & (th.abs() < 0.2)
        return reward, failed, success


class JointTargetTask(IsaacGymTask):
    """Any fixed-base URDF/MJCF arm: drive every joint to a random target (position control by default).

    Observation ``state``: ``[q, q̇, target − q]`` (``3 D``). Reward ``−|target − q|`` (2-norm), +10 on
    success, which is every joint within ``success_tolerance`` and terminates the episode. Targets are
    uniform in the middle 80 % of each joint's range (±π for unlimited joints).
    """

    default_control: ClassVar[Literal["effort", "position"]] = "position"

    target: torch.Tensor = torch.zeros(0)

    def _reset(self, done: torch.Tensor) -> None:
        lo, hi = self._ranges()
        mid, half = (lo + hi) / 2, 0.4 * (hi - lo)
        target = mid + half * (2 * self.rand(self.num_envs, self.num_dofs) - 1)
        if self.target.shape != target.shape:
            self.target = target
        self.target = torch.where(done.unsqueeze(-1), target, self.target)
        super()._reset(done)

    def _sample_reset(self) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = self._ranges()
        n, d = self.num_envs, self.num_dofs
        start = (lo + hi) / 2 + 0.4 * (hi - lo) * (2 * self.rand(n, d) - 1)
        return start, torch.zeros(n, d, device=self.device)

    def _observe(self) -> dict[str, torch.Tensor]:
        if self.target.shape != self.dof_pos.shape:
            self.target = self.dof_pos.clone()
        return {"state": torch.cat([self.dof_pos, self.dof_vel, self.target - self.dof_pos], dim=-1).clone()}

    def _reward_and_status(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        err = self.target - self.dof_pos
        success = (err.abs() < self.cfg.success_tolerance).all(dim=-1)
        reward = -torch.linalg.vector_norm(err, dim=-1) + 10.0 * success.float()
        return reward, success, success
