"""The off-policy schedule of data-parallel ranks (SAC with ``run.distributed=ddp``): collect, agree, update.

Alone, an off-policy learner's actor threads collect while it runs the updates the UTD ratio owes for what has
arrived (:class:`~robot_rl.loop.updates.OffPolicyUpdates`), so how many updates run when depends on timing. Ranks
whose gradients DistributedDataParallel averages must all run the same number of updates, so each iteration
here is the same on every rank:

1. each of this rank's actors steps its envs once (the rank's own seeds) and the rows go into this rank's replay,
   its shard of the run's data;
2. one all-gather tells every rank how many rows each rank stored and how many each shard holds;
3. from those numbers every rank computes the same updates owed: ``utd_ratio × rows stored by all ranks / ranks``,
   once every shard holds ``learning_starts / ranks`` rows. Each update trains on ``batch_size`` rows of every
   shard (``ranks × batch_size`` in all), so a row is drawn as often as it would be alone at the same settings;
4. every rank runs those updates on its shard; DDP averages the gradients, so the weights stay equal.

The env-step counter is the sum over the ranks, the same number on every rank, so the budget and the evaluation
schedule agree. Every collective (the gather here, DDP's all-reduces) has the process group's deadline,
``loop.max_wait_s``: a rank that died or hangs ends the others with an error, never an endless wait.
"""

from __future__ import annotations

import threading

import torch

from robot_rl.core.algorithm import OffPolicyAlgorithm
from robot_rl.core.data_parallel import DataParallel
from robot_rl.loop.actor import Actor
from robot_rl.loop.config import LoopConfig
from robot_rl.loop.learner import Learner


class LockstepOffPolicyUpdates:
    """Collect one step per actor, agree on the updates owed, run them: every rank the same (module docstring)."""

    def __init__(self, learner: Learner, algo: OffPolicyAlgorithm, actors: list[Actor], loop: LoopConfig,
                 stop: threading.Event, dp: DataParallel) -> None:
        self.learner = learner
        self.actors = actors
        self.dp = dp
        self.utd_ratio = algo.utd_ratio
        self.learning_starts = algo.learning_starts
        self.sync_every = loop.weight_sync_every_updates
        self.stop_event = stop
        self.discarded_rollouts = 0
        # The fraction of an update carried to the next iteration. It must be equal on every rank, so a resume
        # starts it at 0 on all of them (the checkpoint's value is rank 0's alone).
        self.carry = 0.0

    def start(self) -> None:
        """Nothing runs concurrently: the actors step inside :meth:`iteration`."""

    def iteration(self) -> None:
        """One env step per actor into this rank's shard, then the updates every rank agreed on."""
        learner = self.learner
        before = learner.transitions
        for actor in self.actors:
            actor.sync_weights()
            actor.step()
            while learner.pump(timeout_s=0):
                pass
        stored = (learner.transitions - before) // max(learner.ranks, 1)  # ingest counts a row once per rank
        everyone, smallest = self._agree(stored, len(learner.storage))
        learner.transitions = before + everyone
        owed = self.carry
        if smallest > 0 and smallest * self.dp.world_size >= self.learning_starts:
            owed += self.utd_ratio * everyone / self.dp.world_size
        learner.owe_updates(owed)
        while learner.owed_updates > 0:
            before_updates = learner.updates
            learner.update_off_policy(max_updates=min(learner.owed_updates, self.sync_every))
            if learner.updates // self.sync_every != before_updates // self.sync_every:
                learner.publish()  # the actors pick it up before their next step
        self.carry = owed - int(owed)

    def _agree(self, stored: int, held: int) -> tuple[int, int]:
        """``(rows every rank stored this iteration, in all; the smallest shard)``, from one all-gather."""
        counts = self.dp.cat(torch.tensor([[stored, held]], dtype=torch.int64, device=self.learner.device))
        return int(counts[:, 0].sum()), int(counts[:, 1].min())

    def stop(self, timeout_s: float) -> None:
        """Mark the run stopped (the actors step only inside :meth:`iteration`)."""
        self.stop_event.set()
