"""Per-actor inboxes taken in turn: how a learner shares itself among its actors.

Each actor session has its own bounded queue. The learner takes from them by deficit round robin (Shreedhar and
Varghese, 1996) counted in transitions: at its turn, a session with chunks waiting earns its weight (its actor's
env count) in credit and is served chunks while the credit covers their rows; then the next session's turn comes.
Over any stretch in which sessions all have chunks waiting, the rows each is served are proportional to its weight
to within one chunk, whatever their chunk sizes and however fast each one sends. A session with nothing waiting
keeps no credit, so an actor that was idle cannot save up a burst.

Bounding each queue on its own is the other half of fairness: an actor that floods fills its own queue and then
waits for it (its chunks stay unacknowledged, its outbox fills, its ``send`` blocks: back-pressure on it alone),
while another actor's chunks still find room. With one queue shared by all (``fair=False``, the transport before
issue 52, kept as the peer of ``benchmarks/actor_fairness.py``) whoever refills the freed slot first wins it, and an
actor can starve.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Queue(Generic[T]):
    weight: int
    items: deque[tuple[int, T]] = field(default_factory=deque)  # (rows, item), oldest first
    credit: int = 0


class FairInbox(Generic[T]):
    """Bounded per-key queues, taken by weighted deficit round robin; thread-safe.

    ``capacity``: items each key may hold (``fair=False``: items all keys together may hold, taken oldest first).
    """

    def __init__(self, capacity: int, fair: bool = True) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.fair = fair
        self._queues: dict[str, _Queue[T]] = {}  # keys with items waiting, in turn order (the first one's turn now)
        self._fifo: deque[tuple[str, int, T]] = deque()  # fair=False: every item, oldest first
        self._size = 0
        self._fresh_turn = True  # the first key has not had its credit for this turn yet
        self._cond = threading.Condition()

    def __len__(self) -> int:
        return self._size

    def size(self, key: str) -> int:
        """Items of ``key`` waiting."""
        q = self._queues.get(key)
        return len(q.items) if q is not None else 0

    def full(self, key: str) -> bool:
        """Whether a :meth:`put_nowait` for ``key`` would be refused now."""
        return self._size >= self.capacity if not self.fair else self.size(key) >= self.capacity

    def put_nowait(self, key: str, item: T, rows: int, weight: int = 1) -> bool:
        """Queue ``item`` (``rows`` transitions) for ``key``, whose share is ``weight``; ``False`` if it is full."""
        with self._cond:
            if self.full(key):
                return False
            self._add(key, item, rows, weight)
            return True

    def put(self, key: str, item: T, rows: int, weight: int, timeout_s: float) -> bool:
        """:meth:`put_nowait`, waiting up to ``timeout_s`` for room; ``False`` if none came."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self.full(key), timeout=max(timeout_s, 0.0)):
                return False
            self._add(key, item, rows, weight)
            return True

    def get(self, timeout_s: float) -> tuple[str, T, bool] | None:
        """``(key, item, freed)``: the next item by turn, waiting up to ``timeout_s``; None if none came.

        ``freed``: the get made room where a :meth:`put_nowait` had been refused (the key's queue, or the shared
        one, was full), so a caller holding items back can offer them again.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._size == 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            was_full = self._size >= self.capacity if not self.fair else False
            key, item, left_in_key = self._take_fifo() if not self.fair else self._take_turn()
            self._size -= 1
            self._cond.notify_all()  # a put() waiting for room
        return key, item, was_full or (self.fair and left_in_key == self.capacity - 1)

    def _add(self, key: str, item: T, rows: int, weight: int) -> None:
        # Caller holds the lock.
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = _Queue(max(int(weight), 1))
        q.weight = max(int(weight), 1)
        q.items.append((max(int(rows), 1), item))
        if not self.fair:
            self._fifo.append((key, rows, item))
        self._size += 1
        self._cond.notify_all()

    def _take_fifo(self) -> tuple[str, T, int]:
        key, _, item = self._fifo.popleft()
        q = self._queues[key]
        q.items.popleft()
        if not q.items:
            del self._queues[key]
        return key, item, len(q.items)

    def _take_turn(self) -> tuple[str, T, int]:
        """Deficit round robin: the first key is served while its credit covers its next item, then goes last."""
        misses = 0
        while True:
            key, q = next(iter(self._queues.items()))
            if self._fresh_turn:
                q.credit += q.weight
                self._fresh_turn = False
            rows, item = q.items[0]
            if q.credit >= rows:
                q.credit -= rows
                q.items.popleft()
                if not q.items:  # nothing waiting: its turn ends and it keeps no credit
                    del self._queues[key]
                    self._fresh_turn = True
                return key, item, len(q.items)
            del self._queues[key]  # its turn ends: last in line
            self._queues[key] = q
            self._fresh_turn = True
            misses += 1
            if misses >= len(self._queues):
                self._skip_idle_rounds()
                misses = 0

    def _skip_idle_rounds(self) -> None:
        """A whole round served nobody (chunks big for their weights): skip the idle rounds.

        Every key gets, at once, the credit of the rounds that would pass before one of them could be served.
        """
        rounds = min((q.items[0][0] - q.credit + q.weight - 1) // q.weight for q in self._queues.values()) - 1
        if rounds > 0:
            for q in self._queues.values():
                q.credit += rounds * q.weight


def jain_index(shares: list[float]) -> float:
    """Jain's fairness index of ``shares`` (e.g. transitions accepted per env, per actor): ``(Σx)² / (n·Σx²)``.

    1 when all are equal, ``1/n`` when one of ``n`` gets everything; 1 for no shares or all zero.
    """
    total, squares = sum(shares), sum(x * x for x in shares)
    return 1.0 if squares == 0 else total * total / (len(shares) * squares)
