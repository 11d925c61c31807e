"""`robot-rl actor`: one actor process feeding a remote learner over ZeroMQ."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from robot_rl.core.config import ConfigError, OnPolicyConfig
from robot_rl.core.rate import RateLoop
from robot_rl.core.transport import LearnerWaitNotice, RemoteActorEndpoint
from robot_rl.loop.actor import Actor
from robot_rl.loop.config import TrainConfig
from robot_rl.loop.run_context import resolve_device, seed_everything
from robot_rl.loop.stop_signals import StopRequest

log = logging.getLogger(__name__)


@dataclass
class ActorReport:
    """What an actor process did before it stopped."""

    env_steps: int
    chunks_sent: int
    chunks_acked: int
    unacked: int
    policy_version: int
    nonfinite_rows: int
    dropped_chunks: int
    stale_pauses: int
    overruns: int
    stop_reason: str = "max_env_steps"
    drained: bool = True
    backlog_s: float = 0.0
    """Seconds the env paused because the learner had not taken its chunks yet (``loop.on_backlog=wait``)."""


def run_actor(cfg: TrainConfig, actor_id: int, max_env_steps: int | None = None,
              stop: StopRequest | None = None) -> ActorReport:
    """Step the task's env with the newest weights and ship transitions, until a stop or ``max_env_steps``.

    SIGINT (Ctrl-C) and SIGTERM (Ray, SLURM, Kubernetes, ``kill``) ask for a stop: the step in progress
    finishes, the outbox drains for up to ``loop.stop_grace_s``, the actor says goodbye and returns. A second
    signal interrupts at once. At the end of ``max_env_steps`` the drain may take up to ``loop.max_wait_s``
    (the learner may be restarting). On-policy algorithms wait for the next weight version after every
    ``rollout_length`` steps (not with ``loop.on_policy_sync=false``); the wait has the deadline ``loop.max_wait_s``.
    """
    if cfg.transport.in_process:
        raise ConfigError("robot-rl actor needs a transport actor processes connect to: transport.type=zmq "
                          "(and the learner's address)")
    device = resolve_device(cfg.run.device)
    seed = cfg.run.seed + 7919 * (actor_id + 1)
    seed_everything(seed)
    env = cfg.make_env(device, seed)
    # The policy alone (no critics, no optimisers); its weights arrive from the learner before the first step.
    policy = cfg.algo.build_policy(env.spec, device, seed)
    endpoint = cfg.transport.connect_actor(env.spec, actor_id, num_envs=env.num_envs)
    actor = Actor(env, policy, endpoint, seed=seed, send_timeout_s=cfg.loop.max_wait_s,
                  max_staleness=cfg.loop.max_staleness, on_backlog=cfg.loop.on_backlog)
    # loop.actor_hz paces the loop like deploy's and record's (absolute deadlines, overruns counted); 0 = unpaced.
    rate = RateLoop(cfg.loop.actor_hz) if cfg.loop.actor_hz > 0 else None
    grace = cfg.loop.stop_grace_s
    stop = stop or StopRequest()
    # A send blocked on a backlogged learner when the stop comes gives up within the grace time too.
    stop.when_requested(lambda: setattr(actor, "send_cutoff", stop.deadline(grace)))
    reason, drained = "interrupted", False
    try:
        with stop.installed():
            reason = _act(cfg, actor, actor_id, max_env_steps, rate, stop, endpoint.address)
            # Every stop but a second signal drains the outbox: nothing produced is dropped while the learner lives.
            # A signal's stop has the engine's grace time; the end of --max-env-steps may wait out a learner restart.
            # Once the learner has finished its run nothing more is stored: the actor ends without waiting.
            drained = actor.learner_finished() is None and _drain(
                endpoint, stop.deadline(grace) if stop.is_set() else time.monotonic() + cfg.loop.max_wait_s)
    except KeyboardInterrupt:
        log.warning("actor %d: interrupted twice; closing without draining", actor_id)
    finally:
        endpoint.close()
        env.close()
        if rate is not None:
            log.info("actor %d: %s", actor_id, rate.stats().summary())
    return ActorReport(actor.env_steps, endpoint.stats.batches_sent, endpoint.acked, endpoint.unacked(),
                       actor.policy_version, actor.nonfinite_rows, actor.dropped_batches + endpoint.dropped(),
                       actor.stale_pauses, rate.overruns if rate is not None else 0, reason, drained, actor.backlog_s)


def _act(cfg: TrainConfig, actor: Actor, actor_id: int, max_env_steps: int | None, rate: RateLoop | None,
         stop: StopRequest, address: str) -> str:
    """The acting loop; returns why it ended (the step budget or the signal that asked for a stop)."""
    # On-policy and synchronous: wait for the next weights after each rollout; asynchronous: never wait.
    rollout = cfg.algo.rollout_length if isinstance(cfg.algo, OnPolicyConfig) and cfg.loop.on_policy_sync else 0
    wait_s = cfg.loop.max_wait_s
    # The first wait is said at once (the learner may not be running); a next rollout's weights only when late.
    if not _await_weights(actor, -1, wait_s, stop, LearnerWaitNotice(address, wait_s, log.warning)):
        if actor.learner_finished():
            return f"the learner had finished its run ({actor.learner_finished()})"
        return f"stopped by {stop.signal_name} before the first weights"
    log.info("actor %d: connected, acting with weights v%d", actor_id, actor.policy_version)
    steps_in_rollout = 0
    while max_env_steps is None or actor.env_steps < max_env_steps:
        if stop.is_set():
            return f"stopped by {stop.signal_name}"
        if finished := actor.learner_finished():
            return f"the learner finished its run ({finished})"
        refused = actor.endpoint.handshake_error if isinstance(actor.endpoint, RemoteActorEndpoint) else None
        if refused:
            raise ConfigError(f"the learner refused this actor: {refused}")
        if rate is not None:
            rate.wait()
        if rollout and steps_in_rollout == rollout:
            if not _await_weights(actor, actor.policy_version, wait_s, stop,
                                  LearnerWaitNotice(address, wait_s, log.warning, quiet_s=10.0)):
                continue  # a stop arrived while waiting: the check above ends the loop
            steps_in_rollout = 0
        else:
            actor.sync_weights()
        actor.step()
        steps_in_rollout += 1
    return "max_env_steps"


def _await_weights(actor: Actor, newer_than: int, timeout_s: float, stop: StopRequest,
                   notice: LearnerWaitNotice) -> bool:
    """Wait for weights newer than ``newer_than`` in short slices; ``False`` if a stop (or the run's end) came first.

    ``notice`` says where and how long it waits (a log line at once or after its quiet time, then every 10 s).
    Raises ``TimeoutError`` when the deadline passes without weights and without a stop.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    while not stop.is_set() and not actor.learner_finished():
        notice(time.monotonic() - start)
        try:
            actor.wait_for_weights(newer_than, min(0.25, max(deadline - time.monotonic(), 0.0)))
            return True
        except TimeoutError:
            if time.monotonic() >= deadline:
                newer = f" newer than v{newer_than}" if newer_than >= 0 else ""
                raise TimeoutError(f"no weights{newer} from the learner at {notice.address} within {timeout_s:.0f}s; "
                                   "is `robot-rl learner` running there?") from None
    return False


def _drain(endpoint: RemoteActorEndpoint, deadline: float) -> bool:
    """Wait until ``deadline`` (monotonic) for the learner to acknowledge every chunk; ``True`` if none is left."""
    while endpoint.unacked() and time.monotonic() < deadline and endpoint.learner_finished is None:
        time.sleep(0.05)
    return not endpoint.unacked()
