"""The learner's ZeroMQ endpoint: a ROUTER socket on its own I/O thread.

Per actor session it delivers chunks exactly once and in sequence order (a chunk that arrives ahead
of a missing one waits for it), acknowledges a chunk once the learner holds it (``ack_after=recv``)
or once the learner says it is stored (``ack_after=confirm``), and keeps the acknowledged sequence
numbers as a small window per session that :meth:`ZmqLearnerEndpoint.state_dict` hands to the
checkpoint. See :mod:`robot_rl.transport.zmq_transport` for the protocol.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import zmq

from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.core.transition import TransitionBatch
from robot_rl.core.transport import CutSession, TransportStats, VersionedWeights
from robot_rl.transport.codec import WireError, decode, encode, unpack_header
from robot_rl.transport.peer_monitor import PeerMonitor
from robot_rl.transport.transition_codec import TransitionPlan, decode_transitions
from robot_rl.transport.zmq_common import (
    SeqWindow,
    Waker,
    ZmqSettings,
    curve_server,
    curve_server_context,
    weights_arrays,
)

log = logging.getLogger(__name__)

_MAX_SESSIONS = 4096  # acknowledged windows kept (oldest sessions forgotten first)


@dataclass
class _Session:
    actor_id: int
    next_seq: int = 0  # every seq below was delivered to the inbox
    ahead: dict[int, tuple[bytes, TransitionBatch, int]] | None = None  # seq → (peer, batch, bytes)


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
        self._sock.bind(address)
        self.address = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._inbox: queue.Queue[tuple[bytes, str, TransitionBatch, int]] = queue.Queue(self.settings.inbox_size)
        self._acks: queue.Queue[tuple[bytes, str, int]] = queue.Queue()
        self._weights: VersionedWeights | None = None
        self._lock = threading.Lock()  # guards _weights, _stored, _unconfirmed, _cuts
        self._peers: dict[bytes, dict[str, Any]] = {}  # routing id → actor id, session, last_seen, version, …
        self._sessions: dict[str, _Session] = {}  # I/O thread only
        self._stored: OrderedDict[str, SeqWindow] = OrderedDict()  # acknowledged seqs per session
        self._unconfirmed: dict[int, tuple[TransitionBatch, bytes, str]] = {}  # id(batch) → (batch, peer, session)
        self._unflushed: dict[tuple[str, int], bytes] = {}  # confirmed, ack waiting for flush_acks()
        self._actor_session: dict[int, str] = {}
        self._cuts: list[CutSession] = []  # waiting until the cut session's chunks have left the inbox
        self._in_inbox: dict[str, int] = {}  # session → chunks of it in the inbox
        self.bytes_received = 0
        self._last_metrics = (time.monotonic(), 0, 0)  # (time, transitions, bytes) at the last metrics()
        self._stop = threading.Event()
        self._waker = Waker()  # acks and weights queued by the learner go out at once, not at the next poll
        self._thread = threading.Thread(target=self._io_loop, name="zmq-learner-io", daemon=True)
        self._thread.start()

    # ---- LearnerEndpoint --------------------------------------------------------------------

    def recv(self, timeout_s: float) -> TransitionBatch | None:
        """The next validated, de-duplicated batch (per actor session in sequence order)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                left = deadline - time.monotonic()
                item = self._inbox.get(timeout=left) if left > 0 else self._inbox.get_nowait()
            except queue.Empty:
                return None
            peer, session, batch, _ = item
            with self._lock:
                self._in_inbox[session] -= 1
                # Checked again here: a restarted learner loads its stored windows (checkpoint, replay
                # on disk) after the socket is bound, so a resend may have slipped in before them.
                stored = batch.seq in self._stored.get(session, ())
                durable = stored and (session, batch.seq) not in self._unflushed
                if not stored:
                    self._unconfirmed[id(batch)] = (batch, peer, session)
            if self._inbox.qsize() == self.settings.inbox_size - 1:
                self._waker.wake()  # it was full: chunks held for room can move in now
            if not stored:
                break
            self.stats.reject("duplicate")
            if durable:
                self._acks.put((peer, session, batch.seq))
                self._waker.wake()
        self.stats.batches_received += 1
        self.stats.transitions_received += len(batch)
        if self.settings.ack_after == "recv":
            self.confirm(batch)
        return batch

    def confirm(self, batch: TransitionBatch) -> None:
        """Say ``batch`` (from :meth:`recv`) is stored: it enters :meth:`state_dict` and is acknowledged.

        With ``ack_after=confirm`` call this once the batch is in the replay; the actor keeps and
        resends the chunk until then. With ``ack_after=durable`` the acknowledgement waits for
        :meth:`flush_acks`. Idempotent.
        """
        with self._lock:
            item = self._unconfirmed.pop(id(batch), None)
            if item is None:
                return
            _, peer, session = item
            self._window(session).add(batch.seq)
            if self.settings.ack_after == "durable":
                self._unflushed[(session, batch.seq)] = peer
                return
        self._acks.put((peer, session, batch.seq))
        self._waker.wake()

    def session_of(self, batch: TransitionBatch) -> str | None:
        """The actor session ``batch`` (from :meth:`recv`, not yet confirmed) came from."""
        with self._lock:
            item = self._unconfirmed.get(id(batch))
        return item[2] if item is not None else None

    def flush_acks(self) -> int:
        """Acknowledge every confirmed chunk (``ack_after=durable``); returns how many.

        Call it after committing a checkpoint that holds the data and :meth:`state_dict`.
        """
        with self._lock:
            flushed, self._unflushed = self._unflushed, {}
        for (session, seq), peer in flushed.items():
            self._acks.put((peer, session, seq))
        self._waker.wake()
        return len(flushed)

    def publish_weights(self, weights: VersionedWeights) -> None:
        """Make ``weights`` the newest; the I/O thread sends them to every actor that lacks them."""
        with self._lock:
            self._weights = weights
        self._waker.wake()

    def pending(self) -> int:
        """Batches received and not yet taken by the learner."""
        return self._inbox.qsize()

    def acks_pending(self) -> int:
        """Batches received (held, or taken and not yet confirmed) that the actors wait to hear about."""
        with self._lock:
            return self._inbox.qsize() + len(self._unconfirmed) + len(self._unflushed)

    def peers(self) -> dict[int, int]:
        """Connected actors: actor id → weight version they last reported."""
        return {p["actor_id"]: p["version"] for p in list(self._peers.values()) if not p.get("dead")}

    def weight_lag(self) -> dict[int, int]:
        """Per connected actor: newest published version minus the version it acts with."""
        with self._lock:
            newest = self._weights.version if self._weights is not None else 0
        return {a: max(newest - v, 0) if v >= 0 else newest for a, v in self.peers().items()}

    def metrics(self) -> dict[str, float]:
        """Rates since the previous call, queue depths, acks pending, rejects by reason, per-actor weight lag."""
        now = time.monotonic()
        t0, n0, b0 = self._last_metrics
        n, b = self.stats.transitions_received, self.bytes_received
        self._last_metrics = (now, n, b)
        dt = max(now - t0, 1e-6)
        lag = self.weight_lag()
        out: dict[str, float] = {
            "transitions_per_s": (n - n0) / dt, "mb_per_s": (b - b0) / dt / 1e6, "inbox": float(self.pending()),
            "held_ahead": float(sum(len(s.ahead or ()) for s in list(self._sessions.values()))),
            "acks_pending": float(self.acks_pending()), "actors": float(len(lag)),
            "weight_lag_max": float(max(lag.values(), default=0)),
            "unknown_peer_messages": float(self.unknown_peer_messages),
        }
        out.update({f"rejects/{k}": float(v) for k, v in sorted(self.stats.rejected.items())})
        out.update({f"weight_lag/actor{a}": float(v) for a, v in sorted(lag.items())})
        return out

    def pop_cut_sessions(self) -> list[CutSession]:
        """Actor sessions found cut (the process died mid-run), once :meth:`recv` handed out their chunks.

        The learner marks the last stored step of each cut episode truncated.
        """
        with self._lock:
            ready = [c for c in self._cuts if self._in_inbox.get(c.session, 0) == 0]
            self._cuts = [c for c in self._cuts if c not in ready]
            for c in ready:
                self._in_inbox.pop(c.session, None)
        return ready

    def state_dict(self) -> dict[str, Any]:
        """The acknowledged sequence windows per actor session (plain data for the checkpoint).

        Saved together with the stored transitions, it lets a restarted learner drop the resends of
        chunks it had already stored: zero duplicates across a learner crash.
        """
        with self._lock:
            return {"sessions": {s: w.to_dict() for s, w in self._stored.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (call before actors resend; a malformed state raises ValueError)."""
        sessions = state.get("sessions") if isinstance(state, dict) else None
        if not isinstance(sessions, dict):
            raise ValueError("transport state needs a 'sessions' map")
        windows = {str(s): SeqWindow.from_dict(w) for s, w in sessions.items()}
        with self._lock:
            self._stored = OrderedDict(windows)

    def merge_state_dict(self, state: dict[str, Any]) -> None:
        """Add the sequence windows of ``state`` (same form as :meth:`state_dict`) to the ones held.

        A learner with replay on disk calls it with the windows its newest segment recorded: they
        are newer than the checkpoint's. Malformed input raises ValueError.
        """
        sessions = state.get("sessions") if isinstance(state, dict) else None
        if not isinstance(sessions, dict):
            raise ValueError("transport state needs a 'sessions' map")
        windows = {str(s): SeqWindow.from_dict(w) for s, w in sessions.items()}
        with self._lock:
            for s, w in windows.items():
                mine = self._stored.get(s)
                if mine is None:
                    self._window(s)
                    self._stored[s] = w
                    continue
                merged = SeqWindow(max(mine.floor, w.floor))
                for q in sorted(mine.above | w.above):
                    if q >= merged.floor:
                        merged.add(q)
                self._stored[s] = merged

    def close(self) -> None:
        """Stop the I/O thread, send the acknowledgements already queued (best effort), close the socket."""
        self._stop.set()
        self._thread.join(timeout=5)
        sent = 0
        while not self._thread.is_alive():
            try:
                peer, session, seq = self._acks.get_nowait()
            except queue.Empty:
                break
            sent += self._send(peer, encode("ack", session, seq))
        self.monitor.close()
        # LINGER 0 would discard those last acknowledgements; the actors would wait for them in vain.
        self._sock.close(1000 if sent else 0)
        self._waker.close()
        if self._auth is not None:
            self._auth.stop()

    # ---- I/O thread -------------------------------------------------------------------------

    def _window(self, session: str) -> SeqWindow:
        # Caller holds the lock.
        w = self._stored.get(session)
        if w is None:
            w = self._stored[session] = SeqWindow()
            while len(self._stored) > _MAX_SESSIONS:
                self._stored.popitem(last=False)
        else:
            self._stored.move_to_end(session)
        return w

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
            self._flush_inbox_waiting()
            while True:
                try:
                    peer, session, seq = self._acks.get_nowait()
                except queue.Empty:
                    break
                self._send(peer, encode("ack", session, seq))
            now = time.monotonic()
            self._send_weights(now)
            if now - last_beat >= self.settings.heartbeat_s:
                last_beat = now
                self._heartbeat(now)

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
        beat = encode("heartbeat", self.session, 0, meta={"version": version})
        for peer, info in list(self._peers.items()):
            if now - info["last_seen"] > 3 * self.settings.heartbeat_s:
                if not info.get("dead"):
                    info["dead"] = True
                    log.warning("actor %d (session %s) silent for %.1fs: considered dead", info["actor_id"],
                                info["session"], now - info["last_seen"])
                if now - info["last_seen"] > 60 * self.settings.heartbeat_s:
                    self._peers.pop(peer, None)  # long gone: stop heartbeating it (it re-hellos if alive)
                    continue
            self._send(peer, beat)

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
            version, floor = meta.get("version"), meta.get("floor")
            if isinstance(version, int):
                info["version"] = version
            if isinstance(floor, int) and header.get("session") == info["session"]:
                self._skip_to(info, floor)
            return
        if kind == "bye":
            self._peers.pop(peer, None)
            self._actor_session.pop(info["actor_id"], None)
            log.info("actor %d said goodbye", info["actor_id"])
            return
        seq = header.get("seq")
        if header.get("session") == info["session"] and isinstance(seq, int) and self._duplicate(peer, info, seq):
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
        self._deliver(peer, info, batch, sum(memoryview(f).nbytes for f in frames))

    def _duplicate(self, peer: bytes, info: dict[str, Any], seq: int) -> bool:
        """Count and drop a chunk already stored, delivered or held (checked before decoding its arrays)."""
        session = info["session"]
        state = self._sessions.setdefault(session, _Session(info["actor_id"]))
        with self._lock:
            stored = seq in self._window(session)
            durable = stored and (session, seq) not in self._unflushed
        if not (stored or seq < state.next_seq or seq in (state.ahead or ())):
            return False
        self.stats.reject("duplicate")
        if durable:
            self._acks.put((peer, session, seq))  # the first ack was lost; say it again
        return True

    def _deliver(self, peer: bytes, info: dict[str, Any], batch: TransitionBatch, nbytes: int) -> None:
        session = info["session"]
        state = self._sessions.setdefault(session, _Session(info["actor_id"]))
        if self._duplicate(peer, info, batch.seq):
            return
        batch.actor_id = info["actor_id"]
        ahead = state.ahead if state.ahead is not None else {}
        state.ahead = ahead
        if len(ahead) >= 4 * self.settings.inbox_size:
            return  # too far ahead of a missing chunk: not acknowledged, the actor resends it later
        ahead[batch.seq] = (peer, batch, nbytes)
        self._release(session, state)

    def _release(self, session: str, state: _Session) -> None:
        """Move the chunks that are next in sequence into the inbox, while it has room."""
        ahead = state.ahead or {}
        while state.next_seq in ahead:
            peer, batch, nbytes = ahead[state.next_seq]
            with self._lock:
                try:
                    self._inbox.put_nowait((peer, session, batch, nbytes))
                except queue.Full:
                    return  # held, unacknowledged; released when the learner catches up
                self._in_inbox[session] = self._in_inbox.get(session, 0) + 1
            del ahead[state.next_seq]
            state.next_seq += 1
            self.bytes_received += nbytes

    def _flush_inbox_waiting(self) -> None:
        for session, state in self._sessions.items():
            if state.ahead and not self._inbox.full():
                self._release(session, state)

    def _skip_to(self, info: dict[str, Any], floor: int) -> None:
        """The actor holds nothing below ``floor``: stop waiting for chunks it gave up on (counted there)."""
        state = self._sessions.get(info["session"])
        if state is None or floor <= state.next_seq:
            return
        # Chunks already in the stored window were acknowledged as duplicates (e.g. resends after a restart
        # whose window arrived from disk after the hello): the actor let go of them because they are stored.
        with self._lock:
            window = self._window(info["session"])
            span = range(state.next_seq, min(floor, state.next_seq + 65536))  # bounded work per heartbeat
            missing = [q for q in span if q not in window] or ([floor - 1] if floor > span.stop else [])
        if missing:
            log.warning("actor %d gave up on %d chunks in %d..%d (dropped and counted on the actor); moving on",
                        info["actor_id"], len(missing), missing[0], missing[-1])
            self.stats.reject("actor_dropped")
        state.next_seq = floor
        if state.ahead:
            state.ahead = {q: v for q, v in state.ahead.items() if q >= floor}
        self._release(info["session"], state)

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
        old = self._actor_session.get(actor_id)
        if old is not None and old != session:
            with self._lock:
                w = self._stored.get(old)
                n = (w.floor + len(w.above)) if w is not None else 0
                self._cuts.append(CutSession(actor_id, old, n))
            log.warning("actor %d restarted without saying goodbye (session %s → %s): the %d chunks stored "
                        "from the old session are kept; its unfinished episodes end there (truncated)",
                        actor_id, old, session, n)
            self._sessions.pop(old, None)
        for p, info in list(self._peers.items()):  # the same actor on a new connection replaces the old one
            if info["actor_id"] == actor_id and p != peer:
                self._peers.pop(p)
        self._actor_session[actor_id] = session
        state = self._sessions.setdefault(session, _Session(actor_id))
        with self._lock:
            floor = self._window(session).floor
        # Chunks below resume_seq were acknowledged (by us or a previous learner) and are never resent.
        state.next_seq = max(state.next_seq, resume_seq, floor)
        if state.ahead:
            state.ahead = {q: v for q, v in state.ahead.items() if q >= state.next_seq}
        known = self._peers.get(peer)
        self._peers[peer] = {"actor_id": actor_id, "session": session, "last_seen": time.monotonic(),
                             "version": known["version"] if known else -1, "sent_version": -1, "sent_at": 0.0}
        log.info("actor %d connected (session %s)", actor_id, session)
        self._send(peer, encode("welcome", self.session, 0, meta={"ok": True}))
        self._release(session, state)
