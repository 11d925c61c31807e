"""ZeroMQ transport: the same endpoint protocols as the in-process one, across processes and machines.

Topology: the learner binds a ROUTER socket (:mod:`~robot_rl.transport.zmq_learner`); each actor
connects a DEALER (:mod:`~robot_rl.transport.zmq_actor`). Each socket is owned by one I/O thread
(ZeroMQ sockets are not thread-safe); the training threads talk to it through bounded queues, so an
actor's control loop never blocks on the network.

Protocol (every message is :mod:`robot_rl.transport.codec` frames with a checksummed header, never
pickle):

- ``hello`` (actor → learner): actor id, actor session, the actor's EnvSpec, and ``resume_seq`` (the
  oldest chunk it still holds). The learner answers ``welcome`` with ``ok`` or the spec mismatch,
  and its own session id. An actor repeats ``hello`` until welcomed. A learner that restarted has a
  new session id, which tells actors to resend everything not yet acknowledged. A hello from a new
  session of a known actor id that never said ``bye`` marks the old session cut (its process died).
- ``transitions`` (actor → learner, seq per actor session): validated against the spec, dropped if
  already received (dedup by ``(actor session, seq)``), delivered in sequence order, and
  acknowledged with ``ack`` once the learner holds it (or has confirmed it stored). A full inbox
  leaves chunks unacknowledged, and the actor resends them later. Chunks that wait together on the
  actor go as one message (one seq; ``coalesce``); ``ack`` and ``held`` name several seqs at once
  (``meta.seqs``), one message per session and turn of the learner's I/O thread.
- ``weights`` (learner → every actor): versioned; only the newest version is sent, and sent again
  to an actor whose heartbeat still reports an older one.
- ``heartbeat`` both ways (the learner's carries its newest version and, per actor, which of its chunks
  it already has: a lease under which the actor resends none of them however long a busy learner takes
  to store them, and the floor below which every chunk is acknowledged: a cumulative ack, so a lost ``ack``
  leaves nothing stuck; the actor's carries the version it acts with); a peer silent for 3 intervals is
  reported dead in the log, and an actor then says ``hello`` again on a fresh socket.
- ``bye`` (actor → learner): the session ends on purpose. From the learner (``final``, with its ``reason``):
  the run is over (budget or threshold), so actors stop instead of draining or waiting for a resume.

Refused connections (unknown CURVE key, plaintext peer) never reach the application; a socket
monitor logs and counts them (:mod:`~robot_rl.transport.peer_monitor`).
"""

from robot_rl.transport.zmq_actor import ZmqActorEndpoint
from robot_rl.transport.zmq_common import SeqWindow, ZmqSettings, generate_keys, load_cert
from robot_rl.transport.zmq_learner import CutSession, ZmqLearnerEndpoint

__all__ = ["CutSession", "SeqWindow", "ZmqActorEndpoint", "ZmqLearnerEndpoint", "ZmqSettings", "generate_keys",
           "load_cert"]
