"""A fault-injecting ZeroMQ proxy for testing a deployment: drops, duplicates, reorders and bit-flips.

Put it between actors and a learner (actors connect to ``front``, it connects to the learner at
``back``) to check that the transport stores nothing corrupt or twice and still delivers everything.
Each actor connection gets its own upstream DEALER, so the learner sees one peer per actor, as
without the proxy. ``blackhole`` drops everything while set (a stalled link); ``drop_types`` drops
every message of the named types (e.g. ``{"weights"}``). Faults apply in both directions.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Any

import zmq

from robot_rl.transport.codec import WireError, unpack_header


@dataclass
class FaultCounts:
    """What the proxy did to the traffic."""

    forwarded: int = 0
    dropped: int = 0
    duplicated: int = 0
    reordered: int = 0
    flipped: int = 0
    by_type: dict[str, int] = field(default_factory=dict)


class FaultProxy:
    """Forward frames between ``front`` (bound ROUTER) and ``back`` (the learner), injecting faults."""

    def __init__(self, front: str, back: str, drop: float = 0.0, duplicate: float = 0.0, reorder: float = 0.0,
                 flip: float = 0.0, seed: int = 0) -> None:
        for name, p in (("drop", drop), ("duplicate", duplicate), ("reorder", reorder), ("flip", flip)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} probability {p} is not in [0, 1]")
        self.p = {"drop": drop, "duplicate": duplicate, "reorder": reorder, "flip": flip}
        self.counts = FaultCounts()
        self.blackhole = threading.Event()
        self.drop_types: set[str] = set()
        self._rng = random.Random(seed)
        self._ctx: zmq.Context[Any] = zmq.Context.instance()
        self._front = self._ctx.socket(zmq.ROUTER)
        self._front.setsockopt(zmq.LINGER, 0)
        self._front.bind(front)
        self.front = self._front.getsockopt_string(zmq.LAST_ENDPOINT)
        self._back_addr = back
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop forwarding and close every socket."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _kind(self, frames: list[bytes]) -> str:
        try:
            return str(unpack_header(frames[0]).get("type"))
        except (WireError, IndexError):
            return "?"

    def _mangle(self, frames: list[bytes]) -> list[bytes]:
        i = self._rng.randrange(len(frames))
        if not frames[i]:
            return frames
        b = bytearray(frames[i])
        b[self._rng.randrange(len(b))] ^= 1 << self._rng.randrange(8)
        self.counts.flipped += 1
        return [*frames[:i], bytes(b), *frames[i + 1:]]

    def _faulty(self, frames: list[bytes], held: list[list[bytes]]) -> list[list[bytes]]:
        """The messages to send now (0, 1, 2 or 3 of them) for one received message."""
        kind = self._kind(frames)
        self.counts.by_type[kind] = self.counts.by_type.get(kind, 0) + 1
        if self.blackhole.is_set() or kind in self.drop_types or self._rng.random() < self.p["drop"]:
            self.counts.dropped += 1
            return []
        if self._rng.random() < self.p["flip"]:
            frames = self._mangle(frames)
        out = [frames]
        if self._rng.random() < self.p["duplicate"]:
            self.counts.duplicated += 1
            out.append(frames)
        if held:  # a held message goes out after this one: the two swapped places
            out.append(held.pop())
        elif self._rng.random() < self.p["reorder"]:
            self.counts.reordered += 1
            held.append(out.pop(0))
        self.counts.forwarded += len(out)
        return out

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._front, zmq.POLLIN)
        upstream: dict[bytes, zmq.Socket[Any]] = {}  # actor routing id → DEALER to the learner
        by_socket: dict[zmq.Socket[Any], bytes] = {}
        held_up: dict[bytes, list[list[bytes]]] = {}
        held_down: dict[bytes, list[list[bytes]]] = {}
        try:
            while not self._stop.is_set():
                for sock, _ in poller.poll(20):
                    if sock is self._front:
                        ident, *frames = self._front.recv_multipart()
                        up = upstream.get(ident)
                        if up is None:
                            up = upstream[ident] = self._ctx.socket(zmq.DEALER)
                            up.setsockopt(zmq.LINGER, 0)
                            up.connect(self._back_addr)
                            by_socket[up] = ident
                            poller.register(up, zmq.POLLIN)
                        for msg in self._faulty(frames, held_up.setdefault(ident, [])):
                            try:
                                up.send_multipart(msg, flags=zmq.NOBLOCK)
                            except zmq.Again:
                                pass
                    else:
                        ident = by_socket[sock]
                        frames = sock.recv_multipart()
                        for msg in self._faulty(frames, held_down.setdefault(ident, [])):
                            try:
                                self._front.send_multipart([ident, *msg], flags=zmq.NOBLOCK)
                            except zmq.Again:
                                pass
        finally:
            for s in upstream.values():
                s.close(0)
            self._front.close(0)
