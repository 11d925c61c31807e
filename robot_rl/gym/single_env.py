"""One sub-env of a robot_rl task as a plain :class:`gymnasium.Env` (what ``gymnasium.make`` returns).

The task runs with ``num_envs=1``. When an episode ends, ``step`` returns its last observation (the task's
``final_obs``) with ``terminated``/``truncated`` set, as a single gymnasium env does; the task has already
started the next episode underneath, and the next ``reset()`` draws a fresh one. The time limit is the task's
own (``max_episode_steps`` of its config), so ids are registered without a ``TimeLimit`` wrapper.
``info["success"]`` is the task's success flag at every step; on the last step of an episode ``info`` also
holds ``episode_return`` and ``episode_length``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np

from robot_rl.gym.build import build_task_env
from robot_rl.gym.spaces import NumpyObs, action_space, obs_row, obs_to_numpy, observation_space, to_numpy

if TYPE_CHECKING:
    import torch

    from robot_rl.core.config import TaskConfig


class RobotRLEnv(gymnasium.Env[Any, np.ndarray]):
    """A robot_rl task with one sub-env behind gymnasium's single-env API (module docstring)."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}  # noqa: RUF012 - as gymnasium declares it

    def __init__(self, task_id: str | TaskConfig, *, device: torch.device | str = "cpu", seed: int | None = None,
                 render_mode: str | None = None, **overrides: Any) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r}: robot_rl tasks render 'rgb_array' (or None)")
        self.task_env = build_task_env(task_id, 1, device=device, seed=seed, **overrides)
        """The robot_rl :class:`~robot_rl.core.env.VecEnv` underneath (``num_envs == 1``)."""
        self.render_mode = render_mode
        self.observation_space = observation_space(self.task_env.spec)
        self.action_space = action_space(self.task_env.spec)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[NumpyObs, dict]:
        """Start an episode (reseeding the task with ``seed``); the first observation and ``{}``."""
        if options:
            raise ValueError(f"robot_rl tasks take no reset options, got {sorted(options)}")
        super().reset(seed=seed)
        obs = self.task_env.reset(seed=seed)
        return obs_row(obs_to_numpy(obs, self.task_env.spec), 0), {}

    def step(self, action: Any) -> tuple[NumpyObs, float, bool, bool, dict[str, Any]]:
        """Apply ``action`` ``[*action_shape]``; at an episode's end, its last observation (module docstring)."""
        import torch

        spec = self.task_env.spec
        batch = torch.as_tensor(np.asarray(action, dtype=np.float32), device=self.task_env.device)
        if tuple(batch.shape) != spec.action.shape:
            raise ValueError(f"action shape {list(batch.shape)} does not match {list(spec.action.shape)}")
        res = self.task_env.step(batch.unsqueeze(0))
        terminated, truncated = bool(res.terminated[0]), bool(res.truncated[0])
        info: dict[str, Any] = {k: to_numpy(v)[0] for k, v in res.info.items()
                                if k != "final_obs" and isinstance(v, torch.Tensor) and v.dim() >= 1}
        if not (terminated or truncated):
            for key in ("episode_return", "episode_length"):
                info.pop(key, None)
        obs = res.info["final_obs"] if terminated or truncated else res.obs
        return obs_row(obs_to_numpy(obs, spec), 0), float(res.reward[0]), terminated, truncated, info

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """The uint8 ``[H, W, 3]`` frame with ``render_mode="rgb_array"``, else ``None``."""
        if self.render_mode != "rgb_array":
            return None
        frame = self.task_env.render()
        return None if frame is None else to_numpy(frame)

    def close(self) -> None:
        """Close the task (its simulator, if any)."""
        self.task_env.close()
