"""The transport contract between actors and a learner.

An actor holds an :class:`ActorEndpoint`: it sends :class:`~robot_rl.transition.TransitionBatch`
chunks and picks up versioned weights. A learner holds a :class:`LearnerEndpoint`: it receives
chunks and publishes weights. Every wait takes a deadline; nothing blocks forever.

The in-process implementation is :mod:`robot_rl.transport.inproc`; the ZeroMQ one implements the
same two protocols so that a run config switches between them by its ``transport`` section only.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from robot_rl.policies.base import Weights
from robot_rl.transition import TransitionBatch


@dataclass
class VersionedWeights:
    """Actor weights stamped with the learner's policy version (monotonic, starts at 0)."""

    version: int
    weights: Weights


@dataclass
class TransportStats:
    """Counters every transport reports (shown in the learner's logs)."""

    batches_sent: int = 0
    batches_received: int = 0
    transitions_received: int = 0
    send_timeouts: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def reject(self, reason: str) -> None:
        """Count a rejected message under ``reason`` (thread-safe: I/O and monitor threads both count)."""
        with self._lock:
            self.rejected[reason] = self.rejected.get(reason, 0) + 1


@runtime_checkable
class ActorEndpoint(Protocol):
    """What an actor uses."""

    actor_id: int

    def send(self, batch: TransitionBatch, timeout_s: float) -> bool:
        """Queue ``batch`` for the learner; ``False`` if it could not within ``timeout_s`` (counted)."""
        ...

    def poll_weights(self, newer_than: int) -> VersionedWeights | None:
        """The newest weights if their version is ``> newer_than``, else ``None``; never blocks."""
        ...

    def wait_weights(self, newer_than: int, timeout_s: float) -> VersionedWeights | None:
        """Block up to ``timeout_s`` for weights newer than ``newer_than``."""
        ...


@runtime_checkable
class LearnerEndpoint(Protocol):
    """What a learner uses."""

    stats: TransportStats

    def recv(self, timeout_s: float) -> TransitionBatch | None:
        """The next batch from any actor, or ``None`` after ``timeout_s``."""
        ...

    def publish_weights(self, weights: VersionedWeights) -> None:
        """Make ``weights`` the newest for every actor (older versions are superseded, not queued)."""
        ...

    def pending(self) -> int:
        """Batches waiting to be received (queue depth)."""
        ...
