"""Levenberg–Marquardt steps that finish what CMA-ES started, for several starting points in lockstep.

The replay error is a sum of squares, ``L(u) = Σ r(u)²`` with ``r`` the weighted normalised state differences
(``r_e,t,i = (ŝ − s)_e,t,i / σ_i · sqrt(w_e / n_e)``, ``n_e`` numbers compared in episode ``e``, ``w_e`` its
weight: ``1/E``, or a bootstrap resample's). Near a minimum Gauss–Newton converges in a few steps where
CMA-ES needs many iterations, so each CMA-ES restart is polished here::

    J  = ∂r/∂u                      (forward differences, step 1e-2 in the unit box; one batch of worlds)
    δ  = −(JᵀJ + λ·diag(JᵀJ) + ε·I)⁻¹ Jᵀ r      for λ ∈ {1e-4, 1e-2, 1}, and 2.5·δ(1e-4)

the best of the four trial points if it lowers L. The difference step is coarse on purpose: the IK
controller's clipping puts small kinks into ``r(u)``, and a 1e-3 step measured them instead of the slope.
The extrapolated trial helps along the narrow valley where servo gain and joint damping trade off.

The delay is held at each point's value (it is a whole number of steps). Along a direction the logs cannot
inform, ``J``'s column is zero and so is the step: that parameter stays wherever CMA-ES left it, so the
spread of the restarts still shows that the logs say nothing about it.
"""

from __future__ import annotations

import numpy as np

from robot_rl.twin.params import values_from_unit
from robot_rl.twin.rollout import Replayer

#: Forward-difference step in the unit box.
STEP = 1e-2
#: (damping λ, step multiplier) of the trial points of every iteration (all evaluated in one batch).
TRIALS = ((1e-4, 1.0), (1e-4, 2.5), (1e-2, 1.0), (1.0, 1.0))
#: Largest move per iteration in the unit box (a step outside the linear region is not trusted further).
MAX_MOVE = 0.1


def _weighted(rep: Replayer, values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Residual vectors ``[K, M]`` with episode weights ``weights`` ``[K, E]``."""
    res = rep.residuals(values)  # [K, E, T + 1, D]
    scale = np.sqrt(weights / rep.row_counts[None])  # [K, E]
    return (res * scale[:, :, None, None]).reshape(len(values), -1)


def jacobian(rep: Replayer, u: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(r [M], J [M, C])`` at unit point ``u`` ``[P]``: weighted residuals and their Jacobian.

    Forward differences in the continuous coordinates (every parameter but the delay).
    """
    cont = [j for j, p in enumerate(rep.params) if not p.is_delay]
    w = np.full((1, rep.num_episodes), 1.0 / rep.num_episodes) if weights is None else weights[None]
    points, steps = [u], []
    for j in cont:
        step = STEP if u[j] + STEP <= 1.0 else -STEP
        p = u.copy()
        p[j] += step
        points.append(p)
        steps.append(step)
    res = _weighted(rep, values_from_unit(rep.params, np.array(points)), np.repeat(w, len(points), axis=0))
    return res[0], ((res[1:] - res[0]) / np.array(steps)[:, None]).T


def polish(rep: Replayer, unit: np.ndarray, weights: np.ndarray | None = None, iterations: int = 5
           ) -> tuple[np.ndarray, np.ndarray]:
    """Polish each row of ``unit`` ``[R, P]``; returns the new points and their losses ``[R]``.

    ``weights`` ``[R, E]``: episode weights of each row's loss (default ``1/E`` each).
    """
    params = rep.params
    cont = [j for j, p in enumerate(params) if not p.is_delay]
    r_n, e = unit.shape[0], rep.num_episodes
    w = np.full((r_n, e), 1.0 / e) if weights is None else np.asarray(weights, np.float64)
    u = unit.copy()
    loss = np.full(r_n, np.inf)
    if not cont:
        return u, (rep.errors(values_from_unit(params, u)) * w).sum(axis=1)
    for _ in range(iterations):
        points, steps = [], []
        for i in range(r_n):
            points.append(u[i])
            for j in cont:
                step = STEP if u[i, j] + STEP <= 1.0 else -STEP
                p = u[i].copy()
                p[j] += step
                points.append(p)
                steps.append(step)
        res = _weighted(rep, values_from_unit(params, np.array(points)), np.repeat(w, len(cont) + 1, axis=0))
        res = res.reshape(r_n, len(cont) + 1, -1)
        h = np.array(steps).reshape(r_n, len(cont))
        trials = []
        for i in range(r_n):
            r0 = res[i, 0]
            loss[i] = float(r0 @ r0)
            jac = ((res[i, 1:] - r0) / h[i][:, None]).T  # [M, C]
            trials.append(_lm_steps(u[i], cont, jac, r0))
        flat = np.concatenate(trials)  # [R · len(TRIALS), P]
        trial_loss = (rep.errors(values_from_unit(params, flat)) * np.repeat(w, len(TRIALS), axis=0)).sum(axis=1)
        trial_loss = trial_loss.reshape(r_n, len(TRIALS))
        improved = False
        for i in range(r_n):
            k = int(np.argmin(trial_loss[i]))
            if trial_loss[i, k] < loss[i]:
                u[i], loss[i] = trials[i][k], trial_loss[i, k]
                improved = True
        if not improved:
            break
    return u, loss


def _lm_steps(u: np.ndarray, cont: list[int], jac: np.ndarray, r0: np.ndarray) -> np.ndarray:
    """Candidate points ``[len(TRIALS), P]``: one damped Gauss–Newton step from ``u`` per trial."""
    a = jac.T @ jac
    g = jac.T @ r0
    eps = 1e-12 * max(float(np.trace(a)), 1e-30)
    out = np.repeat(u[None], len(TRIALS), axis=0)
    for k, (lam, mult) in enumerate(TRIALS):
        delta = -mult * np.linalg.solve(a + lam * np.diag(np.diag(a)) + eps * np.eye(len(cont)), g)
        delta = np.clip(delta, -MAX_MOVE, MAX_MOVE)
        out[k, cont] = np.clip(u[cont] + delta, 0.0, 1.0)
    return out
