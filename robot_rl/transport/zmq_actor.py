"""The actor's ZeroMQ endpoint: a DEALER socket on its own I/O thread behind bounded queues.

The control loop only ever touches ``send`` (a bounded queue put) and ``poll_weights`` (a read of
the newest weights); encoding, resending, spilling, heartbeats and reconnects happen on the I/O
thread. See :mod:`robot_rl.transport.zmq_transport` for the protocol.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections import OrderedDict
from typing import Any, cast

import torch
import zmq

from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.core.transport import LinkState, TransportStats, VersionedWeights
from robot_rl.transport.codec import WireError, decode, encode
from robot_rl.transport.handover import Handover
from robot_rl.transport.open_message import OpenMessage
from robot_rl.transport.spill import SpillStore
from robot_rl.transport.transition_codec import encode_packed_transitions, pack_transitions, transition_arrays
from robot_rl.transport.zmq_common import Waker, ZmqSettings, curve_client, curve_client_keys

log = logging.getLogger(__name__)

#: A chunk the learner says it holds is resent after this many ``resend_after_s`` (the longest back-off) if no
#: acknowledgement came: the learner is behind, not losing it.
_HELD_WAIT = 16


#: Chunks waiting together are sent as one message of at most this many chunks and bytes (the learner's work per
#: message is then shared by all their rows); a chunk handed over to an idle I/O thread leaves alone, at once.
#: They are copied straight into that message (:class:`~robot_rl.transport.open_message.OpenMessage`), so merging
#: costs no second copy, whatever their size up to _COALESCE_CHUNK_BYTES (larger ones go alone, as do images).
_COALESCE_CHUNKS = 64
_COALESCE_BYTES = 1 << 20
_COALESCE_CHUNK_BYTES = 512 << 10

#: An open message is sealed once it is full, or once fewer than this many messages await their acknowledgement:
#: a chunk leaves at once when the link is idle, and while it is busy the chunks that follow gather (the learner's
#: acknowledgements clock the sending, as Nagle's algorithm does for TCP). Not 1: an actor that keeps only a few
#: chunks unacknowledged (deploy's max_unlearned_chunks) sends each alone, as the learner's per-chunk pacing expects.
_IN_FLIGHT = 4

#: Between two scans of the outbox for chunks whose acknowledgement is overdue (new chunks leave at once).
_RESEND_SCAN_S = 0.05


def _frame_bytes(frames: list[Any]) -> int:
    return sum(memoryview(f).nbytes for f in frames)


class ZmqActorEndpoint:
    """Actor side: ``send`` (never blocks on the network), ``poll_weights``/``wait_weights``."""

    def __init__(self, address: str, actor_id: int, spec: EnvSpec, settings: ZmqSettings | None = None,
                 num_envs: int = 1) -> None:
        self.actor_id = actor_id
        self.num_envs = num_envs  # said in the hello: the learner shares itself among actors by env count
        self.spec = spec
        self.settings = s = settings or ZmqSettings()
        self.session = uuid.uuid4().hex[:12]
        self.stats = TransportStats()
        self._ctx: zmq.Context[Any] = zmq.Context.instance()
        self.address = address
        # Read the key files here, so a bad one fails now, not later inside the I/O thread.
        self._curve = curve_client_keys(s.server_public_key, s.client_secret_key, "learner", "actor")
        # Chunks handed over and not yet in the outbox (at most outbox_size; send() waits beyond).
        self._handover = Handover(s.outbox_size, _COALESCE_CHUNKS if s.coalesce else 1, _COALESCE_BYTES,
                                  _COALESCE_CHUNK_BYTES if s.coalesce else -1)
        # seq → (frames, sent at, sends so far)
        self._outbox: OrderedDict[int, tuple[list[Any], float, int]] = OrderedDict()
        self._fresh: list[int] = []  # seqs in the outbox never sent yet: they go at once, without a scan
        self._merged: dict[int, int] = {}  # seq → chunks it holds, for messages of several chunks (spilled ones too)
        self._open_messages: dict[int, OpenMessage] = {}  # seq → its open message, reused once acknowledged
        self._outbox_chunks = 0  # chunks in the outbox (a message may hold several): what outbox_size bounds
        self._spilling = 0  # chunks on their way from _handed to the spill (counted by unacked())
        self._next_scan = 0.0  # when to look for overdue chunks next (0: at once, e.g. after a welcome)
        self._outbox_lock = threading.Lock()
        self.spill = SpillStore(s.spill_dir, self.session, s.spill_max_bytes) \
            if s.outbox_policy == "spill" and s.spill_dir else None
        self._seq = 0
        self._weights: VersionedWeights | None = None
        self._cond = threading.Condition()
        self.connected = threading.Event()
        self.handshake_error: str | None = None
        self.learner_finished: str | None = None  # the learner's reason, once it said the run is over
        self.acked = 0
        self.resent = 0
        self.held_notices = 0  # chunks the learner said it holds (not yet stored): their resends wait
        self.bytes_sent = 0
        #: The newest weight version the learner says it has published (from its heartbeats).
        self.learner_version = -1
        self.heard_at = time.monotonic()  # when anything last came from the learner (a reconnect does not reset it)
        self.dropped_transitions = 0  # by the actor (loop.on_backlog=drop); its heartbeats tell the learner
        self._stop = threading.Event()
        self._waker = Waker()  # a sent chunk leaves at once, not at the I/O thread's next poll
        self._thread = threading.Thread(target=self._io_loop, name=f"zmq-actor-{actor_id}-io", daemon=True)
        self._thread.start()

    # ---- ActorEndpoint ----------------------------------------------------------------------

    def send(self, batch: TransitionBatch, timeout_s: float) -> bool:
        """Queue ``batch``; ``False`` (counted) if the bounded queue stayed full for ``timeout_s``.

        With ``outbox_policy=block`` the queue fills when ``outbox_size`` chunks are unacknowledged,
        so this waits for the learner; with ``spill`` the I/O thread moves overflow to disk and this
        waits only if the I/O thread itself falls behind.
        """
        # Laid out for the wire here, on the caller's thread: the small arrays are copied into one frame (so a buffer
        # the env reuses cannot change a chunk after it was sent), the large ones too with copy_on_send. With
        # coalesce, a small chunk is copied straight into the open message it will leave in.
        s = self.settings
        arrays = transition_arrays(batch)
        names, values = tuple(arrays), list(arrays.values())
        packed = None if self._handover.direct(names, values) else \
            pack_transitions(batch, copy_large=s.copy_on_send, checksums=False)
        wake = self._handover.put(names, values, packed, s.outbox_size - self._outbox_chunks, timeout_s)
        if wake is None:
            self.stats.send_timeouts += 1
            return False
        self.stats.batches_sent += 1
        if wake:
            self._waker.wake()
        return True

    def poll_weights(self, newer_than: int) -> VersionedWeights | None:
        """Newest weights if newer than ``newer_than``; never blocks."""
        w = self._weights
        return w if w is not None and w.version > newer_than else None

    def wait_weights(self, newer_than: int, timeout_s: float) -> VersionedWeights | None:
        """Block up to ``timeout_s`` for weights newer than ``newer_than``."""
        with self._cond:
            self._cond.wait_for(lambda: (self._weights is not None and self._weights.version > newer_than)
                                or self.learner_finished is not None, timeout=timeout_s)
        return self.poll_weights(newer_than)

    def unacked(self) -> int:
        """Chunks queued, in the outbox or spilled, not yet acknowledged by the learner."""
        with self._outbox_lock:
            spilled = sum(self._merged.get(q, 1) for q in self.spill.seqs()) if self.spill else 0
            return self._outbox_chunks + self._handover.waiting + spilled + self._spilling

    def waiting(self) -> int:
        """Chunks handed over and not yet in the outbox (or spilled): ``send`` waits once ``outbox_size`` do."""
        return self._handover.waiting

    def dropped(self) -> int:
        """Chunks given up on (spill budget exhausted or spill file unreadable); each was logged."""
        return self.spill.dropped + self.spill.corrupt if self.spill is not None else 0

    def count_dropped(self, transitions: int) -> None:
        """The actor dropped ``transitions`` it could not hand over (``loop.on_backlog=drop``); the learner hears."""
        self.dropped_transitions += transitions

    def link_state(self) -> LinkState:
        """Whether the learner answers, and what waits on it (:class:`~robot_rl.core.transport.LinkState`)."""
        return LinkState(self.address, self.connected.is_set(), time.monotonic() - self.heard_at, self.unacked(),
                         self.learner_version)

    def close(self) -> None:
        """Say goodbye, stop the I/O thread (unacknowledged chunks are reported, not silently dropped)."""
        self._stop.set()
        self._waker.wake()
        self._thread.join(timeout=5)
        self._waker.close()
        left = self.unacked()
        if left and self.learner_finished is not None:
            log.info("actor %d closing: %d chunks made after the learner's last step were not needed (run over: %s)",
                     self.actor_id, left, self.learner_finished)
        elif left:
            log.warning("actor %d closing with %d unacknowledged chunks", self.actor_id, left)

    # ---- I/O thread -------------------------------------------------------------------------

    def _floor(self) -> int:
        """The oldest chunk this actor still holds: everything below was acknowledged or given up on."""
        with self._outbox_lock:
            held = [next(iter(self._outbox), self._seq), self._seq]
        first_spilled = self.spill.first_seq() if self.spill is not None else None
        if first_spilled is not None:
            held.append(first_spilled)
        return min(held)

    def _hello(self) -> list[Any]:
        return encode("hello", self.session, 0, meta={
            "actor_id": self.actor_id, "session": self.session, "spec": self.spec.to_dict(),
            "resume_seq": self._floor(), "num_envs": self.num_envs})

    def _connect(self) -> zmq.Socket[Any]:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        curve_client(sock, self._curve)
        sock.connect(self.address)
        return sock

    def _intake(self) -> None:
        """Chunks handed over get a sequence number and go to the outbox (or, when it is full, to the spill).

        Several that waited together in one open message (the learner or the socket was slower than the env) go as
        one message, which enters the outbox once it has room for all of them: coalescing never lets more chunks be
        in flight than ``outbox_size`` (send() sizes an open message by the room it will find).
        """
        s = self.settings
        while True:
            free = s.outbox_size - self._outbox_chunks
            room = free > 0 and not (self.spill and len(self.spill))
            if not room and self.spill is None:
                return  # block: leave them waiting; send() waits once outbox_size chunks wait too
            taken = self._handover.take(free if room else s.outbox_size, room and len(self._outbox) >= _IN_FLIGHT,
                                        functools.partial(self._account, room=room))
            if taken is None:
                return  # nothing waits, or it waits for room (or for more chunks to join it)
            item, seq = taken
            packed = item.seal() if isinstance(item, OpenMessage) else item
            frames = encode_packed_transitions(packed, self.session, seq, self.actor_id)
            if room:
                with self._outbox_lock:
                    self._outbox[seq] = (frames, 0.0, 0)
                    if isinstance(item, OpenMessage):
                        self._open_messages[seq] = item
                self._fresh.append(seq)
                continue
            assert self.spill is not None
            kept = self.spill.put(seq, frames)
            if isinstance(item, OpenMessage):  # on disk now (or given up on): its buffer takes new chunks
                self._handover.pool.give(item)
            with self._outbox_lock:
                self._spilling = 0
                if not kept:
                    self._merged.pop(seq, None)
            if not kept:
                self.stats.reject("spill_full")

    def _account(self, chunks: int, room: bool) -> int:
        """A sequence number for a message of ``chunks`` leaving the hand-over, its chunks counted on.

        In the outbox (``room``) or as on their way to the spill; called on the hand-over's lock, before it stops
        counting them, so unacked() never dips.
        """
        seq = self._seq
        self._seq += 1
        with self._outbox_lock:
            if room:
                self._outbox_chunks += chunks
            else:
                self._spilling = chunks
            if chunks > 1:
                self._merged[seq] = chunks
        return seq

    def _let_go(self, seq: int) -> int:
        """Drop ``seq`` from the outbox (caller holds the lock); the chunks it held (0 if it was not there)."""
        if self._outbox.pop(seq, None) is None:
            return 0
        message = self._open_messages.pop(seq, None)
        if message is not None:
            self._handover.pool.give(message)
        chunks = self._merged.pop(seq, 1)
        self._outbox_chunks -= chunks
        return chunks

    def _refill(self) -> None:
        while self.spill is not None and len(self.spill) and self._outbox_chunks < self.settings.outbox_size:
            item = self.spill.pop()
            if item is None:
                break
            with self._outbox_lock:
                self._outbox[item[0]] = (list(item[1]), 0.0, 0)
                self._outbox_chunks += self._merged.get(item[0], 1)
            self._fresh.append(item[0])

    def _send_due(self, sock: zmq.Socket[Any], now: float) -> None:
        """Send the new chunks, and (every ``_RESEND_SCAN_S``) those whose acknowledgement is overdue."""
        if self._fresh:
            with self._outbox_lock:
                fresh = [(q, self._outbox[q][0]) for q in self._fresh if q in self._outbox]
            sent = 0
            for _, f in fresh:
                try:
                    sock.send_multipart(f, flags=zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                sent += 1
                self.bytes_sent += _frame_bytes(f)
            with self._outbox_lock:
                for q, f in fresh[:sent]:
                    if q in self._outbox:
                        self._outbox[q] = (f, now, 1)
            del self._fresh[:sent]
            if sent < len(fresh):
                return  # the socket is full: the rest go on the next turn
        if now < self._next_scan:
            return
        self._next_scan = now + min(_RESEND_SCAN_S, self.settings.resend_after_s / 4)
        # Resends back off (×2 per try, at most ×16): a learner that is only slow to store them, not
        # losing them, is not flooded with copies of what it already holds.
        after = self.settings.resend_after_s
        with self._outbox_lock:
            due = [(q, f, n) for q, (f, t, n) in self._outbox.items() if now - t >= after * (1 << min(n, 5)) / 2]
        for q, f, n in due:
            try:
                sock.send_multipart(f, flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                self._next_scan = 0.0
                break
            with self._outbox_lock:
                if q in self._outbox:
                    self._outbox[q] = (f, now, n + 1)
            self.resent += n > 0
            self.bytes_sent += _frame_bytes(f)

    def _io_loop(self) -> None:
        s = self.settings
        sock = self._connect()
        learner_session: str | None = None
        last_heard = last_hello = time.monotonic()
        sock.send_multipart(self._hello(), flags=zmq.NOBLOCK)
        last_beat = 0.0
        goodbye = False
        poller: zmq.Poller | None = None
        unanswered = 0
        while True:
            if self._stop.is_set():
                if goodbye or not self.connected.is_set():
                    break
                try:  # tell the learner this session ends on purpose (not a crash)
                    sock.send_multipart(encode("bye", self.session, 0), flags=zmq.NOBLOCK)
                except zmq.Again:
                    pass
                goodbye = True
            self._intake()
            self._refill()
            now = time.monotonic()
            if self.connected.is_set():
                self._send_due(sock, now)
            elif self.handshake_error is None and now - last_hello >= s.resend_after_s:
                last_hello = now  # the hello or the welcome was lost: ask again
                unanswered += 1
                if unanswered % 3 == 0:  # on a fresh connection (ZeroMQ may have given up on a refused one)
                    sock.close(0)
                    sock, poller = self._connect(), None
                try:
                    sock.send_multipart(self._hello(), flags=zmq.NOBLOCK)
                except zmq.Again:
                    pass
            if now - last_beat >= s.heartbeat_s:
                last_beat = now
                version = self._weights.version if self._weights is not None else -1
                try:
                    sock.send_multipart(encode("heartbeat", self.session, 0,
                                               meta={"version": version, "floor": self._floor(),
                                                     "dropped": self.dropped_transitions}),
                                        flags=zmq.NOBLOCK)
                except zmq.Again:
                    pass
            if now - last_heard > 3 * s.heartbeat_s and self.connected.is_set():
                log.warning("actor %d: learner silent for %.1fs; reconnecting", self.actor_id, now - last_heard)
                self.connected.clear()
                sock.close(0)
                sock, poller = self._connect(), None
                sock.send_multipart(self._hello(), flags=zmq.NOBLOCK)
                last_heard = last_hello = now
            if poller is None:
                poller = zmq.Poller()
                poller.register(sock, zmq.POLLIN)
                poller.register(self._waker.fd, zmq.POLLIN)
            poller.poll(20)
            self._waker.drain()
            # Asked first, not learnt from zmq.Again: raising it costs more than the rest of an idle turn.
            while cast(int, sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                try:
                    received = sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                last_heard = self.heard_at = time.monotonic()
                try:
                    msg = decode([f.buffer for f in received], s.limits)
                except WireError as e:
                    self.stats.reject(e.reason)
                    continue
                learner_session = self._on_message(sock, msg, learner_session)
        sock.setsockopt(zmq.LINGER, 200 if goodbye else 0)  # let the goodbye leave
        sock.close()

    def _acked_below(self, floor: int) -> None:
        """The learner acknowledged every chunk below ``floor`` (its heartbeat's cumulative ack): let them go.

        A lost single ack would otherwise leave its chunk here for good, leased by the same heartbeats
        (they say the learner has it) and so never resent to be acknowledged again.
        """
        with self._outbox_lock:
            done = [q for q in self._outbox if q < floor]
            self.acked += sum(self._let_go(q) for q in done)

    def _hold_leased(self, received: int, held: set[int]) -> None:
        """The learner has every chunk below ``received`` and those in ``held``: their resend timers move out.

        As for a held notice: a lease its heartbeats renew; a silent or restarted learner ends it.
        """
        until = time.monotonic() + _HELD_WAIT * self.settings.resend_after_s
        with self._outbox_lock:
            for q, (frames, t, n) in self._outbox.items():
                if (q < received or q in held) and t < until:
                    self._outbox[q] = (frames, until, n)

    def _on_message(self, sock: zmq.Socket[Any], msg: Any, learner_session: str | None) -> str | None:
        if msg.type == "welcome":
            if not msg.meta.get("ok"):
                self.handshake_error = str(msg.meta.get("error"))
                log.error("actor %d: learner refused the handshake: %s", self.actor_id, self.handshake_error)
                return learner_session
            if learner_session is not None and msg.session != learner_session:
                log.warning("actor %d: learner restarted; resending %d unacknowledged chunks",
                            self.actor_id, len(self._outbox))
            with self._outbox_lock:  # resend everything unacknowledged to this (maybe new) learner
                for q in self._outbox:
                    self._outbox[q] = (self._outbox[q][0], 0.0, 0)
            self._fresh.clear()  # all of them go with the next scan, in order
            self._next_scan = 0.0
            self.connected.set()
            return msg.session
        if msg.type == "ack":
            if msg.session == self.session:
                seqs = _seqs(msg)
                with self._outbox_lock:
                    self.acked += sum(self._let_go(q) for q in seqs)
        elif msg.type == "held":
            # The learner has the chunks and will store them when it catches up: resend only after the longest
            # back-off (or at once if the learner restarts: its welcome resets every timer).
            if msg.session == self.session:
                until = time.monotonic() + _HELD_WAIT * self.settings.resend_after_s
                with self._outbox_lock:
                    for q in _seqs(msg):
                        entry = self._outbox.get(q)
                        if entry is not None:
                            self._outbox[q] = (entry[0], until, entry[2])
                            self.held_notices += 1
        elif msg.type == "bye" and msg.meta.get("final") is True:
            if self.learner_finished is None:
                self.learner_finished = str(msg.meta.get("reason") or "finished")
                log.info("actor %d: the learner finished its run (%s)", self.actor_id, self.learner_finished)
                with self._cond:  # a wait for weights ends now
                    self._cond.notify_all()
        elif msg.type == "weights":
            new_version = msg.meta.get("version")
            if isinstance(new_version, int) and (self._weights is None or new_version > self._weights.version):
                weights = {k: torch.from_numpy(v.copy()) for k, v in msg.arrays.items()}
                with self._cond:
                    self._weights = VersionedWeights(new_version, weights)
                    self._cond.notify_all()
                self.learner_version = max(self.learner_version, new_version)
        elif msg.type == "heartbeat":
            version = msg.meta.get("version")
            if msg.meta.get("hello") is True or (learner_session is not None and msg.session != learner_session):
                # A restarted learner (or one that dropped us after a long silence) does not know us: hello again.
                self.connected.clear()
                self.learner_version = -1
                try:
                    sock.send_multipart(self._hello(), flags=zmq.NOBLOCK)
                except zmq.Again:
                    pass
            elif isinstance(version, int):
                self.learner_version = max(self.learner_version, version)
                received, held, acked = msg.meta.get("received"), msg.meta.get("held"), msg.meta.get("acked")
                if isinstance(acked, int) and msg.session == learner_session:
                    self._acked_below(acked)
                if isinstance(received, int) and msg.session == learner_session:
                    self._hold_leased(received, set(held) if isinstance(held, list) else set())
        return learner_session


def _seqs(msg: Any) -> list[int]:
    """The chunks an ``ack`` or ``held`` message names: its ``meta.seqs`` (several at once), else its ``seq``."""
    seqs = msg.meta.get("seqs")
    if isinstance(seqs, list):
        return [q for q in seqs if type(q) is int]
    return [msg.seq]
