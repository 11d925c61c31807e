"""MuJoCo's ``mjSTATE_INTEGRATION`` layout for batched backends (MJX, Warp) that keep ``Data`` fields per world.

A state row is what ``mj_getState`` writes for one world; the CPU backend reads and writes it directly. The
batched backends hold the same fields as ``[N, ...]`` arrays, so they convert through a scratch ``MjData``: the
same layout on every backend, and a state saved on one loads on another.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

#: The ``Data`` fields of a ``mjSTATE_INTEGRATION`` row that the arm tasks use (the row also holds the applied
#: forces, ``eq_active`` and user data, which they leave at their defaults).
STATE_FIELDS = ("qpos", "qvel", "act", "qacc_warmstart", "ctrl", "mocap_pos", "mocap_quat", "time")


def _spec() -> Any:
    import mujoco

    return mujoco.mjtState.mjSTATE_INTEGRATION


def pack_states(model: Any, fields: dict[str, np.ndarray]) -> np.ndarray:
    """``float64 [N, S]`` state rows from per-world fields ``{name: [N, ...]}`` (:data:`STATE_FIELDS`)."""
    import mujoco

    n = len(fields["qpos"])
    scratch = mujoco.MjData(model)
    out = np.zeros((n, mujoco.mj_stateSize(model, _spec())))
    for i in range(n):
        for k in STATE_FIELDS:
            if k == "time":
                scratch.time = float(np.asarray(fields[k][i]).reshape(()))
            else:
                getattr(scratch, k)[:] = np.asarray(fields[k][i]).reshape(getattr(scratch, k).shape)
        mujoco.mj_getState(model, scratch, out[i], _spec())
    return out


def unpack_states(model: Any, state: torch.Tensor | np.ndarray, num_envs: int) -> dict[str, np.ndarray]:
    """Per-world fields ``{name: float32 [N, ...]}`` of state rows ``[N, S]``; a ``ValueError`` for another shape."""
    import mujoco

    s = state.detach().to("cpu", torch.float64).numpy() if isinstance(state, torch.Tensor) else np.asarray(state)
    size = mujoco.mj_stateSize(model, _spec())
    if s.shape != (num_envs, size):
        raise ValueError(f"state shape {list(s.shape)} does not match this env's [{num_envs}, {size}]")
    scratch = mujoco.MjData(model)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in STATE_FIELDS}
    for i in range(num_envs):
        mujoco.mj_setState(model, scratch, s[i], _spec())
        for k in STATE_FIELDS:
            cols[k].append(np.array(getattr(scratch, k), np.float32))
    return {k: np.stack(v) for k, v in cols.items()}
