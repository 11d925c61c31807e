"""A robot_rl task as an rsl_rl ``VecEnv`` (rsl-rl-lib >= 3, TensorDict observations).

``pip install 'robot-rl[rsl_rl]'``. Tensors stay on the task's device; gymnasium is not needed.

Observations are a ``TensorDict`` ``[N]`` of observation groups: robot_rl's ``state`` is the group ``policy``
(rsl_rl's usual name, so ``obs_groups={"actor": ["policy"], "critic": ["policy"]}`` works unchanged), every
other key keeps its robot_rl name (``image.top`` uint8 ``[N, H, W, C]``, ``language``) for configs that want
it; ``groups`` renames any of them.

``step(actions)`` returns ``(obs, rewards [N] float32, dones [N] long, extras)``. ``obs`` follows robot_rl's
same-step auto-reset: where ``dones[i]``, row ``i`` is the next episode's first observation (rsl_rl never sees
the final one, and bootstraps time-outs from V(s_t), its own convention). ``extras["time_outs"]`` (bool
``[N]``) marks the truncated episodes. On steps where episodes ended, ``extras["log"]`` holds their
``Episode/return``, ``Episode/length`` and ``Episode/success`` (one value per ended episode), which the
runner's logger averages over the iteration (with a ``log_dir``); finding them costs a host sync per step on
CUDA, which ``log_episodes=False`` saves. Actions are rsl_rl's raw Gaussian samples; the task clamps them into
its bounds and rejects NaN.

``episode_length_buf`` reads the steps taken in each current episode. The task owns its time limit, so
``OnPolicyRunner.learn(init_at_random_ep_len=True)``, which writes random lengths into it, is refused with an
error rather than silently ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from robot_rl.config_io import to_dict
from robot_rl.gym.build import build_task_env, task_config
from robot_rl.sims.extras import require

require("rsl_rl", "rsl_rl", "robot_rl.gym.rsl_rl")

from rsl_rl.env import VecEnv as RslVecEnv  # noqa: E402 - after the check that names the pip install
from tensordict import TensorDict  # noqa: E402

if TYPE_CHECKING:
    from robot_rl.core.config import TaskConfig
    from robot_rl.core.env import VecEnv


#: The task's per-episode info → the tag rsl_rl's logger writes it under (a tag with "/" is used as is).
_EPISODE_LOG = {"episode_return": "Episode/return", "episode_length": "Episode/length", "success": "Episode/success"}


class RslRlVecEnv(RslVecEnv):
    """A robot_rl :class:`~robot_rl.core.env.VecEnv` behind rsl_rl's ``VecEnv`` contract (module docstring)."""

    def __init__(self, env: VecEnv, *, seed: int | None = None, groups: dict[str, str] | None = None,
                 cfg: dict[str, Any] | None = None, log_episodes: bool = True) -> None:
        if len(env.spec.action.shape) != 1:
            raise ValueError(f"rsl_rl takes flat actions [num_actions]; this task's are {list(env.spec.action.shape)}")
        self.env = env
        """The robot_rl task underneath."""
        self.groups = {"state": "policy", **(groups or {})}
        """robot_rl observation key → rsl_rl observation group."""
        self.num_envs = env.num_envs
        self.num_actions = env.spec.action_dim
        self.max_episode_length = env.max_episode_steps
        self.device = env.device
        self.cfg = cfg if cfg is not None else {}
        self.log_episodes = log_episodes
        self._length = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)
        self._obs = self._group(env.reset(seed=seed))

    @property
    def episode_length_buf(self) -> torch.Tensor:  # type: ignore[override]
        """Steps taken in each sub-env's current episode, ``[N]`` long (read-only: the task keeps its clock)."""
        return self._length

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        raise NotImplementedError("robot_rl tasks keep their own episode clocks and time limits; run "
                                  "OnPolicyRunner.learn(..., init_at_random_ep_len=False)")

    def get_observations(self) -> TensorDict:
        """The current observation groups, ``TensorDict`` ``[N]`` on the task's device."""
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Apply ``actions`` ``[N, num_actions]``; ``(obs, rewards, dones, extras)`` (module docstring)."""
        res = self.env.step(actions.to(self.device))
        done = res.terminated | res.truncated
        self._length = torch.where(done, torch.zeros_like(self._length), self._length + 1)
        self._obs = self._group(res.obs)
        extras: dict[str, Any] = {"time_outs": res.truncated}
        if self.log_episodes and bool(done.any()):
            extras["log"] = {tag: res.info[k][done].float() for k, tag in _EPISODE_LOG.items() if k in res.info}
        return self._obs, res.reward, done.long(), extras

    def close(self) -> None:
        """Close the task."""
        self.env.close()

    def _group(self, obs: dict[str, torch.Tensor]) -> TensorDict:
        return TensorDict({self.groups.get(k, k): v for k, v in obs.items()}, batch_size=[self.num_envs],
                          device=self.device)


def make_rsl_rl_env(task_id: str | TaskConfig, num_envs: int | None = None, *, device: torch.device | str = "cpu",
                    seed: int | None = None, groups: dict[str, str] | None = None,
                    **overrides: Any) -> RslRlVecEnv:
    """A robot_rl task as an rsl_rl ``VecEnv``; ``cfg`` is the task's config as a dict (rsl_rl logs it).

    Arguments as :func:`robot_rl.gym.make_vec` (``num_envs`` ``None``: the config's), plus ``groups``.
    """
    cfg = task_config(task_id, **overrides)
    env = build_task_env(cfg, num_envs, device=device, seed=seed)
    try:
        return RslRlVecEnv(env, seed=seed, groups=groups, cfg=to_dict(cfg))
    except BaseException:
        env.close()
        raise
