"""Actions → actuator targets, in torch, for every backend.

The arm has position servos, so a control is a vector of joint targets.

- ``ee_delta`` (what real-arm RL uses): ``a[:3]`` moves the grip site by ``action_scale · a`` (m),
  clipped to a workspace box above the table. The joint step comes from damped least squares on
  the grip site's 6×6 Jacobian (translation and rotation rows, from ``mj_jacSite``)::

      e  = [p* − p ;  ½ Σᵢ rᵢ × rᵢ*]        (position error; orientation error to the home rotation)
      dq = Jᵀ (J Jᵀ + λ² I)⁻¹ e             (λ = ik_damping keeps dq finite at singular poses)

  clipped to ``max_joint_step`` per joint; the target is ``q + dq``. Holding the home rotation keeps
  the gripper pointing down, so a policy only decides where to go.
- ``joint``: ``a[:6]`` changes the arm joint targets by ``joint_scale · a`` (rad) from the measured
  angles.

Tasks with ``gripper_action`` take one more number, ``a[-1] ∈ [-1, 1]`` → finger opening from
closed (−1) to fully open (+1); the others hold the task's fixed opening.
"""

from __future__ import annotations

import numpy as np
import torch

from robot_rl.sims.mujoco.readout import Readout
from robot_rl.sims.mujoco.scene import FINGER_MAX, SceneIndex
from robot_rl.sims.mujoco.tasks import MujocoTaskConfig

#: Box (m) the ee_delta target is kept in: over the table, in front of the base, above the table
#: by at least the fingertips' reach below the grip site.
WORKSPACE_LOW = (0.15, -0.45, 0.02)
WORKSPACE_HIGH = (0.7, 0.45, 0.5)


def action_dim(cfg: MujocoTaskConfig) -> int:
    """Action length for a task config: 3 (ee_delta) or 6 (joint), plus 1 with a gripper action."""
    return (3 if cfg.control == "ee_delta" else 6) + int(cfg.gripper_action)


class ArmController:
    """Turns validated actions ``[N, A]`` into ``ctrl [N, nu]`` (float32, on the env's device).

    Written for few, batched torch ops: at small ``N`` every op's fixed cost (a few µs) is the
    step's cost, so constants are prepared here and the orientation error is one matrix product.
    """

    def __init__(self, cfg: MujocoTaskConfig, ix: SceneIndex, device: torch.device) -> None:
        self.cfg = cfg
        self.ix = ix
        self.arm_q = index_or_slice(ix.arm_qpos, device)
        self.low = torch.as_tensor(ix.arm_low, dtype=torch.float32, device=device)
        self.high = torch.as_tensor(ix.arm_high, dtype=torch.float32, device=device)
        self.ws_low = torch.tensor(WORKSPACE_LOW, device=device)
        self.ws_high = torch.tensor(WORKSPACE_HIGH, device=device)
        # ½ Σ_i r_i × r_i* (r_i: columns of the grip rotation R, r_i* of the home rotation) is linear
        # in R: err = vec(R) @ rot_map, with rot_map[3·a + i, k] = ½ Σ_b ε_kab r*_bi.
        rot = torch.as_tensor(ix.grip_home_rot, dtype=torch.float64)
        eps = torch.zeros(3, 3, 3, dtype=torch.float64)
        for k, a, b in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
            eps[k, a, b], eps[k, b, a] = 1.0, -1.0
        self.rot_map = (0.5 * torch.einsum("kab,bi->aik", eps, rot)).reshape(9, 3).to(device, torch.float32)
        self.damping = (cfg.ik_damping ** 2) * torch.eye(6, device=device)
        self.grip_site = ix.site["grip"]
        # ctrl = [arm targets, finger targets] permuted into actuator order (identity for our arm).
        order = np.concatenate([ix.arm_ctrl, ix.finger_ctrl])
        self.ctrl_perm = None if (order == np.arange(ix.nu)).all() else index_or_slice(np.argsort(order), device)
        self.fixed = torch.full((1, 2), cfg.fixed_finger, device=device)

    def ik_step(self, r: Readout, target: torch.Tensor) -> torch.Tensor:
        """Damped least-squares joint step ``[N, 6]`` moving the grip site toward ``target`` ``[N, 3]``."""
        pos_err = target - r.site_pos[:, self.grip_site]
        rot_err = r.grip_rot.reshape(-1, 9) @ self.rot_map
        err = torch.cat([pos_err, rot_err], dim=-1).unsqueeze(-1)
        j = r.jac
        jt = j.transpose(-1, -2)
        # J Jᵀ + λ² I is symmetric positive definite: solve_ex skips the singularity check (a sync).
        y = torch.linalg.solve_ex(j @ jt + self.damping, err)[0]
        return (jt @ y).squeeze(-1).clamp(-self.cfg.max_joint_step, self.cfg.max_joint_step)

    def __call__(self, action: torch.Tensor, r: Readout) -> torch.Tensor:
        """``ctrl [N, nu]`` for ``action [N, A]`` given the current state ``r``."""
        cfg = self.cfg
        q = r.qpos[:, self.arm_q]
        if cfg.control == "ee_delta":
            grip = r.site_pos[:, self.grip_site]
            target = torch.clamp(torch.add(grip, action[:, :3], alpha=cfg.action_scale), self.ws_low, self.ws_high)
            q_target = q + self.ik_step(r, target)
        else:
            q_target = torch.add(q, action[:, :6], alpha=cfg.joint_scale)
        arm = torch.clamp(q_target, self.low, self.high)
        if cfg.gripper_action:
            finger = ((action[:, -1:] + 1.0) * (0.5 * FINGER_MAX)).expand(-1, 2)
        else:
            finger = self.fixed.expand(action.shape[0], 2)
        ctrl = torch.cat([arm, finger], dim=-1)
        return ctrl if self.ctrl_perm is None else ctrl[:, self.ctrl_perm]


def index_or_slice(a: np.ndarray, device: torch.device) -> torch.Tensor | slice:
    """A slice when the indices are consecutive (a view, no gather), else an index tensor."""
    a = np.asarray(a)
    if len(a) and (np.diff(a) == 1).all():
        return slice(int(a[0]), int(a[-1]) + 1)
    return torch.as_tensor(a, device=device)

