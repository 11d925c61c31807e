"""ZeroMQ transport: the same endpoint protocols as the in-process one, across processes and machines.

Topology: the learner binds a ROUTER socket; each actor connects a DEALER. Each socket is owned by
one I/O thread (ZeroMQ sockets are not thread-safe); the training threads talk to it through
bounded queues, so an actor's control loop never blocks on the network.

Protocol (every message is :mod:`robot_rl.transport.codec` frames, never pickle):

- ``hello`` (actor → learner): actor id, actor session, the actor's EnvSpec. The learner answers
  ``welcome`` with ``ok`` or the spec mismatch, and its own session id. A learner that restarted
  has a new session id, which tells actors to resend everything not yet acknowledged.
- ``transitions`` (actor → learner, seq per actor session): validated against the spec, dropped
  if already received (dedup by ``(actor session, seq)``), and acknowledged with ``ack`` once the
  learner holds it (a full inbox leaves it unacknowledged, and the actor resends later).
- ``weights`` (learner → every actor): versioned; only the newest version is ever sent.
- ``heartbeat`` both ways; a peer silent for 3 intervals is reported dead in the log, and an actor
  then says ``hello`` again (ZeroMQ reconnects the TCP connection by itself).

An actor keeps unacknowledged chunks in a bounded outbox and resends them after
``resend_after_s`` or a reconnect, so a dropped connection or a learner restart loses nothing.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import zmq

from robot_rl.policies.base import Weights
from robot_rl.specs import EnvSpec, SpecMismatchError
from robot_rl.transition import TransitionBatch
from robot_rl.transport.base import TransportStats, VersionedWeights
from robot_rl.transport.codec import WireError, WireLimits, decode, encode
from robot_rl.transport.transition_codec import decode_transitions, encode_transitions

log = logging.getLogger(__name__)


@dataclass
class ZmqSettings:
    """Timing, bounds and (optional) CURVE keys shared by both ends.

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


def generate_keys(directory: str, name: str) -> tuple[str, str]:
    """Write a CURVE keypair ``<name>.key`` (public) and ``<name>.key_secret``; return both paths."""
    import os

    import zmq.auth

    os.makedirs(directory, exist_ok=True)
    public, secret = zmq.auth.create_certificates(directory, name)
    os.chmod(secret, 0o600)
    return str(public), str(secret)


def _load_cert(path: str, what: str) -> tuple[bytes, bytes | None]:
    import zmq.auth

    try:
        return zmq.auth.load_certificate(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read the {what} at {path}: {e}; make one with `robot-rl keys generate`") from None


def _weights_arrays(weights: Weights) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().contiguous().numpy() for k, v in weights.items()}


class _SeqWindow:
    """The set of sequence numbers received, stored as a floor plus the few above it (bounded memory)."""

    def __init__(self) -> None:
        self.floor = 0  # every seq < floor was received
        self.above: set[int] = set()

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and (seq < self.floor or seq in self.above)

    def add(self, seq: int) -> None:
        self.above.add(seq)
        while self.floor in self.above:
            self.above.remove(self.floor)
            self.floor += 1


class ZmqLearnerEndpoint:
    """Learner side: ``recv`` transitions, ``publish_weights``; implements ``LearnerEndpoint``."""

    def __init__(self, address: str, spec: EnvSpec, settings: ZmqSettings | None = None) -> None:
        self.spec = spec
        self.settings = settings or ZmqSettings()
        self.stats = TransportStats()
        self.session = uuid.uuid4().hex[:12]
        self._auth: Any = None
        if self.settings.server_secret_key:
            # A private context: the authenticator applies to every socket of its context.
            from zmq.auth.thread import ThreadAuthenticator

            if not self.settings.allowed_clients_dir:
                raise ValueError("CURVE needs allowed_clients_dir: the public keys of the actors to accept")
            self._ctx: zmq.Context[Any] = zmq.Context()
            self._auth = ThreadAuthenticator(self._ctx, log=logging.getLogger("robot_rl.transport.auth"))
            self._auth.start()
            self._auth.configure_curve(domain="*", location=self.settings.allowed_clients_dir)
        else:
            self._ctx = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        if self.settings.server_secret_key:
            public, secret = _load_cert(self.settings.server_secret_key, "learner's secret key")
            if secret is None:
                raise ValueError(f"{self.settings.server_secret_key} holds no secret key (use the .key_secret file)")
            self._sock.curve_publickey = public
            self._sock.curve_secretkey = secret
            self._sock.curve_server = True
        self._sock.bind(address)
        self.address = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._inbox: queue.Queue[tuple[bytes, TransitionBatch]] = queue.Queue(self.settings.inbox_size)
        self._acks: queue.Queue[tuple[bytes, int]] = queue.Queue()
        self._weights: VersionedWeights | None = None
        self._weights_lock = threading.Lock()
        self._peers: dict[bytes, dict[str, Any]] = {}  # routing id → {session, actor_id, last_seen, version}
        self._seen: dict[str, _SeqWindow] = {}  # actor session → seqs received
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._io_loop, name="zmq-learner-io", daemon=True)
        self._thread.start()

    # ---- LearnerEndpoint --------------------------------------------------------------------

    def recv(self, timeout_s: float) -> TransitionBatch | None:
        """The next validated, de-duplicated batch."""
        try:
            _peer, batch = self._inbox.get(timeout=timeout_s) if timeout_s > 0 else self._inbox.get_nowait()
        except queue.Empty:
            return None
        self.stats.batches_received += 1
        self.stats.transitions_received += len(batch)
        return batch

    def publish_weights(self, weights: VersionedWeights) -> None:
        """Make ``weights`` the newest; the I/O thread sends them to every actor that lacks them."""
        with self._weights_lock:
            self._weights = weights

    def pending(self) -> int:
        """Batches received and not yet taken by the learner."""
        return self._inbox.qsize()

    def peers(self) -> dict[int, int]:
        """Connected actors: actor id → weight version they last reported."""
        return {p["actor_id"]: p["version"] for p in list(self._peers.values())}

    def close(self) -> None:
        """Stop the I/O thread and close the socket."""
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close(0)
        if self._auth is not None:
            self._auth.stop()

    # ---- I/O thread -------------------------------------------------------------------------

    def _send(self, peer: bytes, frames: list[Any]) -> None:
        try:
            self._sock.send_multipart([peer, *frames], flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:  # peer's pipe is full; heartbeats and resends recover
            pass

    def _reject(self, reason: str, detail: str) -> None:
        self.stats.reject(reason)
        if self.stats.rejected[reason] == 1:
            log.warning("rejected a message (%s): %s; further rejects of this kind are only counted", reason, detail)

    def _io_loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        sent_version: dict[bytes, int] = {}
        last_beat = 0.0
        while not self._stop.is_set():
            for _ in range(64):
                if not poller.poll(0 if _ else 20):
                    break
                frames = self._sock.recv_multipart(copy=False)
                self._handle(frames[0].bytes, [f.buffer for f in frames[1:]])
            while True:
                try:
                    peer, seq = self._acks.get_nowait()
                except queue.Empty:
                    break
                self._send(peer, encode("ack", self.session, seq))
            with self._weights_lock:
                w = self._weights
            if w is not None:
                frames_w: list[Any] | None = None
                for peer in list(self._peers):
                    if sent_version.get(peer, -1) < w.version:
                        frames_w = frames_w or encode("weights", self.session, w.version, _weights_arrays(w.weights),
                                                      meta={"version": w.version})
                        self._send(peer, frames_w)
                        sent_version[peer] = w.version
            now = time.monotonic()
            if now - last_beat >= self.settings.heartbeat_s:
                last_beat = now
                for peer, info in list(self._peers.items()):
                    if now - info["last_seen"] > 3 * self.settings.heartbeat_s and not info.get("dead"):
                        info["dead"] = True
                        log.warning("actor %d (session %s) silent for %.1fs: considered dead", info["actor_id"],
                                    info["session"], now - info["last_seen"])
                    self._send(peer, encode("heartbeat", self.session, 0))

    def _handle(self, peer: bytes, frames: list[Any]) -> None:
        try:
            head = decode(frames[:1], self.settings.limits) if len(frames) >= 1 else None
        except WireError:
            head = None
        kind = head.type if head is not None else None
        info = self._peers.get(peer)
        if kind == "hello" and head is not None:
            self._hello(peer, head.meta)
            return
        if info is None:
            self._reject("no_handshake", f"{kind or 'malformed'} message before hello")
            return
        info["last_seen"] = time.monotonic()
        info["dead"] = False
        if kind == "heartbeat" and head is not None:
            version = head.meta.get("version")
            if isinstance(version, int):
                info["version"] = version
            return
        if kind == "bye":
            self._peers.pop(peer, None)
            return
        try:
            batch = decode_transitions(frames, self.spec, self.settings.limits)
        except WireError as e:
            self._reject(e.reason, str(e))
            return
        seen = self._seen.setdefault(info["session"], _SeqWindow())
        if batch.seq in seen:
            self.stats.reject("duplicate")
            self._acks.put((peer, batch.seq))  # the first ack was lost; say it again
            return
        batch.actor_id = info["actor_id"]
        try:
            self._inbox.put_nowait((peer, batch))
        except queue.Full:
            return  # not acknowledged: the actor resends it later (back-pressure without loss)
        seen.add(batch.seq)
        # Acknowledged once it is in the learner's hands (its inbox). Durable acknowledgement, after
        # the replay segment is on disk, comes with crash-safe replay persistence.
        self._acks.put((peer, batch.seq))

    def _hello(self, peer: bytes, meta: dict[str, Any]) -> None:
        actor_id, session, spec_d = meta.get("actor_id"), meta.get("session"), meta.get("spec")
        try:
            if not isinstance(actor_id, int) or not isinstance(session, str) or not isinstance(spec_d, dict):
                raise SpecMismatchError("hello needs actor_id, session and spec")
            self.spec.assert_compatible(EnvSpec.from_dict(spec_d), what=f"actor {actor_id}")
        except (SpecMismatchError, KeyError, TypeError, ValueError) as e:
            self._reject("handshake", str(e))
            self._send(peer, encode("welcome", self.session, 0, meta={"ok": False, "error": str(e)}))
            return
        self._peers[peer] = {"actor_id": actor_id, "session": session, "last_seen": time.monotonic(),
                             "version": -1}
        log.info("actor %d connected (session %s)", actor_id, session)
        self._send(peer, encode("welcome", self.session, 0, meta={"ok": True}))


class ZmqActorEndpoint:
    """Actor side: ``send`` (never blocks on the network), ``poll_weights``/``wait_weights``."""

    def __init__(self, address: str, actor_id: int, spec: EnvSpec, settings: ZmqSettings | None = None) -> None:
        self.actor_id = actor_id
        self.spec = spec
        self.settings = settings or ZmqSettings()
        self.session = uuid.uuid4().hex[:12]
        self.stats = TransportStats()
        self._ctx: zmq.Context[Any] = zmq.Context.instance()
        self._address = address
        if self.settings.server_public_key:  # fail here, not later inside the I/O thread
            self._connect().close(0)
        self._outgoing: queue.Queue[TransitionBatch] = queue.Queue(self.settings.outbox_size)
        self._outbox: OrderedDict[int, tuple[list[Any], float]] = OrderedDict()  # seq → (frames, sent at)
        self._outbox_lock = threading.Lock()
        self._seq = 0
        self._weights: VersionedWeights | None = None
        self._cond = threading.Condition()
        self.connected = threading.Event()
        self.handshake_error: str | None = None
        self.acked = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._io_loop, name=f"zmq-actor-{actor_id}-io", daemon=True)
        self._thread.start()

    # ---- ActorEndpoint ----------------------------------------------------------------------

    def send(self, batch: TransitionBatch, timeout_s: float) -> bool:
        """Queue ``batch`` for sending; ``False`` if the bounded outbox stayed full for ``timeout_s``."""
        try:
            self._outgoing.put(batch, timeout=timeout_s)
        except queue.Full:
            self.stats.send_timeouts += 1
            return False
        self.stats.batches_sent += 1
        return True

    def poll_weights(self, newer_than: int) -> VersionedWeights | None:
        """Newest weights if newer than ``newer_than``; never blocks."""
        w = self._weights
        return w if w is not None and w.version > newer_than else None

    def wait_weights(self, newer_than: int, timeout_s: float) -> VersionedWeights | None:
        """Block up to ``timeout_s`` for weights newer than ``newer_than``."""
        with self._cond:
            self._cond.wait_for(lambda: self._weights is not None and self._weights.version > newer_than,
                                timeout=timeout_s)
        return self.poll_weights(newer_than)

    def unacked(self) -> int:
        """Chunks sent or queued but not yet acknowledged by the learner."""
        with self._outbox_lock:
            return len(self._outbox) + self._outgoing.qsize()

    def close(self) -> None:
        """Stop the I/O thread (unacknowledged chunks are reported, not silently dropped)."""
        self._stop.set()
        self._thread.join(timeout=5)
        left = self.unacked()
        if left:
            log.warning("actor %d closing with %d unacknowledged chunks", self.actor_id, left)

    # ---- I/O thread -------------------------------------------------------------------------

    def _connect(self) -> zmq.Socket[Any]:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        s = self.settings
        if s.server_public_key:
            if not s.client_secret_key:
                raise ValueError("CURVE needs client_secret_key: this actor's .key_secret file")
            server_public, _ = _load_cert(s.server_public_key, "learner's public key")
            public, secret = _load_cert(s.client_secret_key, "actor's secret key")
            if secret is None:
                raise ValueError(f"{s.client_secret_key} holds no secret key (use the .key_secret file)")
            sock.curve_serverkey = server_public
            sock.curve_publickey = public
            sock.curve_secretkey = secret
        sock.connect(self._address)
        sock.send_multipart(encode("hello", self.session, 0, meta={
            "actor_id": self.actor_id, "session": self.session, "spec": self.spec.to_dict()}), copy=False)
        return sock

    def _io_loop(self) -> None:
        s = self.settings
        sock = self._connect()
        learner_session: str | None = None
        last_heard = time.monotonic()
        last_beat = 0.0
        while not self._stop.is_set():
            # Outgoing: new chunks get a sequence number and enter the outbox until acknowledged.
            while len(self._outbox) < s.outbox_size:
                try:
                    batch = self._outgoing.get_nowait()
                except queue.Empty:
                    break
                batch.actor_id, batch.seq = self.actor_id, self._seq
                self._seq += 1
                frames = encode_transitions(batch, self.session)
                with self._outbox_lock:
                    self._outbox[batch.seq] = (frames, 0.0)
            now = time.monotonic()
            if self.connected.is_set():
                with self._outbox_lock:
                    due = [(q, f) for q, (f, t) in self._outbox.items() if now - t >= s.resend_after_s]
                    for q, f in due:
                        self._outbox[q] = (f, now)
                for _, f in due:
                    try:
                        sock.send_multipart(f, flags=zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
            if now - last_beat >= s.heartbeat_s:
                last_beat = now
                version = self._weights.version if self._weights is not None else -1
                try:
                    sock.send_multipart(encode("heartbeat", self.session, 0, meta={"version": version}),
                                        flags=zmq.NOBLOCK)
                except zmq.Again:
                    pass
            if now - last_heard > 3 * s.heartbeat_s and self.connected.is_set():
                log.warning("actor %d: learner silent for %.1fs; reconnecting", self.actor_id, now - last_heard)
                self.connected.clear()
                sock.close(0)
                sock = self._connect()
                last_heard = now
            if not sock.poll(10):
                continue
            while sock.poll(0):
                received = sock.recv_multipart(copy=False)
                last_heard = time.monotonic()
                try:
                    msg = decode([f.buffer for f in received], s.limits)
                except WireError as e:
                    self.stats.reject(e.reason)
                    continue
                if msg.type == "welcome":
                    if not msg.meta.get("ok"):
                        self.handshake_error = str(msg.meta.get("error"))
                        log.error("actor %d: learner refused the handshake: %s", self.actor_id, self.handshake_error)
                        continue
                    if learner_session is not None and msg.session != learner_session:
                        log.warning("actor %d: learner restarted; resending %d unacknowledged chunks",
                                    self.actor_id, len(self._outbox))
                    learner_session = msg.session
                    with self._outbox_lock:  # resend everything unacknowledged to this (new) learner
                        for q in self._outbox:
                            self._outbox[q] = (self._outbox[q][0], 0.0)
                    self.connected.set()
                elif msg.type == "ack":
                    with self._outbox_lock:
                        if self._outbox.pop(msg.seq, None) is not None:
                            self.acked += 1
                elif msg.type == "weights":
                    new_version = msg.meta.get("version")
                    if isinstance(new_version, int) and (self._weights is None or new_version > self._weights.version):
                        weights = {k: torch.from_numpy(v.copy()) for k, v in msg.arrays.items()}
                        with self._cond:
                            self._weights = VersionedWeights(new_version, weights)
                            self._cond.notify_all()
                elif msg.type == "heartbeat" and learner_session is not None and msg.session != learner_session:
                    # A restarted learner does not know us: say hello again.
                    self.connected.clear()
                    sock.send_multipart(encode("hello", self.session, 0, meta={
                        "actor_id": self.actor_id, "session": self.session, "spec": self.spec.to_dict()}))
        sock.close(0)
