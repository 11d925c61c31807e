"""``MujocoVecEnv``: N MuJoCo arm worlds behind the :class:`~robot_rl.envs.VecEnv` contract.

One step: validate the action (NaN rejected before clamping), turn it into servo targets
(``controller.py``), hold them for ``frame_skip`` physics steps in every world (a backend: CPU
thread pool or MJX), score the new state (the task config's ``evaluate``), and reset finished
worlds in the same call (the auto-reset of ``robot_rl/envs.py``).

Start states are drawn from one ``torch.Generator``, only for the worlds whose episode ended, in
world order (a step where nothing ended draws nothing and costs nothing): the same seed gives the
same trajectories, and two backends that end the same episodes draw the same start states.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from robot_rl.config import TASKS
from robot_rl.envs import StepResult, VecEnv, check_action
from robot_rl.sims.mujoco.controller import ArmController, action_dim, index_or_slice
from robot_rl.sims.mujoco.params import PARAM_NAMES, param_labels
from robot_rl.sims.mujoco.readout import Readout
from robot_rl.sims.mujoco.render import CameraRenderer, choose_gl
from robot_rl.sims.mujoco.scene import FINGER_MAX, build_model
from robot_rl.sims.mujoco.tasks import MujocoTaskConfig
from robot_rl.specs import ArraySpec, EnvSpec

#: Length of the arm's own part of ``state``: joint angles (6), joint velocities / 10 (6), finger
#: opening / 8 cm (1), grip-site position (3).
ARM_STATE_DIM = 16


def import_mujoco() -> Any:
    """``import mujoco``, or an ImportError that names the extra that brings it."""
    try:
        import mujoco
    except ImportError:
        raise ImportError("the mujoco/* tasks need MuJoCo: pip install 'robot-rl[mujoco]'") from None
    return mujoco


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
        import_mujoco()
        model, ix = build_model(cfg.objects, cfg.timestep)
        self.model, self.ix = model, ix
        self.backend: Any
        if cfg.backend == "cpu":
            from robot_rl.sims.mujoco.cpu_backend import CpuBackend

            self.backend = CpuBackend(model, ix, self.num_envs, cfg.frame_skip, cfg.num_threads, self.device)
        elif cfg.backend == "mjx":
            from robot_rl.sims.mujoco.mjx_backend import MjxBackend

            self.backend = MjxBackend(model, ix, self.num_envs, cfg.frame_skip, self.device)
        else:
            raise ValueError(f"backend {cfg.backend!r} is not one of 'cpu', 'mjx'")
        self.controller = ArmController(cfg, ix, self.device)
        self._arm_q = index_or_slice(ix.arm_qpos, self.device)
        self._arm_v = index_or_slice(ix.arm_dof, self.device)
        self._fingers = index_or_slice(ix.finger_qpos, self.device)
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
        self.episode_return = torch.zeros(self.num_envs, device=self.device)
        self.episode_length = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self.readout: Readout
        self.reset(seed=self.seed)

    # ---- observations -----------------------------------------------------------------------

    def _arm_state(self, r: Readout) -> torch.Tensor:
        opening = r.qpos[:, self._fingers].sum(-1, keepdim=True).mul_(1 / (2 * FINGER_MAX))
        return torch.cat([r.qpos[:, self._arm_q], r.qvel[:, self._arm_v] * 0.1, opening,
                          r.site_pos[:, self._grip]], dim=-1)

    def _images(self, r: Readout, rows: np.ndarray | None = None) -> dict[str, torch.Tensor]:
        ids = np.arange(self.num_envs) if rows is None else rows
        return {key: torch.from_numpy(self.backend.images(cam, ids, r)).to(self.device)
                for key, cam in self._cameras.items()}

    def _state(self, r: Readout) -> torch.Tensor:
        arm = self._arm_state(r)
        if self.cfg.obs == "pixels":
            return arm
        return torch.cat([arm, self.cfg.task_obs(self.ix, r)], dim=-1)

    def _observe(self, r: Readout) -> dict[str, torch.Tensor]:
        if self.cfg.obs == "state":
            return {"state": self._state(r)}
        return {**self._images(r), "state": self._state(r)}

    # ---- VecEnv -----------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Reset every world (reseeding the start-state generator if ``seed`` is given)."""
        if seed is not None:
            self.generator.manual_seed(int(seed))
        qpos, mocap = self.cfg.sample_start(self.ix, self.generator, self.num_envs, self.device)
        self.backend.set_start(np.arange(self.num_envs), qpos, mocap)
        self.readout = self.backend.readout()
        self.episode_return.zero_()
        self.episode_length.zero_()
        return self._observe(self.readout)

    def step(self, action: torch.Tensor) -> StepResult:
        """Apply ``action [N, A]`` in every world; same-step auto-reset (see ``robot_rl/envs.py``).

        An episode that succeeds on its last allowed step counts as terminated, not truncated.
        """
        action = check_action(action.to(self.device), self.spec, self.num_envs)
        self.backend.step(self.controller(action, self.readout))
        r = self.readout = self.backend.readout()
        dense, success = self.cfg.evaluate(self.ix, r)
        reward = dense.float() if self.cfg.reward == "dense" else success.float() - 1.0
        terminated = success if self.cfg.terminate_on_success else torch.zeros_like(success)
        self.episode_return += reward
        self.episode_length += 1
        truncated = (self.episode_length >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        # Observations are new tensors: the CPU backend's readout is overwritten by the next reset/step.
        final_obs = self._observe(r)
        ep_return = self.episode_return * done
        ep_length = self.episode_length * done
        ended = np.flatnonzero(done.cpu().numpy())
        obs = final_obs
        if len(ended):
            qpos, mocap = self.cfg.sample_start(self.ix, self.generator, len(ended), self.device)
            self.backend.set_start(ended, qpos, mocap)
            self.readout = self.backend.readout()
            self.episode_return.masked_fill_(done, 0.0)
            self.episode_length.masked_fill_(done, 0)
            obs = self._next_obs(final_obs, ended)
        info = {"final_obs": final_obs, "success": success, "episode_return": ep_return,
                "episode_length": ep_length}
        return StepResult(obs, reward, terminated, truncated, info)

    def _next_obs(self, final_obs: dict[str, torch.Tensor], ended: np.ndarray) -> dict[str, torch.Tensor]:
        if self.cfg.obs == "state":
            return self._observe(self.readout)
        # Only reset worlds changed: re-render just those rows.
        rows = torch.from_numpy(ended).to(self.device)
        obs = {}
        for key, fresh in self._images(self.readout, ended).items():
            obs[key] = final_obs[key].clone()
            obs[key][rows] = fresh
        obs["state"] = self._state(self.readout)
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
        self.readout = self.backend.readout()

