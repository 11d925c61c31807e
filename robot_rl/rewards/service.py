"""A reward service over ZeroMQ: one process serves a success classifier or a PRM to many actors, in batches.

Wire format: the transport's (:mod:`robot_rl.transport.codec`): a CRC'd msgpack header plus raw
array frames (small arrays packed into one), every array size-, dtype-, shape- and checksum-checked before
use. No pickle.
Message types of this protocol (``session`` = the client's id, ``seq`` = the request id)::

    hello        → welcome      meta {kind, inputs: {name: [shape, dtype]}, threshold}
    reward_req   → reward_rep   classifier: image.<cam> [N,H,W,C] uint8 → probability f32[N], success bool[N]
                                prm: first.image.<cam>, image.<cam>, meta {goals: [N str]} → progress, done f32[N]
    (anything bad) → reward_err meta {reason, detail}; the server counts it and keeps serving

The server (:class:`RewardServer`, ROUTER) drains every request that arrived, waits up to
``batch_wait_s`` for more, and runs **one** forward over all of them, whichever actor sent them.

The client (:class:`RewardClient`, DEALER) is pipelined: :meth:`~RewardClient.submit` returns a
request id at once, :meth:`~RewardClient.result` waits for that id **with a deadline**, replies to
other ids are kept. Sockets use ``ZMQ_IMMEDIATE``: while no server is connected a request fails
at once (``Unavailable``) instead of queueing for a server that may never come, and ZeroMQ
reconnects by itself when a restarted server binds again; requests lost with the old server hit
their deadline. Nothing ever waits without one.

How the env step gets its reward (:class:`RemoteClassifier`, :class:`RemotePRM`, used by the
wrappers in :mod:`robot_rl.rewards.wrapper`): the request goes out as soon as the step's frames
exist and the reply is attached to that same step if it arrives within ``max_wait_s`` (a batched
round trip is ~1–3 ms on one host, far inside a 50–100 ms robot control period). A late or failed
reply gives the documented fallback — no success for the classifier (a false success teaches the
wrong thing; a missed one costs little), "unknown" progress for the PRM (the wrapper holds the
potential, so the shaping term is ≈ 0, not a spurious drop) — and is counted. After a miss the client stops waiting
(``max_wait_s = 0``) until a reply arrives again, so a dead server costs the control loop at most
one deadline. Why not buffer transitions until their reward arrives: the VecEnv contract returns a
reward with each step, and keeping every actor, replay and PPO rollout unchanged is worth more than
the few ms a bounded wait costs.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.config import ConfigError
from robot_rl.core.specs import ArraySpec
from robot_rl.transport.codec import (
    DEFAULT_LIMITS,
    Message,
    SpecPlan,
    WireError,
    WireLimits,
    decode,
    encode,
    unpack_header,
)
from robot_rl.transport.zmq_common import curve_client, curve_client_keys, curve_server, curve_server_context

log = logging.getLogger(__name__)

#: This protocol's message types (the transport's codec knows its own; see :func:`encode_msg`).
SERVICE_TYPES = frozenset({"hello", "welcome", "reward_req", "reward_rep", "reward_err"})
KINDS = ("success_classifier", "process_reward_model")


class Unavailable(RuntimeError):
    """No reward server answered in time (not connected, restarted, or too slow)."""


class RemoteError(RuntimeError):
    """The server rejected a request; ``reason`` is its short code (``spec_mismatch``, ``bad_crc``, …)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"reward server: {reason}: {detail}")
        self.reason = reason


def encode_msg(msg_type: str, session: str, seq: int, arrays: dict[str, np.ndarray] | None = None,
               meta: dict[str, Any] | None = None) -> list[bytes | memoryview]:
    """Frames of a service message: the transport's wire format with this protocol's message types."""
    return encode(msg_type, session, seq, arrays, meta, types=SERVICE_TYPES)


def decode_msg(frames: list[Any], limits: WireLimits = DEFAULT_LIMITS, specs: SpecPlan | None = None) -> Message:
    """Validate a service message with the codec's checks (raises :class:`WireError`)."""
    return decode(frames, limits, specs, types=SERVICE_TYPES)


# ---- server ----------------------------------------------------------------------------------

def load_reward_model(path: Path | str, on_unseen: str = "error") -> torch.nn.Module:
    """A classifier or PRM checkpoint directory, whichever ``meta.json`` says it holds."""
    import json

    meta_file = Path(path) / "meta.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{path} is not a reward model directory (no meta.json)")
    kind = json.loads(meta_file.read_text()).get("kind")
    if kind == "success_classifier":
        from robot_rl.rewards.classifier import SuccessClassifier

        return SuccessClassifier.load(path)
    if kind == "process_reward_model":
        from robot_rl.rewards.prm import ProcessRewardModel

        return ProcessRewardModel.load(path, on_unseen=on_unseen)  # type: ignore[arg-type]
    raise ConfigError(f"{path} holds a {kind!r} model; the service serves {', '.join(KINDS)}")


@dataclass
class ServerStats:
    """What the server did (for logs and tests)."""

    requests: int = 0
    batches: int = 0
    rows: int = 0
    max_batch_requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)


class RewardServer:
    """Serves one reward model on a ROUTER socket; run :meth:`serve` in a thread or the main loop."""

    def __init__(self, model: torch.nn.Module, bind: str = "tcp://127.0.0.1:5600", max_batch: int = 512,
                 batch_wait_s: float = 0.002, limits: WireLimits = DEFAULT_LIMITS, secret_key: str | None = None,
                 allowed_clients_dir: str | None = None) -> None:
        """Bind ``bind``; with ``secret_key`` and ``allowed_clients_dir``, over CURVE.

        ``secret_key`` is this server's ``.key_secret`` file (`robot-rl keys`), ``allowed_clients_dir`` the
        public keys of the actors to serve: traffic is encrypted and only those actors are answered.
        """
        import zmq

        from robot_rl.rewards.classifier import SuccessClassifier

        self.model = model.eval()
        self.kind = KINDS[0] if isinstance(model, SuccessClassifier) else KINDS[1]
        shapes: dict[str, tuple[int, ...]] = dict(model.encoder.shapes)  # type: ignore[union-attr, arg-type]
        specs = {k: ArraySpec(s, "uint8") for k, s in shapes.items()}
        if self.kind == KINDS[1]:
            specs.update({f"first.{k}": v for k, v in list(specs.items())})
        self.inputs = specs
        self.plan = SpecPlan(specs)
        self.max_batch, self.batch_wait_s, self.limits = max_batch, batch_wait_s, limits
        self.stats = ServerStats()
        self.ctx, self._auth = curve_server_context(secret_key, allowed_clients_dir, "actors")
        if self._auth is None:
            self.ctx = zmq.Context()  # its own context: closing the server never touches the actors' sockets
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        curve_server(self.sock, secret_key, "reward server's secret key")
        self.sock.bind(bind)
        self.address = str(self.sock.getsockopt_string(zmq.LAST_ENDPOINT))
        self._stop = threading.Event()
        # A server dropped without close() still closes its socket before its context terms (left to their own
        # finalisers in a reference cycle, the context would wait forever for the socket, and the collector with it).
        self._closer = weakref.finalize(self, _close_server, self.sock, self._auth, self.ctx)

    def welcome_meta(self) -> dict[str, Any]:
        """What a client learns at ``hello``: the kind, input arrays and (classifier) the threshold."""
        meta: dict[str, Any] = {"kind": self.kind,
                                "inputs": {k: [list(s.shape), s.dtype] for k, s in self.inputs.items()}}
        if self.kind == KINDS[0]:
            meta["threshold"] = float(self.model.threshold)  # type: ignore[arg-type]
        return meta

    def serve(self, stop: threading.Event | None = None, poll_s: float = 0.05) -> None:
        """Answer requests until ``stop`` (or :meth:`stop`) is set."""
        import zmq

        stop = stop or self._stop
        while not stop.is_set() and not self._stop.is_set():
            if not self.sock.poll(int(poll_s * 1000), zmq.POLLIN):
                continue
            pending = self._drain(0)
            deadline = time.monotonic() + self.batch_wait_s
            while _rows(pending) < self.max_batch:
                left = deadline - time.monotonic()  # a short wait gathers other actors' requests
                if left <= 0 or not self.sock.poll(max(int(left * 1000), 0), zmq.POLLIN):
                    break
                pending += self._drain(_rows(pending))
            if pending:
                self._answer(pending)

    def _drain(self, rows: int) -> list[tuple[bytes, Message]]:
        """Messages waiting now, until ``max_batch`` rows (with ``rows`` already held); bad ones answered at once."""
        import zmq

        out: list[tuple[bytes, Message]] = []
        while rows + _rows(out) < self.max_batch:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return out
            ident, body = frames[0].bytes, [f.buffer for f in frames[1:]]
            header: dict[str, Any] | None = None
            try:
                header = unpack_header(body[0], self.limits) if body else None
                if header is not None and header.get("type") == "hello":
                    msg = decode_msg(body, self.limits)
                    self._send(ident, "welcome", msg.seq, meta=self.welcome_meta())
                    continue
                msg = decode_msg(body, self.limits, self.plan)
                if msg.type != "reward_req":
                    raise WireError("unknown_type", f"the reward server answers hello and reward_req, not {msg.type}")
                self._check_rows(msg)
                out.append((ident, msg))
            except WireError as e:
                seq = header.get("seq", 0) if isinstance(header, dict) else 0
                self._error(ident, seq if isinstance(seq, int) and seq >= 0 else 0, e.reason, str(e))
        return out

    def _check_rows(self, msg: Message) -> None:
        if not msg.arrays:
            raise WireError("bad_shape", "a request needs input arrays")
        counts = {len(a) for a in msg.arrays.values()}
        if len(counts) != 1 or 0 in counts:
            raise WireError("bad_shape", "every input needs the same, non-zero number of rows")
        if self.kind == KINDS[1]:
            goals = msg.meta.get("goals")
            if not isinstance(goals, list) or len(goals) not in (1, *counts) or \
                    not all(isinstance(g, str) for g in goals):
                raise WireError("bad_meta", "a PRM request needs meta.goals: one string, or one per row")

    def _answer(self, pending: list[tuple[bytes, Message]]) -> None:
        self.stats.requests += len(pending)
        self.stats.batches += 1
        self.stats.max_batch_requests = max(self.stats.max_batch_requests, len(pending))
        sizes = [len(next(iter(m.arrays.values()))) for _, m in pending]
        self.stats.rows += sum(sizes)
        batch = {k: torch.from_numpy(np.concatenate([m.arrays[k] for _, m in pending])) for k in self.inputs}
        try:
            with torch.no_grad():
                if self.kind == KINDS[0]:
                    prob = self.model.probability(batch)  # type: ignore[operator]
                    out = {"probability": prob.float().numpy(),
                           "success": (prob >= self.model.threshold).numpy()}  # type: ignore[operator]
                else:
                    goals = [g for (_, m), n in zip(pending, sizes, strict=True)
                             for g in (m.meta["goals"] * n if len(m.meta["goals"]) == 1 else m.meta["goals"])]
                    cams = [k for k in self.inputs if not k.startswith("first.")]
                    delta, done = self.model({k: batch[f"first.{k}"] for k in cams},  # type: ignore[operator]
                                             {k: batch[k] for k in cams}, goals)
                    out = {"progress": delta.float().numpy(), "done": done.float().numpy()}
        except (ValueError, KeyError) as e:  # e.g. an instruction the PRM never saw (on_unseen="error")
            for ident, m in pending:
                self._error(ident, m.seq, "model_error", str(e))
            return
        start = 0
        for (ident, m), n in zip(pending, sizes, strict=True):
            self._send(ident, "reward_rep", m.seq, {k: v[start:start + n] for k, v in out.items()},
                       {"batch_rows": sum(sizes), "batch_requests": len(pending)})
            start += n

    def _send(self, ident: bytes, msg_type: str, seq: int, arrays: dict[str, np.ndarray] | None = None,
              meta: dict[str, Any] | None = None) -> None:
        import zmq

        try:
            self.sock.send_multipart([ident, *encode_msg(msg_type, "server", seq, arrays, meta)], zmq.NOBLOCK,
                                     copy=False)
        except zmq.Again:  # a client that stopped reading: its request is dropped, it has a deadline
            self.stats.errors["reply_dropped"] += 1

    def _error(self, ident: bytes, seq: int, reason: str, detail: str) -> None:
        self.stats.errors[reason] += 1
        log.warning("reward server: rejected a request: %s: %s", reason, detail)
        self._send(ident, "reward_err", seq, meta={"reason": reason, "detail": detail[:500]})

    def stop(self) -> None:
        """Make :meth:`serve` return."""
        self._stop.set()

    def close(self) -> None:
        """Close the socket (after :meth:`serve` returned)."""
        self._closer()


def _close_server(sock: Any, auth: Any, ctx: Any) -> None:
    sock.close(0)
    if auth is not None:
        auth.stop()
    ctx.term()


def _rows(pending: list[tuple[bytes, Message]]) -> int:
    return sum(len(next(iter(m.arrays.values()))) for _, m in pending)


# ---- client ----------------------------------------------------------------------------------

class RewardClient:
    """Pipelined requests to a :class:`RewardServer`; every wait has a deadline. Use from one thread."""

    def __init__(self, address: str, timeout_s: float = 5.0, limits: WireLimits = DEFAULT_LIMITS,
                 max_kept: int = 1024, server_public_key: str | None = None,
                 client_secret_key: str | None = None) -> None:
        """Connect to ``address``; with ``server_public_key`` and ``client_secret_key``, over CURVE.

        ``server_public_key`` is the server's ``.key`` file, ``client_secret_key`` this actor's ``.key_secret``.
        """
        import zmq

        self.address, self.timeout_s, self.limits, self.max_kept = address, timeout_s, limits, max_kept
        self.session = uuid.uuid4().hex[:12]
        # The process's shared context: a private one left to the garbage collector hangs the collector forever when
        # the client sits in a reference cycle (the socket's weak reference is cleared before the context's
        # finaliser runs, so it terms with the socket still open). A client needs no context of its own: CURVE is
        # set per socket.
        self.sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        curve_client(self.sock, curve_client_keys(server_public_key, client_secret_key, "reward server", "actor"))
        self.sock.setsockopt(zmq.IMMEDIATE, 1)  # no queueing towards a server that is not connected
        self.sock.setsockopt(zmq.RECONNECT_IVL, 50)
        self.sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        self.sock.connect(address)
        self.seq = 0
        self.replies: dict[int, Message] = {}
        self.last_reply = float("-inf")
        self.info: dict[str, Any] | None = None

    def describe(self, timeout_s: float | None = None) -> dict[str, Any]:
        """The server's ``welcome`` (kind, inputs, threshold); :class:`Unavailable` after the deadline."""
        import zmq

        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        # Right after connect() the TCP connection may not be up yet: wait (bounded) until it is.
        self.sock.poll(max(int(timeout_s * 1000), 0), zmq.POLLOUT)
        seq = self._send("hello", None, {})
        msg = self._wait(seq, max(deadline - time.monotonic(), 0.0))
        if msg.type != "welcome" or msg.meta.get("kind") not in KINDS:
            raise RemoteError("bad_welcome", f"unexpected answer to hello: {msg.type} {msg.meta}")
        self.info = dict(msg.meta)
        return self.info

    def submit(self, arrays: dict[str, np.ndarray], meta: dict[str, Any] | None = None) -> int:
        """Send a request now (never blocks); returns its id. :class:`Unavailable` if no server is connected."""
        return self._send("reward_req", arrays, meta or {})

    def result(self, seq: int, timeout_s: float | None = None) -> dict[str, np.ndarray]:
        """The reply arrays of request ``seq``; waits at most ``timeout_s`` (:class:`Unavailable` after)."""
        msg = self._wait(seq, self.timeout_s if timeout_s is None else timeout_s)
        if msg.type == "reward_err":
            raise RemoteError(str(msg.meta.get("reason", "error")), str(msg.meta.get("detail", "")))
        return msg.arrays

    def request(self, arrays: dict[str, np.ndarray], meta: dict[str, Any] | None = None,
                timeout_s: float | None = None) -> dict[str, np.ndarray]:
        """:meth:`submit` then :meth:`result`, all within ``timeout_s`` (waits for the connection too)."""
        import zmq

        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        self.sock.poll(max(int(timeout_s * 1000), 0), zmq.POLLOUT)
        seq = self.submit(arrays, meta)
        return self.result(seq, max(deadline - time.monotonic(), 0.0))

    def _send(self, msg_type: str, arrays: dict[str, np.ndarray] | None, meta: dict[str, Any]) -> int:
        import zmq

        self.seq += 1
        try:
            self.sock.send_multipart(encode_msg(msg_type, self.session, self.seq, arrays, meta), zmq.NOBLOCK,
                                     copy=False)
        except zmq.Again:
            raise Unavailable(f"no reward server connected at {self.address}") from None
        return self.seq

    def _wait(self, seq: int, timeout_s: float) -> Message:
        import zmq

        deadline = time.monotonic() + timeout_s
        self.drain()
        while seq not in self.replies:
            left = deadline - time.monotonic()
            if left < 0 or not self.sock.poll(max(int(left * 1000), 0), zmq.POLLIN):
                raise Unavailable(f"no reply from the reward server at {self.address} within {timeout_s:.3f}s")
            self.drain()
        return self.replies.pop(seq)

    def drain(self) -> int:
        """Take every reply that has arrived (never blocks); returns how many."""
        import zmq

        got = 0
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            try:
                msg = decode_msg([f.buffer for f in frames], self.limits)
            except WireError as e:
                log.warning("reward client: dropped a malformed reply: %s", e)
                continue
            got += 1
            self.last_reply = time.monotonic()
            if msg.seq > self.seq - self.max_kept:  # replies to long-abandoned requests are dropped
                self.replies[msg.seq] = msg
        for old in [s for s in self.replies if s <= self.seq - self.max_kept]:
            del self.replies[old]
        return got

    def close(self) -> None:
        """Close the socket."""
        self.sock.close(0)
