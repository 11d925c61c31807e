"""The built-in transports' configs: in-process queues (``inproc``) and ZeroMQ (``zmq``)."""

from __future__ import annotations

from dataclasses import dataclass

from robot_rl.core.config import TRANSPORTS, TransportConfig


@TRANSPORTS.register("inproc")
@dataclass
class InprocTransportConfig(TransportConfig):
    """Actor threads and learner in one process, joined by bounded queues."""

    max_queued_batches: int = 8
    """Bound on transition batches waiting for the learner; a full queue paces the actors."""


@TRANSPORTS.register("zmq")
@dataclass
class ZmqTransportConfig(TransportConfig):
    """Learner and actors in separate processes or machines (`robot-rl learner` / `robot-rl actor`)."""

    address: str = "tcp://127.0.0.1:5555"
    """Where the learner binds and actors connect (`--bind` / `--connect` override it). Binding to
    127.0.0.1 keeps the learner off the network unless you say otherwise."""
    heartbeat_s: float = 0.5
    """Heartbeat interval both ways; a peer silent for 3 intervals is reported dead."""
    resend_after_s: float = 2.0
    """An unacknowledged chunk is resent after this long (and at once after a reconnect)."""
    outbox_size: int = 256
    """Chunks an actor keeps until acknowledged; when full, sends wait (the sampler is paced)."""
    inbox_size: int = 64
    """Validated chunks the learner holds before its loop takes them (unacknowledged beyond)."""
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
