"""The learner's ZeroMQ endpoint: a ROUTER socket on its own I/O thread.

The I/O thread talks the protocol (hello/welcome, heartbeats, weights, acknowledgements) and checks
every message; what it delivers goes through a :class:`~robot_rl.transport.zmq_sessions.SessionLedger`,
which per actor session delivers chunks exactly once and in sequence order (a chunk that arrives ahead
of a missing one waits for it), acknowledges a chunk once the learner holds it (``ack_after=recv``)
or once the learner says it is stored (``ack_after=confirm``), and keeps the acknowledged sequence
numbers as a small window per session that :meth:`ZmqLearnerEndpoint.state_dict` hands to the
checkpoint. See :mod:`robot_rl.transport.zmq_transport` for the protocol.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import zmq

from robot_rl.core.config import ConfigError
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.core.transition import TransitionBatch
from robot_rl.core.transport import CutSession, TransportStats, VersionedWeights
from robot_rl.transport.codec import WireError, decode, encode, unpack_header
from robot_rl.transport.fair_inbox import jain_index
from robot_rl.transport.peer_monitor import PeerMonitor
from robot_rl.transport.transition_codec import TransitionPlan, decode_transitions
from robot_rl.transport.zmq_common import (
    Waker,
    ZmqSettings,
    curve_server,
    curve_server_context,
    weights_arrays,
)
from robot_rl.transport.zmq_sessions import SessionLedger

log = logging.getLogger(__name__)

__all__ = ["CutSession", "ZmqLearnerEndpoint"]

#: Chunks one ``ack`` or ``held`` message names at most (the wire's lists hold 1,024 items).
_SEQS_PER_NOTICE = 512


class ZmqLearnerEndpoint:
    """Learner side: ``recv`` transitions, ``publish_weights``; implements ``LearnerEndpoint``."""

    def __init__(self, address: str, spec: EnvSpec, settings: ZmqSettings | None = None) -> None:
        self.spec = spec
        self.settings = settings or ZmqSettings()
        self._plan = TransitionPlan(spec)  # per-array checks compiled once, not per chunk
        self.stats = TransportStats()
        #: Messages from well-formed peers this learner instance does not know (asked to hello; not rejects).
        self.unknown_peer_messages = 0
        self._asked_hello: dict[bytes, float] = {}
        self.session = uuid.uuid4().hex[:12]
        self._ctx, self._auth = curve_server_context(self.settings.server_secret_key,
                                                     self.settings.allowed_clients_dir, "actors")
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        curve_server(self._sock, self.settings.server_secret_key, "learner's secret key")
        self.monitor = PeerMonitor(self._sock, self.stats)
        try:
            self._sock.bind(address)
        except zmq.ZMQError as e:
            self.monitor.close()
            self._sock.close(0)
            if self._auth is not None:
                self._auth.stop()
            if e.errno == zmq.EADDRINUSE:
                raise ConfigError(f"{address} is already in use: another learner (or another program) listens "
                                  "there; stop it, or bind another port (--bind tcp://HOST:PORT, or port * for any "
                                  "free one)") from e
            raise ConfigError(f"cannot bind the learner to {address}: {e}") from e
        self.address = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._waker = Waker()  # acks and weights queued by the learner go out at once, not at the next poll
        self._ledger = SessionLedger(self.settings, self.stats, self._waker.wake)
        self._weights: VersionedWeights | None = None
        self._lock = threading.Lock()  # guards _weights
        self._peers: dict[bytes, dict[str, Any]] = {}  # routing id → actor id, session, last_seen, version, …
        self._session_peer: dict[str, bytes] = {}  # actor session → its newest connection's routing id
        self._last_metrics = (time.monotonic(), 0, 0)  # (time, transitions, bytes) at the last metrics()
        self._finished: str | None = None  # why the run ended, once finish() said so
        self._bye_pending = False
        self._last_actor_transitions: dict[int, int] = {}  # per actor, at the last metrics()
        #: Per actor session: (actor id, transitions its actor dropped, loop.on_backlog=drop), from its heartbeats.
        self._dropped: dict[str, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._io_loop, name="zmq-learner-io", daemon=True)
        self._thread.start()

    # ---- LearnerEndpoint --------------------------------------------------------------------

    def recv(self, timeout_s: float) -> TransitionBatch | None:
        """The next validated, de-duplicated batch (per actor session in sequence order)."""
        return self._ledger.take(timeout_s)

    def confirm(self, batch: TransitionBatch) -> None:
        """Say ``batch`` (from :meth:`recv`) is stored: it enters :meth:`state_dict` and is acknowledged.

        With ``ack_after=confirm`` call this once the batch is in the replay; the actor keeps and
        resends the chunk until then. With ``ack_after=durable`` the acknowledgement waits for
        :meth:`flush_acks`. Idempotent.
        """
        self._ledger.confirm(batch)

    def session_of(self, batch: TransitionBatch) -> str | None:
        """The actor session ``batch`` (from :meth:`recv`, not yet confirmed) came from."""
        return self._ledger.session_of(batch)

    def flush_acks(self) -> int:
        """Acknowledge every confirmed chunk (``ack_after=durable``); returns how many.

        Call it after committing a checkpoint that holds the data and :meth:`state_dict`.
        """
        return self._ledger.flush_acks()

    def publish_weights(self, weights: VersionedWeights) -> None:
        """Make ``weights`` the newest; the I/O thread sends them to every actor that lacks them."""
        with self._lock:
            self._weights = weights
        self._waker.wake()

    def pending(self) -> int:
        """Batches received and not yet taken by the learner."""
        return self._ledger.pending()

    def acks_pending(self) -> int:
        """Batches received (held, or taken and not yet confirmed) that the actors wait to hear about."""
        return self._ledger.acks_pending()

    @property
    def bytes_received(self) -> int:
        """Bytes of the chunks delivered to the inbox so far."""
        return self._ledger.bytes_received

    def peers(self) -> dict[int, int]:
        """Connected actors: actor id → weight version they last reported."""
        return {p["actor_id"]: p["version"] for p in list(self._peers.values()) if not p.get("dead")}

    def weight_lag(self) -> dict[int, int]:
        """Per connected actor: newest published version minus the version it acts with."""
        with self._lock:
            newest = self._weights.version if self._weights is not None else 0
        return {a: max(newest - v, 0) if v >= 0 else newest for a, v in self.peers().items()}

    def metrics(self) -> dict[str, float]:
        """Rates since the previous call, queue depths, acks pending, rejects by reason, and per actor.

        Per actor: transitions per second, its share of them, transitions in all, weight lag, resent chunks dropped
        as duplicates and transitions its actor dropped (``loop.on_backlog=drop``). ``fairness``: Jain's index of the
        connected actors' transitions per env since the previous call (1: each env served alike).
        """
        now = time.monotonic()
        t0, n0, b0 = self._last_metrics
        n, b = self.stats.transitions_received, self.bytes_received
        per_actor = dict(self._ledger.actor_transitions)
        before, self._last_actor_transitions = self._last_actor_transitions, per_actor
        self._last_metrics = (now, n, b)
        dt = max(now - t0, 1e-6)
        lag = self.weight_lag()
        out: dict[str, float] = {
            "transitions_per_s": (n - n0) / dt, "mb_per_s": (b - b0) / dt / 1e6, "inbox": float(self.pending()),
            "held_ahead": float(self._ledger.held_ahead()),
            "acks_pending": float(self.acks_pending()), "actors": float(len(lag)),
            "weight_lag_max": float(max(lag.values(), default=0)),
            "unknown_peer_messages": float(self.unknown_peer_messages),
        }
        out.update({f"rejects/{k}": float(v) for k, v in sorted(self.stats.rejected.items())})
        out.update({f"weight_lag/actor{a}": float(v) for a, v in sorted(lag.items())})
        out.update({f"transitions_per_s/actor{a}": (v - before.get(a, 0)) / dt for a, v in sorted(per_actor.items())})
        out.update(self._shares(per_actor, before, lag))
        out.update({f"duplicates/actor{a}": float(v) for a, v in sorted(self._ledger.actor_duplicates.items())})
        return out

    def _shares(self, per_actor: dict[int, int], before: dict[int, int], connected: dict[int, int]) -> dict[str, float]:
        """Each actor's share of the transitions since the last call, its totals, and the window's fairness."""
        window = {a: v - before.get(a, 0) for a, v in per_actor.items()}
        total = sum(window.values())
        out = {f"share/actor{a}": v / total for a, v in sorted(window.items()) if total}
        out.update({f"transitions/actor{a}": float(v) for a, v in sorted(per_actor.items())})
        dropped: dict[int, int] = {}
        for actor, n in list(self._dropped.values()):
            dropped[actor] = dropped.get(actor, 0) + n
        out.update({f"dropped/actor{a}": float(v) for a, v in sorted(dropped.items())})
        weights = self._ledger.actor_weights
        if total and connected:
            out["fairness"] = jain_index([window.get(a, 0) / weights.get(a, 1) for a in connected])
        return out

    def pop_cut_sessions(self) -> list[CutSession]:
        """Actor sessions found cut (the process died mid-run), once :meth:`recv` handed out their chunks.

        The learner marks the last stored step of each cut episode truncated.
        """
        return self._ledger.pop_cut_sessions()

    def state_dict(self) -> dict[str, Any]:
        """The acknowledged sequence windows per actor session (plain data for the checkpoint).

        Saved together with the stored transitions, it lets a restarted learner drop the resends of
        chunks it had already stored: zero duplicates across a learner crash.
        """
        return self._ledger.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (call before actors resend; a malformed state raises ValueError)."""
        self._ledger.load_state_dict(state)

    def merge_state_dict(self, state: dict[str, Any]) -> None:
        """Add the sequence windows of ``state`` (same form as :meth:`state_dict`) to the ones held.

        A learner with replay on disk calls it with the windows its newest segment recorded: they
        are newer than the checkpoint's. Malformed input raises ValueError.
        """
        self._ledger.merge_state_dict(state)

    def finish(self, reason: str) -> None:
        """The run is over: tell every actor (and any that connects later) to stop instead of waiting."""
        self._finished, self._bye_pending = reason, True
        self._waker.wake()

    def close(self) -> None:
        """Stop the I/O thread, send the acknowledgements already queued (best effort), close the socket."""
        self._stop.set()
        self._thread.join(timeout=5)
        sent = self._send_notices() if not self._thread.is_alive() else 0
        if self._bye_pending and not self._thread.is_alive():
            sent += self._say_run_over()
        self.monitor.close()
        # LINGER 0 would discard those last acknowledgements; the actors would wait for them in vain.
        self._sock.close(1000 if sent else 0)
        self._waker.close()
        if self._auth is not None:
            self._auth.stop()


    # ---- I/O thread -------------------------------------------------------------------------

    def _send(self, peer: bytes, frames: list[Any]) -> bool:
        try:
            self._sock.send_multipart([peer, *frames], flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:  # peer's pipe is full; heartbeats and resends recover
            return False
        except zmq.ZMQError:  # peer vanished (ROUTER_MANDATORY unset: normally silent)
            return False

    def _reject(self, reason: str, detail: str) -> None:
        self.stats.reject(reason)
        if self.stats.rejected[reason] == 1:
            log.warning("rejected a message (%s): %s; further rejects of this kind are only counted", reason, detail)
    def _io_loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._waker.fd, zmq.POLLIN)
        last_beat = 0.0
        while not self._stop.is_set():
            poller.poll(50)
            self._waker.drain()
            for _ in range(64):  # then serve acks and weights, so a burst cannot starve them
                try:
                    frames = self._sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                self._handle(frames[0].bytes, [f.buffer for f in frames[1:]])
            self._ledger.release_waiting()
            self._send_notices()
            if self._bye_pending:
                self._say_run_over()
            now = time.monotonic()
            self._send_weights(now)
            if now - last_beat >= self.settings.heartbeat_s:
                last_beat = now
                self._heartbeat(now)

    def _send_notices(self) -> int:
        """Send the queued ``ack`` and ``held`` notices, several chunks of one session per message; how many went.

        To the session's connection now: an actor that reconnected has a new socket, and the ROUTER drops what is
        addressed to the old one.
        """
        sent = 0
        for kind, notices in (("ack", self._ledger.acks), ("held", self._ledger.helds)):
            if not notices:
                continue
            by_session: dict[str, tuple[bytes, list[int]]] = {}
            while notices:
                peer, session, seq = notices.popleft()
                by_session.setdefault(session, (peer, []))[1].append(seq)
            for session, (peer, seqs) in by_session.items():
                for i in range(0, len(seqs), _SEQS_PER_NOTICE):
                    part = seqs[i:i + _SEQS_PER_NOTICE]
                    sent += self._send(self._session_peer.get(session, peer),
                                       encode(kind, session, part[0], meta={"seqs": part}))
        return sent

    def _run_over(self) -> list[Any]:
        return encode("bye", self.session, 0, meta={"final": True, "reason": self._finished})

    def _say_run_over(self) -> int:
        """The learner's goodbye to every known actor; how many it reached."""
        self._bye_pending = False
        return sum(self._send(peer, self._run_over()) for peer in list(self._peers))

    def _send_weights(self, now: float) -> None:
        with self._lock:
            w = self._weights
        if w is None:
            return
        frames: list[Any] | None = None
        for peer, info in list(self._peers.items()):
            # Send a version once; send it again if the actor still reports an older one after a
            # while (the message was lost, or the actor was stalled): every actor converges.
            if info["sent_version"] < w.version or (
                    info["version"] < w.version and now - info["sent_at"] > self.settings.resend_after_s):
                frames = frames or encode("weights", self.session, w.version, weights_arrays(w.weights),
                                          meta={"version": w.version})
                if self._send(peer, frames):
                    info["sent_version"], info["sent_at"] = w.version, now

    def _heartbeat(self, now: float) -> None:
        with self._lock:
            version = self._weights.version if self._weights is not None else -1
        acked = self._ledger.acked_floors({info["session"] for info in self._peers.values()})
        for peer, info in list(self._peers.items()):
            if now - info["last_seen"] > 3 * self.settings.heartbeat_s:
                if not info.get("dead"):
                    info["dead"] = True
                    log.warning("actor %d (session %s) silent for %.1fs: considered dead", info["actor_id"],
                                info["session"], now - info["last_seen"])
                if now - info["last_seen"] > 60 * self.settings.heartbeat_s:
                    self._peers.pop(peer, None)  # long gone: stop heartbeating it (it re-hellos if alive)
                    continue
            # "received": the actor's chunks below it are here (a lease renewed every beat): it resends none of
            # them while the beats come, however long a busy learner takes to store them.
            has = self._ledger.received(info["session"])
            meta: dict[str, Any] = {"version": version}
            if has is not None:
                meta["received"], meta["held"] = has
            if info["session"] in acked:
                meta["acked"] = acked[info["session"]]
            self._send(peer, encode("heartbeat", self.session, 0, meta=meta))

    def _ask_hello(self, peer: bytes) -> None:
        """Send an unknown peer a heartbeat that asks it to hello again (at most once per resend interval)."""
        self.unknown_peer_messages += 1
        now = time.monotonic()
        if now - self._asked_hello.get(peer, -1e9) < self.settings.resend_after_s:
            return
        self._asked_hello[peer] = now
        if len(self._asked_hello) > 1024:  # bounded: forget the oldest peers
            for old in sorted(self._asked_hello, key=self._asked_hello.__getitem__)[:512]:
                del self._asked_hello[old]
        with self._lock:
            version = self._weights.version if self._weights is not None else -1
        self._send(peer, encode("heartbeat", self.session, 0, meta={"version": version, "hello": True}))

    def _handle(self, peer: bytes, frames: list[Any]) -> None:
        try:
            header = unpack_header(frames[0], self.settings.limits) if frames else {}
        except WireError:
            header = {}
        kind = header.get("type")
        if self._finished is not None and kind in ("hello", "heartbeat", "transitions"):
            self._send(peer, self._run_over())  # an actor that missed the goodbye, or connects after the end
            return
        info = self._peers.get(peer)
        meta: dict[str, Any] = {}
        if kind in ("hello", "heartbeat", "bye"):
            try:
                meta = decode(frames, self.settings.limits).meta
            except WireError as e:
                self._reject(e.reason, str(e))
                return
            if kind == "hello":
                self._hello(peer, meta)
                return
        if info is None:
            if kind in ("heartbeat", "transitions") and isinstance(header.get("session"), str):
                # A well-formed peer this learner does not know: it talked to a learner that restarted, or was
                # dropped after a long silence. Ask it to say hello; its unacked chunks come again after that.
                self._ask_hello(peer)
                return
            self._reject("no_handshake", f"{kind if isinstance(kind, str) else 'unreadable'} message before hello")
            return
        info["last_seen"] = time.monotonic()
        if info.get("dead"):
            info["dead"] = False
            log.info("actor %d is back", info["actor_id"])
        if kind == "heartbeat":
            version, floor, dropped = meta.get("version"), meta.get("floor"), meta.get("dropped")
            if isinstance(version, int):
                info["version"] = version
            if isinstance(dropped, int) and dropped >= 0 and header.get("session") == info["session"]:
                self._dropped[info["session"]] = (info["actor_id"], dropped)
            if isinstance(floor, int) and header.get("session") == info["session"]:
                self._ledger.skip_to(info["actor_id"], info["session"], floor)
            return
        if kind == "bye":
            self._peers.pop(peer, None)
            self._ledger.forget_actor(info["actor_id"])
            log.info("actor %d said goodbye", info["actor_id"])
            return
        seq = header.get("seq")
        if header.get("session") == info["session"] and isinstance(seq, int) and self._ledger.duplicate(
                peer, info["actor_id"], info["session"], seq):
            return  # a resend of a chunk we hold: no need to check its arrays again
        try:
            batch = decode_transitions(frames, self.spec, self.settings.limits, self._plan, header or None)
        except WireError as e:
            self._reject(e.reason, str(e))
            return
        if header.get("session") != info["session"]:
            self._reject("wrong_session", f"chunk of session {header.get('session')!r} on a connection of session "
                                          f"{info['session']!r}")
            return
        self._ledger.deliver(peer, info["actor_id"], info["session"], batch,
                             sum(memoryview(f).nbytes for f in frames))

    def _hello(self, peer: bytes, meta: dict[str, Any]) -> None:
        actor_id, session, spec_d = meta.get("actor_id"), meta.get("session"), meta.get("spec")
        resume_seq = meta.get("resume_seq", 0)
        try:
            if not isinstance(actor_id, int) or not isinstance(session, str) or not isinstance(spec_d, dict) \
                    or not isinstance(resume_seq, int) or resume_seq < 0:
                raise SpecMismatchError("hello needs actor_id, session, resume_seq and spec")
            self.spec.assert_compatible(EnvSpec.from_dict(spec_d), what=f"actor {actor_id}")
        except (SpecMismatchError, KeyError, TypeError, ValueError) as e:
            self._reject("handshake", str(e))
            self._send(peer, encode("welcome", self.session, 0, meta={"ok": False, "error": str(e)}))
            return
        num_envs = meta.get("num_envs", 1)  # absent from older actors: an equal share
        self._ledger.open_session(actor_id, session, resume_seq,
                                  num_envs if isinstance(num_envs, int) and num_envs > 0 else 1)
        for p, info in list(self._peers.items()):  # the same actor on a new connection replaces the old one
            if info["actor_id"] == actor_id and p != peer:
                self._peers.pop(p)
        known = self._peers.get(peer)
        self._session_peer[session] = peer
        if len(self._session_peer) > 4096:  # bounded: forget the oldest sessions
            del self._session_peer[next(iter(self._session_peer))]
        self._peers[peer] = {"actor_id": actor_id, "session": session, "last_seen": time.monotonic(),
                             "version": known["version"] if known else -1, "sent_version": -1, "sent_at": 0.0}
        log.info("actor %d connected (session %s)", actor_id, session)
        self._send(peer, encode("welcome", self.session, 0, meta={"ok": True}))
        self._ledger.release_session(session)
