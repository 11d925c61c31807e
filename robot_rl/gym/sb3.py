"""A robot_rl task as a stable-baselines3 ``VecEnv`` (``pip install 'robot-rl[sb3]'``).

Built on :class:`~robot_rl.gym.vector_env.RobotRLVectorEnv`, so the task steps as one batch and only the
numpy conversion is here. What SB3 reads, per sub-env ``i`` whose episode ended at this step (``done[i]``):

- ``infos[i]["terminal_observation"]``: the episode's last observation (the returned ``obs[i]`` is already the
  next episode's first, as with SB3's own ``DummyVecEnv``);
- ``infos[i]["TimeLimit.truncated"]``: ``truncated and not terminated`` (PPO/A2C bootstrap these from the
  terminal observation);
- ``infos[i]["episode"] = {"r", "l", "t"}``: the task's own episode return and length (and seconds since the
  adapter was made), as SB3's ``Monitor`` writes it, so ``ep_rew_mean`` and ``evaluate_policy`` work without
  a ``VecMonitor``; ``env_is_wrapped(Monitor)`` answers True for that reason;
- ``infos[i]["is_success"]``: the task's success flag (``EvalCallback``'s success rate).

Observations: a ``Box`` for single-key tasks; a ``Dict`` otherwise, with ``.`` in robot_rl's keys replaced by
``_`` (``image.top`` → ``image_top``), because SB3's ``MultiInputPolicy`` names a torch module after each key
and torch forbids dots there. Sub-envs share one batched task: ``get_attr``/``set_attr``/``env_method`` act on
that task (once) and report the result for every index asked; ``seed(s)`` reseeds it with ``s`` at the next
``reset()``; ``render()`` shows sub-env 0.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from robot_rl.sims.extras import require

require("stable_baselines3", "sb3", "robot_rl.gym.sb3")

from gymnasium import spaces  # noqa: E402 - after the check that names the pip install
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn  # noqa: E402

from robot_rl.gym.spaces import NumpyObs  # noqa: E402
from robot_rl.gym.vector_env import RobotRLVectorEnv, make_vec  # noqa: E402

if TYPE_CHECKING:
    import gymnasium
    import torch

    from robot_rl.core.config import TaskConfig


def sb3_key(key: str) -> str:
    """The SB3 name of an observation key: ``image.top`` → ``image_top`` (torch module names have no dots)."""
    return key.replace(".", "_")


class SB3VecEnv(VecEnv):
    """A :class:`RobotRLVectorEnv` behind stable-baselines3's ``VecEnv`` API (module docstring)."""

    def __init__(self, env: RobotRLVectorEnv) -> None:
        self.env = env
        """The gymnasium vector env underneath; ``env.task_env`` is the robot_rl task."""
        space = env.single_observation_space
        if isinstance(space, spaces.Dict):
            space = spaces.Dict({sb3_key(k): s for k, s in space.spaces.items()})
        self._actions: np.ndarray | None = None
        self._started = time.perf_counter()
        super().__init__(env.num_envs, space, env.single_action_space)

    def reset(self) -> NumpyObs:
        """Reset every sub-env (with the seed from :meth:`seed`, if one was set); the first observations."""
        seed = self._seeds[0]
        obs, _ = self.env.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        return self._rename(obs)

    def step_async(self, actions: np.ndarray) -> None:
        """Hold ``actions`` ``[N, *action_shape]`` for :meth:`step_wait`."""
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Step the batch; ``(obs, rewards float32 [N], dones bool [N], infos)`` (module docstring)."""
        if self._actions is None:
            raise RuntimeError("step_wait() without step_async(actions)")
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        self._actions = None
        done = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if done.any():
            final, episode = info["final_obs"], info["final_info"]
            elapsed = round(time.perf_counter() - self._started, 6)
            for i in np.flatnonzero(done):
                infos[i] = {
                    "terminal_observation": self._rename(final[i]),
                    "TimeLimit.truncated": bool(truncated[i] and not terminated[i]),
                    "episode": {"r": float(episode["episode_return"][i]), "l": int(episode["episode_length"][i]),
                                "t": elapsed},
                }
                if "success" in episode:
                    infos[i]["is_success"] = bool(episode["success"][i])
        return self._rename(obs), reward, done, infos

    def close(self) -> None:
        """Close the task."""
        self.env.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Sub-env 0's frame (the task renders one), with ``render_mode="rgb_array"``."""
        frames = self.env.render()
        return list(frames) if frames else [None]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The task's attribute ``attr_name`` (``render_mode``: the adapter's), once per index asked."""
        value = self.env.render_mode if attr_name == "render_mode" else getattr(self.env.task_env, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set ``attr_name`` on the task (shared by every sub-env, so ``indices`` must name them all)."""
        self._all_of(indices, f"set_attr({attr_name!r})")
        setattr(self.env.task_env, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Call the task's method once; its result for every index asked (all of them)."""
        self._all_of(indices, f"env_method({method_name!r})")
        result = getattr(self.env.task_env, method_name)(*method_args, **method_kwargs)
        return [result for _ in range(self.num_envs)]

    def env_is_wrapped(self, wrapper_class: type[gymnasium.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """True for ``Monitor`` (this adapter writes its ``episode`` infos), False for any other wrapper."""
        return [wrapper_class is Monitor for _ in self._get_indices(indices)]

    def _all_of(self, indices: VecEnvIndices, what: str) -> None:
        if sorted(self._get_indices(indices)) != list(range(self.num_envs)):
            raise ValueError(f"{what}: the sub-envs are one batched robot_rl task; act on all of them "
                             f"(indices=None), not {indices}")

    def _rename(self, obs: NumpyObs) -> NumpyObs:
        return {sb3_key(k): v for k, v in obs.items()} if isinstance(obs, dict) else obs


def make_sb3_vec(task_id: str | TaskConfig, num_envs: int = 1, *, device: torch.device | str = "cpu",
                 seed: int | None = None, render_mode: str | None = None, **overrides: Any) -> SB3VecEnv:
    """A robot_rl task as an SB3 ``VecEnv`` (arguments as :func:`robot_rl.gym.make_vec`)."""
    return SB3VecEnv(make_vec(task_id, num_envs, device=device, seed=seed, render_mode=render_mode, **overrides))
