"""A replay laid out ``[num_envs, capacity]`` on the learner's device, for massively parallel envs (FastTD3).

Each sub-env (a stream: one ``(actor_id, env_index)``) owns a row of ``capacity`` time slots written as a ring,
so a vectorised step of E sub-envs is one scatter into E rows and the next step of an episode sits in the next
slot of the same row. Compared with :class:`~robot_rl.replay.buffer.ReplayBuffer` (one shared ring, successor
found by index links), this stores ``next_obs`` explicitly (twice the observation memory, which for state
vectors is small) and in exchange n-step returns are one ``[B, n]`` gather, with no pointer chasing.

Episode boundaries. ``linked[e, p]`` says that slot ``p + 1`` of row ``e`` holds the step that followed slot
``p`` in the same episode. It is set when that next step arrives, and only if slot ``p`` was neither terminated
nor truncated, the stream lost no row in between (a row refused as non-finite, or dropped by the actor), and
the new step's ``obs`` equals slot ``p``'s ``next_obs``. An n-step window walks forward only across linked
slots, so it never crosses an episode end, a gap, or the newest stored step.

Sampling is uniform over every stored transition, across envs and time: an index ``u`` uniform in
``[0, len)`` is mapped to the stream whose cumulative size first exceeds it (``searchsorted``), then to a
slot counted from that stream's oldest step.

Rows with a NaN/inf in the reward, action or an observation are refused (never stored) and counted in
:attr:`DeviceReplay.nonfinite_rows`: a non-finite value in a sampled batch would put NaN into every weight at the
next update. This storage is not persisted to disk (``robot_rl.replay.persist`` does not know it); a resumed
run refills it from empty.
"""

from __future__ import annotations

import logging
import math

import torch

from robot_rl.core.extras import DISCOUNT
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.replay.buffer import _occurrence_rank

log = logging.getLogger(__name__)


class DeviceReplay:
    """``capacity`` steps for each of ``num_envs`` streams (see the module docstring).

    Args:
        n_step: sampled rows carry ``Σ_{i<m} γ^i r_{t+i}`` over the ``m ≤ n`` steps of the window, and the
            ``next_obs``/``terminated``/``truncated`` of its last step; ``extras["discount"] = γ^m`` always (so
            the learner bootstraps with ``discount·(1 − terminated)`` whatever ``n_step`` is).
        generator: draws the sample indices (``None``: torch's global generator).
    """

    def __init__(self, spec: EnvSpec, num_envs: int, capacity: int, device: torch.device | str = "cpu", *,
                 n_step: int = 1, gamma: float = 0.99, generator: torch.Generator | None = None) -> None:
        if num_envs < 1 or capacity < 2 or n_step < 1:
            raise ValueError(f"need num_envs >= 1, capacity >= 2 and n_step >= 1; got {num_envs}, {capacity}, "
                             f"{n_step}")
        self.spec, self.num_envs, self.capacity = spec, int(num_envs), int(capacity)
        self.device = torch.device(device)
        self.n_step, self.gamma, self.generator = n_step, gamma, generator
        e, c, dev = self.num_envs, self.capacity, self.device
        self._obs = {k: torch.zeros(e, c, *s.shape, dtype=s.torch_dtype, device=dev)
                     for k, s in spec.observation.items()}
        self._next_obs = {k: torch.zeros_like(v) for k, v in self._obs.items()}
        self._action = torch.zeros(e, c, *spec.action.shape, dtype=torch.float32, device=dev)
        self._reward = torch.zeros(e, c, dtype=torch.float32, device=dev)
        # terminated, truncated, intervened, linked (slot p+1 continues slot p's episode)
        self._flags = torch.zeros(e, c, 4, dtype=torch.bool, device=dev)
        self._version = torch.zeros(e, c, dtype=torch.int64, device=dev)
        self._ptr = torch.zeros(e, dtype=torch.int64, device=dev)  # next slot to write, per stream
        self._size = torch.zeros(e, dtype=torch.int64, device=dev)  # stored steps, per stream
        self._gap = torch.zeros(e, dtype=torch.bool, device=dev)  # a row of the stream was refused since its last
        self._stream_env = torch.zeros(e, dtype=torch.int64, device=dev)  # env_index of each stream
        self._streams: dict[int, torch.Tensor] = {}  # actor id → [max env + 1] stream ids (-1: none yet)
        self._used = 0  # streams assigned
        self._total = 0
        self._discounts = gamma ** torch.arange(n_step, dtype=torch.float32, device=dev)
        self.nonfinite_rows = 0
        """Rows refused because a float field was NaN/inf."""

    def __len__(self) -> int:
        return self._total

    # ---- adding -----------------------------------------------------------------------------

    def _stream_ids(self, actor_id: int, env: torch.Tensor, max_env: int) -> torch.Tensor:
        """The stream of each row, assigning new ones to ``(actor_id, env_index)`` pairs seen for the first time."""
        table = self._streams.get(actor_id)
        if table is None or table.shape[0] <= max_env:
            grown = torch.full((max_env + 1,), -1, dtype=torch.int64, device=self.device)
            if table is not None:
                grown[: table.shape[0]] = table
            self._streams[actor_id] = table = grown
        ids = table[env]
        new = torch.unique(env[ids < 0])
        if new.numel():
            if self._used + new.numel() > self.num_envs:
                raise ValueError(f"the replay was built for {self.num_envs} sub-envs and actor {actor_id} brings "
                                 f"sub-env {int(new.max())}, sub-env number {self._used + new.numel()} in all "
                                 "(make_storage(num_envs) must count every actor's sub-envs)")
            fresh = torch.arange(self._used, self._used + new.numel(), device=self.device)
            table[new] = fresh
            self._stream_env[fresh] = new
            self._used += new.numel()
            ids = table[env]
        return ids

    def add(self, batch: TransitionBatch) -> None:
        """Store ``batch``: rows of one sub-env in batch order are consecutive steps; non-finite rows are refused."""
        if len(batch) == 0:
            return
        if set(batch.obs) != set(self._obs) or set(batch.next_obs) != set(self._obs):
            raise KeyError(f"observation keys {sorted(batch.obs)} do not match the replay's {sorted(self._obs)}")
        batch = batch.to(self.device)
        env = batch.env_index.to(torch.int64)
        ok = batch.finite_rows()
        lo, hi, bad = torch.stack([env.min(), env.max(), (~ok).sum()]).tolist()
        if lo < 0:
            raise ValueError("env_index must be non-negative")
        ids = self._stream_ids(int(batch.actor_id), env, hi)
        if not bad:
            self._write(batch, ids)
            return
        if self.nonfinite_rows == 0:
            log.warning("replay refused %d transition(s) with NaN/inf (reward, action or observation); further "
                        "ones are only counted in nonfinite_rows", bad)
        self.nonfinite_rows += bad
        # In time order (one step per stream at a time), so that a refused step breaks exactly the link across it.
        rank = _occurrence_rank(ids)
        for r in range(int(rank.max()) + 1):
            part = rank == r
            self._gap[ids[part & ~ok]] = True  # the stream's next stored step does not continue its last one
            good = (part & ok).nonzero().flatten()
            if good.numel():
                self._write(batch.index(good), ids[good])

    def _write(self, b: TransitionBatch, ids: torch.Tensor) -> None:
        n, cap = len(b), self.capacity
        rank = _occurrence_rank(ids) if n > 1 else torch.zeros_like(ids)
        counts = torch.bincount(ids, minlength=self.num_envs)
        most = int(counts.max())
        if most >= cap:  # its first step would link to a slot the same batch overwrites
            raise ValueError(f"a batch holds {most} steps of one sub-env; it must be fewer than its {cap} slots")
        before = self._size[ids]
        pos = (self._ptr[ids] + rank) % cap
        for k, store in self._obs.items():
            store[ids, pos] = b.obs[k].to(store.dtype)
            self._next_obs[k][ids, pos] = b.next_obs[k].to(store.dtype)
        self._action[ids, pos] = b.action.reshape(n, *self.spec.action.shape).float()
        self._reward[ids, pos] = b.reward.float()
        self._version[ids, pos] = b.policy_version.to(torch.int64)
        self._flags[ids, pos] = torch.stack([b.terminated, b.truncated, b.intervened,
                                             torch.zeros_like(b.terminated)], dim=1).bool()
        # Link each new step to the slot before it (written earlier, or by this batch at rank − 1).
        prev = (pos - 1) % cap
        has_prev = (before + rank) > 0
        first = rank == 0
        gap = self._gap[ids] & first
        flags = self._flags[ids, prev]
        same = ~(flags[:, 0] | flags[:, 1]) & has_prev & ~gap
        for k, store in self._next_obs.items():
            same &= (store[ids, prev].reshape(n, -1) == b.obs[k].to(store.dtype).reshape(n, -1)).all(dim=1)
        self._flags[ids, prev, 3] = same
        self._gap[ids] = False
        self._ptr = (self._ptr + counts) % cap
        self._size = torch.clamp(self._size + counts, max=cap)
        self._total = int(self._size.sum())

    # ---- sampling ---------------------------------------------------------------------------

    def sample_slots(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(stream, slot, age)`` ``[batch_size]`` each, uniform with replacement over the stored steps.

        ``age`` counts from the stream's oldest step.
        """
        if self._total == 0:
            raise ValueError("cannot sample from an empty replay")
        u = torch.randint(0, self._total, (batch_size,), device=self.device, generator=self.generator)
        ends = self._size.cumsum(0)
        e = torch.searchsorted(ends, u, right=True)
        size = self._size[e]
        age = u - (ends[e] - size)
        slot = (self._ptr[e] - size + age) % self.capacity
        return e, slot, age

    def sample(self, batch_size: int) -> TransitionBatch:
        """``batch_size`` transitions drawn uniformly with replacement, n-step returns applied.

        A batch larger than what the replay holds is refused: it would repeat most rows and means the learner
        started before it had the data it was configured for.
        """
        if not 1 <= batch_size <= self._total:
            raise ValueError(f"cannot sample {batch_size} transitions from a replay holding {self._total}: collect "
                             "more first (learning_starts must be at least batch_size)")
        e, slot, _ = self.sample_slots(batch_size)
        return self.gather(e, slot)

    def gather(self, e: torch.Tensor, slot: torch.Tensor) -> TransitionBatch:
        """The transitions starting at ``(stream, slot)`` ``[B]``, with their n-step windows."""
        n, b = self.n_step, e.shape[0]
        window = (slot[:, None] + torch.arange(n, device=self.device)) % self.capacity  # [B, n]
        rows = e[:, None].expand(b, n)
        # Step i of the window counts iff every step before it links to its successor.
        linked = self._flags[rows[:, :-1], window[:, :-1], 3]
        keep = torch.cat([torch.ones(b, 1, dtype=torch.bool, device=self.device),
                          torch.cumprod(linked.to(torch.int8), dim=1).bool()], dim=1)
        steps = keep.sum(dim=1)  # m in [1, n]
        reward = (self._reward[rows, window] * self._discounts * keep).sum(dim=1)
        last = window.gather(1, (steps - 1)[:, None]).squeeze(1)
        end_flags = self._flags[e, last]
        first_flags = self._flags[e, slot]
        return TransitionBatch(
            obs={k: v[e, slot] for k, v in self._obs.items()},
            next_obs={k: v[e, last] for k, v in self._next_obs.items()},
            action=self._action[e, slot].reshape(b, *self.spec.action.shape),
            reward=reward, terminated=end_flags[:, 0], truncated=end_flags[:, 1], intervened=first_flags[:, 2],
            policy_version=self._version[e, slot], env_index=self._stream_env[e],
            extras={DISCOUNT.name: self.gamma ** steps.to(torch.float32)},
        )

    # ---- sizes ------------------------------------------------------------------------------

    def stream_sizes(self) -> torch.Tensor:
        """``[num_envs]`` steps stored per stream (streams in the order their sub-envs first arrived)."""
        return self._size.clone()

    @staticmethod
    def per_env_capacity(total: int, num_envs: int, n_step: int = 1) -> int:
        """Slots per stream for about ``total`` transitions in all (at least ``n_step + 1``)."""
        return max(math.ceil(total / max(num_envs, 1)), n_step + 1, 2)
