"""Check newly received policy weights on recorded observations before they may drive the robot.

An actor on a real robot keeps a small set of recorded observations (e.g. the first steps of recent
episodes). When the learner publishes new weights, :class:`WeightGate` runs the candidate policy and the
current one on those observations and accepts the candidate only if its actions are finite, inside the
action bounds, and no further than ``max_deviation`` (max absolute difference, normalised units) from the
current policy's actions on the same observations. A rejected version is counted and logged; the robot
keeps acting with the previous weights.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

ActFn = Callable[[dict[str, np.ndarray]], np.ndarray]
"""Deterministic policy: batched observation dict ``{key: [N, ...]}`` → actions ``[N, A]``."""


@dataclass
class WeightCheckConfig:
    """Acceptance rules for new weights."""

    max_deviation: float = 0.5
    """Largest allowed |new − current| of any action entry on any recorded observation."""
    low: float = -1.0
    """Lower bound every action entry must respect."""
    high: float = 1.0
    """Upper bound every action entry must respect."""
    min_observations: int = 1
    """Refuse to judge (and so reject) with fewer recorded observations than this."""


@dataclass
class WeightCheckResult:
    """The verdict on one candidate: ``ok``, ``reason`` when not ok, and the measured deviation."""

    ok: bool
    reason: str
    max_deviation: float


def check_policy_update(candidate: ActFn, current: ActFn | None, observations: dict[str, np.ndarray],
                        config: WeightCheckConfig | None = None) -> WeightCheckResult:
    """Judge ``candidate`` on ``observations`` against ``current`` (None for the first weights)."""
    cfg = config or WeightCheckConfig()
    n = min((len(v) for v in observations.values()), default=0)
    if n < cfg.min_observations:
        return WeightCheckResult(False, f"only {n} recorded observations (need {cfg.min_observations})", np.inf)
    try:
        new = np.asarray(candidate(observations), dtype=np.float64)
    except Exception as e:  # a candidate that crashes must not reach the robot
        return WeightCheckResult(False, f"candidate raised {type(e).__name__}: {e}", np.inf)
    if new.shape[0] != n:
        return WeightCheckResult(False, f"candidate returned {new.shape[0]} actions for {n} observations", np.inf)
    if not np.isfinite(new).all():
        return WeightCheckResult(False, "candidate produced non-finite actions", np.inf)
    if new.min() < cfg.low or new.max() > cfg.high:
        return WeightCheckResult(False, f"actions outside [{cfg.low}, {cfg.high}]: "
                                        f"range [{new.min():.3g}, {new.max():.3g}]", np.inf)
    if current is None:
        return WeightCheckResult(True, "", 0.0)
    old = np.asarray(current(observations), dtype=np.float64)
    if old.shape != new.shape:
        return WeightCheckResult(False, f"action shape changed {old.shape} -> {new.shape}", np.inf)
    dev = float(np.abs(new - old).max())
    if dev > cfg.max_deviation:
        return WeightCheckResult(False, f"max deviation {dev:.3g} from the current policy > {cfg.max_deviation}",
                                 dev)
    return WeightCheckResult(True, "", dev)


class WeightGate:
    """Keeps the accepted policy; :meth:`offer` a candidate per new weight version."""

    def __init__(self, observations: dict[str, np.ndarray], config: WeightCheckConfig | None = None) -> None:
        self.observations = observations
        self.config = config or WeightCheckConfig()
        self.current: ActFn | None = None
        self.version: int | None = None
        self.counts: Counter[str] = Counter()

    def offer(self, candidate: ActFn, version: int) -> WeightCheckResult:
        """Accept ``candidate`` as the acting policy if it passes; otherwise keep the current one."""
        result = check_policy_update(candidate, self.current, self.observations, self.config)
        if result.ok:
            self.current, self.version = candidate, version
            self.counts["accepted"] += 1
        else:
            self.counts["rejected"] += 1
            log.warning("weights v%d rejected: %s (still acting with v%s)", version, result.reason, self.version)
        return result
