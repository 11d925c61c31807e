"""Any gymnasium environment as a :class:`~robot_rl.core.env.VecEnv` (registered as ``gym`` and ``gymnasium``).

Task ids: ``gymnasium/<env id>`` (``gymnasium/Pendulum-v1``, ``gymnasium/HalfCheetah-v5``,
``gymnasium/gym_hil/PandaPickCubeBase-v0``). An id with a namespace that gymnasium does not know yet
(``gym_hil/...``) imports the module of that name first, which is how such packages register their
envs; ``module:EnvId`` (gymnasium's own syntax) names the module explicitly.

Sub-envs run in gymnasium's ``SyncVectorEnv`` (``vector: sync``, one process) or ``AsyncVectorEnv``
(``vector: async``, one worker process per sub-env: worth it when a step costs more than the pipe,
as with MuJoCo envs), both with ``autoreset_mode=SAME_STEP``, which is exactly our auto-reset
contract: a finished row returns the next episode's first observation and the last one in
``info["final_obs"]``. The adapter converts numpy to torch on ``device`` and back.

Spaces. A ``Box`` observation becomes ``{"state": float32 [D]}`` (flattened if multi-dimensional), or
``{"image.camera": uint8 [H, W, C]}`` for a 3-d uint8 ``Box``. A ``Dict`` of Boxes (nested or not, as
gym_hil's Panda envs give) is split the same way: every 3-d uint8 Box becomes ``image.<name>`` (its
own key, e.g. ``pixels/front`` → ``image.front``), and all other Boxes are flattened and concatenated,
in the space's key order, into one ``state`` vector (the layout is in ``spec.extras["state_layout"]``).
A ``Box`` action keeps its bounds when they are the same on every dimension (Pendulum: ``[-2, 2]``);
per-dimension bounds are exposed as ``[-1, 1]`` and rescaled here, because
:class:`~robot_rl.core.specs.ArraySpec` bounds are scalars. Success comes from ``info["is_success"]``,
``info["success"]`` or ``info["succeed"]`` (gym_hil) when the env reports it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import torch

from robot_rl.core.config import TASKS, ConfigError
from robot_rl.core.env import StepResult, VecEnv, check_action
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.sims.base import SimTaskConfig
from robot_rl.sims.extras import require

if TYPE_CHECKING:
    import gymnasium

#: info keys read as the success flag, in this order.
SUCCESS_KEYS = ("is_success", "success", "succeed")


@TASKS.register("gymnasium")
@TASKS.register("gym")
@dataclass
class GymnasiumTaskConfig(SimTaskConfig):
    """A gymnasium environment by id, vectorised (CPU simulation, tensors on any device)."""

    extra: ClassVar[str | None] = "gym"

    num_envs: int = 1
    """Parallel sub-environments."""
    env_id: str = "Pendulum-v1"
    """Registered gymnasium id, e.g. ``Pendulum-v1``, ``HalfCheetah-v5``, ``gym_hil/PandaPickCubeBase-v0``."""
    vector: Literal["sync", "async"] = "sync"
    """``sync``: sub-envs step one after another in this process; ``async``: one worker process each."""
    async_context: Literal["fork", "spawn", "forkserver"] | None = None
    """``async``: how workers start (null: the platform's default). Renderers that hold a GL context
    (MuJoCo with EGL/OSMesa cameras, gym_hil's ``image_obs``) need ``spawn``."""
    max_episode_steps: int | None = None
    """Time limit override (``null`` = the id's registered limit)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for ``gymnasium.make``."""
    render: bool = False
    """Create the envs with ``render_mode="rgb_array"`` so that ``render()`` returns frames."""

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> GymnasiumVecEnv:
        """Build the vectorised env; gymnasium is imported only here."""
        require("gymnasium", "gym", "the 'gym' task")
        from robot_rl.sims.mujoco.render import choose_gl

        # MuJoCo envs that open a renderer even without cameras (gym_hil's Panda envs do, in __init__) need a
        # headless OpenGL backend before mujoco is imported; a display or a MUJOCO_GL the user set is kept.
        choose_gl(torch.device(device).type)
        import gymnasium

        n = num_envs if num_envs is not None else self.num_envs
        if n < 1:
            raise ConfigError(f"num_envs must be >= 1, got {n}")
        kwargs = dict(self.env_kwargs)
        if self.render:
            kwargs["render_mode"] = "rgb_array"
        if self.max_episode_steps is not None:
            kwargs["max_episode_steps"] = self.max_episode_steps
        env_id = self.env_id
        _import_namespace(env_id)
        if ":" not in env_id and env_id not in gymnasium.registry:
            # gymnasium.make would say the same, but only inside a worker process for `async`.
            gymnasium.spec(env_id)  # raises NameNotFound/VersionNotFound with gymnasium's suggestions
        fns = [functools.partial(_make_env, env_id, kwargs) for _ in range(n)]
        same_step = gymnasium.vector.AutoresetMode.SAME_STEP
        vec: gymnasium.vector.SyncVectorEnv | gymnasium.vector.AsyncVectorEnv
        if self.vector == "async":
            vec = gymnasium.vector.AsyncVectorEnv(fns, autoreset_mode=same_step, context=self.async_context)
        else:
            vec = gymnasium.vector.SyncVectorEnv(fns, autoreset_mode=same_step)
        try:
            return GymnasiumVecEnv(vec, torch.device(device), seed)
        except BaseException:
            vec.close()
            raise


def _import_namespace(env_id: str) -> None:
    """Import the package that registers ``ns/Env-v0`` (by convention the module ``ns``), if there is one."""
    import gymnasium

    if ":" in env_id or "/" not in env_id or env_id in gymnasium.registry:
        return
    namespace = env_id.split("/", 1)[0]
    if importlib.util.find_spec(namespace) is not None:
        importlib.import_module(namespace)


def _make_env(env_id: str, kwargs: dict[str, Any]) -> gymnasium.Env:
    """One sub-env (module level and partial-bound, so that async workers can unpickle it)."""
    import gymnasium

    _import_namespace(env_id)  # a spawned worker starts with gymnasium's registry only
    return gymnasium.make(env_id, **kwargs)


def _leaves(space: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """``(key path, Box)`` for every leaf of a (nested) ``Dict`` space, in the space's order."""
    import gymnasium

    if isinstance(space, gymnasium.spaces.Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in _leaves(sub, (*path, str(key)))]
    if not isinstance(space, gymnasium.spaces.Box):
        where = "/".join(path) or "observation"
        raise TypeError(f"{where}: only Box spaces (or Dicts of them) are supported, got {space}")
    return [(path, space)]


def _is_image(space: Any) -> bool:
    return bool(space.dtype == np.uint8 and len(space.shape) == 3)


class _ObsLayout:
    """How a gymnasium observation (array or nested dict) maps to our ``{key: array}`` dict."""

    def __init__(self, space: Any) -> None:
        leaves = _leaves(space)
        self.images: list[tuple[str, tuple[str, ...]]] = []
        self.state: list[tuple[tuple[str, ...], int]] = []
        image_leaves = [p for p, s in leaves if _is_image(s)]
        names = [p[-1] if p else "camera" for p in image_leaves]
        for path, name in zip(image_leaves, names, strict=True):
            # A leaf name used twice (two "rgb" under different parents) keeps its whole path.
            self.images.append(("image." + (name if names.count(name) == 1 else "_".join(path)), path))
        self.specs: dict[str, ArraySpec] = {}
        for path, box in leaves:
            if _is_image(box):
                key = next(k for k, p in self.images if p == path)
                self.specs[key] = ArraySpec(box.shape, "uint8", 0, 255)
            else:
                self.state.append((path, int(np.prod(box.shape))))
        if self.state:
            self.specs["state"] = ArraySpec((sum(n for _, n in self.state),), "float32")

    def layout(self) -> list[list[Any]]:
        """``[[key path, size], ...]`` of the concatenated ``state`` vector (YAML-able, for the spec)."""
        return [["/".join(p) or "observation", n] for p, n in self.state]

    def convert(self, obs: Any, batch: int) -> dict[str, np.ndarray]:
        """``{key: [batch, ...]}`` from a batched observation (``batch`` rows) of the space."""
        out: dict[str, np.ndarray] = {}
        for key, path in self.images:
            out[key] = np.asarray(_get(obs, path), np.uint8)
        if self.state:
            parts = [np.asarray(_get(obs, p), np.float32).reshape(batch, -1) for p, _ in self.state]
            out["state"] = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        return out


def _get(obs: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obs = obs[key]
    return obs


class GymnasiumVecEnv(VecEnv):
    """A gymnasium vector env (sync or async, same-step auto-reset) behind the :class:`VecEnv` contract."""

    def __init__(self, vec: gymnasium.vector.SyncVectorEnv | gymnasium.vector.AsyncVectorEnv, device: torch.device,
                 seed: int) -> None:
        import gymnasium

        self.vec = vec
        self.device = device
        self.num_envs = vec.num_envs
        self._layout = _ObsLayout(vec.single_observation_space)
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
        env_spec = vec.get_attr("spec")[0]  # works for sync and async (asks a worker)
        extras: dict[str, Any] = {"gym_id": env_spec.id if env_spec else None}
        if any(path for path, _ in self._layout.state):  # a Dict space: say what the state is made of
            extras["state_layout"] = self._layout.layout()
        self.spec = EnvSpec(observation=dict(self._layout.specs),
                            action=ArraySpec(act.shape, "float32", bounds[0], bounds[1]), extras=extras)
        limit = env_spec.max_episode_steps if env_spec else None
        self.max_episode_steps = int(limit) if limit is not None else 0
        self._seed: int | None = seed
        self._return = np.zeros(self.num_envs, np.float64)
        self._length = np.zeros(self.num_envs, np.int64)

    def _to_torch(self, obs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(v, device=self.device) for k, v in obs.items()}

    def _to_obs(self, x: Any) -> dict[str, torch.Tensor]:
        return self._to_torch(self._layout.convert(x, self.num_envs))

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
        any_done = bool(done.any())
        self._return += reward
        self._length += 1
        next_obs = self._layout.convert(obs, self.num_envs)
        final_obs = {k: v.copy() for k, v in next_obs.items()}
        if any_done:
            rows = np.flatnonzero(info["_final_obs"]) if "_final_obs" in info else np.flatnonzero(done)
            for i in rows:
                # info["final_obs"] is an object array of single (unbatched) observations.
                for k, v in self._layout.convert(_batch_of_one(info["final_obs"][i]), 1).items():
                    final_obs[k][i] = v[0]
        success = self._success(info, done)
        if any_done:
            ep_return = np.where(done, self._return, 0.0).astype(np.float32)
            ep_length = np.where(done, self._length, 0)
            self._return[done] = 0
            self._length[done] = 0
        else:  # most steps: skip the masked writes (this bookkeeping is much of a cheap env's overhead)
            ep_return = np.zeros(self.num_envs, np.float32)
            ep_length = np.zeros(self.num_envs, np.int64)
        out_info = {"final_obs": self._to_torch(final_obs),
                    "success": torch.as_tensor(success, device=self.device),
                    "episode_return": torch.as_tensor(ep_return, device=self.device),
                    "episode_length": torch.as_tensor(ep_length, device=self.device)}
        dev = self.device
        return StepResult(self._to_torch(next_obs), torch.as_tensor(reward, dtype=torch.float32, device=dev),
                          torch.as_tensor(terminated, dtype=torch.bool, device=dev),
                          torch.as_tensor(truncated, dtype=torch.bool, device=dev), out_info)

    def _success(self, info: dict[str, Any], done: np.ndarray) -> np.ndarray:
        # SAME_STEP puts the finished episode's last info under "final_info" (the top level then
        # holds the reset info), so finished rows read it from there.
        success = np.zeros(self.num_envs, bool)
        final = info.get("final_info", {})
        for key in SUCCESS_KEYS:
            if key in info:
                success |= np.asarray(info[key], bool) & np.asarray(info.get("_" + key, True), bool) & ~done
            if key in final:
                success |= np.asarray(final[key], bool) & np.asarray(final.get("_" + key, True), bool) & done
        return success

    def render(self) -> torch.Tensor | None:
        """Sub-env 0's RGB frame when made with ``render=True``."""
        # call() reaches the workers of an AsyncVectorEnv too (each renders; sub-env 0's is kept).
        frames = self.vec.call("render")
        frame = frames[0] if frames else None
        if frame is None:
            return None
        image = np.asarray(frame, dtype=np.uint8)
        # Some envs (gym_hil) render every camera: [cameras, H, W, 3]; the first one is the video's.
        return torch.as_tensor(image[0] if image.ndim == 4 else image)

    def close(self) -> None:
        """Close the gymnasium envs."""
        self.vec.close()


def _batch_of_one(obs: Any) -> Any:
    """A single observation (array or nested dict) with a leading batch axis of 1."""
    if isinstance(obs, dict):
        return {k: _batch_of_one(v) for k, v in obs.items()}
    return np.asarray(obs)[None]
