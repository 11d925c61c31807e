"""The base of simulated tasks: domain randomisation (``task.randomize``) for every backend.

A task config deriving from :class:`SimTaskConfig` that has a ``randomize`` section comes back inside
:class:`robot_rl.sims.randomize.RandomizedVecEnv` from its ``make``, so domain randomisation works for every
backend without each ``make`` or each caller remembering it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from robot_rl.core.config import ConfigError, TaskConfig

if TYPE_CHECKING:
    import torch

    from robot_rl.core.env import VecEnv


@dataclass
class ParamRange:
    """How one simulator parameter is randomised: a uniform sample per world, drawn at each reset."""

    low: float = 1.0
    """Lower end of the uniform range."""
    high: float = 1.0
    """Upper end of the uniform range."""
    mode: Literal["scale", "add"] = "scale"
    """``scale``: nominal × U(low, high); ``add``: nominal + U(low, high)."""
    indices: list[int] | None = None
    """Only these elements of the parameter's first per-world axis (e.g. bodies 2 and 3); null = all."""

    def __post_init__(self) -> None:
        if not self.low <= self.high:
            raise ConfigError(f"randomize range needs low <= high, got low={self.low}, high={self.high}")


@dataclass
class RandomizeConfig:
    """Domain randomisation of a task (``task.randomize``; see robot_rl/sims/randomize.py)."""

    params: dict[str, ParamRange] = field(default_factory=dict)
    """Simulator parameters by name (``body_mass``, ``geom_friction``, ``dof_damping``, ``actuator_gain``,
    ...; the env's ``get_params()`` lists them), each resampled per world at every episode start."""
    obs_noise: dict[str, float] = field(default_factory=dict)
    """Gaussian noise std per float observation key, e.g. ``{state: 0.01}``."""
    action_delay: tuple[int, int] = (0, 0)
    """Steps the applied action lags the policy's, uniform in [min, max] per world per episode."""
    obs_delay: tuple[int, int] = (0, 0)
    """Latency: steps the policy's observation lags the simulator, uniform in [min, max] per world per episode."""

    def __post_init__(self) -> None:
        for name, (lo, hi) in (("action_delay", self.action_delay), ("obs_delay", self.obs_delay)):
            if not 0 <= lo <= hi:
                raise ConfigError(f"randomize.{name} needs 0 <= min <= max, got [{lo}, {hi}]")
        for key, std in self.obs_noise.items():
            if not std >= 0:
                raise ConfigError(f"randomize.obs_noise.{key} must be >= 0, got {std}")

    def active(self) -> bool:
        """Whether anything is randomised at all."""
        return bool(self.params or any(self.obs_noise.values()) or max(self.action_delay) > 0
                    or max(self.obs_delay) > 0)


@dataclass
class SimTaskConfig(TaskConfig):
    """Base for simulated task configs: a :class:`TaskConfig` with domain randomisation.

    ``make`` of every subclass is wrapped (in ``__init_subclass__``) so that a task with a ``randomize``
    section comes back inside :class:`robot_rl.sims.randomize.RandomizedVecEnv`.
    """

    randomize: RandomizeConfig | None = None
    """Domain randomisation (parameters, observation noise, action/observation delay); null = none."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        make = cls.__dict__.get("make")
        if make is not None:
            setattr(cls, "make", _with_randomization(make))  # noqa: B010 - mypy forbids assigning a method


def _with_randomization(make: Any) -> Any:
    @functools.wraps(make)
    def make_randomized(self: SimTaskConfig, device: torch.device | str, seed: int,
                        num_envs: int | None = None) -> VecEnv:
        env = make(self, device, seed, num_envs)
        if self.randomize is None or not self.randomize.active():
            return env
        from robot_rl.sims.randomize import RandomizedVecEnv

        # A subclass whose make calls super().make() gets the already wrapped env back: wrap once.
        return env if isinstance(env, RandomizedVecEnv) else RandomizedVecEnv(env, self.randomize, seed)

    return make_randomized
