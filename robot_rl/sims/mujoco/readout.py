"""What a MuJoCo backend hands the task after each step: batched state as torch tensors.

Both backends (CPU thread pool and MJX) fill the same :class:`Readout`, so the controller, the
rewards and the observations are written once, in torch, and do not know which simulator ran.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Readout(NamedTuple):
    """Kinematic state of ``N`` worlds after a step (all float32 on the env's device).

    Positions are current: backends run forward kinematics after the last physics step, so the
    sites match ``qpos`` (``mj_step`` alone leaves them one integration step behind).
    """

    qpos: torch.Tensor
    """``[N, nq]`` generalised positions (free joints: position then quaternion w x y z)."""
    qvel: torch.Tensor
    """``[N, nv]`` generalised velocities."""
    site_pos: torch.Tensor
    """``[N, nsite, 3]`` world positions of every site."""
    grip_rot: torch.Tensor
    """``[N, 3, 3]`` world rotation of the grip site."""
    jac: torch.Tensor
    """``[N, 6, 6]`` Jacobian of the grip site (rows: 3 translation, 3 rotation) w.r.t. the arm joints."""
    mocap_pos: torch.Tensor
    """``[N, nmocap, 3]`` mocap body positions (goal marker, hole block)."""
