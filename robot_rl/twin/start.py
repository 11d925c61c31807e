"""A MuJoCo arm task's physics state, rebuilt from one logged ``state`` observation.

The ``state`` vector of the MuJoCo arm tasks (docs/sims-mujoco.md) holds what a replay needs to start
where the log started: joint angles ``[0:6]``, joint velocities / 10 ``[6:12]``, the finger opening
/ 8 cm ``[12]`` (split evenly between the two fingers), then each task's objects and goal:

=====================  =========================================================================
``mujoco/reach``       goal ``[16:19]`` (a mocap body)
``mujoco/push``        cube position ``[16:19]`` and quaternion ``[19:23]``, goal xy ``[26:28]``
``mujoco/pick_cube``   cube position ``[16:19]`` and quaternion ``[19:23]``, goal ``[26:29]``
``mujoco/peg_insert``  peg tip ``[16:19]`` and quaternion ``[19:23]``, hole entry ``[23:26]``
=====================  =========================================================================

Finger and object velocities are not observed and start at zero (episodes start at rest); the servo
targets start at the measured joint angles, as an env reset sets them. The state is loaded through the
env's public ``get_state`` / ``set_state`` (MuJoCo's ``mjSTATE_INTEGRATION`` layout).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from robot_rl.core.config import ConfigError
from robot_rl.sims.mujoco.scene import FINGER_MAX
from robot_rl.sims.mujoco.tasks import (
    MujocoPegInsertConfig,
    MujocoPickCubeConfig,
    MujocoPushConfig,
    MujocoReachConfig,
    MujocoTaskConfig,
)

#: The order of MuJoCo's ``mjSTATE_INTEGRATION`` components in a state vector.
_COMPONENTS = ("TIME", "QPOS", "QVEL", "ACT", "WARMSTART", "CTRL", "QFRC_APPLIED", "XFRC_APPLIED", "EQ_ACTIVE",
               "MOCAP_POS", "MOCAP_QUAT", "USERDATA", "PLUGIN")


def state_slices(model: Any) -> dict[str, slice]:
    """Where each component (``QPOS``, ``QVEL``, ``CTRL``, ``MOCAP_POS``, ...) sits in a state vector."""
    import mujoco

    out, offset = {}, 0
    for name in _COMPONENTS:
        size = int(mujoco.mj_stateSize(model, getattr(mujoco.mjtState, f"mjSTATE_{name}")))
        out[name] = slice(offset, offset + size)
        offset += size
    return out


def supported(cfg: MujocoTaskConfig) -> bool:
    """Whether a start state can be rebuilt from this task's ``state`` observation."""
    return isinstance(cfg, (MujocoReachConfig, MujocoPushConfig, MujocoPickCubeConfig, MujocoPegInsertConfig))


def start_state(cfg: MujocoTaskConfig, env: Any, state0: np.ndarray, template: np.ndarray) -> np.ndarray:
    """Physics states ``[E, S]`` for the observations ``state0`` ``[E, D]``.

    ``env`` is a ``MujocoVecEnv`` of ``cfg`` (its ``model`` and ``ix``); ``template`` ``[S]`` is one world's
    state right after a reset (what is not observed is taken from it: mocap orientations, applied forces).
    """
    model, ix = env.model, env.ix
    e = len(state0)
    qpos, mocap = scene_pose(cfg, model, ix, state0)
    qvel = np.zeros((e, model.nv))
    qvel[:, ix.arm_dof] = 10.0 * state0[:, 6:12]
    sl = state_slices(model)
    out = np.tile(template, (e, 1))
    out[:, sl["TIME"]] = 0.0
    out[:, sl["QPOS"]] = qpos
    out[:, sl["QVEL"]] = qvel
    out[:, sl["WARMSTART"]] = 0.0
    ctrl = out[:, sl["CTRL"]]
    ctrl[:, ix.arm_ctrl] = qpos[:, ix.arm_qpos]
    ctrl[:, ix.finger_ctrl] = qpos[:, ix.finger_qpos]
    out[:, sl["CTRL"]] = ctrl
    out[:, sl["MOCAP_POS"]] = mocap.reshape(e, -1)
    return out


def scene_pose(cfg: MujocoTaskConfig, model: Any, ix: Any, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(qpos [E, nq], mocap_pos [E, nmocap, 3])`` of the scenes the ``state`` observations ``[E, D]`` show.

    What a camera sees (the twin's camera fit renders them); velocities are not part of a pose.
    """
    import mujoco

    if not supported(cfg):
        raise ConfigError(f"{type(cfg).__name__}: the twin cannot rebuild this task's start state from its state "
                          "observation (supported: mujoco/reach, push, pick_cube, peg_insert and their variants)")
    e = len(state)
    qpos = np.tile(ix.home_qpos, (e, 1)).astype(np.float64)
    mocap = np.tile(ix.home_mocap, (e, 1, 1)).astype(np.float64)
    qpos[:, ix.arm_qpos] = state[:, 0:6]
    qpos[:, ix.finger_qpos] = (state[:, 12] * FINGER_MAX)[:, None]
    _objects(cfg, model, ix, state, qpos, mocap, mujoco)
    return qpos, mocap


def _objects(cfg: MujocoTaskConfig, model: Any, ix: Any, s: np.ndarray, qpos: np.ndarray, mocap: np.ndarray,
             mujoco: Any) -> None:
    """Write the task's objects and goal from observations ``s`` into ``qpos`` / ``mocap`` (in place)."""
    goal = ix.mocap["goal"]
    if isinstance(cfg, MujocoReachConfig):
        mocap[:, goal] = s[:, 16:19]
        return
    if isinstance(cfg, (MujocoPushConfig, MujocoPickCubeConfig)):
        a = ix.free_qpos["cube"]
        qpos[:, a:a + 3] = s[:, 16:19]
        qpos[:, a + 3:a + 7] = _unit(s[:, 19:23])
        if isinstance(cfg, MujocoPushConfig):
            mocap[:, goal, :2], mocap[:, goal, 2] = s[:, 26:28], 0.0
        else:
            mocap[:, goal] = s[:, 26:29]
        return
    # peg_insert: the peg body sits at tip − R(quat)·(tip site's offset); the hole block below its entry site.
    a = ix.free_qpos["peg"]
    quat = _unit(s[:, 19:23])
    tip_local = np.asarray(model.site_pos[ix.site["peg_tip"]], np.float64)
    for row in range(len(s)):
        offset = np.zeros(3)
        mujoco.mju_rotVecQuat(offset, tip_local, quat[row])
        qpos[row, a:a + 3] = s[row, 16:19] - offset
    qpos[:, a + 3:a + 7] = quat
    mocap[:, ix.mocap["hole"]] = s[:, 23:26] - np.asarray(model.site_pos[ix.site["hole"]], np.float64)
    mocap[:, goal] = (0.0, 0.0, -1.0)


def _unit(q: np.ndarray) -> np.ndarray:
    """Quaternions renormalised (a float32 log rounds them off the unit sphere)."""
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def load_start(env: Any, states: np.ndarray) -> None:
    """Load physics states ``[N, S]`` into every world of ``env``."""
    env.set_state(torch.from_numpy(np.ascontiguousarray(states)))
