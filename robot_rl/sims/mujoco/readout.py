"""What a MuJoCo backend hands the task after each step: the batched state of every world.

Both backends fill the same :class:`Readout`, so the controller, the rewards and the observations
are written once and do not know which simulator ran. Its fields are torch tensors (float32, on the
env's device: the MJX backend, and every backend's public ``readout()``) or numpy arrays (float64,
on the host: the CPU backend's ``task_readout()``, which the env computes on); ``arrays.py`` says why.
"""

from __future__ import annotations

from typing import NamedTuple

from robot_rl.sims.mujoco.arrays import Array


class Readout(NamedTuple):
    """Kinematic state of ``N`` worlds after a step (all torch or all numpy, see the module docstring).

    Positions are current: backends run forward kinematics after the last physics step, so the
    sites match ``qpos`` (``mj_step`` alone leaves them one integration step behind).
    """

    qpos: Array
    """``[N, nq]`` generalised positions (free joints: position then quaternion w x y z)."""
    qvel: Array
    """``[N, nv]`` generalised velocities."""
    site_pos: Array
    """``[N, nsite, 3]`` world positions of every site."""
    grip_rot: Array
    """``[N, 3, 3]`` world rotation of the grip site."""
    jac: Array
    """``[N, 6, 6]`` Jacobian of the grip site (rows: 3 translation, 3 rotation) w.r.t. the arm joints."""
    mocap_pos: Array
    """``[N, nmocap, 3]`` mocap body positions (goal marker, hole block)."""
