"""The replay buffer's storage: two preallocated rings on the buffer's device and the write path into them.

- an **observation ring** of ``obs_capacity`` slots, each one observation (images as uint8), plus
  ``slot_prev``: the slot of the frame before it in the same episode (``-1`` at an episode start);
- a **transition ring** of ``capacity`` rows: action, reward, flags, and two slot numbers, ``obs_slot``
  and ``next_slot``, plus ``prev_row`` (the stream's previous transition, for n-step chains).

A stream is one sub-env of one actor ``(actor_id, env_index)``. When a row's observation is exactly
the previous row's ``next_obs`` in the same stream (the usual case), the row points at that slot
instead of storing it again, so a transition costs one observation, not two. An episode's final
observation (``terminated | truncated``) is its own slot and is never chained to the reset
observation that follows. Rows whose observation does not match (a dropped row, a restart) get a
fresh slot, so correctness never depends on the actor sending every step.

Slot and row numbers are absolute counters (``position = number mod capacity``), which makes
"is this slot still alive" a comparison and lets :mod:`robot_rl.replay.segments` append the rings to
disk as they fill. When the observation ring wraps faster than the transition ring (episodes much
shorter than 20 steps with the default ``obs_capacity``), the rows whose observation was overwritten
are dropped from the oldest end first: the buffer then holds fewer than ``capacity`` rows, never a
wrong one.

:class:`~robot_rl.replay.buffer.ReplayBuffer` builds on :class:`ReplayRing`: it splits what is added
into parts the rings can take, samples from them, and commits them to a segment log.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import TransitionBatch

_ROW_FIELDS = ("action", "reward", "terminated", "truncated", "intervened", "policy_version", "env_index")
#: Per-row bookkeeping stored (and persisted) next to the transition fields.
_LINK_FIELDS = ("actor_id", "obs_slot", "next_slot", "prev_row")
_FLAG_FIELDS = ("terminated", "truncated", "intervened")
_INT_FIELDS = ("policy_version", "env_index", *_LINK_FIELDS)
#: Below this many bytes per observation a second slot per row costs nothing worth saving.
_SMALL_OBS_BYTES = 4096


class ReplayRing:
    """The observation and transition rings for ``spec``, with ``capacity`` rows (see the module docstring).

    ``obs_capacity`` defaults to ``2·capacity`` for small observations, else ``1.05·capacity``.
    """

    def __init__(self, spec: EnvSpec, capacity: int, device: torch.device | str = "cpu", *,
                 obs_capacity: int | None = None) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.spec = spec
        self.capacity = int(capacity)
        self.device = torch.device(device)
        obs_bytes = sum(math.prod(s.shape) * s.torch_dtype.itemsize for s in spec.observation.values())
        if obs_capacity is None:
            obs_capacity = 2 * capacity if obs_bytes <= _SMALL_OBS_BYTES else capacity + math.ceil(capacity / 20)
        if obs_capacity < 4:
            raise ValueError(f"obs_capacity must be at least 4, got {obs_capacity}")
        self.obs_capacity = int(obs_capacity)
        # A row may reuse the previous row's next-observation slot only if that slot is in the newer
        # half of the ring, so that evicting slots also evicts rows oldest-first (see _advance).
        self._chain_window = self.obs_capacity // 2
        self._max_part = max(1, min(self.capacity, (self.obs_capacity - self._chain_window - 1) // 2))
        dev, cap, ocap = self.device, self.capacity, self.obs_capacity
        # One spare slot/row at the end is a write-only sink for masked scatters (no host sync).
        self._obs = {k: torch.empty(ocap + 1, *s.shape, dtype=s.torch_dtype, device=dev)
                     for k, s in spec.observation.items()}
        self._slot_prev = torch.full((ocap + 1,), -1, dtype=torch.int64, device=dev)
        self._slot_row = torch.full((ocap + 1,), -1, dtype=torch.int64, device=dev)
        # Scalar fields are packed by dtype so a sample gathers them in two ops, not nine; the named
        # columns in _rows are views into the packed tensors (writes go through).
        self._flags = torch.zeros(cap, len(_FLAG_FIELDS), dtype=torch.bool, device=dev)
        self._ints = torch.zeros(cap, len(_INT_FIELDS), dtype=torch.int64, device=dev)
        self._rows: dict[str, torch.Tensor] = {
            "action": torch.empty(cap, *spec.action.shape, dtype=spec.action.torch_dtype, device=dev),
            "reward": torch.empty(cap, dtype=torch.float32, device=dev),
            **{f: self._flags[:, i] for i, f in enumerate(_FLAG_FIELDS)},
            **{f: self._ints[:, i] for i, f in enumerate(_INT_FIELDS)},
        }
        self._next_row = torch.full((cap + 1,), -1, dtype=torch.int64, device=dev)
        self._t = self._o = 0  # rows / slots ever written (absolute counters)
        self._t_lo = self._o_lo = 0  # oldest live row; oldest slot that exists at all (after a reload)
        self._streams: dict[int, torch.Tensor] = {}  # actor id → [env, 2]: pending (slot, row), -1 = none

    # ---- sizes ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._t - self._t_lo

    @property
    def transitions_written(self) -> int:
        """Rows ever added (also the absolute number the next row gets)."""
        return self._t

    @property
    def slots_written(self) -> int:
        """Observation slots ever written (≈ rows + episode starts)."""
        return self._o

    def actor_ids(self, idx: torch.Tensor) -> torch.Tensor:
        """``[B]`` int64: the actor id each row at ring positions ``idx`` came from (demos: ``DEMO_ACTOR_ID``)."""
        return self._rows["actor_id"].index_select(0, idx)

    def _slot_floor(self) -> int:
        return max(self._o - self.obs_capacity, self._o_lo)

    # ---- writing ----------------------------------------------------------------------------

    def _stream(self, actor_id: int, max_env: int) -> torch.Tensor:
        state = self._streams.get(actor_id)
        if state is None or state.shape[0] <= max_env:
            grown = torch.full((max(max_env + 1, 2 * (0 if state is None else state.shape[0])), 2), -1,
                               dtype=torch.int64, device=self.device)
            if state is not None:
                grown[: state.shape[0]] = state
            self._streams[actor_id] = state = grown
        return state

    def _append(self, b: TransitionBatch) -> None:
        """Store rows with distinct ``env_index`` (``len(b) <= _max_part``)."""
        n, dev, ocap = len(b), self.device, self.obs_capacity
        env = b.env_index.to(torch.int64)
        stream = self._stream(int(b.actor_id), int(env.max()))
        pending = stream[env]
        ps, pr = pending[:, 0], pending[:, 1]
        # Chain: this row's observation is the slot its stream's previous row stored as next_obs.
        chain = ps >= max(self._o - self._chain_window, self._slot_floor(), 0)
        psp = ps.clamp(min=0) % ocap
        for k, store in self._obs.items():
            chain &= (store[psp].reshape(n, -1) == b.obs[k].to(store.dtype).reshape(n, -1)).all(dim=1)
        fresh = (~chain).long()
        counts = 1 + fresh
        first = self._o + counts.cumsum(0) - counts
        obs_slot = torch.where(chain, ps, first)
        next_slot = first + fresh
        n_slots = n + int(fresh.sum())  # the one host sync of an add
        rows = self._t + torch.arange(n, device=dev)
        prev_row = torch.where(chain & (pr >= self._t_lo), pr, torch.full_like(pr, -1))
        self._advance(n, n_slots)
        # New slots: the row's own observation where it did not chain (an episode start), then its
        # successor. Unchained rows' first slot goes to the sink row when chained (no sync needed).
        fresh_pos = torch.where(chain, torch.full_like(first, ocap), first % ocap)
        next_pos = next_slot % ocap
        for k, store in self._obs.items():
            store.index_copy_(0, fresh_pos, b.obs[k].to(store.dtype))
            store.index_copy_(0, next_pos, b.next_obs[k].to(store.dtype))
        self._slot_prev.index_fill_(0, fresh_pos, -1)
        self._slot_prev.index_copy_(0, next_pos, obs_slot)
        self._slot_row.index_copy_(0, next_pos, torch.full_like(rows, -1))
        self._slot_row.index_copy_(0, obs_slot % ocap, rows)
        fields = {f: getattr(b, f) for f in _ROW_FIELDS}
        fields.update(actor_id=torch.full_like(rows, int(b.actor_id)), obs_slot=obs_slot, next_slot=next_slot,
                      prev_row=prev_row)
        self._write_rows(rows, fields)
        done = b.terminated | b.truncated
        stream[env] = torch.where(done[:, None], torch.full_like(pending, -1), torch.stack([next_slot, rows], 1))
        self._t += n
        self._o += n_slots

    def _advance(self, n_rows: int, n_slots: int) -> None:
        """Evict what ``n_rows`` new rows and ``n_slots`` new slots overwrite (oldest first)."""
        ocap = self.obs_capacity
        lo_old, lo_new = max(self._o - ocap, 0), self._o + n_slots - ocap
        if lo_new > lo_old:
            pos = torch.arange(lo_old, lo_new, device=self.device) % ocap
            users = self._slot_row[pos]
            # Every row up to the newest one reading an evicted slot goes too (FIFO order kept).
            self._t_lo = max(self._t_lo, int(users.max()) + 1)
            self._slot_row[pos] = -1
        self._t_lo = min(max(self._t_lo, self._t + n_rows - self.capacity), self._t + n_rows)

    def _write_rows(self, rows: torch.Tensor, fields: dict[str, torch.Tensor]) -> None:
        pos = rows % self.capacity
        for f, dst in self._rows.items():
            dst.index_copy_(0, pos, fields[f].to(self.device, dst.dtype))
        self._next_row.index_fill_(0, pos, -1)
        prev = fields["prev_row"].to(self.device)
        link = torch.where(prev >= self._t_lo, prev % self.capacity, torch.full_like(prev, self.capacity))
        self._next_row.index_copy_(0, link, rows)
        self._next_row[self.capacity] = -1

    # ---- rows by position (reward relabelling) ----------------------------------------------

    def live_positions(self, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Ring positions of the live rows ``start..stop`` counted from the oldest (``[0, len)``)."""
        stop = len(self) if stop is None else min(stop, len(self))
        return (torch.arange(start, stop, device=self.device) + self._t_lo) % self.capacity

    def raw_rows(self, pos: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor],
                                                   torch.Tensor, torch.Tensor]:
        """One-step ``(obs, next_obs, reward, intervened)`` of the rows at ring positions ``pos``.

        As stored: no n-step return, frame stack or action chunk is applied (what a reward model relabels).
        """
        ints = self._ints.index_select(0, pos)
        ocap = self.obs_capacity
        obs_slot = ints[:, _INT_FIELDS.index("obs_slot")] % ocap
        next_slot = ints[:, _INT_FIELDS.index("next_slot")] % ocap
        obs = {k: v.index_select(0, obs_slot) for k, v in self._obs.items()}
        nxt = {k: v.index_select(0, next_slot) for k, v in self._obs.items()}
        return obs, nxt, self._rows["reward"].index_select(0, pos), self._rows["intervened"].index_select(0, pos)

    def stored_batches(self, start: int, stop: int, *, intervened_only: bool = False) -> list[TransitionBatch]:
        """The live rows numbered ``start..stop`` as they were added, one batch per actor id, in the order stored.

        One step each (no n-step return, frame stack or action chunk), without ``extras``; ``intervened_only``
        keeps the rows flagged ``intervened``. What a routed buffer copies again after a reload.
        """
        lo, hi = max(start, self._t_lo), min(stop, self._t)
        if hi <= lo:
            return []
        pos = torch.arange(lo, hi, device=self.device) % self.capacity
        if intervened_only:
            pos = pos[self._rows["intervened"].index_select(0, pos)]
        actors = self._rows["actor_id"].index_select(0, pos)
        batches = []
        for actor in torch.unique(actors).tolist():
            mine = pos[actors == actor]
            obs, next_obs, reward, intervened = self.raw_rows(mine)
            r = {f: self._rows[f].index_select(0, mine) for f in ("action", "terminated", "truncated",
                                                                   "policy_version", "env_index")}
            batches.append(TransitionBatch(obs=obs, action=r["action"], reward=reward, terminated=r["terminated"],
                                           truncated=r["truncated"], next_obs=next_obs, intervened=intervened,
                                           policy_version=r["policy_version"], env_index=r["env_index"],
                                           actor_id=int(actor)))
        return batches

    def rewrite_rewards(self, pos: torch.Tensor, reward: torch.Tensor) -> None:
        """Overwrite the stored rewards at ring positions ``pos``.

        In memory only: segments already on disk keep the reward they were written with, so relabel
        again after a resume.
        """
        self._rows["reward"].index_copy_(0, pos, reward.to(self._rows["reward"].dtype))

    def rows_reaching(self, actor_id: int, next_obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Absolute numbers of the live rows of ``actor_id`` whose ``next_obs`` equals ``next_obs`` on its keys.

        ``next_obs``: ``{key: [...]}``, one unbatched observation (a subset of the keys: a state vector is enough to
        find the step an operator's answer is about, the camera frames need not be compared).
        """
        pos = self.live_positions()
        pos = pos[self._rows["actor_id"].index_select(0, pos) == actor_id]
        slot = self._ints.index_select(0, pos)[:, _INT_FIELDS.index("next_slot")]
        alive = slot >= self._slot_floor()
        pos, slot = pos[alive], slot[alive] % self.obs_capacity
        if not len(pos):
            return pos
        hit = torch.ones(len(pos), dtype=torch.bool, device=self.device)
        for k, v in next_obs.items():
            stored = self._obs[k].index_select(0, slot)
            hit &= (stored == v.to(self.device, stored.dtype)).reshape(len(pos), -1).all(dim=1)
        pos = pos[hit]
        # Position → absolute row: the live rows are [_t_lo, _t), one per position.
        return torch.remainder(pos - self._t_lo, self.capacity) + self._t_lo

    def outcomes(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(reward, terminated, truncated)`` of the live absolute rows ``rows``."""
        pos = rows.to(self.device) % self.capacity
        return tuple(self._rows[f].index_select(0, pos) for f in ("reward", "terminated", "truncated"))  # type: ignore[return-value]

    def _write_outcomes(self, rows: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor,
                        truncated: torch.Tensor) -> None:
        pos = rows.to(self.device) % self.capacity
        self._rows["reward"].index_copy_(0, pos, reward.to(self.device, torch.float32))
        for f, v in (("terminated", terminated), ("truncated", truncated)):
            self._flags[:, _FLAG_FIELDS.index(f)].index_copy_(0, pos, v.to(self.device, torch.bool))

    # ---- in-memory state (small buffers, tests) -----------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The written rows and slots and the counters (the unused capacity is not saved)."""
        nr, ns = min(self._t, self.capacity), min(self._o, self.obs_capacity)
        return {"capacity": self.capacity, "obs_capacity": self.obs_capacity,
                "counters": torch.tensor([self._t, self._o, self._t_lo, self._o_lo]),
                "rows": {f: t[:nr].clone() for f, t in self._rows.items()}, "next_row": self._next_row[:nr].clone(),
                "obs": {k: v[:ns].clone() for k, v in self._obs.items()},
                "slot_prev": self._slot_prev[:ns].clone(), "slot_row": self._slot_row[:ns].clone(),
                "streams": {str(a): s.clone() for a, s in self._streams.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (capacities and keys must match)."""
        if int(state["capacity"]) != self.capacity or int(state["obs_capacity"]) != self.obs_capacity:
            raise ValueError(f"buffer capacity {self.capacity}/{self.obs_capacity} != saved "
                             f"{state['capacity']}/{state['obs_capacity']}")
        for name, mine in (("obs", self._obs), ("rows", self._rows)):
            if set(state[name]) != set(mine):
                raise KeyError(f"saved {name} keys {sorted(state[name])} != {sorted(mine)}")
            for k, dst in mine.items():
                dst[: len(state[name][k])].copy_(state[name][k])
        for dst, src in ((self._next_row, state["next_row"]), (self._slot_prev, state["slot_prev"]),
                         (self._slot_row, state["slot_row"])):
            dst[: len(src)].copy_(src)
        self._t, self._o, self._t_lo, self._o_lo = (int(x) for x in state["counters"].tolist())
        self._streams = {int(a): s.to(self.device) for a, s in state["streams"].items()}

    # ---- loading a committed segment (see robot_rl.replay.segments) ----------------------------

    def load_segment(self, t0: int, t1: int, o0: int, o1: int, arrays: dict[str, torch.Tensor]) -> None:
        """Replay one committed segment into the rings (used by :meth:`SegmentLog.load_into`)."""
        if self._t == 0 and self._o == 0 and (t0 or o0):
            # The log's older segments were pruned: start the counters where the log starts.
            self._t = self._t_lo = t0
            self._o = self._o_lo = o0
        if (t0, o0) != (self._t, self._o):
            raise ValueError(f"segment starts at row {t0}/slot {o0}, buffer is at {self._t}/{self._o}")
        n, m, ocap = t1 - t0, o1 - o0, self.obs_capacity
        if n > self.capacity or m > ocap:
            raise ValueError(f"a segment of {n} rows/{m} slots does not fit a buffer of capacity "
                             f"{self.capacity}/{ocap}; open it with a larger buffer")
        self._advance(n, m)
        self._o = o1
        slot_abs = torch.arange(o0, o1, device=self.device)
        keep = slot_abs >= o1 - ocap
        spos = slot_abs[keep] % ocap
        for k, store in self._obs.items():
            store.index_copy_(0, spos, arrays[f"obs.{k}"].to(self.device)[keep])
        self._slot_prev.index_copy_(0, spos, arrays["slot.prev"].to(self.device)[keep])
        self._slot_row.index_fill_(0, spos, -1)
        rows = torch.arange(t0, t1, device=self.device)
        fields = {f: arrays[f"row.{f}"].to(self.device) for f in self._rows}
        obs_slot = fields["obs_slot"]
        live = obs_slot >= self._slot_floor()
        self._slot_row.index_copy_(0, torch.where(live, obs_slot % ocap, torch.full_like(obs_slot, ocap)), rows)
        if not bool(live.all()):  # rows reading slots that were pruned from the log
            self._t_lo = max(self._t_lo, int(rows[~live].max()) + 1)
        self._write_rows(rows, fields)
        self._t = t1

