"""gymnasium spaces for a robot_rl :class:`~robot_rl.core.specs.EnvSpec`, and torch ⇄ numpy for its arrays.

Observations: a task with one observation key (``reach``: ``state``) is seen as a plain ``Box`` of that
array; a task with several (``reach_pixels``: ``image.top`` and ``state``) as a ``Dict`` of Boxes under
robot_rl's own key names. Bounds: the spec's scalar ``low``/``high`` (``None`` is unbounded for floats and
the dtype's range for integers). The action is one float32 ``Box`` ``[A]`` (or ``[horizon, A]``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from robot_rl.core.specs import ArraySpec, EnvSpec

#: A gymnasium observation: one array (single-key tasks) or a dict of arrays by robot_rl key.
NumpyObs = np.ndarray | dict[str, np.ndarray]


def array_space(spec: ArraySpec) -> spaces.Box:
    """The ``Box`` of one array spec (no batch dimension)."""
    dtype = np.dtype(spec.dtype)
    if np.issubdtype(dtype, np.floating):
        low = -np.inf if spec.low is None else spec.low
        high = np.inf if spec.high is None else spec.high
    elif dtype == np.bool_:
        low, high = 0, 1
    else:
        info = np.iinfo(dtype)
        low = info.min if spec.low is None else int(spec.low)
        high = info.max if spec.high is None else int(spec.high)
    return spaces.Box(low=low, high=high, shape=spec.shape, dtype=dtype)


def observation_space(spec: EnvSpec) -> spaces.Box | spaces.Dict:
    """One observation: the only key's ``Box``, or a ``Dict`` of every key's ``Box`` (in the spec's order)."""
    if len(spec.observation) == 1:
        return array_space(next(iter(spec.observation.values())))
    return spaces.Dict({key: array_space(s) for key, s in spec.observation.items()})


def action_space(spec: EnvSpec) -> spaces.Box:
    """The action ``Box`` (float32, the spec's scalar bounds on every element)."""
    return array_space(spec.action)


def to_numpy(x: torch.Tensor) -> np.ndarray:
    """A host copy of ``x`` that never aliases the env's own tensors (gymnasium's "data not reused")."""
    return x.detach().to("cpu", copy=True).numpy()


def obs_to_numpy(obs: dict[str, torch.Tensor], spec: EnvSpec) -> NumpyObs:
    """A batched torch observation ``{key: [N, ...]}`` as the batched gymnasium observation."""
    if len(spec.observation) == 1:
        return to_numpy(obs[next(iter(spec.observation))])
    return {key: to_numpy(obs[key]) for key in spec.observation}


def obs_row(obs: NumpyObs, i: int) -> NumpyObs:
    """Row ``i`` of a batched numpy observation (one sub-env's observation)."""
    if isinstance(obs, dict):
        return {key: value[i] for key, value in obs.items()}
    return obs[i]


def action_to_torch(action: Any, spec: EnvSpec, num_envs: int, device: torch.device) -> torch.Tensor:
    """A batched action (numpy, list or tensor) as float32 ``[N, *action_shape]`` on ``device``.

    The shape is checked here so that a single sub-env's action given to a batch fails with both shapes named;
    bounds and finiteness are the task's ``check_action``.
    """
    array = torch.as_tensor(np.asarray(action, dtype=np.float32), device=device)
    expected = (num_envs, *spec.action.shape)
    if tuple(array.shape) != expected:
        raise ValueError(f"action shape {list(array.shape)} does not match [num_envs, *action] = {list(expected)}")
    return array
