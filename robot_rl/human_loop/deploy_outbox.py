"""A robot's side of back-pressure: chunks the transport has no room for are kept, never dropped.

A robot's control loop cannot wait on the network in the middle of an episode (the arm would stall past its
watchdog), and robot time is too dear to throw its data away. Deploy hands each chunk to the transport without
waiting; a chunk the transport's bounded outbox refuses (the learner is far behind, or gone) is kept here, in order,
and offered again before any newer one at every later hand-over. Between episodes, with the robot held, the loop
waits for the kept chunks to go: a learner that is only slow pauses the robot between episodes, never mid-episode,
so what is kept is at most about one episode; a learner silent for ``max_wait_s`` stops the run with
:class:`~robot_rl.core.transport.LearnerUnreachable`, which says how many chunks were kept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from robot_rl.core.transition import TransitionBatch
from robot_rl.core.transport import LearnerUnreachable, LinkState, LinkStateEndpoint

log = logging.getLogger(__name__)


class KeptChunks:
    """Chunks waiting for room in the transport's outbox, oldest first."""

    def __init__(self) -> None:
        self._chunks: deque[TransitionBatch] = deque()
        self.kept = 0  # chunks that had to wait here at least once
        self.paused_s = 0.0  # time the robot waited between episodes for them to go

    def __len__(self) -> int:
        return len(self._chunks)

    def hand_over(self, endpoint: Any, batch: TransitionBatch) -> int:
        """Queue ``batch`` behind any kept chunk and hand over what the transport takes now; returns how many went."""
        self._chunks.append(batch)
        sent = self.offer(endpoint)
        if self._chunks and self._chunks[-1] is batch:
            self.kept += 1
            if self.kept == 1 or self.kept % 100 == 0:
                log.warning("deploy: the transport's outbox is full (the learner is behind): %d chunks kept for "
                            "later, none dropped; the robot pauses between episodes until they are sent",
                            len(self._chunks))
        return sent

    def offer(self, endpoint: Any) -> int:
        """Hand the kept chunks over in order, without waiting; returns how many the transport took."""
        sent = 0
        while self._chunks and endpoint.send(self._chunks[0], 0.0):
            self._chunks.popleft()
            sent += 1
        return sent

    def wait_sent(self, endpoint: Any, stop: threading.Event, max_wait_s: float, most_unacked: int = 0,
                  on_pause: Callable[[], None] | None = None) -> int:
        """Between episodes: wait until every kept chunk is handed over (or ``stop``); returns how many went.

        ``most_unacked`` > 0 (``max_unlearned_chunks``): wait also until at most that many sent chunks are
        unacknowledged (by a learner that takes a chunk in once it learned from the ones before). ``on_pause`` is
        called once before a wait (the robot is held on purpose: its watchdog goes off). Raises
        :class:`LearnerUnreachable` once the learner has been silent for ``max_wait_s``.
        """
        linked = endpoint if isinstance(endpoint, LinkStateEndpoint) else None

        def caught_up(state: LinkState | None) -> bool:
            return not self._chunks and (not most_unacked or state is None or state.unacked <= most_unacked)

        if caught_up(linked.link_state() if linked is not None else None):
            return 0
        if on_pause is not None:
            on_pause()
        start, sent = time.monotonic(), 0
        if self._chunks:  # a wait for the learner's updates alone is the configured pace: not a warning
            log.warning("deploy: the robot waits for the learner to take %d kept chunks", len(self._chunks))
        while not stop.is_set():
            sent += self.offer(endpoint)
            state = linked.link_state() if linked is not None else None
            if caught_up(state):
                break
            if state is not None and state.silent_s >= max_wait_s:
                raise LearnerUnreachable(f"deploy: {state.describe()}; it has not answered for {state.silent_s:.0f}s "
                                         f"(max_wait_s={max_wait_s:.0f}) and {len(self._chunks)} chunks are kept "
                                         "here. Is the learner running and reachable?")
            stop.wait(0.05)
        self.paused_s += time.monotonic() - start
        return sent
