"""Domain randomisation as a :class:`~robot_rl.core.env.VecEnv` wrapper, usable by every backend.

A task gets it with a ``randomize`` section (``SimTaskConfig.randomize``, a
:class:`~robot_rl.sims.base.RandomizeConfig`); its ``make`` then returns :class:`RandomizedVecEnv`::

    task:
      type: mujoco/pick_cube
      randomize:
        params:
          body_mass: {low: 0.8, high: 1.2}                  # scale: nominal × U(0.8, 1.2)
          geom_friction: {low: -0.2, high: 0.2, mode: add}  # add: nominal + U(-0.2, 0.2)
          dof_damping: {low: 0.5, high: 2.0, indices: [0, 1]}
        obs_noise: {state: 0.01}                           # gaussian std per float key
        action_delay: [0, 2]                               # steps, per world per episode
        obs_delay: [0, 1]                                  # latency of the observation, steps

The parameter API (the convention backends implement)
------------------------------------------------------
An env with randomisable parameters has two methods:

- ``get_params() -> dict[str, Tensor]``: every parameter's current values, per world, ``[N, ...]``
  on ``env.device`` (copies, float32);
- ``set_params(name, values)``: set ``name`` for all worlds from ``values`` ``[N, ...]`` (the shape
  ``get_params()[name]`` has). It takes effect from the next ``step``.

Names are ``<entity>_<property>``, with the meaning MuJoCo gives them and the shape after the world
axis ``[N, ...]``: ``body_mass`` ``[nbody]``, ``body_inertia`` ``[nbody, 3]``, ``geom_friction``
``[ngeom, 3]`` (MuJoCo: slide, spin, roll; Isaac Gym's shape friction: ``[nshape]``),
``dof_damping`` / ``dof_stiffness`` / ``dof_friction`` / ``dof_armature`` ``[ndof]``,
``actuator_gain`` ``[nu]`` (gain of the action → force/target map), ``gravity`` ``[3]``. Where the
renderer allows, camera and light parameters follow the same rule: ``camera_pos`` ``[ncam, 3]``,
``camera_quat`` ``[ncam, 4]``, ``camera_fovy`` ``[ncam]``, ``light_pos`` ``[nlight, 3]``,
``light_diffuse`` ``[nlight, 3]``, ``light_ambient`` ``[nlight, 3]``. A backend exposes what it can
and may add its own (the built-in ``reach``: ``link_length`` ``[2]``, ``action_scale``, ``joint_step``).

A backend whose *observation* depends on a parameter (``reach``'s link lengths move the end-effector)
also has ``observe() -> dict[str, Tensor]``, the current observation of all worlds; the wrapper uses
it to refresh the first observation of an episode whose parameters it just changed.

Semantics
---------
- Parameters are sampled for all worlds at ``reset()``, and for a world whose episode ended inside
  ``step`` (same-step auto-reset) right after that step, so each episode runs with one sample from
  its first action on. Random numbers are drawn for every world every time and kept only where an
  episode starts, so the samples depend on the seed alone, never on which episodes ended.
- Observation noise ``N(0, std²)`` is added to the observation and to ``info["final_obs"]`` (rows that
  did not end keep ``final_obs == obs``).
- Action delay ``k``: the simulator applies the action the policy gave ``k`` steps earlier; at an
  episode start the history is filled with the episode's first action.
- Observation delay (latency) ``m``: the policy sees the observation from ``m`` steps earlier (the
  episode's first observation until ``m`` steps have passed); ``final_obs`` is delayed alike, so the
  learner bootstraps from what the policy would have seen.
- :meth:`RandomizedVecEnv.pop_summary` gives the mean/min/max of the values sampled since the last
  call (for TensorBoard via ``RunLog.scalars``); the ranges themselves are in the run's config.yaml.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

import torch

from robot_rl.core.config import ConfigError
from robot_rl.core.env import StepResult, VecEnv, VecEnvWrapper, check_action, observable
from robot_rl.sims.base import ParamRange, RandomizeConfig

__all__ = ["RandomizableEnv", "RandomizedVecEnv", "pop_summaries"]

#: Offset between the env's seed and the randomisation stream (so the two never coincide).
SEED_OFFSET = 7919


@runtime_checkable
class RandomizableEnv(Protocol):
    """An env that exposes simulator parameters per world (see the module docstring)."""

    def get_params(self) -> dict[str, torch.Tensor]:
        """Every parameter's current values, ``[N, ...]`` per name."""
        ...

    def set_params(self, name: str, values: torch.Tensor) -> None:
        """Set parameter ``name`` of all worlds to ``values`` ``[N, ...]``."""
        ...


class RandomizedVecEnv(VecEnvWrapper):
    """``env`` with its parameters resampled per episode, noisy and/or delayed observations and actions."""

    def __init__(self, env: VecEnv, cfg: RandomizeConfig, seed: int) -> None:
        super().__init__(env)
        self.cfg = cfg
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed) + SEED_OFFSET)
        self.nominal: dict[str, torch.Tensor] = {}
        self._element_mask: dict[str, torch.Tensor] = {}
        if cfg.params:
            if not isinstance(env, RandomizableEnv):
                raise ConfigError(f"{type(env).__name__} exposes no parameters (get_params/set_params), so "
                                  "randomize.params cannot be used with it; obs_noise and the delays still can")
            current = env.get_params()
            for name, rng in cfg.params.items():
                if name not in current:
                    raise ConfigError(f"randomize.params: {type(env).__name__} has no parameter {name!r}; "
                                      f"it has: {', '.join(sorted(current))}")
                self.nominal[name] = current[name].to(self.device, torch.float32).clone()
                self._element_mask[name] = self._elements(name, rng)
        for key in cfg.obs_noise:
            obs_spec = env.spec.observation.get(key)
            if obs_spec is None or not obs_spec.dtype.startswith("float"):
                floats = [k for k, s in env.spec.observation.items() if s.dtype.startswith("float")]
                raise ConfigError(f"randomize.obs_noise: {key!r} is not a float observation key; "
                                  f"float keys: {', '.join(floats) or '(none)'}")
        self.values = {name: v.clone() for name, v in self.nominal.items()}
        n = self.num_envs
        self.action_delay = torch.zeros(n, dtype=torch.long, device=self.device)
        self.obs_delay = torch.zeros(n, dtype=torch.long, device=self.device)
        self._rows = torch.arange(n, device=self.device)
        self._action_hist: torch.Tensor | None = None
        self._obs_hist: dict[str, torch.Tensor] = {}
        self._episode_start = torch.ones(n, dtype=torch.bool, device=self.device)
        self._stats: dict[str, torch.Tensor] = {}
        # The actor's thread records while the learner's logging pops (a run's twin refit read the dict as it grew).
        self._stats_lock = threading.Lock()

    def _elements(self, name: str, rng: ParamRange) -> torch.Tensor:
        """Bool mask over one world's elements of ``name`` that ``rng.indices`` selects (all if None)."""
        shape = self.nominal[name].shape[1:]
        mask = torch.ones(shape, dtype=torch.bool, device=self.device)
        if rng.indices is not None:
            if not shape:
                raise ConfigError(f"randomize.params.{name}: a scalar per world has no indices")
            bad = [i for i in rng.indices if not 0 <= i < shape[0]]
            if bad:
                raise ConfigError(f"randomize.params.{name}: indices {bad} out of range [0, {shape[0]})")
            mask = torch.zeros(shape, dtype=torch.bool, device=self.device)
            mask[rng.indices] = True
        return mask

    # ---- sampling -----------------------------------------------------------------------------

    def retarget(self, cfg: RandomizeConfig) -> None:
        """New ranges (a refitted twin), taken by each world at its next episode start.

        The parameters and their elements must be the ones randomised already (their nominal values were read
        at construction), and the observation's delay and noise stay as they are.
        """
        old = {k: r.indices for k, r in self.cfg.params.items()}
        new = {k: r.indices for k, r in cfg.params.items()}
        if old != new or cfg.obs_delay != self.cfg.obs_delay or cfg.obs_noise != self.cfg.obs_noise:
            raise ConfigError(f"retarget changes what is randomised ({sorted(old)} -> {sorted(new)}, or the "
                              "observation delay or noise): only the ranges may change during a run")
        self.cfg = cfg
        self.action_delay = self.action_delay.clamp(max=cfg.action_delay[1])  # the history is cut to the new depth

    def _uniform(self, low: float, high: float, shape: tuple[int, ...]) -> torch.Tensor:
        return low + (high - low) * torch.rand(shape, generator=self.generator, device=self.device)

    def _randint(self, bounds: tuple[int, int]) -> torch.Tensor:
        lo, hi = bounds
        return torch.randint(lo, hi + 1, (self.num_envs,), generator=self.generator, device=self.device)

    def _resample(self, start: torch.Tensor) -> None:
        """New parameters and delays for the worlds where ``start`` ``[N]`` is True."""
        for name, rng in self.cfg.params.items():
            nominal = self.nominal[name]
            u = self._uniform(rng.low, rng.high, tuple(nominal.shape))
            sample = nominal * u if rng.mode == "scale" else nominal + u
            where = start.view(-1, *([1] * (nominal.dim() - 1))) & self._element_mask[name]
            self.values[name] = torch.where(where, sample, self.values[name])
            assert isinstance(self.env, RandomizableEnv)
            self.env.set_params(name, self.values[name].clone())
            self._record(name, self.values[name], where)
        self.action_delay = torch.where(start, self._randint(self.cfg.action_delay), self.action_delay)
        self.obs_delay = torch.where(start, self._randint(self.cfg.obs_delay), self.obs_delay)

    def _record(self, name: str, values: torch.Tensor, where: torch.Tensor) -> None:
        # Device-side sums (no host sync per step); pop_summary reads them back.
        inf = torch.full_like(values, float("inf"))
        stats = torch.stack([(values * where).sum(), where.sum().to(values.dtype),
                             torch.where(where, values, inf).min(), torch.where(where, values, -inf).max()])
        with self._stats_lock:
            prev = self._stats.get(name)
            if prev is not None:
                stats = torch.stack([prev[0] + stats[0], prev[1] + stats[1], torch.minimum(prev[2], stats[2]),
                                     torch.maximum(prev[3], stats[3])])
            self._stats[name] = stats

    def pop_summary(self) -> dict[str, float]:
        """``{name/mean, name/min, name/max}`` of the values sampled since the last call, and ``episodes``.

        ``episodes`` counts the worlds that got new parameters (episode starts) in that time.
        """
        out: dict[str, float] = {}
        with self._stats_lock:
            taken, self._stats = self._stats, {}
        for name, stats in taken.items():
            s, count, lo, hi = stats.tolist()
            elements = max(int(self._element_mask[name].sum()), 1)
            if count > 0:
                out.update({f"{name}/mean": s / count, f"{name}/min": lo, f"{name}/max": hi})
                out["episodes"] = count / elements
        return out

    # ---- VecEnv -------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Resample every world (reseeding the randomisation stream with ``seed``), then reset the env."""
        if seed is not None:
            self.generator.manual_seed(int(seed) + SEED_OFFSET)
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._resample(everyone)
        obs = self.env.reset(seed)
        self._episode_start = everyone
        self._action_hist = None
        self._obs_hist = {k: v.unsqueeze(0).repeat(self._obs_depth(), *([1] * v.dim())) for k, v in obs.items()}
        return self._noisy(obs)

    def _obs_depth(self) -> int:
        return self.cfg.obs_delay[1] + 1

    def step(self, action: torch.Tensor) -> StepResult:
        """Delay the action, step, resample the worlds whose episode ended, delay and noise the observation."""
        action = check_action(action.to(self.device), self.spec, self.num_envs)
        applied = self._delay_action(action)
        res = self.env.step(applied)
        done = res.terminated | res.truncated
        obs, final_obs = res.obs, res.info["final_obs"]
        obs_delay = self.obs_delay  # the finished episodes' latency, before they are resampled
        if bool(done.any()):
            self._resample(done)
            source = observable(self.env) if self.cfg.params else None
            if source is not None:
                fresh = source.observe()
                obs = {k: _where_rows(done, fresh[k], v) for k, v in obs.items()}
        self._episode_start = done
        obs, final_obs = self._delay_obs(obs, final_obs, done, obs_delay)
        noisy_obs = self._noisy(obs)
        noisy_final = self._noisy(final_obs)
        # Rows that did not end must keep final_obs == obs (one noise draw, not two).
        noisy_final = {k: _where_rows(done, v, noisy_obs[k]) for k, v in noisy_final.items()}
        info = dict(res.info)
        info["final_obs"] = noisy_final
        return StepResult(noisy_obs, res.reward, res.terminated, res.truncated, info)

    def _delay_action(self, action: torch.Tensor) -> torch.Tensor:
        depth = self.cfg.action_delay[1] + 1
        if depth == 1:
            return action
        if self._action_hist is None:
            self._action_hist = action.unsqueeze(0).repeat(depth, *([1] * action.dim()))
        elif self._action_hist.shape[0] != depth:  # retargeted: keep the newest, repeat the oldest to deepen
            kept = self._action_hist[:depth]
            self._action_hist = torch.cat([kept, kept[-1:].expand(depth - kept.shape[0], *kept.shape[1:])])
        hist = torch.cat([action.unsqueeze(0), self._action_hist[:-1]])
        fill = action.unsqueeze(0).expand_as(hist)
        hist = torch.where(self._episode_start.view(1, -1, *([1] * (action.dim() - 1))), fill, hist)
        self._action_hist = hist
        return hist[self.action_delay, self._rows]

    def _delay_obs(self, obs: dict[str, torch.Tensor], final_obs: dict[str, torch.Tensor], done: torch.Tensor,
                   delay: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        if self._obs_depth() == 1:
            return obs, final_obs
        out_obs, out_final = {}, {}
        for key, hist in self._obs_hist.items():
            # The finished (or continuing) episode's newest observation enters the history first.
            hist = torch.cat([final_obs[key].unsqueeze(0), hist[:-1]])
            delayed_final = hist[delay, self._rows]
            start = done.view(1, -1, *([1] * (obs[key].dim() - 1)))
            hist = torch.where(start, obs[key].unsqueeze(0).expand_as(hist), hist)
            self._obs_hist[key] = hist
            out_final[key] = delayed_final
            out_obs[key] = _where_rows(done, obs[key], delayed_final)
        return out_obs, out_final

    def observation(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``obs`` with this wrapper's noise, not its delay.

        An observation asked for outside ``step`` (a restored demo state) starts an episode, and an episode's first
        observation is never delayed.
        """
        return self._noisy(obs)

    def _noisy(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = dict(obs)
        for key, std in self.cfg.obs_noise.items():
            if std > 0:
                x = obs[key]
                out[key] = x + std * torch.randn(x.shape, generator=self.generator, device=self.device,
                                                 dtype=x.dtype)
        return out

    def get_params(self) -> dict[str, torch.Tensor]:
        """The wrapped env's parameters (so that wrappers can be stacked and tests can read them)."""
        if not isinstance(self.env, RandomizableEnv):
            raise AttributeError(f"{type(self.env).__name__} exposes no parameters")
        return self.env.get_params()

    def set_params(self, name: str, values: torch.Tensor) -> None:
        """Set a parameter of the wrapped env (it is resampled again at that world's next episode)."""
        if not isinstance(self.env, RandomizableEnv):
            raise AttributeError(f"{type(self.env).__name__} exposes no parameters")
        self.env.set_params(name, values)


def _where_rows(rows: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row ``i`` of ``a`` where ``rows[i]``, else of ``b``."""
    return torch.where(rows.view(-1, *([1] * (a.dim() - 1))), a, b)


def pop_summaries(envs: Iterable[VecEnv]) -> dict[str, float]:
    """Merge :meth:`RandomizedVecEnv.pop_summary` over the randomised ones of ``envs`` (for logging).

    The runner logs it with ``runlog.scalars(pop_summaries(envs), env_steps, prefix="randomize/")``.
    """
    merged: dict[str, float] = {}
    weight: dict[str, float] = {}
    for env in envs:
        if not isinstance(env, RandomizedVecEnv):
            continue
        summary = env.pop_summary()
        n = summary.get("episodes", 0.0)
        for key, value in summary.items():
            if key.endswith("/min"):
                merged[key] = min(merged.get(key, value), value)
            elif key.endswith("/max"):
                merged[key] = max(merged.get(key, value), value)
            elif key.endswith("/mean"):
                total = weight.get(key, 0.0) + n
                merged[key] = (merged.get(key, 0.0) * weight.get(key, 0.0) + value * n) / max(total, 1e-12)
                weight[key] = total
            else:
                merged[key] = merged.get(key, 0.0) + value
    return merged
