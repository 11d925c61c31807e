"""CMA-ES over the normalised parameter box, with restarts and an episode bootstrap for the uncertainty.

The loss of a candidate is the mean over episodes of its replay error (:mod:`robot_rl.twin.rollout`).
:func:`fit` runs ``restarts`` CMA-ES instances in lockstep — their populations are evaluated as one batch of
worlds — the first from the uncalibrated simulator (factors 1, delay 0), the others from random points of
the box; then a few Levenberg–Marquardt steps polish each restart's best point (:mod:`robot_rl.twin.polish`).
The fit is the best polished point.

Uncertainty, per parameter (in its own units: a factor, or steps of delay):

- **restarts**: the standard deviation of the converged restarts' best points (restarts whose loss is
  within ``10 × best + 1e-6 × the uncalibrated loss``: one stuck in another basin, or still sliding down a
  valley, measures the search, not the logs). Where the logs constrain a parameter, every restart
  ends at the same value; where they do not (a mass that never moves, a friction of surfaces that never
  touch), the loss is flat along it and each restart stops wherever its search wandered: a spread the
  size of the box.
- **bootstrap** (``bootstrap > 0``): the standard deviation of refits on episodes resampled with
  replacement, each a few Levenberg–Marquardt steps from the fit: how much the answer depends on which
  episodes happened to be logged (noise, unmodelled effects). The delay is not refitted there.

- **local** (Laplace): how sharply the error rises around the fit. With ``J = ∂r/∂u`` at the fit (unit box),
  ``N`` compared numbers and ``s² = L`` the mean squared normalised error, the information is
  ``F = N·JᵀJ / s²``; a uniform prior over the box (variance 1/12 per coordinate) gives the posterior
  ``Σ_u = (F + 12·I)⁻¹``, turned into the parameter's units by the delta method
  (``std = value · ln(high/low) · sqrt(Σ_u,ii)``). A parameter that changes no replayed state has ``F_ii = 0``
  and keeps the prior's spread: about the whole box, whatever the restarts did. It counts every step as an
  independent measurement, so for informed parameters it is optimistic; the bootstrap is the honest check.

The reported ``std`` is ``sqrt(std_restarts² + std_bootstrap² + std_local²)`` (a term that cannot be estimated,
e.g. the restarts' spread with fewer than two converged restarts, counts as zero); the delay has no local term.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.twin.params import FitParam, values_from_unit
from robot_rl.twin.polish import jacobian, polish
from robot_rl.twin.rollout import Replayer

#: Per-iteration callback ``(stage, done_iterations, total_iterations, best_loss)``.
ProgressFn = Callable[[str, int, int, float], None]


@dataclass
class FitConfig:
    """How hard CMA-ES searches, and how the uncertainty is estimated."""

    population: int = 12
    """Candidates per CMA-ES iteration (per restart)."""
    iterations: int = 40
    """CMA-ES iterations per restart."""
    restarts: int = 4
    """Independent CMA-ES runs (the first from the uncalibrated simulator, the rest from random points)."""
    bootstrap: int = 0
    """Refits on episodes resampled with replacement (0: uncertainty from the restarts only)."""
    polish_iterations: int = 12
    """Levenberg–Marquardt iterations polishing each restart's best point (0: none)."""
    bootstrap_iterations: int = 4
    """Levenberg–Marquardt iterations of each bootstrap refit (from the fit)."""
    sigma0: float = 0.3
    """Initial CMA-ES step size in the normalised box [0, 1]^P."""
    seed: int = 0
    """Seed of CMA-ES and of the bootstrap resampling."""

    def __post_init__(self) -> None:
        if self.population < 2 or self.iterations < 1 or self.restarts < 1 or self.bootstrap < 0:
            raise ConfigError("population must be >= 2, iterations and restarts >= 1, bootstrap >= 0")


@dataclass
class FitResult:
    """What :func:`fit` found (values are factors, or steps for the delay)."""

    params: list[FitParam]
    value: np.ndarray
    """The fit ``[P]``."""
    std: np.ndarray
    """Combined uncertainty ``[P]`` (module docstring)."""
    std_restarts: np.ndarray
    std_bootstrap: np.ndarray
    std_local: np.ndarray
    restart_values: np.ndarray
    """Each restart's best point ``[R, P]``."""
    restart_losses: np.ndarray
    converged: np.ndarray
    """Which restarts count towards the spread ``[R]``."""
    bootstrap_values: np.ndarray
    """``[B, P]``."""
    loss_before: float
    loss_after: float
    errors_before: np.ndarray
    """Per-episode RMS normalised state error ``[E]`` of the uncalibrated simulator."""
    errors_after: np.ndarray
    """The same with the fitted parameters."""
    evaluations: int = 0
    wall_s: float = 0.0
    history: list[float] = field(default_factory=list)
    """Best loss after each lockstep iteration of the restarts."""


def _cma() -> Any:
    try:
        import cma
    except ImportError:
        raise ImportError("robot-rl twin needs CMA-ES: pip install 'robot-rl[twin]' (the cma package)") from None
    return cma


def _lockstep(rep: Replayer, starts: np.ndarray, sigma: float, cfg: FitConfig, iterations: int,
              weights: np.ndarray | None, stage: str, progress: ProgressFn | None) -> tuple[np.ndarray, np.ndarray,
                                                                                           list[float]]:
    """Run one CMA-ES per row of ``starts`` (unit coordinates) in lockstep; best points ``[R, P]`` and losses.

    ``weights`` ``[R, E]`` weight the episodes of each run's loss (a bootstrap resample), else all equal.
    """
    cma = _cma()
    r = starts.shape[0]
    opts = {"bounds": [0.0, 1.0], "popsize": cfg.population, "verbose": -9, "tolfun": 1e-12, "tolx": 1e-6}
    runs = [cma.CMAEvolutionStrategy(list(starts[i]), sigma, {**opts, "seed": cfg.seed * 1000 + i + 1})
            for i in range(r)]
    best_u, best_f = starts.copy(), np.full(r, np.inf)
    history = []
    for it in range(iterations):
        active = [i for i in range(r) if not runs[i].stop()]
        if not active:
            break
        asked = {i: np.clip(np.asarray(runs[i].ask()), 0.0, 1.0) for i in active}
        unit = np.concatenate([asked[i] for i in active])
        errs = rep.errors(values_from_unit(rep.params, unit))  # [sum pop, E]
        row = 0
        for i in active:
            pop = len(asked[i])
            e = errs[row:row + pop]
            row += pop
            losses = e.mean(axis=1) if weights is None else e @ weights[i]
            runs[i].tell(list(asked[i]), losses.tolist())
            k = int(np.argmin(losses))
            if losses[k] < best_f[i]:
                best_f[i], best_u[i] = float(losses[k]), asked[i][k]
        history.append(float(best_f.min()))
        if progress is not None:
            progress(stage, it + 1, iterations, float(best_f.min()))
    return best_u, best_f, history


def fit(rep: Replayer, cfg: FitConfig | None = None, progress: ProgressFn | None = None) -> FitResult:
    """Fit ``rep.params`` to ``rep.logs`` (module docstring)."""
    cfg = cfg or FitConfig()
    t0 = time.perf_counter()
    params = rep.params
    rng = np.random.default_rng(cfg.seed)
    neutral = np.array([[p.to_unit(p.neutral) for p in params]])
    starts = np.concatenate([neutral, rng.uniform(0.1, 0.9, (cfg.restarts - 1, len(params)))])
    best_u, best_f, history = _lockstep(rep, starts, cfg.sigma0, cfg, cfg.iterations, None, "fit", progress)
    if cfg.polish_iterations > 0:
        polished, losses = polish(rep, best_u, iterations=cfg.polish_iterations)
        better = losses < best_f
        best_u[better], best_f[better] = polished[better], losses[better]
        if progress is not None:
            progress("polish", 1, 1, float(best_f.min()))
    before = rep.errors(values_from_unit(params, neutral))[0]
    restart_values = values_from_unit(params, best_u)
    k = int(np.argmin(best_f))
    value = restart_values[k]
    after = rep.errors(value[None])[0]
    loss_before, loss_after = float(before.mean()), float(after.mean())
    converged = best_f <= 10.0 * best_f[k] + 1e-6 * loss_before
    std_r = restart_values[converged].std(axis=0, ddof=1) if converged.sum() >= 2 else np.zeros(len(params))
    boot, std_b = _bootstrap(rep, best_u[k], cfg, rng, progress)
    std_l = local_std(rep, best_u[k], value, loss_after)
    std = np.sqrt(std_r ** 2 + std_b ** 2 + std_l ** 2)
    return FitResult(params=list(params), value=value, std=std, std_restarts=std_r, std_bootstrap=std_b,
                     std_local=std_l,
                     restart_values=restart_values, restart_losses=best_f, converged=converged,
                     bootstrap_values=boot, loss_before=loss_before, loss_after=loss_after,
                     errors_before=np.sqrt(before), errors_after=np.sqrt(after), evaluations=rep.evaluations,
                     wall_s=time.perf_counter() - t0, history=history)


def local_std(rep: Replayer, u: np.ndarray, value: np.ndarray, loss: float) -> np.ndarray:
    """The Laplace term ``[P]`` of the module docstring at unit point ``u`` (zero for the delay)."""
    cont = [j for j, p in enumerate(rep.params) if not p.is_delay]
    out = np.zeros(len(rep.params))
    if not cont:
        return out
    _, jac = jacobian(rep, u)
    n = float(rep.row_counts.sum())
    info = n * (jac.T @ jac) / max(loss, 1e-12)
    cov = np.linalg.inv(info + 12.0 * np.eye(len(cont)))
    for c, j in enumerate(cont):
        p = rep.params[j]
        out[j] = value[j] * np.log(p.high / p.low) * np.sqrt(max(cov[c, c], 0.0))
    return out


def _bootstrap(rep: Replayer, best: np.ndarray, cfg: FitConfig, rng: np.random.Generator,
               progress: ProgressFn | None) -> tuple[np.ndarray, np.ndarray]:
    """Refits ``[B, P]`` on resampled episodes, and their standard deviation ``[P]`` (zeros when B < 2)."""
    p = len(rep.params)
    if cfg.bootstrap < 1:
        return np.zeros((0, p)), np.zeros(p)
    e = rep.num_episodes
    weights = np.stack([np.bincount(rng.integers(0, e, e), minlength=e) / e for _ in range(cfg.bootstrap)])
    unit, _ = polish(rep, np.repeat(best[None], cfg.bootstrap, axis=0), weights, cfg.bootstrap_iterations)
    if progress is not None:
        progress("bootstrap", 1, 1, float("nan"))
    boot = values_from_unit(rep.params, unit)
    return boot, (boot.std(axis=0, ddof=1) if cfg.bootstrap >= 2 else np.zeros(p))
