"""What a twin fit estimates: scale factors on simulator parameters, and an action delay in steps.

A fitted parameter is written ``NAME`` or ``NAME:ELEMENTS``:

- ``NAME`` is a parameter of the env's parameter API (``env.get_params()``: on the MuJoCo tasks
  ``body_mass``, ``geom_friction``, ``dof_damping``, ``actuator_gain``), or ``action_delay``;
- ``ELEMENTS`` picks elements along the parameter's first per-world axis by label
  (``env.param_labels(NAME)``: ``j1``, ``link3``, ``cube``, ...) or index, joined by ``+``
  (``dof_damping:j1+j2+j3``). Without it every element is scaled together.

A simulator parameter is fitted as one factor ``s`` on its nominal value (``value = s · nominal`` for the
chosen elements), the ``mode: scale`` of a domain-randomisation range (:class:`~robot_rl.sims.base.ParamRange`),
so a fit maps one to one onto a ``task.randomize`` section. ``action_delay`` is the number of control
steps the applied action lags the logged one (``randomize.action_delay``). Each name appears at most
once: a ``task.randomize`` section holds one range per parameter.

CMA-ES searches a normalised box ``u ∈ [0, 1]``: a factor is ``s = low · (high / low) ** u`` (log scale,
so halving and doubling are equally far from 1), the delay ``d = round(u · max_delay)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from robot_rl.core.config import ConfigError

#: The name of the fitted control delay (steps), as ``task.randomize.action_delay`` calls it.
DELAY = "action_delay"


@dataclass(frozen=True)
class FitParam:
    """One fitted quantity: a scale factor on (some elements of) a simulator parameter, or the delay."""

    name: str
    """Parameter API name (``dof_damping``, ...) or ``action_delay``."""
    indices: tuple[int, ...] | None
    """Elements along the first per-world axis (``None``: all of them)."""
    labels: tuple[str, ...]
    """The elements' labels (``env.param_labels``), for reports; empty for all elements and the delay."""
    low: float
    """Lower bound: of the factor, or of the delay (steps)."""
    high: float
    """Upper bound."""

    @property
    def key(self) -> str:
        """How the command line writes it: ``NAME`` or ``NAME:label+label``."""
        return self.name if not self.labels else f"{self.name}:{'+'.join(self.labels)}"

    @property
    def is_delay(self) -> bool:
        """Whether this is the action delay (an integer number of steps) rather than a factor."""
        return self.name == DELAY

    @property
    def neutral(self) -> float:
        """The value of the uncalibrated simulator: factor 1, delay 0."""
        return 0.0 if self.is_delay else 1.0

    def from_unit(self, u: float) -> float:
        """The parameter value at normalised coordinate ``u`` (clipped to [0, 1])."""
        u = min(max(float(u), 0.0), 1.0)
        if self.is_delay:
            return float(round(self.low + u * (self.high - self.low)))
        return float(self.low * (self.high / self.low) ** u)

    def to_unit(self, value: float) -> float:
        """Inverse of :meth:`from_unit` (clipped to [0, 1])."""
        if self.is_delay:
            u = (value - self.low) / (self.high - self.low) if self.high > self.low else 0.0
        else:
            u = math.log(value / self.low) / math.log(self.high / self.low)
        return min(max(u, 0.0), 1.0)


def values_from_unit(params: Sequence[FitParam], unit: np.ndarray) -> np.ndarray:
    """Parameter values ``[K, P]`` of normalised points ``unit`` ``[K, P]``."""
    unit = np.atleast_2d(unit)
    return np.array([[p.from_unit(u) for p, u in zip(params, row)] for row in unit], dtype=np.float64)


def parse_params(spec: str | Sequence[str], names: Sequence[str], labels_of: Callable[[str], list[str]],
                 scale_range: tuple[float, float] = (0.2, 5.0), max_delay: int = 3) -> list[FitParam]:
    """Turn ``"dof_damping,actuator_gain:j1+j2,action_delay"`` into :class:`FitParam` s.

    ``names`` are the env's parameter names, ``labels_of(name)`` its element labels. Raises
    :class:`~robot_rl.core.config.ConfigError` naming what is wrong and what is valid.
    """
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if not items:
        raise ConfigError("no parameters to fit: give --params, e.g. actuator_gain,dof_damping,action_delay")
    lo, hi = scale_range
    if not 0 < lo < 1 < hi:
        raise ConfigError(f"scale range needs 0 < low < 1 < high (1 is the uncalibrated sim), got [{lo}, {hi}]")
    if max_delay < 0:
        raise ConfigError(f"max_delay must be >= 0, got {max_delay}")
    out: list[FitParam] = []
    for item in items:
        name, _, elements = item.partition(":")
        if any(p.name == name for p in out):
            raise ConfigError(f"--params names {name!r} twice; a task.randomize section holds one range per "
                              "parameter, so group its elements in one entry (e.g. dof_damping:j1+j2)")
        if name == DELAY:
            if elements:
                raise ConfigError(f"{DELAY} has no elements (got {item!r})")
            out.append(FitParam(DELAY, None, (), 0.0, float(max_delay)))
            continue
        if name not in names:
            raise ConfigError(f"unknown parameter {name!r}; the task has: {', '.join([*names, DELAY])}")
        indices, labels = _elements(name, elements, labels_of(name)) if elements else (None, ())
        out.append(FitParam(name, indices, labels, float(lo), float(hi)))
    return out


def _elements(name: str, text: str, labels: list[str]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    indices: list[int] = []
    for part in text.split("+"):
        part = part.strip()
        if part in labels:
            indices.append(labels.index(part))
        elif part.isdigit() and int(part) < len(labels):
            indices.append(int(part))
        else:
            raise ConfigError(f"{name} has no element {part!r}; its elements: {', '.join(labels)} "
                              f"(or indices 0..{len(labels) - 1})")
    if len(set(indices)) != len(indices):
        raise ConfigError(f"{name}:{text} names an element twice")
    return tuple(indices), tuple(labels[i] for i in indices)
