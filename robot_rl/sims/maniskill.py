"""ManiSkill3 environments as a :class:`~robot_rl.core.env.VecEnv` (registered as ``maniskill``).

``--task maniskill/PickCube-v1`` picks this config with ``env_id="PickCube-v1"``; any registered
ManiSkill3 id works (``PushCube-v1``, ``PegInsertionSide-v1``, …).

Backends. On ``physx_cuda`` one ManiSkill env simulates all ``num_envs`` scenes on the GPU and its
torch tensors are handed on as they are (no host copies). ``physx_cpu`` simulates one scene per
ManiSkill env, so ``num_envs > 1`` there means that many single-scene envs in this process, stepped
one after another and concatenated. Both need a Vulkan device to build scenes, even for state
observations (on a CPU-only machine: Mesa's lavapipe, see ``docs/sims-maniskill.md``).

Auto-reset. ManiSkill's own ``ManiSkillVectorEnv`` clones every observation and info tensor when any
sub-env finishes; this adapter instead steps the raw env and resets only the finished rows with
``reset(options={"env_idx": rows})``, which is the same same-step contract as ours:

- ``info["final_obs"]``: the observation at the end of the finished episode (other rows: ``obs``);
- ``info["success"]``: ManiSkill's ``info["success"]`` of the step (before the reset);
- ``info["episode_return"]``/``["episode_length"]``: totals of finished episodes.

Observations. ``obs="state"``: ``{"state": float32 [D]}`` (ManiSkill's flattened state). ``obs="rgb"``:
``{"state": float32 [D'], "image.<camera>": uint8 [H, W, 3]}`` where ``state`` flattens the agent's
proprioception and the task's extras (goal position, TCP pose, …), one image per sensor camera.

Actions are ManiSkill's (``pd_joint_delta_pos`` in ``[-1, 1]`` for the Panda by default). Bounds that
differ per dimension are exposed as ``[-1, 1]`` and rescaled here, since
:class:`~robot_rl.core.specs.ArraySpec` bounds are scalars.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from robot_rl.core.config import TASKS, ConfigError
from robot_rl.core.env import StepResult, VecEnv, check_action
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.sims.base import SimTaskConfig

INSTALL_HINT = ("pip install 'robot-rl[maniskill]' (and a Vulkan driver; on a CPU-only machine Mesa's "
                "lavapipe, see docs/sims-maniskill.md)")


@TASKS.register("maniskill")
@dataclass
class ManiSkillTaskConfig(SimTaskConfig):
    """A ManiSkill3 task by id: batched on the GPU with ``physx_cuda``, one scene per env on CPU."""

    presets: ClassVar[dict[str, dict[str, Any]]] = {"ppo": {"task.num_envs": 512}}
    extra: ClassVar[str | None] = "maniskill"

    num_envs: int = 8
    """Parallel scenes (GPU: one batched simulation; CPU: that many single-scene envs)."""
    env_id: str = "PickCube-v1"
    """Registered ManiSkill3 id, e.g. ``PickCube-v1``, ``PushCube-v1``, ``PegInsertionSide-v1``."""
    obs: Literal["state", "rgb"] = "state"
    """``state``: flat float state; ``rgb``: proprioception/task state plus one image per camera."""
    sim_backend: str = "auto"
    """``physx_cuda``, ``physx_cpu``, or ``auto`` (``physx_cuda`` when the device is CUDA)."""
    render_backend: str = "auto"
    """``sapien_cuda``, ``sapien_cpu``, or ``auto`` (``sapien_cuda`` when the device is CUDA)."""
    control_mode: str | None = None
    """Controller, e.g. ``pd_joint_delta_pos``, ``pd_ee_delta_pose`` (``null`` = the task's default)."""
    max_episode_steps: int | None = None
    """Time limit override (``null`` = the id's registered limit)."""
    image_size: int | None = None
    """``rgb``: side (px) of the square sensor images (``null`` = the task's default, 128 for PickCube)."""
    render: bool = False
    """Create the envs with ``render_mode="rgb_array"`` so that ``render()`` returns frames (videos)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for ``gymnasium.make`` (e.g. ``reward_mode: normalized_dense``)."""

    def backends(self, device: torch.device) -> tuple[str, str]:
        """The (sim, render) backend names that ``auto`` resolves to for ``device``."""
        cuda = device.type == "cuda"
        index = f":{device.index}" if cuda and device.index is not None else ""
        sim = self.sim_backend if self.sim_backend != "auto" else ("physx_cuda" if cuda else "physx_cpu")
        render = self.render_backend
        if render == "auto":
            render = f"sapien_cuda{index}" if cuda else "sapien_cpu"
        if sim == "physx_cuda" and index:
            sim += index
        return sim, render

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> ManiSkillVecEnv:
        """Build the batched env; ManiSkill (and SAPIEN, gymnasium) are imported only here."""
        gym = _import_maniskill()
        n = num_envs if num_envs is not None else self.num_envs
        if n < 1:
            raise ConfigError(f"num_envs must be >= 1, got {n}")
        dev = torch.device(device)
        _check_env_id(self.env_id)
        sim, render = self.backends(dev)
        kwargs: dict[str, Any] = {"obs_mode": self.obs, "sim_backend": sim, "render_backend": render}
        if self.control_mode is not None:
            kwargs["control_mode"] = self.control_mode
        if self.max_episode_steps is not None:
            kwargs["max_episode_steps"] = self.max_episode_steps
        if self.image_size is not None:
            kwargs["sensor_configs"] = {"width": self.image_size, "height": self.image_size}
        if self.render:
            kwargs["render_mode"] = "rgb_array"
        kwargs.update(self.env_kwargs)
        if sim.startswith("physx_cuda"):
            envs = [gym.make(self.env_id, num_envs=n, **kwargs)]
        else:
            # PhysX on the CPU holds one scene per env (ManiSkill refuses num_envs > 1 there).
            envs = [gym.make(self.env_id, num_envs=1, **kwargs) for _ in range(n)]
        return ManiSkillVecEnv(envs, dev, seed, self.obs, env_id=self.env_id)


def _import_maniskill() -> Any:
    try:
        import gymnasium
        import mani_skill.envs  # noqa: F401 - registers the ManiSkill ids with gymnasium
    except ImportError as e:
        raise ImportError(f"the 'maniskill' task needs ManiSkill3 ({e.name} is missing): {INSTALL_HINT}") from None
    return gymnasium


def _check_env_id(env_id: str) -> None:
    """Unknown ids list the registered ones; ids whose assets are not installed fail before any download.

    ManiSkill would otherwise ask on stdin whether to download missing assets (or download them
    unasked with ``MS_SKIP_ASSET_DOWNLOAD_PROMPT=1``); runs here never fetch anything at run time.
    """
    from mani_skill.utils import assets
    from mani_skill.utils.registration import REGISTERED_ENVS

    if env_id not in REGISTERED_ENVS:
        known = ", ".join(sorted(REGISTERED_ENVS))
        raise ConfigError(f"unknown ManiSkill env id {env_id!r}; registered ids: {known}")
    missing = []
    for asset_id in REGISTERED_ENVS[env_id].asset_download_ids or []:
        ids = (assets.expand_data_group_into_individual_data_source_ids(asset_id)
               if asset_id in assets.DATA_GROUPS else [asset_id])
        missing += [i for i in ids if not assets.is_data_source_downloaded(i)]
    if missing:
        shown = ", ".join(missing[:5]) + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else "")
        raise FileNotFoundError(
            f"ManiSkill env {env_id!r} needs assets that are not installed: {shown}. Download them once "
            f"beforehand with `python -m mani_skill.utils.download_asset {env_id}` (stored under "
            f"$MS_ASSET_DIR, default ~/.maniskill/data); this adapter never downloads at run time."
        )


def _leaf_size(space: Any) -> int:
    return int(np.prod(space.shape)) if space.shape else 1


def _flat_size(space: Any) -> int:
    import gymnasium

    if isinstance(space, gymnasium.spaces.Dict):
        return sum(_flat_size(s) for s in space.spaces.values())
    return _leaf_size(space)


def _flatten(tree: dict[str, Any], n: int, out: list[torch.Tensor]) -> None:
    """Depth-first, in dict order (the order of the observation space), as ``[n, d]`` float32 pieces."""
    for value in tree.values():
        if isinstance(value, dict):
            _flatten(value, n, out)
        else:
            out.append(value.reshape(n, -1).to(torch.float32))


class ManiSkillVecEnv(VecEnv):
    """ManiSkill3 env(s) behind the :class:`VecEnv` contract (see the module docstring).

    ``envs`` is either one batched env (GPU simulation) or a list of single-scene envs (CPU), all
    made by ``gymnasium.make`` with the same arguments; their batches are concatenated in order.
    """

    def __init__(self, envs: list[Any], device: torch.device, seed: int,
                 obs_mode: str, env_id: str = "") -> None:
        import gymnasium

        if not envs:
            raise ValueError("ManiSkillVecEnv needs at least one env")
        self.envs = envs
        self.device = torch.device(device)
        self.obs_mode = obs_mode
        base = envs[0].unwrapped
        self.sim_device = torch.device(base.device)
        self._sizes = [int(e.unwrapped.num_envs) for e in envs]
        self.num_envs = sum(self._sizes)
        obs_space = base.single_observation_space
        if obs_mode == "state":
            obs_spec = {"state": ArraySpec((_leaf_size(obs_space),), "float32")}
        elif obs_mode == "rgb":
            state_dim = sum(_flat_size(obs_space[k]) for k in ("agent", "extra") if k in obs_space.spaces)
            obs_spec = {"state": ArraySpec((state_dim,), "float32")}
            for cam, cam_space in obs_space["sensor_data"].spaces.items():
                obs_spec[f"image.{cam}"] = ArraySpec(cam_space["rgb"].shape, "uint8", 0, 255)
        else:
            raise ConfigError(f"obs must be 'state' or 'rgb', got {obs_mode!r}")
        act = base.single_action_space
        if not isinstance(act, gymnasium.spaces.Box):
            raise TypeError(f"action: only Box action spaces are supported, got {act}")
        low, high = np.asarray(act.low, np.float64), np.asarray(act.high, np.float64)
        uniform = bool(np.all(low == low.flat[0]) and np.all(high == high.flat[0]))
        self._rescale: tuple[torch.Tensor, torch.Tensor] | None = None
        if uniform:
            bounds = (float(low.flat[0]), float(high.flat[0]))
        else:
            # ArraySpec bounds are scalars: expose [-1, 1] and map to the Box per dimension.
            bounds = (-1.0, 1.0)
            self._rescale = (torch.as_tensor((high - low) / 2, dtype=torch.float32, device=self.sim_device),
                             torch.as_tensor((high + low) / 2, dtype=torch.float32, device=self.sim_device))
        self.spec = EnvSpec(observation=obs_spec, action=ArraySpec(act.shape, "float32", bounds[0], bounds[1]),
                            extras={"maniskill_id": env_id, "control_mode": getattr(base, "control_mode", None)})
        self.max_episode_steps = int(_time_limit(envs[0]) or 0)
        self._seed: int | None = seed
        self._return = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)
        self._length = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)

    # -- conversions ------------------------------------------------------------------------

    def _convert(self, raw: Any) -> dict[str, torch.Tensor]:
        """ManiSkill's observation of one env (batch ``n``) in our keys, on the sim device."""
        if self.obs_mode == "state":
            return {"state": raw}
        n = raw["sensor_data"][next(iter(raw["sensor_data"]))]["rgb"].shape[0]
        pieces: list[torch.Tensor] = []
        _flatten({k: raw[k] for k in ("agent", "extra") if k in raw}, n, pieces)
        out = {"state": torch.cat(pieces, dim=1)}
        for cam, data in raw["sensor_data"].items():
            out[f"image.{cam}"] = data["rgb"]
        return out

    def _gather(self, parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        if len(parts) == 1:
            obs = parts[0]
        else:
            obs = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
        return {k: v.to(self.device) for k, v in obs.items()}  # no-op when the sim is on self.device

    # -- VecEnv -----------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Reset every sub-env; the first call without ``seed`` uses the seed given to ``make``.

        CPU sub-env ``i`` is seeded with ``seed + i``; a batched GPU env takes ``seed`` itself.
        """
        if seed is None:
            seed, self._seed = self._seed, None
        parts = []
        for i, env in enumerate(self.envs):
            raw, _ = env.reset(seed=None if seed is None else seed + i)
            parts.append(self._convert(raw))
        self._return.zero_()
        self._length.zero_()
        return self._gather(parts)

    def step(self, action: torch.Tensor) -> StepResult:
        """Step every sub-env with ``action`` ``[N, *action_shape]`` (NaN rejected, then clamped)."""
        a = check_action(action, self.spec, self.num_envs).to(self.sim_device, torch.float32)
        if self._rescale is not None:
            a = a * self._rescale[0] + self._rescale[1]
        obs_parts, final_parts, rew, term, trunc, succ = [], [], [], [], [], []
        start = 0
        for env, n in zip(self.envs, self._sizes, strict=True):
            raw, r, te, tr, info = env.step(a[start:start + n] if len(self.envs) > 1 else a)
            start += n
            te_t, tr_t = _as_bool(te, n, self.sim_device), _as_bool(tr, n, self.sim_device)
            done = te_t | tr_t
            obs = self._convert(raw)
            final = obs
            if bool(done.any()):
                # Same-step reset of the finished rows only; the new tensors leave `final` intact.
                new_raw, _ = env.reset(options={"env_idx": done.nonzero().flatten()})
                new = self._convert(new_raw)
                mask = {k: done.view(-1, *([1] * (v.dim() - 1))) for k, v in new.items()}
                obs = {k: torch.where(mask[k], new[k], final[k]) for k in new}
            s = info.get("success")
            succ.append(_as_bool(s, n, self.sim_device) if s is not None
                        else torch.zeros(n, dtype=torch.bool, device=self.sim_device))
            obs_parts.append(obs)
            final_parts.append(final)
            rew.append(torch.as_tensor(r, device=self.sim_device).reshape(n).to(torch.float32))
            term.append(te_t)
            trunc.append(tr_t)
        reward = self._cat(rew)
        terminated, truncated = self._cat(term), self._cat(trunc)
        done_all = terminated | truncated
        self._return += reward
        self._length += 1
        info_out = {
            "final_obs": self._gather(final_parts),
            "success": self._cat(succ),
            "episode_return": torch.where(done_all, self._return, 0.0),
            "episode_length": torch.where(done_all, self._length, 0),
        }
        self._return.masked_fill_(done_all, 0.0)
        self._length.masked_fill_(done_all, 0)
        return StepResult(self._gather(obs_parts), reward, terminated, truncated, info_out)

    def _cat(self, parts: list[torch.Tensor]) -> torch.Tensor:
        return (parts[0] if len(parts) == 1 else torch.cat(parts)).to(self.device)

    def render(self) -> torch.Tensor | None:
        """Sub-env 0's RGB frame ``[H, W, 3]`` uint8 when made with ``render=True``."""
        if getattr(self.envs[0].unwrapped, "render_mode", None) is None:
            return None
        frame = self.envs[0].render()
        if frame is None:
            return None
        frame = torch.as_tensor(frame)
        return (frame[0] if frame.dim() == 4 else frame).to(torch.uint8).cpu()

    def close(self) -> None:
        """Close the ManiSkill envs (releases their scenes)."""
        for env in self.envs:
            env.close()


def _as_bool(x: Any, n: int, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(x, device=device).reshape(n).to(torch.bool)


def _time_limit(env: Any) -> int | None:
    """The episode limit of ManiSkill's ``TimeLimitWrapper`` (``None`` when the env has none)."""
    while env is not None:
        limit = getattr(env, "_max_episode_steps", None)
        if limit is not None:
            return int(limit)
        env = getattr(env, "env", None)
    return None
