"""The built-in transports' configs: in-process queues (``inproc``) and ZeroMQ (``zmq``)."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, ClassVar

from robot_rl.core.config import TRANSPORTS, ConfigError, TransportConfig
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transport import ActorEndpoint, LearnerEndpoint, LearnerLink, RemoteActorEndpoint


@TRANSPORTS.register("inproc")
@dataclass
class InprocTransportConfig(TransportConfig):
    """Actor threads and learner in one process, joined by bounded queues."""

    max_queued_batches: int = 8
    """Bound on transition batches waiting for the learner; a full queue paces the actors."""

    def open_learner(self, spec: EnvSpec) -> LearnerLink:
        """Bounded queues between this process's actor threads and its learner."""
        from robot_rl.transport.inproc import InprocTransport

        return InprocLink(InprocTransport(self.max_queued_batches))

    def connect_actor(self, spec: EnvSpec, actor_id: int, num_envs: int = 1) -> RemoteActorEndpoint:
        """In-process actors are threads of the learner: there is nothing to connect to."""
        raise ConfigError("transport.type=inproc has no actor processes: `robot-rl train` runs the actors as "
                          "threads; for `robot-rl actor` use transport.type=zmq")


@TRANSPORTS.register("zmq")
@dataclass
class ZmqTransportConfig(TransportConfig):
    """Learner and actors in separate processes or machines (`robot-rl learner` / `robot-rl actor`)."""

    in_process: ClassVar[bool] = False

    address: str = "tcp://127.0.0.1:5555"
    """Where the learner binds and actors connect (`--bind` / `--connect` override it). Binding to
    127.0.0.1 keeps the learner off the network unless you say otherwise."""
    heartbeat_s: float = 0.5
    """Heartbeat interval both ways; a peer silent for 3 intervals is reported dead."""
    resend_after_s: float = 2.0
    """An unacknowledged chunk is resent after this long (and at once after a reconnect)."""
    outbox_size: int = 8
    """Chunks an actor keeps until acknowledged; when full, sends wait (the sampler is paced). Small on purpose: rows
    queued behind a busy learner age, and a learner that stores rows acted by weights thousands of steps old learns
    from stale data (`launch --actors 2` on reach, 16 envs each: a 256-chunk outbox and as many queued let the
    actors run up to 16,384 env steps ahead of the learner; docs/scale-out.md). Like the in-process queue's 8
    batches. Raise it for a link with a long round trip, with `outbox_policy=spill` on a robot."""
    inbox_size: int = 64
    """Validated chunks the learner holds per actor before its loop takes them (unacknowledged beyond); the loop
    takes from the actors' inboxes in turn, by env count (docs/distributed.md, Sharing the learner)."""
    server_secret_key: str | None = None
    """Learner: its CURVE `.key_secret` file; turns on encryption and authentication."""
    allowed_clients_dir: str | None = None
    """Learner: directory of actors' public `.key` files it accepts (everyone else is refused)."""
    server_public_key: str | None = None
    """Actor: the learner's public `.key` file (CURVE on)."""
    client_secret_key: str | None = None
    """Actor: its own `.key_secret` file (its `.key` must be in the learner's allow-list)."""
    outbox_policy: str = "block"
    """Actor, when `outbox_size` chunks are unacknowledged: `block` (sends wait: the sampler is paced by
    the learner) or `spill` (chunks go to checksummed files in `spill_dir`, resent later; never waits)."""
    spill_dir: str | None = None
    """Actor: directory for spilled chunks (`outbox_policy=spill`)."""
    spill_max_bytes: int = 1 << 30
    """Actor: bytes the spill directory may hold; chunks beyond are dropped, counted and logged."""
    copy_on_send: bool = True
    """Actor: copy each chunk when it is handed over, so an env or camera driver that reuses its buffers
    cannot change it afterwards; turn off only for envs that return fresh tensors (saves one copy)."""
    coalesce: bool = True
    """Actor: chunks that wait together (the learner or the link was slower than the env) go as one message of
    their rows, still at most `outbox_size` chunks in flight; the learner receives fewer, larger batches.
    `false`: one message per chunk."""

    def open_learner(self, spec: EnvSpec) -> LearnerLink:
        """Bind ``address``; a chunk is acknowledged only once the learner confirms it stored (durably)."""
        from robot_rl.transport.zmq_transport import ZmqLearnerEndpoint, ZmqSettings

        return ZmqLink(ZmqLearnerEndpoint(self.address, spec, ZmqSettings.from_config(self, ack_after="confirm")))

    def connect_actor(self, spec: EnvSpec, actor_id: int, num_envs: int = 1) -> RemoteActorEndpoint:
        """Connect to the learner at ``address`` as actor ``actor_id`` with ``num_envs`` envs (its share)."""
        from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

        return ZmqActorEndpoint(self.address, actor_id, spec, ZmqSettings.from_config(self), num_envs=num_envs)


class InprocLink:
    """:class:`LearnerLink` of the in-process transport."""

    address: str | None = None

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.endpoint: LearnerEndpoint = transport.learner_endpoint()

    def local_actor(self, actor_id: int) -> ActorEndpoint:
        """A queue endpoint for actor thread ``actor_id``."""
        return typing.cast(ActorEndpoint, self.transport.actor_endpoint(actor_id))

    def metrics(self) -> dict[str, float]:
        """No network: nothing to count beyond the learner endpoint's stats."""
        return {}

    def close(self) -> None:
        """Queues need no release."""


class ZmqLink:
    """:class:`LearnerLink` of the ZeroMQ transport."""

    def __init__(self, endpoint: Any) -> None:
        self._zmq = endpoint  # a ZmqLearnerEndpoint (imported lazily: pyzmq is loaded only when chosen)
        self.endpoint: LearnerEndpoint = endpoint
        self.address: str | None = str(endpoint.address)

    def local_actor(self, actor_id: int) -> ActorEndpoint:
        """ZeroMQ actors are processes (`robot-rl actor --connect ADDRESS`), not threads."""
        raise ConfigError(f"transport.type=zmq: actors connect from their own processes to {self.address}")

    def metrics(self) -> dict[str, float]:
        """Throughput, acknowledgements, weight lag and rejects (docs/distributed.md)."""
        return typing.cast(dict[str, float], self._zmq.metrics())

    def close(self) -> None:
        """Unbind and stop the I/O thread."""
        self._zmq.close()
