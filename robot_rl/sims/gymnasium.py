"""Any gymnasium environment as a :class:`~robot_rl.envs.VecEnv` (registered as ``gym``).

Sub-envs run in gymnasium's ``SyncVectorEnv`` with ``autoreset_mode=SAME_STEP``, which is exactly
our auto-reset contract: a finished row returns the next episode's first observation and the last
one in ``info["final_obs"]``. The adapter converts numpy to torch on ``device`` and back.

Spaces. A ``Box`` observation becomes ``{"state": float32 [D]}`` (flattened if multi-dimensional), or
``{"image.camera": uint8 [H, W, C]}`` for a 3-d uint8 ``Box``. A ``Box`` action keeps its bounds when
they are the same on every dimension (Pendulum: ``[-2, 2]``); per-dimension bounds are exposed as
``[-1, 1]`` and rescaled here, because :class:`~robot_rl.specs.ArraySpec` bounds are scalars.
Success comes from ``info["is_success"]`` or ``info["success"]`` when the env reports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from robot_rl.config import TASKS, TaskConfig
from robot_rl.envs import StepResult, VecEnv, check_action
from robot_rl.specs import ArraySpec, EnvSpec

if TYPE_CHECKING:
    import gymnasium


@TASKS.register("gym")
@dataclass
class GymnasiumTaskConfig(TaskConfig):
    """A gymnasium environment by id, vectorised in-process (CPU simulation, tensors on any device)."""

    num_envs: int = 1
    """Parallel sub-environments (gymnasium's SyncVectorEnv steps them one after another)."""
    env_id: str = "Pendulum-v1"
    """Registered gymnasium id, e.g. ``Pendulum-v1``, ``HalfCheetah-v5``."""
    max_episode_steps: int | None = None
    """Time limit override (``null`` = the id's registered limit)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for ``gymnasium.make``."""
    render: bool = False
    """Create the envs with ``render_mode="rgb_array"`` so that ``render()`` returns frames."""

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> GymnasiumVecEnv:
        """Build the vectorised env; gymnasium is imported only here."""
        try:
            import gymnasium
        except ImportError:
            raise ImportError("the 'gym' task needs gymnasium: pip install 'robot-rl[gym]'") from None
        n = num_envs if num_envs is not None else self.num_envs
        kwargs = dict(self.env_kwargs)
        if self.render:
            kwargs["render_mode"] = "rgb_array"
        if self.max_episode_steps is not None:
            kwargs["max_episode_steps"] = self.max_episode_steps
        vec = gymnasium.vector.SyncVectorEnv(
            [lambda: gymnasium.make(self.env_id, **kwargs) for _ in range(n)],
            autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP,
        )
        return GymnasiumVecEnv(vec, torch.device(device), seed)


def _box_spec(space: Any, what: str) -> tuple[str, ArraySpec]:
    import gymnasium

    if not isinstance(space, gymnasium.spaces.Box):
        raise TypeError(f"{what}: only Box spaces are supported, got {space}")
    if space.dtype == np.uint8 and len(space.shape) == 3:
        return "image.camera", ArraySpec(space.shape, "uint8", 0, 255)
    return "state", ArraySpec((int(np.prod(space.shape)),), "float32")


class GymnasiumVecEnv(VecEnv):
    """A gymnasium ``SyncVectorEnv`` (same-step auto-reset) behind the :class:`VecEnv` contract."""

    def __init__(self, vec: gymnasium.vector.SyncVectorEnv, device: torch.device, seed: int) -> None:
        import gymnasium

        self.vec = vec
        self.device = device
        self.num_envs = vec.num_envs
        self._obs_key, obs_spec = _box_spec(vec.single_observation_space, "observation")
        act = vec.single_action_space
        if not isinstance(act, gymnasium.spaces.Box):
            raise TypeError(f"action: only Box spaces are supported, got {act}")
        low, high = np.asarray(act.low, np.float64), np.asarray(act.high, np.float64)
        uniform = bool(np.all(low == low.flat[0]) and np.all(high == high.flat[0]))
        finite = bool(np.isfinite(low).all() and np.isfinite(high).all())
        self._rescale: tuple[np.ndarray, np.ndarray] | None = None
        if uniform and finite:
            bounds: tuple[float | None, float | None] = (float(low.flat[0]), float(high.flat[0]))
        elif finite:
            # ArraySpec bounds are scalars: expose [-1, 1] and map to the Box per dimension.
            bounds = (-1.0, 1.0)
            self._rescale = ((high - low) / 2.0, (high + low) / 2.0)
        else:
            bounds = (None, None)
        self.spec = EnvSpec(observation={self._obs_key: obs_spec},
                            action=ArraySpec(act.shape, "float32", bounds[0], bounds[1]),
                            extras={"gym_id": vec.envs[0].spec.id if vec.envs[0].spec else None})
        limit = vec.envs[0].spec.max_episode_steps if vec.envs[0].spec else None
        self.max_episode_steps = int(limit) if limit is not None else 0
        self._seed: int | None = seed
        self._return = np.zeros(self.num_envs, np.float64)
        self._length = np.zeros(self.num_envs, np.int64)

    def _to_obs(self, x: np.ndarray) -> dict[str, torch.Tensor]:
        if self._obs_key == "state":
            x = x.reshape(x.shape[0], -1).astype(np.float32, copy=False)
        return {self._obs_key: torch.as_tensor(x).to(self.device)}

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Reset every sub-env; the first call without ``seed`` uses the seed given to ``make``."""
        if seed is None:
            seed, self._seed = self._seed, None
        obs, _ = self.vec.reset(seed=seed)
        if seed is not None:
            self.vec.action_space.seed(seed)
        self._return[:] = 0
        self._length[:] = 0
        return self._to_obs(obs)

    def step(self, action: torch.Tensor) -> StepResult:
        """Step every sub-env with ``action`` ``[N, *action_shape]`` (clamped, NaN rejected)."""
        a = check_action(action, self.spec, self.num_envs).detach().cpu().numpy()
        if self._rescale is not None:
            a = a * self._rescale[0] + self._rescale[1]
        obs, reward, terminated, truncated, info = self.vec.step(a.astype(self.vec.single_action_space.dtype))
        done = terminated | truncated
        self._return += reward
        self._length += 1
        final_obs = obs.copy()
        if done.any():
            rows = np.flatnonzero(info["_final_obs"]) if "_final_obs" in info else np.flatnonzero(done)
            final_obs[rows] = np.stack([info["final_obs"][i] for i in rows])
        success = self._success(info, done)
        ep_return = np.where(done, self._return, 0.0).astype(np.float32)
        ep_length = np.where(done, self._length, 0)
        self._return[done] = 0
        self._length[done] = 0
        out_info = {"final_obs": self._to_obs(final_obs),
                    "success": torch.as_tensor(success, device=self.device),
                    "episode_return": torch.as_tensor(ep_return, device=self.device),
                    "episode_length": torch.as_tensor(ep_length, device=self.device)}
        return StepResult(self._to_obs(obs), torch.as_tensor(reward, dtype=torch.float32).to(self.device),
                          torch.as_tensor(terminated, dtype=torch.bool).to(self.device),
                          torch.as_tensor(truncated, dtype=torch.bool).to(self.device), out_info)

    def _success(self, info: dict[str, Any], done: np.ndarray) -> np.ndarray:
        # SAME_STEP puts the finished episode's last info under "final_info" (the top level then
        # holds the reset info), so finished rows read it from there.
        success = np.zeros(self.num_envs, bool)
        final = info.get("final_info", {})
        for key in ("is_success", "success"):
            if key in info:
                success |= np.asarray(info[key], bool) & np.asarray(info.get("_" + key, True), bool) & ~done
            if key in final:
                success |= np.asarray(final[key], bool) & np.asarray(final.get("_" + key, True), bool) & done
        return success

    def render(self) -> torch.Tensor | None:
        """Sub-env 0's RGB frame when made with ``render=True``."""
        frame = self.vec.envs[0].render()
        if frame is None:
            return None
        return torch.as_tensor(np.asarray(frame, dtype=np.uint8))

    def close(self) -> None:
        """Close the gymnasium envs."""
        self.vec.close()
