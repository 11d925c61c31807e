"""Device-resident replay: observations stored once, successors found by index, n-step on sampling.

The storage is :class:`~robot_rl.replay.ring.ReplayRing` (robot_rl/replay/ring.py): an observation
ring and a transition ring, rows of one stream chained so that a transition costs one observation.
:class:`ReplayBuffer` adds what the learner uses on top of it: ``add`` splits a batch into parts the
rings can take (one row per stream each), sampling, and persistence to a segment log.

Sampling (``sample``/``gather``) is a fixed number of batched index operations on the device:
n-step returns and frame stacks follow the ``next_row``/``slot_prev`` links with a Python loop over
``n``/``k`` steps, never over samples.

Persistence (``attach_log``/``flush``/``watermark``, see :mod:`robot_rl.replay.segments`): rows are
handed to the log's writer a segment at a time; the watermark counts only what is durable.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import torch

from robot_rl.core.extras import ACTION_PAD, DISCOUNT, MC_RETURN
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.replay.relabels import Fix, read_journal, write_journal
from robot_rl.replay.returns import EpisodeReturns
from robot_rl.replay.ring import _FLAG_FIELDS, _INT_FIELDS, _ROW_FIELDS, ReplayRing

if TYPE_CHECKING:
    from robot_rl.replay.segments import LoadReport, SegmentLog



def concat_batches(batches: list[TransitionBatch]) -> TransitionBatch:
    """Concatenate batches row-wise (``extras`` keep only the keys every batch has)."""
    if len(batches) == 1:
        return batches[0]

    def cat_dict(dicts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        keys = set(dicts[0]).intersection(*dicts[1:])
        return {k: torch.cat([d[k] for d in dicts]) for k in sorted(keys)}

    rows = {f: torch.cat([getattr(b, f) for b in batches]) for f in _ROW_FIELDS}
    return _batch(cat_dict([b.obs for b in batches]), cat_dict([b.next_obs for b in batches]), rows,
                  cat_dict([b.extras for b in batches]))


def _batch(obs: dict[str, torch.Tensor], next_obs: dict[str, torch.Tensor], rows: dict[str, torch.Tensor],
           extras: dict[str, torch.Tensor] | None = None) -> TransitionBatch:
    return TransitionBatch(obs=obs, next_obs=next_obs, action=rows["action"], reward=rows["reward"],
                           terminated=rows["terminated"], truncated=rows["truncated"],
                           intervened=rows["intervened"], policy_version=rows["policy_version"],
                           env_index=rows["env_index"], extras=extras or {})


def _occurrence_rank(keys: torch.Tensor) -> torch.Tensor:
    """``[n]``: how many earlier rows share each row's key (0 for the first occurrence)."""
    n = keys.numel()
    order = torch.argsort(keys * n + torch.arange(n, device=keys.device))
    sorted_keys = keys[order]
    is_start = torch.ones(n, dtype=torch.bool, device=keys.device)
    is_start[1:] = sorted_keys[1:] != sorted_keys[:-1]
    pos = torch.arange(n, device=keys.device)
    group_start = torch.cummax(torch.where(is_start, pos, torch.zeros_like(pos)), 0).values
    rank = torch.empty_like(pos)
    rank[order] = pos - group_start
    return rank


class ReplayBuffer(ReplayRing):
    """A ring buffer of ``capacity`` transitions for observations and actions described by ``spec``.

    Args:
        obs_capacity: observation slots (default: ``2·capacity`` for small observations, else
            ``1.05·capacity``: one slot per row plus one per episode start for episodes ≥ 20 steps).
        n_step: sampled rows carry ``Σ_{i<m} γ^i r_{t+i}`` over up to ``n`` steps of the same
            episode, ``next_obs``/``terminated``/``truncated`` of the last of them, and
            ``extras["discount"] = γ^m`` (only when ``n_step > 1``) for the bootstrap.
        frame_stack: ``k > 1`` returns observations ``[B, k, ...]`` (oldest first), built at sample
            time from ``slot_prev``; frames before the episode start repeat its first frame.
        action_chunk: ``H > 1`` returns actions ``[B, H, *action_shape]``, the next ``H`` actions of
            the episode, and ``extras["action_pad"]`` ``[B, H]`` where the episode ended first (the
            last action is repeated there).
        track_returns: sampled rows carry ``extras["mc_return"]``, the discounted return-to-go of their episode
            (NaN while it runs; :mod:`robot_rl.replay.returns`), Cal-QL's reference value online.
    """

    def __init__(self, spec: EnvSpec, capacity: int, device: torch.device | str = "cpu", *,
                 obs_capacity: int | None = None, n_step: int = 1, gamma: float = 0.99,
                 frame_stack: int = 1, action_chunk: int = 1, track_returns: bool = False) -> None:
        if n_step < 1 or frame_stack < 1 or action_chunk < 1:
            raise ValueError(f"n_step, frame_stack and action_chunk must be >= 1, got {n_step}, "
                             f"{frame_stack}, {action_chunk}")
        super().__init__(spec, capacity, device, obs_capacity=obs_capacity)
        self.n_step, self.gamma, self.frame_stack, self.action_chunk = n_step, gamma, frame_stack, action_chunk
        self._log: SegmentLog | None = None
        self._committed = (0, 0)  # (rows, slots) durable on disk
        self._submitted = (0, 0)  # (rows, slots) handed to the log's writer
        self._segment_rows = 0
        self._flush_every_s = math.inf
        self._last_flush = time.monotonic()
        self._returns = EpisodeReturns(self.capacity, gamma, self.device) if track_returns else None
        self._fixes: dict[int, Fix] = {}  # rows corrected after they were stored (robot_rl.replay.relabels)

    # ---- sizes of what waits for the disk -------------------------------------------------

    @property
    def rows_pending(self) -> int:
        """Rows added but not yet handed to the on-disk log's writer (0 without persistence)."""
        return self._t - self._submitted[0] if self._log is not None else 0

    @property
    def segment_rows(self) -> int:
        """Rows per on-disk segment (0 without persistence)."""
        return self._segment_rows

    # ---- adding -----------------------------------------------------------------------------

    def add(self, batch: TransitionBatch) -> None:
        """Append ``B`` rows (wrapping around); with a segment log attached, commit full segments.

        Rows of one stream (same ``env_index``) in one batch are taken in batch order. A batch
        larger than ``capacity`` keeps only its newest ``capacity`` rows in memory (all are persisted).
        """
        n = len(batch)
        if n == 0:
            return
        if set(batch.obs) != set(self._obs) or set(batch.next_obs) != set(self._obs):
            raise KeyError(f"observation keys {sorted(batch.obs)} do not match the buffer's {sorted(self._obs)}")
        batch = batch.to(self.device)
        env = batch.env_index.to(torch.int64)
        if int(env.min()) < 0:
            raise ValueError("env_index must be non-negative")
        parts = [batch]
        if n > 1 and torch.unique(env).numel() != n:
            rank = _occurrence_rank(env)
            parts = [batch.index((rank == r).nonzero().flatten()) for r in range(int(rank.max()) + 1)]
        for part in parts:
            for start in range(0, len(part), self._max_part):
                chunk = part if len(part) <= self._max_part else part.index(slice(start, start + self._max_part))
                if self._log is not None and self._t + len(chunk) - self._submitted[0] > self._segment_rows:
                    self.flush(wait=False)
                self._append_tracked(chunk)
        if self._log is not None and (self._t - self._submitted[0] >= self._segment_rows
                                      or time.monotonic() - self._last_flush >= self._flush_every_s):
            self.flush(wait=False)

    def _append_tracked(self, chunk: TransitionBatch) -> None:
        """``_append``, and with ``track_returns`` the returns of the episodes ``chunk`` ends."""
        returns, t0 = self._returns, self._t
        if returns is None:
            self._append(chunk)
            return
        returns.clear(t0, len(chunk))
        self._append(chunk)
        done = chunk.terminated | chunk.truncated
        if bool(done.any()):
            ends = t0 + done.nonzero().flatten()
            returns.finish(ends, self._rows["reward"], self._rows["prev_row"], self._t_lo)

    # ---- sampling ---------------------------------------------------------------------------

    def sample_indices(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[batch_size]`` ring positions of live rows, uniform with replacement, drawn on the device."""
        if len(self) == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        r = torch.randint(0, len(self), (batch_size,), device=self.device, generator=generator)
        return (r + self._t_lo) % self.capacity

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TransitionBatch:
        """``batch_size`` transitions drawn uniformly with replacement."""
        return self.gather(self.sample_indices(batch_size, generator))

    def _frames(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        ocap = self.obs_capacity
        # index_select rather than v[pos]: a few times faster for large uint8 images on CPU.
        if self.frame_stack == 1:
            pos = slots % ocap
            return {k: v.index_select(0, pos) for k, v in self._obs.items()}
        floor = self._slot_floor()
        chain, cur = [slots], slots
        for _ in range(self.frame_stack - 1):
            prev = self._slot_prev[cur % ocap]
            cur = torch.where(prev >= floor, prev, cur)  # before the episode start: repeat the first frame
            chain.append(cur)
        pos = torch.stack(chain[::-1], 1) % ocap
        return {k: v.index_select(0, pos.flatten()).reshape(*pos.shape, *v.shape[1:]) for k, v in self._obs.items()}

    def gather(self, idx: torch.Tensor) -> TransitionBatch:
        """The rows at ring positions ``idx`` (``[B]`` int64) as a batch, with n-step/stack/chunk applied."""
        r = self._rows
        extras: dict[str, torch.Tensor] = {}
        last, reward = idx, r["reward"].index_select(0, idx)
        if self.n_step > 1:
            # R = Σ_{i<m} γ^i r_{t+i}, stopping after a terminated/truncated row or the stream's newest
            # row; the target bootstraps from next_obs of the last row with γ^m (if not terminated).
            discount = torch.full_like(reward, self.gamma)
            active = ~(r["terminated"][idx] | r["truncated"][idx])
            for i in range(1, self.n_step):
                nxt = self._next_row[last]
                step = active & (nxt >= 0)
                last = torch.where(step, nxt % self.capacity, last)
                reward = reward + torch.where(step, self.gamma ** i * r["reward"][last], 0.0)
                discount = torch.where(step, discount * self.gamma, discount)
                active = step & ~(r["terminated"][last] | r["truncated"][last])
            extras[DISCOUNT.name] = discount
        action = r["action"].index_select(0, idx)
        if self.action_chunk > 1:
            steps, pads, cur = [idx], [torch.zeros_like(idx, dtype=torch.bool)], idx
            ended = r["terminated"][idx] | r["truncated"][idx]
            for _ in range(self.action_chunk - 1):
                nxt = self._next_row[cur]
                ok = ~ended & (nxt >= 0)
                cur = torch.where(ok, nxt % self.capacity, cur)
                ended = ~ok | r["terminated"][cur] | r["truncated"][cur]
                steps.append(cur)
                pads.append(~ok)
            action = r["action"][torch.stack(steps, 1)]
            extras[ACTION_PAD.name] = torch.stack(pads, 1)
        flags, ints = self._flags.index_select(0, idx), self._ints.index_select(0, idx)
        rows = {f: flags[:, i] for i, f in enumerate(_FLAG_FIELDS)}
        rows.update({f: ints[:, i] for i, f in enumerate(_INT_FIELDS) if f in _ROW_FIELDS})
        next_slot = ints[:, _INT_FIELDS.index("next_slot")]
        if self.n_step > 1:
            end = self._flags.index_select(0, last)
            rows.update(terminated=end[:, 0], truncated=end[:, 1])
            next_slot = r["next_slot"].index_select(0, last)
        rows.update(action=action, reward=reward)
        if self._returns is not None:
            extras[MC_RETURN.name] = self._returns.read(idx)
        return _batch(self._frames(ints[:, _INT_FIELDS.index("obs_slot")]), self._frames(next_slot), rows, extras)

    # ---- persistence (see robot_rl.replay.segments) --------------------------------------------

    def attach_log(self, log: SegmentLog, segment_transitions: int = 2000,
                   flush_every_s: float = math.inf, source_limit: int | None = None) -> LoadReport:
        """Back this buffer with ``log``: load its verified segments, then append every new row to it.

        The buffer must be empty. Returns what was loaded and what was dropped as damaged. ``source_limit``: this
        buffer holds copies routed from another one, which holds that many rows (:meth:`SegmentLog.load_into`).
        """
        if self._t:
            raise RuntimeError("attach a segment log before adding rows")
        if not 1 <= segment_transitions <= self._max_part:
            raise ValueError(f"segment_transitions must be in [1, {self._max_part}] for this buffer "
                             f"(capacity {self.capacity}), got {segment_transitions}")
        report = log.load_into(self, source_limit)
        self._fixes = read_journal(log.directory)
        kept = [t for t in self._fixes if self._t_lo <= t < self._t]
        if kept:  # the corrections made after those rows reached the disk (robot_rl.replay.relabels)
            self._write_outcomes(*_fix_tensors(kept, self._fixes))
        if self._returns is not None:  # the reloaded episodes that ended: their returns again
            r = self._rows
            self._returns.fill_all(self._t_lo, self._t, r["terminated"] | r["truncated"], r["reward"], r["prev_row"])
        self._log, self._segment_rows, self._flush_every_s = log, segment_transitions, flush_every_s
        self._committed = self._submitted = (self._t, self._o)
        self._last_flush = time.monotonic()
        return report

    def flush(self, wait: bool = True) -> tuple[int, int]:
        """Commit the rows and slots added since the last commit as one segment; returns the watermark.

        The segment is encoded and fsynced on the log's writer thread; ``wait=False`` returns at once
        (``add`` uses it), ``wait=True`` returns once everything added so far is durable. The
        watermark ``(rows, slots)`` counts only what is durable. A full disk raises
        :class:`~robot_rl.durable.DiskFullError` (from this or a later call); the rows stay in
        memory and the next flush writes them again.
        """
        self._last_flush = time.monotonic()
        if self._log is None:
            return self._committed
        try:
            t0, o0 = self._submitted
            if self._t != t0:
                if t0 < self._t - self.capacity or o0 < self._o - self.obs_capacity:
                    raise RuntimeError(f"rows {t0}.. waiting for the disk were overwritten in memory; the "
                                       "replay on disk has a gap from here (was the disk full for long?)")
                rows = torch.arange(t0, self._t, device=self.device) % self.capacity
                slots = torch.arange(o0, self._o, device=self.device) % self.obs_capacity
                arrays = {f"row.{f}": v[rows].cpu() for f, v in self._rows.items()}
                arrays.update({f"obs.{k}": v[slots].cpu() for k, v in self._obs.items()})
                arrays["slot.prev"] = self._slot_prev[slots].cpu()
                self._log.submit(t0, self._t, o0, self._o, arrays, (self._t_lo, self._o - self.obs_capacity))
                self._submitted = (self._t, self._o)
            if wait:
                self._log.wait()
        except OSError:
            self._submitted = self._log.durable  # resubmit what did not reach the disk
            raise
        finally:
            self._committed = self._log.durable
        return self._committed

    def mark_source(self, row_end: int, source_rows: int, durable: bool = False) -> None:
        """A routed buffer: its rows up to ``row_end`` copy the routed rows among its source's first ``source_rows``.

        Recorded in the segments' headers so that a reopened log matches its source (``SegmentLog.mark_source``,
        which says what ``durable`` does); a no-op without a log.
        """
        if self._log is not None:
            self._log.mark_source(row_end, source_rows, durable)

    def relabel_rows(self, rows: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor,
                     truncated: torch.Tensor) -> int:
        """Correct reward and end flags of the absolute rows ``rows`` (each ``[N]``); returns the rows changed.

        Rows no longer live are skipped. With a segment log the corrections are also committed to its journal
        (:mod:`robot_rl.replay.relabels`) before this returns, so a reopened buffer has them.
        """
        live = (rows >= self._t_lo) & (rows < self._t)
        rows, reward, terminated, truncated = rows[live], reward[live], terminated[live], truncated[live]
        old_r, old_term, old_trunc = self.outcomes(rows)
        changed = ((old_r != reward.to(old_r)) | (old_term != terminated.to(old_term.device))
                   | (old_trunc != truncated.to(old_trunc.device)))
        if not bool(changed.any()):
            return 0
        rows, reward, terminated, truncated = rows[changed], reward[changed], terminated[changed], truncated[changed]
        self._write_outcomes(rows, reward, terminated, truncated)
        if self._returns is not None:  # the returns-to-go read the rewards
            r = self._rows
            self._returns.fill_all(self._t_lo, self._t, r["terminated"] | r["truncated"], r["reward"], r["prev_row"])
        if self._log is not None:
            for t, fix in zip(rows.tolist(), zip(reward.tolist(), terminated.tolist(), truncated.tolist()),
                              strict=True):
                self._fixes[int(t)] = (float(fix[0]), bool(fix[1]), bool(fix[2]))
            floor = self._log.segments[0].t0 if self._log.segments else 0
            write_journal(self._log.directory, self._fixes, floor)
        return int(changed.sum())

    @property
    def persisted(self) -> bool:
        """Whether a segment log backs this buffer (``attach_log``)."""
        return self._log is not None

    @property
    def watermark(self) -> tuple[int, int]:
        """``(rows, slots)`` committed to disk (``(0, 0)`` without a log)."""
        if self._log is not None:
            self._committed = self._log.durable
        return self._committed

    def close(self) -> None:
        """Commit everything added and stop the log's writer thread (a no-op without a log)."""
        if self._log is not None:
            self.flush()
            self._log.close()


def _fix_tensors(rows: list[int], fixes: dict[int, Fix]) -> tuple[torch.Tensor, ...]:
    return (torch.tensor(rows, dtype=torch.int64), torch.tensor([fixes[t][0] for t in rows]),
            torch.tensor([fixes[t][1] for t in rows]), torch.tensor([fixes[t][2] for t in rows]))


# Importable from here as before; defined in its own file (it imports this one, hence at the end).
from robot_rl.replay.mixing import MixingSampler  # noqa: E402

__all__ = ["MixingSampler", "ReplayBuffer", "concat_batches"]
