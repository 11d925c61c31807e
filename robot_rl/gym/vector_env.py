"""A robot_rl task as a :class:`gymnasium.vector.VectorEnv` (numpy in, numpy out).

The task's batched env does the work (on any device); this class only converts. Semantics, per gymnasium 1.x:

- ``metadata["autoreset_mode"]`` is ``AutoresetMode.SAME_STEP``, robot_rl's own contract
  (robot_rl/core/env.py): where ``terminated[i] or truncated[i]``, row ``i`` of the returned observation is
  already the next episode's first observation, and the finished episode's last one is
  ``info["final_obs"][i]`` (an object array, ``None`` where nothing ended, with the mask
  ``info["_final_obs"]``; both present only on steps where some episode ended, as gymnasium's
  ``SyncVectorEnv`` does). ``info["final_info"]`` (mask ``_final_info``) holds the finished episodes'
  ``success``, ``episode_return`` and ``episode_length``, each with its ``_key`` mask.
- ``info["success"]`` (``[N]`` bool, mask ``_success``) is the task's success flag at this step for the rows
  that go on; the rows that ended have theirs in ``final_info``.
- Spaces (robot_rl/gym/spaces.py): one observation key → a ``Box``; several → a ``Dict`` by robot_rl key.
  Observations keep the task's dtypes (float32 state, uint8 images, int64 tokens); rewards are float32,
  ``terminated``/``truncated`` bool, all ``[N]``. Time limits are the task's own (``max_episode_steps``).
- ``reset(seed=s)`` reseeds the task's one generator for the whole batch (an ``int``; a list of per-env seeds
  is refused). ``render()`` returns a 1-tuple with sub-env 0's RGB frame (``render_mode="rgb_array"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from robot_rl.gym.build import build_task_env
from robot_rl.gym.spaces import (
    NumpyObs,
    action_space,
    action_to_torch,
    obs_row,
    obs_to_numpy,
    observation_space,
    to_numpy,
)

if TYPE_CHECKING:
    import torch

    from robot_rl.core.config import TaskConfig
    from robot_rl.core.env import StepResult
    from robot_rl.core.env import VecEnv as TaskVecEnv
    from robot_rl.core.specs import EnvSpec

#: Keys of the task's step info that are not per-step flags (episode totals go to ``final_info`` only).
_EPISODE_KEYS = ("episode_return", "episode_length")


class RobotRLVectorEnv(VectorEnv):
    """``num_envs`` sub-envs of a robot_rl task behind gymnasium's vector API (module docstring)."""

    # A plain dict, as gymnasium declares it (an instance attribute of its base class).
    metadata: dict[str, Any] = {  # noqa: RUF012
        "autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": ["rgb_array"]}

    def __init__(self, task_env: TaskVecEnv, render_mode: str | None = None) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r}: robot_rl tasks render 'rgb_array' (or None)")
        self.task_env = task_env
        """The robot_rl :class:`~robot_rl.core.env.VecEnv` underneath (torch tensors on its device)."""
        self.num_envs = task_env.num_envs
        self.render_mode = render_mode
        self.single_observation_space = observation_space(task_env.spec)
        self.single_action_space = action_space(task_env.spec)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    @property
    def device(self) -> torch.device:
        """The task's device (its tensors live there; what this class returns is numpy on the host)."""
        return self.task_env.device

    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[NumpyObs, dict[str, Any]]:
        """Reset every sub-env (reseeding the task with ``seed``); return the first observations and ``{}``."""
        if isinstance(seed, (list, tuple)):
            raise TypeError("a robot_rl task draws every sub-env from one generator: reset(seed=<int>), not a list")
        if options:
            raise ValueError(f"robot_rl tasks take no reset options, got {sorted(options)}")
        super().reset(seed=seed)
        obs = self.task_env.reset(seed=seed)
        return obs_to_numpy(obs, self.task_env.spec), {}

    def step(self, actions: Any) -> tuple[NumpyObs, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env with ``actions`` ``[N, *action_shape]``; same-step auto-reset (module docstring)."""
        spec = self.task_env.spec
        res = self.task_env.step(action_to_torch(actions, spec, self.num_envs, self.task_env.device))
        terminated, truncated = to_numpy(res.terminated).astype(bool), to_numpy(res.truncated).astype(bool)
        return (obs_to_numpy(res.obs, spec), to_numpy(res.reward).astype(np.float32), terminated, truncated,
                step_info(res, spec, done=terminated | truncated))

    def render(self) -> tuple[np.ndarray, ...] | None:
        """``(frame,)``: sub-env 0's uint8 ``[H, W, 3]`` frame, or ``None`` without ``render_mode="rgb_array"``."""
        if self.render_mode != "rgb_array":
            return None
        frame = self.task_env.render()
        return None if frame is None else (to_numpy(frame),)

    def close_extras(self, **kwargs: Any) -> None:
        """Close the task (its simulator, if any)."""
        self.task_env.close()


def step_info(res: StepResult, spec: EnvSpec, done: np.ndarray) -> dict[str, Any]:
    """The gymnasium batched info for one task step (keys and masks as in the module docstring)."""
    info: dict[str, Any] = {}
    per_step = {k: to_numpy(v) for k, v in res.info.items()
                if k != "final_obs" and k not in _EPISODE_KEYS and _is_batched(v, len(done))}
    for key, value in per_step.items():
        info[key], info[f"_{key}"] = value, ~done
    if not done.any():
        return info
    final = obs_to_numpy(res.info["final_obs"], spec)
    final_obs = np.full(len(done), None, dtype=object)
    for i in np.flatnonzero(done):
        final_obs[i] = obs_row(final, int(i))
    final_info: dict[str, Any] = {}
    episode = {k: to_numpy(res.info[k]) for k in _EPISODE_KEYS if k in res.info}
    for key, value in {**per_step, **episode}.items():
        final_info[key], final_info[f"_{key}"] = value, done.copy()
    info["final_obs"], info["_final_obs"] = final_obs, done.copy()
    info["final_info"], info["_final_info"] = final_info, done.copy()
    return info


def _is_batched(value: Any, n: int) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == n


def make_vec(task_id: str | TaskConfig, num_envs: int = 1, *, device: torch.device | str = "cpu",
             seed: int | None = None, render_mode: str | None = None, **overrides: Any) -> RobotRLVectorEnv:
    """A robot_rl task as a gymnasium ``VectorEnv`` of ``num_envs`` sub-envs.

    ``task_id``: any id ``robot-rl tasks`` lists (``reach``, ``push``, ``mujoco/pick_cube``,
    ``maniskill/PickCube-v1``) or a task config; ``overrides`` set the task config's fields
    (``max_episode_steps=20``, ``control="joint"``). The task runs on ``device``; observations come back as
    numpy. ``seed`` ``None`` draws one from the OS. A task whose simulator is missing raises ``ImportError``
    with the ``pip install`` that brings it.
    """
    env = build_task_env(task_id, num_envs, device=device, seed=seed, **overrides)
    try:
        return RobotRLVectorEnv(env, render_mode=render_mode)
    except BaseException:
        env.close()
        raise
