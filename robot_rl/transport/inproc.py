"""In-process transport: bounded queues between actor threads and the learner thread.

Each actor thread has its own bounded queue (``max_queued_batches``), so a slow learner paces the actors
instead of growing memory without limit, and the learner takes from the queues in turn
(:mod:`~robot_rl.transport.fair_inbox`), so one actor thread cannot crowd out another. Weights are a single
"latest" slot: publishing replaces it, so a stalled actor always jumps straight to the newest version.
"""

from __future__ import annotations

import threading

from robot_rl.core.transition import TransitionBatch
from robot_rl.core.transport import TransportStats, VersionedWeights
from robot_rl.transport.fair_inbox import FairInbox


class InprocTransport:
    """Owns the queue and the weight slot; hands out endpoints."""

    def __init__(self, max_queued_batches: int = 8) -> None:
        if max_queued_batches < 1:
            raise ValueError("max_queued_batches must be >= 1")
        # In-process actors step copies of one env (the same env count): one chunk each per turn.
        self._queue: FairInbox[TransitionBatch] = FairInbox(max_queued_batches)
        self._weights: VersionedWeights | None = None
        self._cond = threading.Condition()
        self.stats = TransportStats()

    def actor_endpoint(self, actor_id: int) -> InprocActorEndpoint:
        """An endpoint for actor ``actor_id``."""
        return InprocActorEndpoint(self, actor_id)

    def learner_endpoint(self) -> InprocLearnerEndpoint:
        """The learner's endpoint."""
        return InprocLearnerEndpoint(self)


class InprocActorEndpoint:
    """Actor side of :class:`InprocTransport`."""

    def __init__(self, transport: InprocTransport, actor_id: int) -> None:
        self._t = transport
        self.actor_id = actor_id
        self._seq = 0

    def send(self, batch: TransitionBatch, timeout_s: float) -> bool:
        """Queue a batch, stamping actor id and sequence number."""
        batch.actor_id = self.actor_id
        batch.seq = self._seq
        if not self._t._queue.put(str(self.actor_id), batch, 1, 1, timeout_s):
            self._t.stats.send_timeouts += 1
            return False
        self._seq += 1
        self._t.stats.batches_sent += 1
        return True

    def poll_weights(self, newer_than: int) -> VersionedWeights | None:
        """Newest weights if newer, without blocking."""
        w = self._t._weights
        return w if w is not None and w.version > newer_than else None

    def wait_weights(self, newer_than: int, timeout_s: float) -> VersionedWeights | None:
        """Block until weights newer than ``newer_than`` exist, or the deadline passes."""
        with self._t._cond:
            self._t._cond.wait_for(
                lambda: self._t._weights is not None and self._t._weights.version > newer_than,
                timeout=timeout_s,
            )
        return self.poll_weights(newer_than)


class InprocLearnerEndpoint:
    """Learner side of :class:`InprocTransport`."""

    def __init__(self, transport: InprocTransport) -> None:
        self._t = transport
        self.stats = transport.stats

    def recv(self, timeout_s: float) -> TransitionBatch | None:
        """Next batch or ``None`` after the deadline (``timeout_s == 0`` polls)."""
        got = self._t._queue.get(timeout_s)
        if got is None:
            return None
        batch = got[1]
        self.stats.batches_received += 1
        self.stats.transitions_received += len(batch)
        return batch

    def publish_weights(self, weights: VersionedWeights) -> None:
        """Replace the weight slot and wake actors waiting for it."""
        with self._t._cond:
            self._t._weights = weights
            self._t._cond.notify_all()

    def pending(self) -> int:
        """Queue depth."""
        return len(self._t._queue)
