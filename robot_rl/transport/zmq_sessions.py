"""The learner endpoint's per-session bookkeeping: exactly-once, in-order delivery and the acknowledged windows.

Per actor session a :class:`SessionLedger` delivers chunks exactly once and in sequence order (a chunk
that arrives ahead of a missing one waits for it, up to ``4 · inbox_size`` of them), moves them into
the session's own inbox while it has room (the learner takes from the inboxes in turn, weighted by each
actor's env count: :mod:`~robot_rl.transport.fair_inbox`), acknowledges a chunk once the learner holds it
(``ack_after=recv``), once the learner says it is stored (``ack_after=confirm``) or once that is durable
(``ack_after=durable``, :meth:`SessionLedger.flush_acks`), and keeps the acknowledged sequence numbers as a small
window per session (:class:`~robot_rl.transport.zmq_common.SeqWindow`) for the checkpoint.

It owns no socket: :class:`~robot_rl.transport.zmq_learner.ZmqLearnerEndpoint`'s I/O thread feeds it
(``duplicate``, ``deliver``, ``open_session``, ``skip_to``, ``release_waiting``) and sends what it
queues on ``acks``; the learner's thread takes from it (``take``, ``confirm``, ``state_dict`` …).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from robot_rl.core.transition import TransitionBatch
from robot_rl.core.transport import CutSession, TransportStats
from robot_rl.transport.fair_inbox import FairInbox
from robot_rl.transport.zmq_common import SeqWindow, ZmqSettings

log = logging.getLogger(__name__)

_MAX_SESSIONS = 4096  # acknowledged windows kept (oldest sessions forgotten first)


@dataclass
class _Session:
    actor_id: int
    weight: int = 1  # the actor's env count: its share of the learner
    next_seq: int = 0  # every seq below was delivered to the inbox
    ahead: dict[int, tuple[bytes, TransitionBatch, int]] | None = None  # seq → (peer, batch, bytes)


class SessionLedger:
    """Which chunks of which actor session the learner holds, has stored, and has acknowledged.

    ``wake`` is called whenever an acknowledgement is queued on :attr:`acks` or the inbox gets room, so
    that the I/O thread acts at once rather than at its next poll.
    """

    def __init__(self, settings: ZmqSettings, stats: TransportStats, wake: Callable[[], None]) -> None:
        self.settings = settings
        self.stats = stats
        self._wake = wake
        #: Delivered chunks, per session in sequence order, taken in turn: ``(peer, batch, bytes)``.
        self.inbox: FairInbox[tuple[bytes, TransitionBatch, int]] = FairInbox(settings.inbox_size,
                                                                              settings.fair_service)
        #: Acknowledgements for the I/O thread to send: ``(peer, session, seq)`` (a deque: appends and pops are
        #: atomic, with no lock and condition per chunk as a queue.Queue has).
        self.acks: deque[tuple[bytes, str, int]] = deque()
        #: "Held" notices: chunks the learner has but has not stored yet (its inbox is full, it is behind). The
        #: actor then waits instead of resending them: resends follow the learner's back-pressure, not a timer.
        self.helds: deque[tuple[bytes, str, int]] = deque()
        self._lock = threading.Lock()  # guards _stored, _unconfirmed, _unflushed, _cuts, _in_inbox
        self._sessions: dict[str, _Session] = {}  # I/O thread only
        self._stored: OrderedDict[str, SeqWindow] = OrderedDict()  # acknowledged seqs per session
        self._unconfirmed: dict[int, tuple[TransitionBatch, bytes, str]] = {}  # id(batch) → (batch, peer, session)
        self._unflushed: dict[tuple[str, int], bytes] = {}  # confirmed, ack waiting for flush_acks()
        self._actor_session: dict[int, str] = {}  # I/O thread only
        self._cuts: list[CutSession] = []  # waiting until the cut session's chunks have left the inbox
        self._in_inbox: dict[str, int] = {}  # session → chunks of it in the inbox
        self.bytes_received = 0
        #: Per actor id: transitions handed to the learner, and resent chunks dropped as already stored.
        self.actor_transitions: Counter[int] = Counter()
        #: Per actor id: its env count (its hello's ``num_envs``), the weight of its share.
        self.actor_weights: dict[int, int] = {}
        self.actor_duplicates: Counter[int] = Counter()

    # ---- the learner's side -------------------------------------------------------------------

    def take(self, timeout_s: float) -> TransitionBatch | None:
        """The next validated, de-duplicated batch (per actor session in sequence order)."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = self.inbox.get(deadline - time.monotonic())
            if got is None:
                return None
            session, (peer, batch, _), freed = got
            with self._lock:
                self._in_inbox[session] -= 1
                # Checked again here: a restarted learner loads its stored windows (checkpoint, replay
                # on disk) after the socket is bound, so a resend may have slipped in before them.
                stored = batch.seq in self._stored.get(session, ())
                durable = stored and (session, batch.seq) not in self._unflushed
                if not stored:
                    self._unconfirmed[id(batch)] = (batch, peer, session)
            if freed:
                self._wake()  # it was full: chunks held for room can move in now
            if not stored:
                break
            self.stats.reject("duplicate")
            self.actor_duplicates[batch.actor_id] += 1
            if durable:
                self.acks.append((peer, session, batch.seq))
                self._wake()
        self.stats.batches_received += 1
        self.stats.transitions_received += len(batch)
        self.actor_transitions[batch.actor_id] += len(batch)
        if self.settings.ack_after == "recv":
            self.confirm(batch)
        return batch

    def confirm(self, batch: TransitionBatch) -> None:
        """Say ``batch`` (from :meth:`take`) is stored: it enters :meth:`state_dict` and is acknowledged."""
        with self._lock:
            item = self._unconfirmed.pop(id(batch), None)
            if item is None:
                return
            _, peer, session = item
            self._window(session).add(batch.seq)
            if self.settings.ack_after == "durable":
                self._unflushed[(session, batch.seq)] = peer
                return
        self.acks.append((peer, session, batch.seq))
        self._wake()

    def session_of(self, batch: TransitionBatch) -> str | None:
        """The actor session ``batch`` (from :meth:`take`, not yet confirmed) came from."""
        with self._lock:
            item = self._unconfirmed.get(id(batch))
        return item[2] if item is not None else None

    def flush_acks(self) -> int:
        """Acknowledge every confirmed chunk (``ack_after=durable``); returns how many."""
        with self._lock:
            flushed, self._unflushed = self._unflushed, {}
        for (session, seq), peer in flushed.items():
            self.acks.append((peer, session, seq))
        self._wake()
        return len(flushed)

    def pending(self) -> int:
        """Batches delivered and not yet taken by the learner."""
        return len(self.inbox)

    def acks_pending(self) -> int:
        """Batches received (held, or taken and not yet confirmed) that the actors wait to hear about."""
        with self._lock:
            return len(self.inbox) + len(self._unconfirmed) + len(self._unflushed)

    def held_ahead(self) -> int:
        """Chunks held because one before them in their session is missing."""
        return sum(len(s.ahead or ()) for s in list(self._sessions.values()))

    def pop_cut_sessions(self) -> list[CutSession]:
        """Actor sessions found cut (the process died mid-run), once :meth:`take` handed out their chunks."""
        with self._lock:
            ready = [c for c in self._cuts if self._in_inbox.get(c.session, 0) == 0]
            self._cuts = [c for c in self._cuts if c not in ready]
            for c in ready:
                self._in_inbox.pop(c.session, None)
        return ready

    def state_dict(self) -> dict[str, Any]:
        """The acknowledged sequence windows per actor session (plain data for the checkpoint)."""
        with self._lock:
            return {"sessions": {s: w.to_dict() for s, w in self._stored.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (a malformed state raises ValueError)."""
        sessions = state.get("sessions") if isinstance(state, dict) else None
        if not isinstance(sessions, dict):
            raise ValueError("transport state needs a 'sessions' map")
        windows = {str(s): SeqWindow.from_dict(w) for s, w in sessions.items()}
        with self._lock:
            self._stored = OrderedDict(windows)

    def merge_state_dict(self, state: dict[str, Any]) -> None:
        """Add the sequence windows of ``state`` (same form as :meth:`state_dict`) to the ones held."""
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

    # ---- the I/O thread's side ----------------------------------------------------------------

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

    def duplicate(self, peer: bytes, actor_id: int, session: str, seq: int) -> bool:
        """Count and drop a chunk already stored, delivered or held (checked before decoding its arrays)."""
        state = self._sessions.setdefault(session, _Session(actor_id, self.actor_weights.get(actor_id, 1)))
        with self._lock:
            stored = seq in self._window(session)
            durable = stored and (session, seq) not in self._unflushed
        if not (stored or seq < state.next_seq or seq in (state.ahead or ())):
            return False
        self.stats.reject("duplicate")
        self.actor_duplicates[actor_id] += 1
        if durable:
            self.acks.append((peer, session, seq))  # the first ack was lost; say it again
        else:
            self.helds.append((peer, session, seq))  # not stored yet: the learner is behind, not losing it
        return True

    def deliver(self, peer: bytes, actor_id: int, session: str, batch: TransitionBatch, nbytes: int) -> None:
        """Take a decoded chunk of ``session``: into the inbox if it is next, else held until it is."""
        state = self._sessions.setdefault(session, _Session(actor_id, self.actor_weights.get(actor_id, 1)))
        if self.duplicate(peer, actor_id, session, batch.seq):
            return
        batch.actor_id = actor_id
        ahead = state.ahead if state.ahead is not None else {}
        state.ahead = ahead
        if len(ahead) >= 4 * self.settings.inbox_size:
            return  # too far ahead of a missing chunk: not acknowledged, the actor resends it later
        ahead[batch.seq] = (peer, batch, nbytes)
        self._release(session, state)
        # Held, in the inbox or waiting for room in it: the ack comes only once the learner has taken (or stored,
        # or committed) it, which a learner busy with updates may not do within the actor's resend timer. Saying
        # "held" now spares the copy that timer would send only to be dropped as a duplicate.
        self.helds.append((peer, session, batch.seq))

    def _release(self, session: str, state: _Session) -> None:
        """Move the chunks that are next in sequence into the inbox, while it has room."""
        ahead = state.ahead or {}
        while state.next_seq in ahead:
            peer, batch, nbytes = ahead[state.next_seq]
            with self._lock:
                if not self.inbox.put_nowait(session, (peer, batch, nbytes), len(batch), state.weight):
                    return  # held, unacknowledged; released when the learner catches up
                self._in_inbox[session] = self._in_inbox.get(session, 0) + 1
            del ahead[state.next_seq]
            state.next_seq += 1
            self.bytes_received += nbytes

    def received(self, session: str) -> tuple[int, list[int]] | None:
        """What the learner has of ``session``: every chunk below the first number, and the listed ones.

        Below: in its inbox, taken, stored or given up on. Listed: the lowest 512 of those held ahead of a missing
        chunk (the wire's list bound is 1024).
        """
        state = self._sessions.get(session)
        return None if state is None else (state.next_seq, sorted(state.ahead or ())[:512])

    def acked_floors(self, sessions: set[str]) -> dict[str, int]:
        """Per session of ``sessions``: every chunk below this was acknowledged (stored, and durable where asked).

        The heartbeats repeat it: a cumulative acknowledgement, so a lost ack (the actor reconnected on a new
        socket, a dropped frame) costs one heartbeat, not a chunk stuck in the actor's outbox.
        """
        with self._lock:
            floors = {s: self._stored[s].floor for s in sessions if s in self._stored}
            for s, q in self._unflushed:  # confirmed, not yet durable: not acknowledged yet
                if s in floors and q < floors[s]:
                    floors[s] = q
        return floors

    def release_waiting(self) -> None:
        """Move held chunks that are next in sequence into the inbox, now that it may have room."""
        for session, state in self._sessions.items():
            if state.ahead and not self.inbox.full(session):
                self._release(session, state)

    def skip_to(self, actor_id: int, session: str, floor: int) -> None:
        """The actor holds nothing below ``floor``: stop waiting for chunks it gave up on (counted there)."""
        state = self._sessions.get(session)
        if state is None or floor <= state.next_seq:
            return
        # Chunks already in the stored window were acknowledged as duplicates (e.g. resends after a restart
        # whose window arrived from disk after the hello): the actor let go of them because they are stored.
        with self._lock:
            window = self._window(session)
            span = range(state.next_seq, min(floor, state.next_seq + 65536))  # bounded work per heartbeat
            missing = [q for q in span if q not in window] or ([floor - 1] if floor > span.stop else [])
        if missing:
            log.warning("actor %d gave up on %d chunks in %d..%d (dropped and counted on the actor); moving on",
                        actor_id, len(missing), missing[0], missing[-1])
            self.stats.reject("actor_dropped")
        state.next_seq = floor
        if state.ahead:
            state.ahead = {q: v for q, v in state.ahead.items() if q >= floor}
        self._release(session, state)

    def open_session(self, actor_id: int, session: str, resume_seq: int, weight: int = 1) -> None:
        """An actor said hello with ``session``: cut its previous session, if any, and start after ``resume_seq``.

        ``weight``: the actor's env count, its share of the learner against the other actors.

        Chunks below ``resume_seq`` were acknowledged (by this learner or a previous one) and are never resent.
        Call :meth:`release_session` once the actor is welcomed.
        """
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
        self._actor_session[actor_id] = session
        state = self._sessions.setdefault(session, _Session(actor_id, self.actor_weights.get(actor_id, 1)))
        state.weight = self.actor_weights[actor_id] = max(int(weight), 1)
        with self._lock:
            floor = self._window(session).floor
        state.next_seq = max(state.next_seq, resume_seq, floor)
        if state.ahead:
            state.ahead = {q: v for q, v in state.ahead.items() if q >= state.next_seq}

    def release_session(self, session: str) -> None:
        """Move what ``session`` has waiting and next in sequence into the inbox."""
        state = self._sessions.get(session)
        if state is not None:
            self._release(session, state)

    def forget_actor(self, actor_id: int) -> None:
        """The actor said goodbye: its next hello starts a session that cuts nothing."""
        self._actor_session.pop(actor_id, None)
