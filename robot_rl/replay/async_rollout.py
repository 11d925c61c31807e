"""A rollout that actors fill without waiting for the learner: blocks of ``T`` steps from whichever actor delivers.

A synchronous rollout (:class:`~robot_rl.replay.rollout.RolloutStorage`) gives each (actor, sub-env) its own
column and is full when every column holds ``T`` steps, so the learner waits for the slowest actor and every
actor waits for the update. Here each actor's rows first go to its own staging *blocks* ``[T, n]`` (``n`` = the
sub-envs of one actor), in time order: the ``j``-th row of a sub-env lands in block ``j // T`` at step
``j % T``. A block is *complete* when each of its columns holds ``T`` steps. The rollout ``[T, N]`` is assembled
from the first ``N / n`` complete blocks in the order they completed, from any actors: a fast actor may give
two, a slow one none, and nobody waits for the slowest.

Staleness is bounded by ``max_staleness`` (``k``): a complete block whose oldest row was acted by weights more
than ``k`` versions behind the learner's (:meth:`AsyncRolloutStorage.advance`) is dropped whole and its rows
are counted (``dropped_rows``); versions only grow along a sub-env's rows, so the block's first rows are its
oldest. :meth:`AsyncRolloutStorage.behind` tells the update how far behind each kept row is, for its
off-policy correction (decoupled PPO in :mod:`robot_rl.policies.ppo`).

Each column of the assembled rollout is ``T`` consecutive steps of one sub-env, so GAE runs over it as over a
synchronous rollout. Where a column's rows are not consecutive (the rows of a quarantined sub-env were
dropped by its actor, an actor process restarted), the step before the gap is marked truncated: it
bootstraps from its own ``next_obs`` and the advantage recursion stops there.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

import torch

from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.replay.rollout import RolloutStorage

log = logging.getLogger(__name__)


@dataclass
class _Stream:
    """One actor's staging: its incomplete blocks in time order and each sub-env's rows since the first block."""

    count: torch.Tensor  # [n] rows received per sub-env (CPU int64)
    first: int = 0  # the index, in blocks of T rows, of blocks[0] in this actor's stream
    blocks: deque[RolloutStorage] = field(default_factory=deque)


class AsyncRolloutStorage(RolloutStorage):
    """``[T, N]`` rollout assembled from complete ``[T, n]`` blocks of any actors, at most ``max_staleness`` behind.

    ``envs_per_actor`` (``n``) must divide ``num_envs`` (``N``): every actor runs the task's ``num_envs``. The
    learner's version starts at 0; the loop calls :meth:`advance` with each version it publishes.
    """

    def __init__(self, spec: EnvSpec, num_envs: int, length: int, device: torch.device | str,
                 envs_per_actor: int, max_staleness: int) -> None:
        super().__init__(spec, num_envs, length, device)
        if envs_per_actor <= 0 or num_envs % envs_per_actor:
            raise ValueError(f"envs_per_actor ({envs_per_actor}) must divide the rollout's {num_envs} sub-envs")
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        self.envs_per_actor = envs_per_actor
        self.max_staleness = max_staleness
        self.learner_version = 0
        self.dropped_rows = 0
        """Rows of blocks dropped for being more than ``max_staleness`` versions behind."""
        self._streams: dict[int, _Stream] = {}
        self._ready: deque[tuple[RolloutStorage, int]] = deque()  # complete blocks and their oldest version
        self._pool: list[RolloutStorage] = []  # cleared blocks, reused
        self._lag = (0.0, 0.0)  # the last assembled rollout's mean and largest lag

    # ---- rows in ----------------------------------------------------------------------------

    @classmethod
    def like(cls, rollout: RolloutStorage, envs_per_actor: int, max_staleness: int) -> AsyncRolloutStorage:
        """An asynchronous rollout of ``rollout``'s spec, shape and device (an algorithm's ``make_storage``)."""
        return cls(rollout.spec, rollout.num_envs, rollout.length, rollout.device, envs_per_actor, max_staleness)

    def add(self, batch: TransitionBatch) -> None:
        """Stage each row in its actor's block at its sub-env's next step; move complete blocks to the ready queue."""
        actor = int(batch.actor_id)
        n, length = self.envs_per_actor, self.length
        stream = self._streams.get(actor)
        if stream is None:
            stream = self._streams[actor] = _Stream(torch.zeros(n, dtype=torch.long))
        env = batch.env_index.detach().to("cpu", torch.long)
        if env.numel() and (int(env.min()) < 0 or int(env.max()) >= n):
            raise IndexError(f"env_index outside [0, {n}) from actor {actor} (every actor runs {n} sub-envs)")
        # A batch may hold several steps of one sub-env: its r-th row is r steps after that sub-env's count.
        order = torch.argsort(env, stable=True)
        sorted_env = env[order]
        rank = torch.empty_like(env)
        rank[order] = torch.arange(env.numel()) - torch.searchsorted(sorted_env, sorted_env)
        block = (stream.count[env] + rank) // length - stream.first
        stream.count.index_add_(0, env, torch.ones_like(env))
        for b in torch.unique(block).tolist():
            while len(stream.blocks) <= b:
                stream.blocks.append(self._new_block())
            rows = (block == b).nonzero().flatten()
            stream.blocks[b].add(batch if rows.numel() == len(batch) else batch.index(rows.to(batch.env_index.device)))
        while stream.blocks and stream.blocks[0].is_full():
            done = stream.blocks.popleft()
            stream.first += 1
            self._ready.append((done, int(done.policy_version.min())))

    def _new_block(self) -> RolloutStorage:
        if self._pool:
            return self._pool.pop()
        return RolloutStorage(self.spec, self.envs_per_actor, self.length, self.device)

    def _recycle(self, block: RolloutStorage) -> None:
        block.clear()
        block._columns.clear()  # the next actor to use it numbers its sub-envs afresh
        block._next_column = 0
        self._pool.append(block)

    # ---- staleness --------------------------------------------------------------------------

    def advance(self, learner_version: int) -> None:
        """The learner now holds weights ``learner_version``: drop the complete blocks more than ``k`` behind it."""
        self.learner_version = learner_version
        oldest_kept = learner_version - self.max_staleness
        kept: deque[tuple[RolloutStorage, int]] = deque()
        for block, oldest in self._ready:
            if oldest >= oldest_kept:
                kept.append((block, oldest))
                continue
            if self.dropped_rows == 0:
                log.warning("dropped a block of %d rows acted by weights v%d, more than max_staleness=%d versions "
                            "behind the learner's v%d; further drops are only counted (stale_rows_dropped)",
                            block.length * block.num_envs, oldest, self.max_staleness, learner_version)
            self.dropped_rows += block.length * block.num_envs
            self._recycle(block)
        self._ready = kept

    def behind(self) -> torch.Tensor:
        """``[T, N]`` int64: versions between the weights that acted each row and the learner's (0 = on-policy)."""
        return self.learner_version - self.policy_version

    # ---- the rollout ------------------------------------------------------------------------

    def is_full(self) -> bool:
        """A rollout is assembled, or enough fresh complete blocks are ready to assemble one now."""
        if super().is_full():
            return True
        self.advance(self.learner_version)
        if len(self._ready) < self.num_envs // self.envs_per_actor:
            return False
        self._assemble()
        return True

    def _assemble(self) -> None:
        n = self.envs_per_actor
        for i in range(self.num_envs // n):
            block, _ = self._ready.popleft()
            cols = slice(i * n, (i + 1) * n)
            for key, buf in self.obs.items():
                buf[:, cols] = block.obs[key]
                self.next_obs[key][:, cols] = block.next_obs[key]
            self.action[:, cols] = block.action
            self.reward[:, cols] = block.reward
            self.terminated[:, cols] = block.terminated
            self.truncated[:, cols] = block.truncated
            self.intervened[:, cols] = block.intervened
            self.policy_version[:, cols] = block.policy_version
            if not self.extras:
                self.extras = {k: torch.zeros(self.length, self.num_envs, *v.shape[2:], dtype=v.dtype,
                                              device=self.device) for k, v in block.extras.items()}
            if set(block.extras) != set(self.extras):
                raise KeyError(f"extras keys {sorted(block.extras)} differ from the rollout's {sorted(self.extras)}")
            for key, buf in self.extras.items():
                buf[:, cols] = block.extras[key]
            self._recycle(block)
        self._cut_gaps()
        self._cursor.fill_(self.length)
        lag = self.behind().float()
        self._lag = (float(lag.mean()), float(lag.max()))

    def _cut_gaps(self) -> None:
        """Truncate each step that did not end its episode and whose successor is not the next row (a gap)."""
        if self.length < 2:
            return
        gap = torch.zeros_like(self.truncated[:-1])
        for key, obs in self.obs.items():
            gap |= (self.next_obs[key][:-1] != obs[1:]).flatten(2).any(-1)
        self.truncated[:-1] |= gap & ~self.done[:-1]

    def truncate_actor(self, actor_id: int) -> None:
        """Mark the newest staged row of each of ``actor_id``'s sub-envs truncated (its actor process died there).

        A newest row that completed a block is the last step of its column, where the advantage recursion stops
        anyway (``compute_gae``), so only rows still in incomplete blocks need the mark.
        """
        stream = self._streams.get(actor_id)
        if stream is None:
            return
        newest = stream.count - 1
        for env in (newest >= 0).nonzero().flatten().tolist():
            b = int(newest[env]) // self.length - stream.first
            if 0 <= b < len(stream.blocks):
                block = stream.blocks[b]
                col = int(block._columns[actor_id][env])
                block.truncated[int(newest[env]) % self.length, col] = True

    def clear(self) -> None:
        """Forget the assembled rollout; staged and ready blocks stay for the next one."""
        super().clear()

    def __len__(self) -> int:
        staged = sum(len(b) for s in self._streams.values() for b in s.blocks)
        return super().__len__() + staged + sum(len(b) for b, _ in self._ready)

    def stats(self) -> dict[str, float]:
        """For logs: rows dropped as stale, and the last assembled rollout's mean and largest lag (versions)."""
        return {"stale_rows_dropped": float(self.dropped_rows), "staleness_mean": self._lag[0],
                "staleness_max": self._lag[1]}
