"""What both ZeroMQ endpoints share: settings, CURVE key files, the received-sequence window."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robot_rl.core.algorithm import Weights
from robot_rl.core.config import ConfigError
from robot_rl.transport.codec import WireLimits

OUTBOX_POLICIES = ("block", "spill")
ACK_AFTER = ("recv", "confirm", "durable")


@dataclass
class ZmqSettings:
    """Timing, bounds, delivery policies and (optional) CURVE keys of both ends.

    CURVE: the learner needs ``server_secret_key`` (its certificate) and ``allowed_clients_dir`` (the
    public certificates of actors it accepts); an actor needs ``server_public_key`` and its own
    ``client_secret_key``. Certificates come from ``robot-rl keys generate``.
    """

    heartbeat_s: float = 0.5
    resend_after_s: float = 2.0
    outbox_size: int = 256
    inbox_size: int = 64
    limits: WireLimits = field(default_factory=WireLimits)
    server_secret_key: str | None = None
    allowed_clients_dir: str | None = None
    server_public_key: str | None = None
    client_secret_key: str | None = None
    #: Actor: what happens when ``outbox_size`` chunks are unacknowledged. ``block``: ``send`` waits
    #: (the sampler is paced by the learner); ``spill``: chunks go to checksummed files in
    #: ``spill_dir`` and are resent from there, so ``send`` never waits.
    outbox_policy: str = "block"
    spill_dir: str | None = None
    #: Bytes the spill directory may hold; chunks beyond are dropped, counted and logged.
    spill_max_bytes: int = 1 << 30
    #: Learner: acknowledge a chunk when the learner takes it (``recv``), when the learner says it is
    #: stored (``confirm``), or only after the checkpoint holding it is on disk (``durable``: the
    #: learner calls ``flush_acks()`` after committing ``state_dict()`` with the data).
    ack_after: str = "recv"
    #: Actor: ``send`` copies the batch to host memory it owns (one copy, on the caller's thread), so an
    #: env or camera driver that reuses its buffers cannot change a chunk after it was sent (its CRC
    #: would stop matching and every resend be rejected). Turn off only for envs that return fresh tensors.
    copy_on_send: bool = True
    #: Actor: chunks waiting together (the learner or the link was slower than the env) go as one message of their
    #: rows, at most ``outbox_size`` chunks in flight still. The learner then receives fewer, larger batches than
    #: ``send`` was called with; its work per message is shared by more rows (small chunks: several times the
    #: throughput, ``benchmarks/transport_bench.py``).
    coalesce: bool = True
    #: Learner: each actor session has its own inbox of ``inbox_size`` chunks, taken in turn by env count
    #: (:mod:`~robot_rl.transport.fair_inbox`). False: one inbox shared by all, first come first served: the
    #: transport before issue 52, where a flooding actor could starve another (``benchmarks/actor_fairness.py``'s peer).
    fair_service: bool = True

    def __post_init__(self) -> None:
        if self.outbox_policy not in OUTBOX_POLICIES:
            raise ValueError(f"outbox_policy {self.outbox_policy!r}; valid: {list(OUTBOX_POLICIES)}")
        if self.ack_after not in ACK_AFTER:
            raise ValueError(f"ack_after {self.ack_after!r}; valid: {list(ACK_AFTER)}")
        if self.outbox_policy == "spill" and not self.spill_dir:
            raise ValueError("outbox_policy=spill needs spill_dir (a directory on the actor's disk)")
        if self.heartbeat_s <= 0 or self.resend_after_s <= 0 or self.outbox_size < 1 or self.inbox_size < 1:
            raise ValueError("heartbeat_s and resend_after_s must be > 0, outbox_size and inbox_size >= 1")

    @classmethod
    def from_config(cls, t: Any, **overrides: Any) -> ZmqSettings:
        """Settings from a :class:`~robot_rl.transport.config.ZmqTransportConfig` (fields it lacks keep defaults)."""
        names = ("heartbeat_s", "resend_after_s", "outbox_size", "inbox_size", "server_secret_key",
                 "allowed_clients_dir", "server_public_key", "client_secret_key", "outbox_policy", "spill_dir",
                 "spill_max_bytes", "copy_on_send", "coalesce")
        kwargs = {n: getattr(t, n) for n in names if hasattr(t, n)}
        kwargs.update(overrides)
        return cls(**kwargs)


def generate_keys(directory: str, name: str) -> tuple[str, str]:
    """Write a CURVE keypair ``<name>.key`` (public) and ``<name>.key_secret``; return both paths."""
    import zmq.auth

    os.makedirs(directory, exist_ok=True)
    public, secret = zmq.auth.create_certificates(directory, name)
    os.chmod(secret, 0o600)
    return str(public), str(secret)


def load_cert(path: str, what: str) -> tuple[bytes, bytes | None]:
    """``(public, secret)`` of a certificate file, or a ValueError that says how to make one."""
    import zmq.auth

    try:
        return zmq.auth.load_certificate(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the {what} at {path}: {e}; make one with `robot-rl keys generate`") from None


def curve_server_context(secret_key: str | None, allowed_clients_dir: str | None, who: str) -> tuple[Any, Any]:
    """``(context, authenticator)`` for a CURVE server, or the shared context and None without keys.

    The authenticator applies to every socket of its context, so a server with keys gets a private one.
    """
    import logging

    import zmq

    if not secret_key:
        return zmq.Context.instance(), None
    from zmq.auth.thread import ThreadAuthenticator

    if not allowed_clients_dir:
        raise ConfigError(f"CURVE needs allowed_clients_dir: the public keys of the {who} to accept")
    ctx: zmq.Context[Any] = zmq.Context()
    auth = ThreadAuthenticator(ctx, log=logging.getLogger("robot_rl.transport.auth"))
    auth.start()
    auth.configure_curve(domain="*", location=allowed_clients_dir)
    return ctx, auth


def curve_server(sock: Any, secret_key: str | None, what: str) -> None:
    """Make ``sock`` (before bind) a CURVE server with the certificate at ``secret_key``; no-op without one."""
    if not secret_key:
        return
    public, secret = load_cert(secret_key, what)
    if secret is None:
        raise ConfigError(f"{secret_key} holds no secret key (use the .key_secret file)")
    sock.curve_publickey = public
    sock.curve_secretkey = secret
    sock.curve_server = True


def curve_client_keys(server_public_key: str | None, client_secret_key: str | None, server: str,
                      client: str) -> tuple[bytes, bytes, bytes] | None:
    """``(server public, client public, client secret)`` from key files, None without a server key.

    Read once, up front, so a missing or wrong file fails where it is configured; ``server`` / ``client``
    name the two ends in errors.
    """
    if not server_public_key:
        return None
    if not client_secret_key:
        raise ConfigError(f"CURVE needs server_public_key and client_secret_key (this {client}'s .key_secret file)")
    server_public, _ = load_cert(server_public_key, f"{server}'s public key")
    public, secret = load_cert(client_secret_key, f"{client}'s secret key")
    if secret is None:
        raise ConfigError(f"{client_secret_key} holds no secret key (use the .key_secret file)")
    return server_public, public, secret


def curve_client(sock: Any, keys: tuple[bytes, bytes, bytes] | None) -> None:
    """Make ``sock`` (before connect) a CURVE client with :func:`curve_client_keys`; no-op for None."""
    if keys is not None:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = keys


def weights_arrays(weights: Weights) -> dict[str, np.ndarray]:
    """CPU numpy views of actor weights, ready for the wire."""
    return {k: v.detach().cpu().contiguous().numpy() for k, v in weights.items()}


class SeqWindow:
    """The set of sequence numbers received, stored as a floor plus the few above it (bounded memory)."""

    def __init__(self, floor: int = 0, above: set[int] | None = None) -> None:
        self.floor = floor  # every seq < floor was received
        self.above: set[int] = set(above or ())

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and (seq < self.floor or seq in self.above)

    def add(self, seq: int) -> None:
        """Record ``seq``."""
        self.above.add(seq)
        while self.floor in self.above:
            self.above.remove(self.floor)
            self.floor += 1

    def to_dict(self) -> dict[str, Any]:
        """Plain data for checkpoints."""
        return {"floor": self.floor, "above": sorted(self.above)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SeqWindow:
        """Inverse of :meth:`to_dict` (validated: it comes from a file)."""
        floor, above = d.get("floor"), d.get("above", [])
        if not isinstance(floor, int) or floor < 0 or not isinstance(above, list) \
                or not all(isinstance(s, int) and s > floor for s in above):
            raise ValueError(f"malformed sequence window {d!r}")
        return cls(floor, set(above))


class Waker:
    """Wakes an I/O thread blocked in ``zmq.Poller.poll`` when another thread queued work for it.

    A non-blocking pipe: any thread may call :meth:`wake` (one ``write``; a full pipe already means
    "awake"), the I/O thread polls :attr:`fd` next to its socket and calls :meth:`drain`. A wake while one
    is already pending writes nothing: one syscall per turn of the I/O thread, not one per chunk or ack.
    """

    def __init__(self) -> None:
        self.fd, self._w = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._w, False)
        self._pending = False

    def wake(self) -> None:
        """Make the next (or current) poll return at once."""
        # The caller queued its work before this check, and drain() clears the flag after reading the pipe
        # and before the I/O thread looks at its queues: work whose wake was skipped is seen on this turn.
        if self._pending:
            return
        self._pending = True
        try:
            os.write(self._w, b"\0")
        except (BlockingIOError, OSError):
            pass

    def drain(self) -> None:
        """Consume pending wake-ups (call before looking at the queues the wakers fill)."""
        try:
            while os.read(self.fd, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        self._pending = False

    def close(self) -> None:
        """Close both ends."""
        for fd in (self.fd, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
