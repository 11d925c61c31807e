"""Who the learner refused: a ZeroMQ socket monitor turns handshake failures into logged, counted refusals.

ZeroMQ refuses an unknown CURVE key (the authenticator answers 400) or a plaintext peer on a CURVE
socket (mechanism mismatch) inside its own I/O thread, before any message reaches the application.
The socket monitor reports these as events; this module reads them on the learner's I/O thread.

Mapping an event to the peer's address: ``EVENT_ACCEPTED`` carries the new connection's file
descriptor, whose ``getpeername`` gives the address; ``EVENT_HANDSHAKE_FAILED_*`` carries no
descriptor but is followed by ``EVENT_DISCONNECTED`` of the same connection (libzmq emits both
from the engine's error path, in that order, on its single I/O thread); failures and disconnects
are paired first-in, first-out. The address is best-effort: a connection closed before its
``ACCEPTED`` event is read (a plaintext greeting fails within microseconds on localhost) is
reported as ``?``; every refusal is counted either way.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections import deque
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from robot_rl.core.transport import TransportStats

log = logging.getLogger(__name__)

#: Monitor event → reject reason code.
REFUSALS: dict[int, str] = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "refused_key",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "refused_protocol",
    # Mostly a peer that hung up mid-handshake (a port scanner, a process that exited): counted, logged
    # at info level only.
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake_aborted",
}
_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | sum(REFUSALS)


def _peer_address(fd: int) -> str:
    try:
        s = socket.socket(fileno=fd)  # wraps the descriptor; detach() below leaves it open for ZeroMQ
    except OSError:
        return "?"
    try:
        host, port = s.getpeername()[:2]
        return f"{host}:{port}"
    except (OSError, ValueError):
        return "?"
    finally:
        s.detach()


class PeerMonitor:
    """Reads a socket's monitor events on its own thread; logs and counts refused peers with their address.

    Its own thread, blocked on the events, reads an ``ACCEPTED`` descriptor's address within
    microseconds, before a fast refusal (a plaintext peer fails at the first greeting) closes it.
    """

    def __init__(self, sock: zmq.Socket[Any], stats: TransportStats) -> None:
        self._sock = sock
        self.socket = sock.get_monitor_socket(_EVENTS)
        self.stats = stats
        self.refused: list[tuple[str, str]] = []  # (reason, address), most recent last, bounded
        self._fd_address: dict[int, str] = {}
        self._failed: deque[str] = deque(maxlen=64)  # failures whose DISCONNECTED has not come yet
        self._logged: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zmq-peer-monitor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.socket.poll(50):
                self.handle()

    def handle(self) -> None:
        """Process every pending event (never blocks)."""
        while self.socket.poll(0):
            ev = recv_monitor_message(self.socket)
            event, value = ev["event"], ev["value"]
            if event == zmq.EVENT_ACCEPTED:
                self._fd_address[value] = _peer_address(value)
            elif event in REFUSALS:
                self._failed.append(REFUSALS[event])
            elif event == zmq.EVENT_DISCONNECTED:
                address = self._fd_address.pop(value, "?")
                if self._failed:
                    self._refuse(self._failed.popleft(), address)

    def _refuse(self, reason: str, address: str) -> None:
        self.stats.reject(reason)
        self.refused = [*self.refused[-99:], (reason, address)]
        host = address.rsplit(":", 1)[0]
        if (reason, host) not in self._logged:  # peers retry every 100 ms: log each once, count all
            self._logged.add((reason, host))
            why = {"refused_key": "its CURVE key is not in the allow-list",
                   "refused_protocol": "it does not speak this socket's security (plaintext peer on a CURVE "
                                       "learner, or not ZeroMQ)",
                   "handshake_aborted": "it hung up during the ZeroMQ handshake"}[reason]
            log.log(logging.INFO if reason == "handshake_aborted" else logging.WARNING,
                    "refused a connection from %s: %s (further refusals from this host are only counted)",
                    address, why)

    def close(self) -> None:
        """Stop monitoring (before the monitored socket is closed)."""
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.disable_monitor()
        self.socket.close(0)
