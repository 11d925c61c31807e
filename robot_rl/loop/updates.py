"""How the learner's updates interleave with collection: off-policy (actor threads) or on-policy (rollouts).

The runner calls :meth:`UpdateStrategy.iteration` until the budget or the success threshold; the strategy
owns what differs between the two families. Off-policy: actor threads step their envs concurrently; the
learner runs the updates owed by the UTD ratio and publishes weights every ``weight_sync_every_updates``.
On-policy: collect ``rollout_length`` steps from every actor (or wait for remote actors to fill the
rollout), update once, publish, and only then let the actors continue; with ``loop.on_policy_sync=false`` nobody
waits (:mod:`robot_rl.loop.async_updates`). The run strategy picks the schedule (:mod:`robot_rl.loop.run_strategy`):
off-policy on data-parallel ranks, every rank collects and updates in lockstep (:mod:`robot_rl.loop.lockstep`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from robot_rl.core.algorithm import Algorithm, OnPolicyAlgorithm, OnPolicyStorage
from robot_rl.loop.actor import Actor
from robot_rl.loop.actor_threads import ActorThreads
from robot_rl.loop.async_updates import AsyncOnPolicyUpdates
from robot_rl.loop.config import LoopConfig
from robot_rl.loop.learner import Learner

log = logging.getLogger(__name__)


class UpdateStrategy(Protocol):
    """One family's interleaving of collection and learning."""

    discarded_rollouts: int

    def start(self) -> None:
        """Start whatever collects concurrently (actor threads)."""
        ...

    def iteration(self) -> None:
        """Collect and/or learn a little; raises what an actor thread raised."""
        ...

    def stop(self, timeout_s: float) -> None:
        """Stop collecting (actors hold) and join what :meth:`start` started."""
        ...


class OffPolicyUpdates:
    """Actor threads collect while the learner updates at the UTD ratio (SAC)."""

    def __init__(self, learner: Learner, actors: list[Actor], loop: LoopConfig, stop: threading.Event) -> None:
        self.learner = learner
        self.actors = actors
        self.sync_every = loop.weight_sync_every_updates
        self.stop_event = stop
        self.discarded_rollouts = 0
        self.actor_threads = ActorThreads(actors, stop)

    def start(self) -> None:
        """Start one thread per actor."""
        self.actor_threads.start()

    def iteration(self) -> None:
        """Run the owed updates (publishing every ``sync_every``), or wait briefly for data."""
        self.actor_threads.check()
        learner = self.learner
        if learner.owed_updates > 0:
            before = learner.updates
            learner.update_off_policy(max_updates=min(learner.owed_updates, self.sync_every))
            if learner.updates // self.sync_every != before // self.sync_every:
                learner.publish()
            return
        if not learner.pump(timeout_s=0.05) and self.stop_event.is_set():
            raise self.actor_threads.stopped()

    def stop(self, timeout_s: float) -> None:
        """Tell the actor threads to hold and join them."""
        self.actor_threads.join(timeout_s)


class OnPolicyUpdates:
    """Collect a whole rollout with the current weights, update once, publish (PPO, flow PPO)."""

    def __init__(self, learner: Learner, algo: Algorithm, actors: list[Actor], loop: LoopConfig,
                 stop: threading.Event, remote: bool) -> None:
        self.learner = learner
        self.actors = actors
        self.rollout = algo.rollout_length if isinstance(algo, OnPolicyAlgorithm) else 1
        self.max_wait_s = loop.max_wait_s
        self.stop_event = stop
        self.remote = remote
        self.discarded_rollouts = 0

    def start(self) -> None:
        """Nothing runs concurrently: actors step inside :meth:`iteration`."""

    def iteration(self) -> None:
        """One rollout and one update."""
        learner = self.learner
        if self.remote:
            # Remote actors collect; the rollout is complete when every column is full.
            deadline = time.monotonic() + self.max_wait_s
            while not learner.update_on_policy():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no complete rollout within {self.max_wait_s:.0f}s; "
                                       "are the actors running and connected?")
                learner.pump(timeout_s=0.05)
            learner.publish()
            return
        for _ in range(self.rollout):
            for a in self.actors:
                a.step()
                while learner.pump(timeout_s=0):
                    pass
        if not learner.update_on_policy():
            # Rows were dropped (non-finite env output): a rollout with holes cannot be used for GAE,
            # so it is discarded whole, counted and reported, never learned from.
            self.discarded_rollouts += 1
            log.warning("discarding an incomplete rollout (%d so far): an env produced NaN/inf",
                        self.discarded_rollouts)
            if not isinstance(learner.storage, OnPolicyStorage):
                raise RuntimeError("on-policy storage was not full after a rollout and cannot be cleared")
            learner.storage.clear()
        learner.publish()
        for a in self.actors:
            a.sync_weights()

    def stop(self, timeout_s: float) -> None:
        """Mark the run stopped (actors step only inside :meth:`iteration`)."""
        self.stop_event.set()


def make_updates(learner: Learner, algo: Algorithm, actors: list[Actor], loop: LoopConfig, stop: threading.Event,
                 remote: bool) -> UpdateStrategy:
    """The one-process schedule for ``algo``: rollouts (on-policy, or asynchronous ones), actor threads (off-policy)."""
    if algo.on_policy:
        if not loop.on_policy_sync:
            return AsyncOnPolicyUpdates(learner, actors, loop, stop)
        return OnPolicyUpdates(learner, algo, actors, loop, stop, remote)
    return OffPolicyUpdates(learner, actors, loop, stop)
