"""Open-loop replay of logged actions in the MuJoCo simulator, for many parameter candidates at once.

:class:`Replayer` holds one CPU-backend ``MujocoVecEnv`` whose worlds are ``candidates × episodes``: world
``c · E + e`` replays episode ``e`` under candidate ``c``. Each candidate's parameters are written per world
through the env's ``set_params(name, values, env_ids)`` (the parameter API of
:mod:`robot_rl.sims.randomize`), every world starts from its episode's logged first state
(:mod:`robot_rl.twin.start`), and all worlds step together, so a CMA-ES population costs one batched
rollout instead of one rollout per candidate.

The action delay ``d`` of a candidate shifts its actions: the world applies logged action
``max(t − d, 0)`` at step ``t`` — what ``task.randomize.action_delay`` does (the history starts filled
with the episode's first action).

The error of a replay is the mean over steps ``t = 1 … T_e`` and state dimensions ``i`` of
``((ŝ_t,i − s_t,i) / σ_i)²``, where ``σ_i`` is the spread of dimension ``i`` over all logged frames
(floored at 1e-3, so constant dimensions do not divide by zero): every number in the state counts in its
own units.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from robot_rl.sims.mujoco.tasks import MujocoTaskConfig
from robot_rl.twin.logs import Logs
from robot_rl.twin.params import FitParam
from robot_rl.twin.start import load_start, start_state

if TYPE_CHECKING:
    from robot_rl.sims.mujoco.env import MujocoVecEnv

#: Floor of the per-dimension scale σ_i of the error.
SIGMA_FLOOR = 1e-3


def control_hz(cfg: MujocoTaskConfig) -> float:
    """The task's control rate: one step is ``frame_skip · timestep`` seconds."""
    return 1.0 / (cfg.frame_skip * cfg.timestep)


def replay_config(cfg: MujocoTaskConfig, steps: int) -> MujocoTaskConfig:
    """``cfg`` for replays: CPU backend, state observations, no randomisation, no episode end before ``steps``."""
    return dataclasses.replace(cfg, backend="cpu", obs="state", extra_cameras=(), randomize=None,
                               terminate_on_success=False, max_episode_steps=steps + 1)


class Replayer:
    """Replays ``logs`` under parameter candidates (module docstring).

    ``batch_candidates`` candidates share one env (``batch_candidates × E`` worlds); more are done in
    chunks, and a shorter chunk gets an env of its own size. ``num_threads`` is the env's worker count
    (0: one per core).
    """

    def __init__(self, cfg: MujocoTaskConfig, logs: Logs, params: Sequence[FitParam], batch_candidates: int = 8,
                 num_threads: int = 0) -> None:
        self.logs = logs
        self.params = list(params)
        self.num_episodes = logs.num_episodes
        self.steps = int(logs.lengths.max())
        self.batch_candidates = max(1, int(batch_candidates))
        self.cfg = replay_config(dataclasses.replace(cfg, num_threads=num_threads), self.steps)
        self._envs: dict[int, MujocoVecEnv] = {}
        env = self._env(self.batch_candidates)
        self.nominal = {p.name: env.get_params()[p.name][0].clone() for p in self.params if not p.is_delay}
        self.starts = start_state(self.cfg, env, logs.states[:, 0], env.get_state()[0].numpy())  # [E, S]
        self.sigma = np.maximum(logs.states.reshape(-1, logs.states.shape[-1]).std(axis=0), SIGMA_FLOOR)
        steps = np.arange(self.steps + 1)[None, :]
        self.mask = (steps >= 1) & (steps <= logs.lengths[:, None])  # [E, T + 1]: the rows compared
        self.evaluations = 0

    def _env(self, candidates: int) -> MujocoVecEnv:
        """The env of ``candidates × E`` worlds (built once per size: a short last chunk gets its own)."""
        env = self._envs.get(candidates)
        if env is None:
            env = self._envs[candidates] = self.cfg.make("cpu", 0, num_envs=candidates * self.num_episodes)
        return env

    def close(self) -> None:
        """Stop the envs' worker threads."""
        for env in self._envs.values():
            env.close()
        self._envs.clear()

    # ---- parameters -------------------------------------------------------------------------

    def _set_params(self, env: MujocoVecEnv, values: np.ndarray) -> np.ndarray:
        """Write candidates ``values [C, P]`` into the ``C × E`` worlds of ``env``; their delays ``[C]``."""
        e = self.num_episodes
        delays = np.zeros(len(values), np.int64)
        for j, p in enumerate(self.params):
            if p.is_delay:
                delays = np.rint(values[:, j]).astype(np.int64)
                continue
            nominal = self.nominal[p.name]
            scale = torch.ones((len(values), *nominal.shape), dtype=torch.float64)
            factor = torch.from_numpy(values[:, j]).view(-1, *([1] * nominal.dim()))
            if p.indices is None:
                scale = scale * factor
            else:
                scale[:, list(p.indices)] = factor.expand(-1, len(p.indices), *nominal.shape[1:])
            per_world = (nominal[None] * scale).repeat_interleave(e, dim=0)
            env.set_params(p.name, per_world)
        return delays

    def _actions(self, delays: np.ndarray) -> np.ndarray:
        """Actions ``[T, C·E, A]`` with each candidate's delay applied."""
        t = np.arange(self.steps)
        acts = [self.logs.actions[:, np.maximum(t - d, 0)] for d in delays]  # each [E, T, A]
        return np.ascontiguousarray(np.concatenate(acts).transpose(1, 0, 2)).astype(np.float32)

    # ---- replay -----------------------------------------------------------------------------

    def _rollout(self, values: np.ndarray) -> np.ndarray:
        """Predicted states ``[C·E, T + 1, D]`` for ``C <= batch_candidates`` candidates ``values [C, P]``."""
        c = len(values)
        env = self._env(c)
        env.reset()
        delays = self._set_params(env, values)
        load_start(env, np.tile(self.starts, (c, 1)))
        actions = torch.from_numpy(self._actions(delays))
        out = np.zeros((c * self.num_episodes, self.steps + 1, self.logs.states.shape[-1]))
        out[:, 0] = np.tile(self.logs.states[:, 0], (c, 1))
        for t in range(self.steps):
            out[:, t + 1] = env.step(actions[t]).obs["state"].numpy()
        self.evaluations += c
        return out

    def predict(self, values: np.ndarray) -> np.ndarray:
        """Predicted states ``[K, E, T + 1, D]`` for candidates ``values [K, P]``."""
        values = np.atleast_2d(np.asarray(values, np.float64))
        c, e = self.batch_candidates, self.num_episodes
        chunks = [self._rollout(values[i:i + c]).reshape(-1, e, self.steps + 1, self.logs.states.shape[-1])
                  for i in range(0, len(values), c)]
        return np.concatenate(chunks)

    def residuals(self, values: np.ndarray) -> np.ndarray:
        """Normalised state differences ``(ŝ − s) / σ`` ``[K, E, T + 1, D]``, zero on rows not compared.

        An episode's error (:meth:`errors`) is the sum of its squares divided by ``self.row_counts``.
        """
        pred = self.predict(values)
        return (pred - self.logs.states[None]) / self.sigma * self.mask[None, :, :, None]

    @property
    def row_counts(self) -> np.ndarray:
        """Numbers compared per episode ``[E]``: steps × state dimensions."""
        return self.mask.sum(axis=-1) * self.logs.states.shape[-1]

    def errors(self, values: np.ndarray) -> np.ndarray:
        """Mean squared normalised state error ``[K, E]`` of each candidate on each episode."""
        res = self.residuals(values)
        return (res ** 2).sum(axis=(-1, -2)) / self.row_counts[None]
