"""Asynchronous on-policy learning (``loop.on_policy_sync=false``): actors never wait for the learner.

The synchronous strategy (:class:`~robot_rl.loop.updates.OnPolicyUpdates`) collects a rollout with the current
weights from every actor, updates, publishes, and only then lets the actors go on. Here:

- in one process each actor steps its env on its own thread and loads the newest weights between steps (as the
  off-policy actors do); an actor process (`robot-rl actor`) skips its wait for the next version after a rollout;
- the learner pumps rows into an :class:`~robot_rl.replay.async_rollout.AsyncRolloutStorage` and updates as soon
  as it holds a rollout of complete blocks acted at most ``loop.max_staleness`` (k) versions behind its weights,
  whichever actors they came from; older blocks are dropped and counted;
- the algorithm's update corrects for the age of each row (``corrects_staleness``: decoupled PPO in
  :mod:`robot_rl.policies.ppo` and :mod:`robot_rl.policies.flow.ppo`).
"""

from __future__ import annotations

import threading
import time

import torch

from robot_rl.core.algorithm import Algorithm, OnPolicyAlgorithm
from robot_rl.core.config import ConfigError
from robot_rl.core.specs import EnvSpec
from robot_rl.loop.actor import Actor
from robot_rl.loop.actor_threads import ActorThreads
from robot_rl.loop.config import LoopConfig
from robot_rl.loop.learner import Learner
from robot_rl.replay.async_rollout import AsyncRolloutStorage


def async_rollout(loop: LoopConfig, algo: Algorithm, spec: EnvSpec, device: torch.device | str, num_envs_total: int,
                  envs_per_actor: int) -> AsyncRolloutStorage | None:
    """The learner's rollout when ``loop.on_policy_sync`` is false (else None); a user's mistake is a ConfigError.

    The run strategy refuses it where it cannot run (:meth:`~robot_rl.loop.run_strategy.RunStrategy.check`).
    """
    if not algo.on_policy or loop.on_policy_sync:
        return None
    if loop.max_staleness is None:
        raise ConfigError("loop.on_policy_sync=false needs loop.max_staleness=K: the learner drops rows acted by "
                          "weights more than K versions behind its own (e.g. loop.max_staleness=2)")
    if not isinstance(algo, OnPolicyAlgorithm) or not algo.corrects_staleness:
        raise ConfigError(f"{type(algo).__name__} cannot correct for rows acted by older weights; keep "
                          "loop.on_policy_sync=true (asynchronous on-policy learning: ppo, flow_ppo)")
    return AsyncRolloutStorage(spec, num_envs_total, algo.rollout_length, device, envs_per_actor, loop.max_staleness)


class AsyncOnPolicyUpdates:
    """Actor threads (in one process) or processes collect without waiting; the learner updates on any full rollout."""

    def __init__(self, learner: Learner, actors: list[Actor], loop: LoopConfig, stop: threading.Event) -> None:
        if not isinstance(learner.storage, AsyncRolloutStorage):
            raise TypeError("asynchronous on-policy updates need the learner built with an AsyncRolloutStorage "
                            "(robot_rl.loop.async_updates.async_rollout)")
        self.learner = learner
        self.storage: AsyncRolloutStorage = learner.storage
        self.max_wait_s = loop.max_wait_s
        self.stop_event = stop
        self.discarded_rollouts = 0
        self.actor_threads = ActorThreads(actors, stop)
        self._last_update = time.monotonic()

    def start(self) -> None:
        """Start one thread per in-process actor."""
        self.storage.advance(self.learner.version)
        self._last_update = time.monotonic()
        self.actor_threads.start()

    def iteration(self) -> None:
        """Update and publish if a rollout is ready; otherwise take one batch (or wait briefly for one)."""
        self.actor_threads.check()
        learner, storage = self.learner, self.storage
        storage.advance(learner.version)  # an extension may have published since (a refit, co-training's SFT)
        if learner.update_on_policy():
            learner.publish()
            storage.advance(learner.version)
            learner.last_stats.update(storage.stats())
            self._last_update = time.monotonic()
            return
        if time.monotonic() - self._last_update > self.max_wait_s:
            raise TimeoutError(f"no complete rollout within {self.max_wait_s:.0f}s (holding {len(storage)} rows, "
                               f"{storage.dropped_rows} dropped as stale); are the actors running and connected?")
        if not learner.pump(timeout_s=0.05) and self.stop_event.is_set():
            raise self.actor_threads.stopped()

    def stop(self, timeout_s: float) -> None:
        """Tell the actor threads to hold and join them."""
        self.actor_threads.join(timeout_s)
