"""The transport contract between actors and a learner.

An actor holds an :class:`ActorEndpoint`: it sends :class:`~robot_rl.core.transition.TransitionBatch`
chunks and picks up versioned weights. A learner holds a :class:`LearnerEndpoint`: it receives
chunks and publishes weights. Every wait takes a deadline; nothing blocks forever.

The in-process implementation is :mod:`robot_rl.transport.inproc`; the ZeroMQ one implements the
same two protocols so that a run config switches between them by its ``transport`` section only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from robot_rl.core.algorithm import Weights
from robot_rl.core.errors import UserError
from robot_rl.core.transition import TransitionBatch


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


@dataclass
class CutSession:
    """An actor session that ended without saying goodbye (its process died), seen when it came back."""

    actor_id: int
    session: str
    stored_seqs: int  # chunks of it the learner stored


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


@runtime_checkable
class RemoteActorEndpoint(ActorEndpoint, Protocol):
    """An actor process's endpoint (``TransportConfig.connect_actor``).

    It keeps every chunk until the learner acknowledges it, and can be refused by the learner at connect
    time (a spec mismatch, a key not in the allow-list).
    """

    #: The learner's address (``tcp://host:port``), for the messages that say where the actor waits.
    address: str
    handshake_error: str | None
    #: Why the learner ended the run (``"budget"``, ``"threshold"``), once it said so; None while it runs. A
    #: learner that only stops (Ctrl-C, SIGTERM, a crash) does not set it: its actors wait for it to resume.
    learner_finished: str | None
    acked: int
    stats: TransportStats

    def unacked(self) -> int:
        """Chunks sent but not yet acknowledged."""
        ...

    def dropped(self) -> int:
        """Chunks given up on (a full spill directory); counted, never silent."""
        ...

    def close(self) -> None:
        """Say goodbye to the learner and release the socket."""
        ...


@runtime_checkable
class LearnerLink(Protocol):
    """The learner's side of an opened transport (``TransportConfig.open_learner``).

    ``endpoint`` is what the learner receives from; ``address`` is where actor processes connect (``None``
    for in-process transports, whose actors get their endpoints from :meth:`local_actor`).
    """

    endpoint: LearnerEndpoint
    address: str | None

    def local_actor(self, actor_id: int) -> ActorEndpoint:
        """An endpoint for an actor thread in this process (in-process transports only)."""
        ...

    def metrics(self) -> dict[str, float]:
        """Network counters for logs (empty where there is no network)."""
        ...

    def close(self) -> None:
        """Stop listening and release sockets and threads."""
        ...


# ---- optional capabilities of endpoints (checked with isinstance) ----------------------------------------


@runtime_checkable
class AckingEndpoint(Protocol):
    """A learner endpoint whose actors keep every chunk until the learner confirms it durable.

    The learner calls :meth:`confirm` once the chunk's rows are stored, and with replay on disk only after
    the segment holding them is committed; an unconfirmed chunk is resent after a reconnect and the
    duplicate dropped by (session, seq). See docs/replay-and-checkpoints.md.
    """

    def confirm(self, batch: TransitionBatch) -> None:
        """Acknowledge ``batch`` to its actor: the learner has it (durably, where replay is persisted)."""
        ...


@runtime_checkable
class SessionEndpoint(Protocol):
    """A learner endpoint that knows which actor process session sent each chunk."""

    def session_of(self, batch: TransitionBatch) -> str | None:
        """The sending actor's session id (a restarted actor process has a new one)."""
        ...

    def pop_cut_sessions(self) -> list[CutSession]:
        """Sessions that ended without a goodbye since the last call (whose chunks have all been received)."""
        ...


@runtime_checkable
class StatefulEndpoint(Protocol):
    """A learner endpoint with state a resume restores: the per-session de-duplication windows."""

    def state_dict(self) -> dict[str, Any]:
        """The de-duplication state, saved in checkpoints."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (at resume)."""
        ...

    def merge_state_dict(self, state: dict[str, Any]) -> None:
        """Add windows found elsewhere (the replay on disk) to the restored ones."""
        ...


@runtime_checkable
class FinishingEndpoint(Protocol):
    """A learner endpoint that can tell its actor processes the run is over, so they stop rather than wait.

    Without it an actor outlives its learner by design (waiting for a resumed learner); after
    :meth:`finish` it ends at once, with its unacknowledged chunks reported as not needed.
    """

    def finish(self, reason: str) -> None:
        """Tell every connected actor, and any that connects later, that the run ended (``reason``)."""
        ...


@runtime_checkable
class VersionAwareEndpoint(Protocol):
    """An actor endpoint that hears the learner's newest weight version before fetching the weights."""

    learner_version: int


@dataclass
class LinkState:
    """What an actor process's endpoint knows of its learner: whether it answers, and what waits on it."""

    address: str
    connected: bool
    silent_s: float
    """Seconds since anything came from the learner (its I/O thread heartbeats even while its loop is busy)."""
    unacked: int
    """Chunks sent and not yet acknowledged (in memory or spilled)."""
    learner_version: int
    """The newest weight version the learner announced (-1: none yet)."""

    def describe(self) -> str:
        """``the learner at tcp://…: last heard 0.3s ago, 512 chunks unacknowledged, weights v12``."""
        heard = f"last heard {self.silent_s:.1f}s ago" + ("" if self.connected else ", not connected")
        version = f", weights v{self.learner_version}" if self.learner_version >= 0 else ""
        return f"the learner at {self.address}: {heard}, {self.unacked} chunks unacknowledged{version}"


@runtime_checkable
class LinkStateEndpoint(Protocol):
    """An actor endpoint that can say whether its learner answers: a slow learner is waited for, a silent one not."""

    def link_state(self) -> LinkState:
        """The learner as this endpoint sees it now."""
        ...


@runtime_checkable
class DropCountingEndpoint(Protocol):
    """An actor endpoint that tells its learner the transitions its actor dropped (``loop.on_backlog=drop``).

    The learner's status line and run summary then show them.
    """

    def count_dropped(self, transitions: int) -> None:
        """Add ``transitions`` to the dropped count the learner hears of."""
        ...


class LearnerUnreachable(TimeoutError):
    """An actor waited for a learner that stopped answering (dead, stopped or cut off), not for a slow one."""


class HandshakeRefused(RuntimeError, UserError):
    """The learner refused this actor at connect time (spec mismatch, key not allowed): waiting cannot help."""


def wait_first_weights(endpoint: ActorEndpoint, timeout_s: float, slice_s: float = 0.25,
                       on_wait: Callable[[float], None] | None = None) -> VersionedWeights | None:
    """The learner's first weights, waiting up to ``timeout_s``; None on the deadline.

    A remote actor's wait stops at once with :class:`HandshakeRefused` when the learner refuses it: without the
    check it sat out the whole deadline and then blamed a dead learner. ``on_wait`` gets the seconds waited so far
    before every slice (a :class:`LearnerWaitNotice`, a status line), so the wait is never silent.
    """
    import time

    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        if isinstance(endpoint, RemoteActorEndpoint) and endpoint.handshake_error:
            raise HandshakeRefused(f"the learner refused this actor: {endpoint.handshake_error}")
        if on_wait is not None:
            on_wait(time.monotonic() - start)
        left = deadline - time.monotonic()
        new = endpoint.wait_weights(-1, min(slice_s, max(left, 0.0)))
        if new is not None or left <= 0:
            return new


class LearnerWaitNotice:
    """Says where an actor waits for its learner and for how long: the first call at once, then every ``every_s``.

    Call it with the seconds waited so far, as often as convenient (``wait_first_weights``'s ``on_wait``); it
    returns the line (``waiting for the learner at tcp://127.0.0.1:5555: 12s of 60s``) every time, for a status
    line, and hands it to ``say`` (a logger's ``warning``) only once per ``every_s``, so a log gets a line at once
    and then one every ``every_s``, never a flood. ``quiet_s``: say nothing before this many seconds (a wait that
    is normal when short, e.g. an on-policy actor's wait for the next rollout's weights).
    """

    def __init__(self, address: str, timeout_s: float, say: Callable[[str], None], every_s: float = 10.0,
                 quiet_s: float = 0.0) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.say = say
        self.every_s = every_s
        self._next_s = quiet_s

    def line(self, waited_s: float) -> str:
        """The words, with the seconds waited and the deadline."""
        return f"waiting for the learner at {self.address}: {waited_s:.0f}s of {self.timeout_s:.0f}s"

    def __call__(self, waited_s: float) -> str:
        """The line for ``waited_s``; said (logged) when the next ``every_s`` mark is reached."""
        text = self.line(waited_s)
        if waited_s >= self._next_s:
            self.say(text)
            while self._next_s <= waited_s:
                self._next_s += self.every_s
        return text
