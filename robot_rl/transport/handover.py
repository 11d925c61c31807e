"""Between the actor's control loop and its I/O thread: the chunks handed over and not yet in the outbox.

The control loop's thread lays each chunk out for the wire as it hands it over (the copy ``copy_on_send`` asks for):
a small one straight into the open message it will leave in (:class:`~robot_rl.transport.open_message.OpenMessage`),
any other as a message of its own. The I/O thread takes them oldest first. One lock and one deque per message, not
a queue item per chunk; at most ``capacity`` chunks wait (``put`` waits beyond, up to its timeout).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import numpy as np

from robot_rl.transport.codec import PackedArrays
from robot_rl.transport.open_message import MessagePool, OpenMessage

#: Acknowledged messages kept for reuse: at most as many as the outbox can hold, and at most this many bytes. Acks
#: come in batches (one per turn of the learner's I/O thread), so the pool must hold a batch's messages until the
#: chunks that follow take them; memory the outbox held at its peak anyway.
_POOL_BYTES = 64 << 20


class Handover:
    """Chunks handed over, oldest first; the newest may be an open message that later chunks join."""

    def __init__(self, capacity: int, chunks_per_message: int, message_bytes: int, chunk_bytes: int) -> None:
        self.capacity = capacity
        self.chunks_per_message = min(chunks_per_message, capacity)
        self.message_bytes = message_bytes
        self.chunk_bytes = chunk_bytes  # larger chunks leave alone
        self.waiting = 0  # chunks handed over and not yet taken
        self._items: deque[PackedArrays | OpenMessage] = deque()
        self._open: OpenMessage | None = None
        self._cond = threading.Condition(threading.Lock())
        #: Messages the learner acknowledged, reused (``give`` them back).
        self.pool = MessagePool(max(1, min(capacity, _POOL_BYTES // max(message_bytes, 1))))

    def direct(self, names: tuple[str, ...], values: list[np.ndarray]) -> bool:
        """Whether this chunk goes into an open message (else the caller packs it alone and passes it to ``put``)."""
        message = self._open  # read without the lock: put() checks again under it
        return (message is not None and message.fits(names, values)) or OpenMessage.eligible(values, self.chunk_bytes)

    def put(self, names: tuple[str, ...], values: list[np.ndarray], packed: PackedArrays | None, room: int,
            timeout_s: float) -> bool | None:
        """Hand a chunk over: ``packed`` if given, else ``values`` copied into the open message.

        ``room``: chunks the outbox could take now, less those waiting here (sizes a new open message, so that all
        its chunks fit when it reaches the outbox). Returns None if ``capacity`` chunks stayed waiting for
        ``timeout_s``, else whether the I/O thread needs waking (a chunk joining an open message that is not full
        does not: the I/O thread knows of it).
        """
        with self._cond:
            if self.waiting >= self.capacity and not self._cond.wait_for(lambda: self.waiting < self.capacity,
                                                                         timeout_s):
                return None
            self.waiting += 1
            if packed is not None:
                self._items.append(packed)
                self._open = None
                return True
            message = self._open
            if message is not None and message.fits(names, values):
                message.append(values)
                return message.rows == message.capacity
            # A full outbox: as many chunks as it can ever hold; they go together once acknowledgements make room.
            chunks = min(self.chunks_per_message, room - (self.waiting - 1) if room > self.waiting - 1 else
                         self.capacity)
            message = self._open = self.pool.take(names, values, chunks, self.message_bytes)
            self._items.append(message)
            message.append(values)
            return True

    def take(self, free: int, hold: bool, account: Callable[[int], int]) -> tuple[PackedArrays | OpenMessage, int]\
            | None:
        """The oldest message, sealed against more chunks, and the sequence number ``account(chunks)`` gave it.

        None if nothing waits, if it holds more than ``free`` chunks (it waits for room), or if ``hold`` and it is
        the open message with room left (more chunks may join it). ``account`` runs under the lock, so the chunks
        are counted elsewhere before they stop counting here.
        """
        with self._cond:
            if not self._items:
                return None
            item = self._items[0]
            chunks = item.chunks if isinstance(item, OpenMessage) else 1
            if chunks > free or (hold and item is self._open and item.rows < item.capacity):
                return None
            self._items.popleft()
            if isinstance(item, OpenMessage):
                item.sealed = True  # the control loop's thread writes no more into it
                if item is self._open:
                    self._open = None
            seq = account(chunks)
            self.waiting -= chunks
            self._cond.notify_all()
            return item, seq
