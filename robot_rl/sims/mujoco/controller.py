"""Actions → actuator targets, for every backend (torch or numpy, see ``arrays.py``).

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

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from robot_rl.sims.mujoco.arrays import Array, add_scaled, namespace, solve
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


@dataclass(frozen=True)
class _Constants:
    """The controller's constant arrays in one namespace (torch float32 on a device, numpy float64)."""

    arm_q: Any
    low: Array
    high: Array
    ws_low: Array
    ws_high: Array
    rot_map: Array
    damping: Array
    fixed: Array
    ctrl_perm: Any


class ArmController:
    """Turns validated actions ``[N, A]`` into ``ctrl [N, nu]``, in the namespace of the readout.

    Written for few, batched ops: at small ``N`` every op's fixed cost is the step's cost, so
    constants are prepared here (once per namespace) and the orientation error is one matrix product.
    A numpy action and readout (CPU backend) give float64 numpy; torch ones (MJX) float32 torch.
    """

    def __init__(self, cfg: MujocoTaskConfig, ix: SceneIndex, device: torch.device) -> None:
        self.cfg = cfg
        self.ix = ix
        self.device = device
        self.grip_site = ix.site["grip"]
        # ½ Σ_i r_i × r_i* (r_i: columns of the grip rotation R, r_i* of the home rotation) is linear
        # in R: err = vec(R) @ rot_map, with rot_map[3·a + i, k] = ½ Σ_b ε_kab r*_bi.
        rot = np.asarray(ix.grip_home_rot, dtype=np.float64)
        eps = np.zeros((3, 3, 3))
        for k, a, b in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
            eps[k, a, b], eps[k, b, a] = 1.0, -1.0
        # C order: einsum's output is strided, and a strided matrix takes another BLAS path (other bits).
        self._rot_map = np.ascontiguousarray((0.5 * np.einsum("kab,bi->aik", eps, rot)).reshape(9, 3))
        # ctrl = [arm targets, finger targets] permuted into actuator order (identity for our arm).
        order = np.concatenate([ix.arm_ctrl, ix.finger_ctrl])
        self._perm = None if (order == np.arange(ix.nu)).all() else np.argsort(order)
        self._constants: dict[Any, _Constants] = {}
        self._fixed: dict[tuple[Any, int], Array] = {}

    def _const(self, xp: Any) -> _Constants:
        c = self._constants.get(xp)
        if c is None:
            cfg, ix = self.cfg, self.ix
            if xp is np:
                def conv(a: Any) -> Array:
                    return np.asarray(a, dtype=np.float64)
                dev = None
            else:
                def conv(a: Any) -> Array:
                    return torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=torch.float32, device=self.device)
                dev = self.device
            c = _Constants(
                arm_q=index_or_slice(ix.arm_qpos, dev), low=conv(ix.arm_low), high=conv(ix.arm_high),
                ws_low=conv(WORKSPACE_LOW), ws_high=conv(WORKSPACE_HIGH), rot_map=conv(self._rot_map),
                damping=(cfg.ik_damping ** 2) * conv(np.eye(6)), fixed=conv([[cfg.fixed_finger] * 2]),
                ctrl_perm=None if self._perm is None else index_or_slice(self._perm, dev))
            self._constants[xp] = c
        return c

    def _fixed_rows(self, xp: Any, c: _Constants, n: int) -> Array:
        """The fixed finger targets as ``[n, 2]`` (a broadcast view, made once per batch size)."""
        rows = self._fixed.get((xp, n))
        if rows is None:
            rows = self._fixed[(xp, n)] = xp.broadcast_to(c.fixed, (n, 2))
        return rows

    def ik_step(self, r: Readout, target: Array) -> Array:
        """Damped least-squares joint step ``[N, 6]`` moving the grip site toward ``target`` ``[N, 3]``."""
        xp = namespace(target)
        c = self._const(xp)
        pos_err = target - r.site_pos[:, self.grip_site]
        rot_err = r.grip_rot.reshape(-1, 9) @ c.rot_map
        err = xp.concat([pos_err, rot_err], axis=-1)[..., None]
        j = r.jac
        jt = j.mT
        # J Jᵀ + λ² I is symmetric positive definite: no singularity check (on a GPU, a sync).
        y = solve(j @ jt + c.damping, err)
        return (jt @ y)[..., 0].clip(-self.cfg.max_joint_step, self.cfg.max_joint_step)

    def __call__(self, action: Array, r: Readout) -> Array:
        """``ctrl [N, nu]`` for ``action [N, A]`` given the current state ``r`` (same namespace)."""
        cfg = self.cfg
        xp = namespace(action)
        c = self._const(xp)
        q = r.qpos[:, c.arm_q]
        if cfg.control == "ee_delta":
            grip = r.site_pos[:, self.grip_site]
            target = add_scaled(grip, action[:, :3], cfg.action_scale).clip(c.ws_low, c.ws_high)
            q_target = q + self.ik_step(r, target)
        else:
            q_target = add_scaled(q, action[:, :6], cfg.joint_scale)
        arm = q_target.clip(c.low, c.high)
        if cfg.gripper_action:
            finger = (action[:, -1:] + 1.0) * (0.5 * FINGER_MAX)
            ctrl = xp.concat([arm, finger, finger], axis=-1)
        else:
            ctrl = xp.concat([arm, self._fixed_rows(xp, c, action.shape[0])], axis=-1)
        return ctrl if c.ctrl_perm is None else ctrl[:, c.ctrl_perm]


def index_or_slice(a: np.ndarray, device: torch.device | None) -> torch.Tensor | np.ndarray | slice:
    """A slice when the indices are consecutive (a view, no gather), else an index array.

    The index array is a torch tensor on ``device``, or a numpy array for ``device=None`` (numpy math).
    """
    a = np.asarray(a)
    if len(a) and (np.diff(a) == 1).all():
        return slice(int(a[0]), int(a[-1]) + 1)
    return a.astype(np.int64) if device is None else torch.as_tensor(a, device=device)

