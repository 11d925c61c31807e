"""The learner: validates incoming transitions, stores them, updates the algorithm, publishes weights.

The learner is the trust boundary: every batch is checked against the run's :class:`EnvSpec`
(keys, shapes, dtypes) and for NaN/inf before it can reach the storage. A bad batch is rejected,
counted by reason, and logged once per reason; the learner keeps running.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import torch

from robot_rl.policies.base import Algorithm, OffPolicyAlgorithm, OnPolicyAlgorithm, ReplayStorage
from robot_rl.specs import EnvSpec, SpecMismatchError
from robot_rl.transition import TransitionBatch
from robot_rl.transport.base import LearnerEndpoint, VersionedWeights

log = logging.getLogger(__name__)


class Learner:
    """Owns the algorithm, its storage and the learner endpoint."""

    def __init__(self, algo: Algorithm, spec: EnvSpec, endpoint: LearnerEndpoint,
                 device: torch.device | str, num_envs_total: int) -> None:
        self.algo = algo
        self.spec = spec
        self.endpoint = endpoint
        self.device = torch.device(device)
        self.storage = algo.make_storage(num_envs_total)
        self.version = 0
        self.updates = 0
        self.transitions = 0
        self._owed_updates = 0.0
        self.last_stats: dict[str, float] = {}
        self._logged_reasons: set[str] = set()

    # ---- data in ----------------------------------------------------------------------------

    def validate(self, batch: TransitionBatch) -> str | None:
        """The reason ``batch`` must be rejected, or ``None`` if it is fine."""
        n = len(batch)
        try:
            self.spec.check_obs(batch.obs)
            self.spec.check_obs(batch.next_obs)
            self.spec.action.check("action", batch.action)
        except SpecMismatchError as e:
            return "nonfinite" if "NaN" in str(e) else f"spec: {e}"
        for name in ("reward", "terminated", "truncated", "intervened", "policy_version", "env_index"):
            t = getattr(batch, name)
            if tuple(t.shape) != (n,):
                return f"spec: {name} has shape {list(t.shape)}, expected [{n}]"
        if not bool(torch.isfinite(batch.reward).all()):
            return "nonfinite"
        return None

    def ingest(self, batch: TransitionBatch) -> bool:
        """Validate and store ``batch``; ``False`` (and counted) if rejected."""
        reason = self.validate(batch)
        if reason is not None:
            key = reason.split(":")[0]
            self.endpoint.stats.reject(key)
            if key not in self._logged_reasons:
                self._logged_reasons.add(key)
                log.warning("rejected a batch from actor %d (%s); further rejects of this kind are only "
                            "counted", batch.actor_id, reason)
            return False
        self.storage.add(batch.to(self.device))
        self.transitions += len(batch)
        if isinstance(self.algo, OffPolicyAlgorithm) and len(self.storage) >= self.algo.learning_starts:
            self._owed_updates += self.algo.utd_ratio * len(batch)
        return True

    def pump(self, timeout_s: float) -> bool:
        """Receive and ingest one batch if one arrives within ``timeout_s``."""
        batch = self.endpoint.recv(timeout_s)
        if batch is None:
            return False
        self.ingest(batch)
        return True

    # ---- learning ---------------------------------------------------------------------------

    @property
    def owed_updates(self) -> int:
        """Off-policy: whole gradient updates owed to the data received (UTD ratio)."""
        return int(self._owed_updates)

    def update_off_policy(self, max_updates: int) -> int:
        """Run up to ``max_updates`` owed off-policy updates; returns how many ran."""
        algo = cast(OffPolicyAlgorithm, self.algo)
        if not isinstance(self.storage, ReplayStorage):
            raise TypeError(f"{type(self.storage).__name__} has no sample(); off-policy learners need a replay")
        sample = self.storage.sample
        done = 0
        while done < max_updates and self._owed_updates >= 1.0:
            self.last_stats = algo.update(sample(algo.batch_size))
            self._owed_updates -= 1.0
            self.updates += 1
            done += 1
        return done

    def update_on_policy(self) -> bool:
        """On-policy: update once the rollout is full; ``True`` if it did."""
        algo = cast(OnPolicyAlgorithm, self.algo)
        is_full = getattr(self.storage, "is_full", None)
        if is_full is None or not is_full():
            return False
        self.last_stats = algo.update(self.storage)
        self.updates += 1
        return True

    def publish(self) -> int:
        """Publish the current actor weights as the next version; returns the version."""
        self.version += 1
        self.endpoint.publish_weights(VersionedWeights(self.version, self.algo.actor_weights()))
        return self.version

    # ---- resume -----------------------------------------------------------------------------

    def counters(self) -> dict[str, Any]:
        """Counters saved in checkpoints."""
        return {"version": self.version, "updates": self.updates, "transitions": self.transitions,
                "owed_updates": self._owed_updates}

    def load_counters(self, c: dict[str, Any]) -> None:
        """Restore :meth:`counters`."""
        self.version = int(c["version"])
        self.updates = int(c["updates"])
        self.transitions = int(c["transitions"])
        # The storage starts empty after a restart (replay persistence is separate), so no update is
        # owed until it holds ``learning_starts`` transitions again.
        self._owed_updates = 0.0
