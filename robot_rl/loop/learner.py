"""The learner: validates incoming transitions, stores them, updates the algorithm, publishes weights.

The learner is the trust boundary: every batch is checked against the run's :class:`EnvSpec`
(keys, shapes, dtypes) and for NaN/inf before it can reach the storage. A bad batch is rejected,
counted by reason, and logged once per reason; the learner keeps running.
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast

import torch

from robot_rl.core.algorithm import (
    CRITIC_WEIGHTS_PREFIX,
    Algorithm,
    CriticPublisher,
    DurableStorage,
    OffPolicyAlgorithm,
    OnPolicyAlgorithm,
    OnPolicyStorage,
    ReplayStorage,
    Storage,
)
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.core.transition import TransitionBatch
from robot_rl.core.transport import AckingEndpoint, LearnerEndpoint, SessionEndpoint, VersionedWeights
from robot_rl.replay.persist import keep_chunk_whole, mark_chunk, primary_buffer

log = logging.getLogger(__name__)


class Learner:
    """Owns the algorithm, its storage and the learner endpoint."""

    def __init__(self, algo: Algorithm, spec: EnvSpec, endpoint: LearnerEndpoint,
                 device: torch.device | str, num_envs_total: int, storage: Storage | None = None) -> None:
        self.algo = algo
        self.spec = spec
        self.endpoint = endpoint
        self.device = torch.device(device)
        #: ``algo.make_storage`` unless the loop gives one (an asynchronous on-policy rollout).
        self.storage = algo.make_storage(num_envs_total) if storage is None else storage
        self.version = 0
        self.updates = 0
        self.transitions = 0
        #: Data-parallel ranks stepping in lockstep: ``transitions`` counts all of them (this rank's × ``ranks``),
        #: so budgets, evaluations and logs speak of the whole run's env steps.
        self.ranks = 1
        self.publish_critic = False
        """Publish the critics with the actor weights (actors that score states, e.g. deploy's help gate)."""
        self._owed_updates = 0.0
        self.last_stats: dict[str, float] = {}
        self._logged_reasons: set[str] = set()
        self._unconfirmed: list[TransitionBatch] = []  # stored, waiting for a replay commit to be acked
        self._oldest_unconfirmed = 0.0
        self.cut_sessions = 0  # actor sessions that ended without a goodbye (process killed)
        # Capabilities resolved once: an isinstance against a runtime Protocol costs ~8 us, several times the
        # empty recv that pump() makes between actor steps.
        self._acking = endpoint if isinstance(endpoint, AckingEndpoint) else None
        self._sessions = endpoint if isinstance(endpoint, SessionEndpoint) else None
        self._durable = self.storage if isinstance(self.storage, DurableStorage) else None
        self._rollout = self.storage if isinstance(self.storage, OnPolicyStorage) else None

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
        per_row = {"reward": batch.reward, "terminated": batch.terminated, "truncated": batch.truncated,
                   "intervened": batch.intervened, "policy_version": batch.policy_version, "env_index": batch.env_index}
        for name, t in per_row.items():
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
        # With replay on disk, the segment that holds a chunk's rows also records its (session, seq):
        # a restarted learner rebuilds its de-duplication window from the disk, not from the older
        # checkpoint, so a resend of a stored chunk whose acknowledgement was lost is dropped.
        buf = primary_buffer(self.storage)
        session = self._sessions.session_of(batch) if buf is not None and self._sessions is not None else None
        if buf is not None and session is not None:
            keep_chunk_whole(buf, len(batch))
        self.storage.add(batch.to(self.device))
        if buf is not None and session is not None:
            mark_chunk(buf, session, batch.seq)
        self.transitions += len(batch) * self.ranks
        if isinstance(self.algo, OffPolicyAlgorithm) and len(self.storage) >= self.algo.learning_starts:
            self._owed_updates += self.algo.utd_ratio * len(batch)
        return True

    def pump(self, timeout_s: float) -> bool:
        """Receive and ingest one batch if one arrives within ``timeout_s``."""
        self._end_cut_sessions()
        self.confirm_due()
        batch = self.endpoint.recv(timeout_s)
        if batch is None:
            return False
        self.ingest(batch)
        # Stored (or rejected for good): a transport that acknowledges on confirmation may do so now,
        # or, with persisted replay, once the rows are on disk (see _confirm_durable).
        if self._acking is not None:
            self._confirm_durable(batch, self._acking)
        return True

    #: With persisted replay, acknowledgements wait for a segment commit; at most this many chunks or
    #: this long, then the learner commits a (smaller) segment so actors' outboxes never fill.
    ack_max_chunks = 32
    ack_max_delay_s = 1.0

    def _confirm_durable(self, batch: TransitionBatch, endpoint: AckingEndpoint) -> None:
        if not (self._durable is not None and self._durable.persisted):
            endpoint.confirm(batch)
            return
        if not self._unconfirmed:
            self._oldest_unconfirmed = time.monotonic()
        self._unconfirmed.append(batch)
        self.confirm_due()

    def confirm_due(self, force: bool = False) -> None:
        """Commit the replay and acknowledge the stored chunks if enough are waiting or the oldest waited long."""
        if not self._unconfirmed or self._acking is None:
            return
        if not (force or len(self._unconfirmed) >= self.ack_max_chunks
                or time.monotonic() - self._oldest_unconfirmed >= self.ack_max_delay_s):
            return
        if self._durable is not None:
            self._durable.flush()
        for b in self._unconfirmed:
            self._acking.confirm(b)
        self._unconfirmed.clear()

    def _end_cut_sessions(self) -> None:
        """Mark where killed actor processes stopped: their last stored steps end their episodes.

        Marked truncated, so on-policy returns never run across the cut into the restarted actor's steps.
        """
        if self._sessions is None:
            return
        for cut in self._sessions.pop_cut_sessions():
            if self._rollout is not None:
                self._rollout.truncate_actor(cut.actor_id)
            self.cut_sessions += 1

    # ---- learning ---------------------------------------------------------------------------

    @property
    def owed_updates(self) -> int:
        """Off-policy: whole gradient updates owed to the data received (UTD ratio)."""
        return int(self._owed_updates)

    def owe_updates(self, owed: float) -> None:
        """Set the off-policy updates owed: a lockstep schedule counts them from every rank's data, not this rank's."""
        self._owed_updates = owed

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
        if self._rollout is None:
            raise TypeError(f"{type(self.storage).__name__} is not a rollout; on-policy learners need one")
        if not self._rollout.is_full():
            return False
        self.last_stats = algo.update(self.storage)
        self.updates += 1
        return True

    def publish(self) -> int:
        """Publish the current actor weights as the next version; returns the version.

        With ``publish_critic`` the critics go too, under :data:`~robot_rl.core.algorithm.CRITIC_WEIGHTS_PREFIX`.
        """
        self.version += 1
        weights = self.algo.actor_weights()
        if self.publish_critic:
            if not isinstance(self.algo, CriticPublisher):
                raise TypeError(f"{type(self.algo).__name__} has no critics an actor can evaluate "
                                "(publish_critic needs an algorithm like SAC)")
            weights = {**weights, **{CRITIC_WEIGHTS_PREFIX + k: v for k, v in self.algo.critic_weights().items()}}
        self.endpoint.publish_weights(VersionedWeights(self.version, weights))
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
        # With persisted replay the storage is reloaded before this, and the updates owed carry on;
        # an empty storage owes nothing until it holds ``learning_starts`` transitions again.
        refilled = isinstance(self.algo, OffPolicyAlgorithm) and len(self.storage) >= self.algo.learning_starts
        self._owed_updates = float(c.get("owed_updates", 0.0)) if refilled else 0.0
