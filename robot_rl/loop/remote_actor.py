"""`robot-rl actor`: one actor process feeding a remote learner over ZeroMQ."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from robot_rl.core.config import ConfigError, OnPolicyConfig
from robot_rl.hardware.rate import RateLoop
from robot_rl.loop.actor import Actor
from robot_rl.loop.config import TrainConfig
from robot_rl.loop.run_context import resolve_device, seed_everything

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


def run_actor(cfg: TrainConfig, actor_id: int, max_env_steps: int | None = None) -> ActorReport:
    """Step the task's env with the newest weights and ship transitions, until Ctrl-C or ``max_env_steps``.

    On-policy algorithms wait for the next weight version after every ``rollout_length`` steps; the
    wait has the deadline ``loop.max_wait_s``.
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
    endpoint = cfg.transport.connect_actor(env.spec, actor_id)
    actor = Actor(env, policy, endpoint, seed=seed, send_timeout_s=cfg.loop.max_wait_s,
                  max_staleness=cfg.loop.max_staleness)
    # loop.actor_hz paces the loop like deploy's and record's (absolute deadlines, overruns counted); 0 = unpaced.
    rate = RateLoop(cfg.loop.actor_hz) if cfg.loop.actor_hz > 0 else None
    rollout = cfg.algo.rollout_length if isinstance(cfg.algo, OnPolicyConfig) else 0
    try:
        actor.wait_for_weights(-1, cfg.loop.max_wait_s)
        log.info("actor %d: connected, acting with weights v%d", actor_id, actor.policy_version)
        steps_in_rollout = 0
        while max_env_steps is None or actor.env_steps < max_env_steps:
            if endpoint.handshake_error:
                raise ConfigError(f"the learner refused this actor: {endpoint.handshake_error}")
            if rate is not None:
                rate.wait()
            if rollout and steps_in_rollout == rollout:
                actor.wait_for_weights(actor.policy_version, cfg.loop.max_wait_s)
                steps_in_rollout = 0
            else:
                actor.sync_weights()
            actor.step()
            steps_in_rollout += 1
        # A graceful stop drains the outbox: nothing produced is dropped while the learner is alive.
        deadline = time.monotonic() + cfg.loop.max_wait_s
        while endpoint.unacked() and time.monotonic() < deadline:
            time.sleep(0.05)
    except KeyboardInterrupt:
        log.warning("actor %d interrupted", actor_id)
    finally:
        endpoint.close()
        env.close()
        if rate is not None:
            log.info("actor %d: %s", actor_id, rate.stats().summary())
    return ActorReport(actor.env_steps, endpoint.stats.batches_sent, endpoint.acked, endpoint.unacked(),
                       actor.policy_version, actor.nonfinite_rows, actor.dropped_batches + endpoint.dropped(),
                       actor.stale_pauses, rate.overruns if rate is not None else 0)


