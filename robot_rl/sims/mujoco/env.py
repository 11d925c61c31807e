"""``MujocoVecEnv``: N MuJoCo arm worlds behind the :class:`~robot_rl.core.env.VecEnv` contract.

One step: validate the action (NaN rejected before clamping), turn it into servo targets
(``controller.py``), hold them for ``frame_skip`` physics steps in every world (a backend: CPU
thread pool or MJX), score the new state (the task config's ``evaluate``), and reset finished
worlds in the same call (the auto-reset of ``robot_rl/core/env.py``).

The per-step math (controller, rewards, observations, episode counters) runs on the backend's
``task_readout()``: torch tensors on the env's device for MJX, float64 numpy arrays on the host for
the CPU backend (``host_arrays``), where some 60 small torch ops cost several times the numpy ones
(``arrays.py``). Everything returned is a torch tensor on the env's device either way, made once
per array at the end of the step.

Start states are drawn from one ``torch.Generator``, only for the worlds whose episode ended, in
world order (a step where nothing ended draws nothing and costs nothing): the same seed gives the
same trajectories, and two backends that end the same episodes draw the same start states.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from robot_rl.core.config import TASKS
from robot_rl.core.env import StepResult, VecEnv, check_action
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.sims.mujoco.arrays import (
    Array,
    as_float32,
    concat_float32,
    fill_where_,
    namespace,
    to_numpy,
    to_torch,
)
from robot_rl.sims.mujoco.camera_pose import apply_camera_adjust
from robot_rl.sims.mujoco.controller import ArmController, action_dim, index_or_slice
from robot_rl.sims.mujoco.params import PARAM_NAMES, param_labels
from robot_rl.sims.mujoco.readout import Readout
from robot_rl.sims.mujoco.render import CameraRenderer, choose_gl
from robot_rl.sims.mujoco.render import import_mujoco as import_mujoco_checking_gl
from robot_rl.sims.mujoco.scene import FINGER_MAX, build_model
from robot_rl.sims.mujoco.tasks import MujocoTaskConfig

#: Length of the arm's own part of ``state``: joint angles (6), joint velocities / 10 (6), finger
#: opening / 8 cm (1), grip-site position (3).
ARM_STATE_DIM = 16


def import_mujoco(renders: bool = True) -> Any:
    """``import mujoco``, or an ImportError naming the extra that brings it (RenderingUnavailableError: no OpenGL)."""
    try:
        return import_mujoco_checking_gl(renders)
    except ImportError:
        raise ImportError("the mujoco/* tasks need MuJoCo: pip install 'robot-rl[mujoco]'") from None


class MujocoVecEnv(VecEnv):
    """A batch of MuJoCo arm worlds for one task config (see the module docstring).

    Domain-randomisation API (per world, on any backend): :meth:`get_params`, :meth:`set_params`,
    :meth:`param_labels`; exact state save/restore: :meth:`get_state`, :meth:`set_state`.
    """

    def __init__(self, cfg: MujocoTaskConfig, num_envs: int, device: torch.device | str, seed: int) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.cfg = cfg
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.max_episode_steps = int(cfg.max_episode_steps)
        self.seed = int(seed)
        if cfg.obs != "state":
            choose_gl(self.device.type)
        import_mujoco(renders=cfg.obs != "state")
        model, ix = build_model(cfg.objects, cfg.timestep)
        apply_camera_adjust(model, cfg.camera_adjust)
        self.model, self.ix = model, ix
        self.backend: Any
        if cfg.backend == "cpu":
            from robot_rl.sims.mujoco.cpu_backend import CpuBackend

            self.backend = CpuBackend(model, ix, self.num_envs, cfg.frame_skip, cfg.num_threads, self.device)
        elif cfg.backend == "mjx":
            from robot_rl.sims.mujoco.mjx_backend import MjxBackend

            self.backend = MjxBackend(model, ix, self.num_envs, cfg.frame_skip, self.device)
        elif cfg.backend == "warp":
            from robot_rl.sims.mujoco.warp_backend import WarpBackend

            self.backend = WarpBackend(model, ix, self.num_envs, cfg.frame_skip, self.device)
        else:
            raise ValueError(f"backend {cfg.backend!r} is not one of 'cpu', 'mjx', 'warp'")
        self.controller = ArmController(cfg, ix, self.device)
        self._host = bool(self.backend.host_arrays)
        index_device = None if self._host else self.device
        self._arm_q = index_or_slice(ix.arm_qpos, index_device)
        self._arm_v = index_or_slice(ix.arm_dof, index_device)
        self._fingers = index_or_slice(ix.finger_qpos, index_device)
        self._grip = ix.site["grip"]
        self._cameras: dict[str, CameraRenderer] = {}
        self._video: CameraRenderer | None = None
        obs: dict[str, ArraySpec]
        state_dim = ARM_STATE_DIM if cfg.obs == "pixels" else cfg.state_dim()
        obs = {"state": ArraySpec((state_dim,), "float32")}
        if cfg.obs != "state":
            image = ArraySpec((cfg.image_size, cfg.image_size, 3), "uint8", 0, 255)
            names = (cfg.camera, *cfg.extra_cameras)
            obs = {**{f"image.{c}": image for c in names}, **obs}
            self._cameras = {f"image.{c}": CameraRenderer(model, c, cfg.image_size, cfg.image_size) for c in names}
        self.spec = EnvSpec(observation=obs, action=ArraySpec((action_dim(cfg),), "float32", -1.0, 1.0),
                            extras={"task": TASKS.name_of(cfg), "backend": cfg.backend})
        self.generator = torch.Generator(device=self.device)
        # Episode counters, in the namespace of the per-step math. On the host they are numpy arrays
        # that the public tensors share (so on the CPU even for a CUDA env), so a caller's in-place
        # edit of those (reward schedules reset them) is seen here.
        self._counters: tuple[Array, Array]
        if self._host:
            self._counters = (np.zeros(self.num_envs, np.float32), np.zeros(self.num_envs, np.int64))
            self.episode_return = torch.from_numpy(self._counters[0])
            self.episode_length = torch.from_numpy(self._counters[1])
        else:
            self.episode_return = torch.zeros(self.num_envs, device=self.device)
            self.episode_length = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
            self._counters = (self.episode_return, self.episode_length)
        self._r: Readout
        self.reset(seed=self.seed)

    @property
    def readout(self) -> Readout:
        """State of all worlds as float32 torch tensors on the env's device.

        On the CPU backend these are float32 copies of its float64 arrays, made when asked for after a
        step or reset, into the same tensors each time: copy what you keep, ask again after a step.
        """
        return self.backend.readout()  # type: ignore[no-any-return]

    # ---- observations -----------------------------------------------------------------------

    def _arm_state(self, r: Readout) -> list[Array]:
        opening = r.qpos[:, self._fingers].sum(-1)[:, None] * (1 / (2 * FINGER_MAX))
        return [r.qpos[:, self._arm_q], r.qvel[:, self._arm_v] * 0.1, opening, r.site_pos[:, self._grip]]

    def _images(self, r: Readout, rows: np.ndarray | None = None) -> dict[str, torch.Tensor]:
        ids = np.arange(self.num_envs) if rows is None else rows
        return {key: torch.from_numpy(self.backend.images(cam, ids, r)).to(self.device)
                for key, cam in self._cameras.items()}

    def _state(self, r: Readout) -> torch.Tensor:
        parts = self._arm_state(r)
        if self.cfg.obs != "pixels":
            parts.append(self.cfg.task_obs(self.ix, r))
        # One new float32 array (numpy: cast while copying), shared with torch.
        return to_torch(concat_float32(parts), self.device)

    def _observe(self, r: Readout) -> dict[str, torch.Tensor]:
        """Observations of the state ``r`` (a task readout, or the torch ``readout``): new tensors."""
        if self.cfg.obs == "state":
            return {"state": self._state(r)}
        return {**self._images(r), "state": self._state(r)}

    def observe(self) -> dict[str, torch.Tensor]:
        """The current observation of every world (after :meth:`set_state`: the restored state's)."""
        return self._observe(self._r)

    # ---- VecEnv -----------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Reset every world (reseeding the start-state generator if ``seed`` is given)."""
        if seed is not None:
            self.generator.manual_seed(int(seed))
        qpos, mocap = self.cfg.sample_start(self.ix, self.generator, self.num_envs, self.device)
        self.backend.set_start(np.arange(self.num_envs), qpos, mocap)
        self._r = self.backend.task_readout()
        self.episode_return.zero_()
        self.episode_length.zero_()
        return self._observe(self._r)

    def _host_action(self, action: torch.Tensor) -> np.ndarray:
        """``check_action`` for the host math: the same checks and clamp, in numpy, as float64."""
        t = action.detach().cpu()
        a = (t.float() if t.dtype == torch.bfloat16 else t).numpy()  # numpy has no bfloat16
        if a.shape != (self.num_envs, *self.spec.action.shape) or not np.isfinite(a).all():
            check_action(action, self.spec, self.num_envs)  # raises, saying what is wrong
        low, high = self.spec.action.low, self.spec.action.high
        a = a.astype(np.float64)
        return a if low is None and high is None else np.clip(a, low, high)

    def step(self, action: torch.Tensor) -> StepResult:
        """Apply ``action [N, A]`` in every world; same-step auto-reset (see ``robot_rl/core/env.py``).

        An episode that succeeds on its last allowed step counts as terminated, not truncated.
        """
        a = self._host_action(action) if self._host else check_action(action.to(self.device), self.spec,
                                                                       self.num_envs)
        self.backend.step(self.controller(a, self._r))
        r = self._r = self.backend.task_readout()
        dense, success = self.cfg.evaluate(self.ix, r)
        reward = as_float32(dense) if self.cfg.reward == "dense" else as_float32(success) - 1.0
        terminated = success if self.cfg.terminate_on_success else namespace(success).zeros_like(success)
        ep_ret, ep_len = self._counters
        ep_ret += reward
        ep_len += 1
        truncated = (ep_len >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        # Observations are new arrays: the backend's readout is overwritten by the next reset/step.
        final_obs = self._observe(r)
        ep_return = ep_ret * done
        ep_length = ep_len * done
        ended = np.flatnonzero(to_numpy(done))
        obs = final_obs
        if len(ended):
            qpos, mocap = self.cfg.sample_start(self.ix, self.generator, len(ended), self.device)
            self.backend.set_start(ended, qpos, mocap)
            self._r = self.backend.task_readout()
            fill_where_(ep_ret, done, 0.0)
            fill_where_(ep_len, done, 0)
            obs = self._next_obs(final_obs, ended)
        dev = self.device
        info = {"final_obs": final_obs, "success": to_torch(success, dev), "episode_return": to_torch(ep_return, dev),
                "episode_length": to_torch(ep_length, dev)}
        return StepResult(obs, to_torch(reward, dev), to_torch(terminated, dev), to_torch(truncated, dev), info)

    def _next_obs(self, final_obs: dict[str, torch.Tensor], ended: np.ndarray) -> dict[str, torch.Tensor]:
        if self.cfg.obs == "state":
            return self._observe(self._r)
        # Only reset worlds changed: re-render just those rows.
        rows = torch.from_numpy(ended).to(self.device)
        obs = {}
        for key, fresh in self._images(self._r, ended).items():
            obs[key] = final_obs[key].clone()
            obs[key][rows] = fresh
        obs["state"] = self._state(self._r)
        return obs

    def render(self) -> torch.Tensor:
        """RGB frame of world 0 from the ``front`` camera, uint8 ``[240, 320, 3]``."""
        if self._video is None:
            choose_gl(self.device.type)
            self._video = CameraRenderer(self.model, "front", 240, 320)
        r = self.readout
        frame = self._video.render(r.qpos[:1].detach().cpu().double().numpy(),
                                   r.mocap_pos[:1].detach().cpu().double().numpy())
        return torch.from_numpy(frame[0]).to(self.device)

    def close(self) -> None:
        """Stop worker threads and free OpenGL contexts."""
        self.backend.close()
        for renderer in (*self._cameras.values(), self._video):
            if renderer is not None:
                renderer.close()
        self._cameras, self._video = {}, None

    # ---- domain randomisation and state -----------------------------------------------------

    @staticmethod
    def param_names() -> tuple[str, ...]:
        """Names accepted by :meth:`set_params` (``body_mass``, ``geom_friction``, ...; see params.py)."""
        return PARAM_NAMES

    def param_labels(self, name: str) -> list[str]:
        """Element names along the first per-world axis of parameter ``name`` (e.g. body names)."""
        return param_labels(self.model, name)

    def get_params(self) -> dict[str, torch.Tensor]:
        """Current parameters, ``{name: float64 [N, ...]}`` (copies, on the CPU)."""
        return self.backend.get_params()  # type: ignore[no-any-return]

    def set_params(self, name: str, values: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        """Set ``name`` in worlds ``env_ids`` (``None``: all) to ``values [len(env_ids), ...]``.

        Takes effect from the next physics step; nothing else in the model changes.
        """
        self.backend.set_params(name, values, env_ids)

    def get_state(self) -> torch.Tensor:
        """``float64 [N, S]`` physics state of every world (restored exactly by :meth:`set_state`)."""
        return self.backend.get_state()  # type: ignore[no-any-return]

    def set_state(self, state: torch.Tensor) -> None:
        """Load a state from :meth:`get_state` (episode counters are kept)."""
        self.backend.set_state(state)
        self._r = self.backend.task_readout()

