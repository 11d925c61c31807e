"""Named replay buffers (online, demos, interventions) sampled in set proportions."""

from __future__ import annotations

import logging
from typing import Any

import torch

from robot_rl.core.transition import DEMO_ACTOR_ID, TransitionBatch
from robot_rl.replay.buffer import ReplayBuffer, concat_batches

log = logging.getLogger(__name__)


class MixingSampler:
    """Samples fixed proportions of each batch from named buffers (RLPD / HIL-SERL symmetric sampling).

    ``add`` stores every row in ``online`` and, when ``route_interventions_to`` names a buffer, also
    copies the rows with ``intervened`` set there (HIL-SERL keeps human corrections in the demo
    buffer as well as the online one). ``add_to(name, batch)`` loads demonstrations directly.

    ``intervened_sampled`` counts the sampled rows a person intervened in while the policy acted; rows of loaded
    demonstrations (``actor_id == DEMO_ACTOR_ID``, flagged intervened too when recorded by teleop) are counted
    apart, in ``demos_sampled``.

    Per batch of ``B`` rows, buffer ``k`` contributes ``round(p_k · B)`` rows, with the rounding
    remainder given by largest fractional part (so the counts always sum to ``B``); an empty buffer's
    share goes to the non-empty ones in proportion to their weights. Rows come grouped by buffer.

    With the buffers on disk (:func:`~robot_rl.replay.persist.attach_replay`), each commits to its own segment
    log, so a kill can fall between the two commits. The routed buffer's segments record how many of
    ``online``'s rows their copies match (:meth:`ReplayBuffer.mark_source`); on reopening, the copies beyond
    what ``online`` holds are set aside and the intervened rows ``online`` holds beyond the copies are routed
    again (:meth:`resume_routing`), so the two agree exactly: nothing lost, nothing twice.
    """

    def __init__(self, buffers: dict[str, ReplayBuffer], proportions: dict[str, float],
                 online: str = "online", route_interventions_to: str | None = "demos") -> None:
        if set(proportions) != set(buffers):
            raise KeyError(f"proportions {sorted(proportions)} must name exactly the buffers {sorted(buffers)}")
        if any(p < 0 for p in proportions.values()) or sum(proportions.values()) <= 0:
            raise ValueError(f"proportions must be non-negative with a positive sum, got {proportions}")
        for name in (online, route_interventions_to):
            if name is not None and name not in buffers:
                raise KeyError(f"{name!r} is not one of the buffers {sorted(buffers)}")
        self.buffers = buffers
        self.proportions = {k: v / sum(proportions.values()) for k, v in proportions.items()}
        self.online = online
        self.route_interventions_to = route_interventions_to
        self.rows_sampled = 0
        self.rows_rerouted = 0
        """Rows copied into the routed buffer again from ``online``'s reloaded rows (:meth:`resume_routing`)."""
        # Device tensors: counting never syncs the GPU.
        self._intervened_sampled: torch.Tensor | int = 0
        self._demos_sampled: torch.Tensor | int = 0

    @property
    def persisted(self) -> bool:
        """Whether a segment log backs any of the buffers."""
        return any(b.persisted for b in self.buffers.values())

    def __len__(self) -> int:
        """Rows held across all buffers (an intervention stored in two buffers counts twice)."""
        return sum(len(b) for b in self.buffers.values())

    def add(self, batch: TransitionBatch) -> None:
        """Store in the online buffer; intervened rows also in ``route_interventions_to``."""
        online = self.buffers[self.online]
        if self.route_interventions_to is None:
            online.add(batch)
            return
        routed = self.buffers[self.route_interventions_to]
        submitted = online.transitions_written - online.rows_pending
        online.add(batch)
        rows = batch.intervened.nonzero().flatten()
        if rows.numel():
            self._route(routed, batch.index(rows), online.transitions_written)
        if routed.rows_pending and online.transitions_written - online.rows_pending != submitted:
            # online just committed a segment: the copies follow, so a reopened log has few rows to route again
            routed.flush(wait=False)

    @staticmethod
    def _route(routed: ReplayBuffer, copies: TransitionBatch, source_rows: int) -> None:
        """Add ``copies`` to ``routed``: it then copies the intervened rows of online's first ``source_rows``.

        Marked only where copies are added: rows without interventions, and rows added straight to ``routed``
        (``add_to``), keep the copies matching the smallest such count, so the fewest segments are set aside.
        """
        n = len(copies)
        if routed.rows_pending and routed.rows_pending + n > routed.segment_rows:
            routed.flush(wait=False)  # the segment ends where the copies match online (its mark), not inside them
        routed.mark_source(routed.transitions_written + n, source_rows)
        routed.add(copies)

    def add_to(self, name: str, batch: TransitionBatch) -> None:
        """Store ``batch`` in buffer ``name`` only (e.g. offline demonstrations)."""
        buf = self.buffers[name]
        if name != self.route_interventions_to or not buf.persisted:
            buf.add(batch)
            return
        # Rows no buffer can route again: in segments of their own that never hold a copy online lacks, so that
        # reopening never sets them aside (rare: demonstrations are loaded once, at the start).
        self.flush()
        buf.add(batch)
        buf.flush(wait=False)

    def resume_routing(self, routed_from: int | None) -> int:
        """After reopening both buffers: route again ``online``'s intervened rows from number ``routed_from`` on.

        ``routed_from`` is where the routed buffer's reloaded copies end (``LoadReport.source_rows``; ``None``
        for a log written before that was recorded: left as it is). Returns the rows copied.
        """
        if self.route_interventions_to is None:
            return 0
        online, routed = self.buffers[self.online], self.buffers[self.route_interventions_to]
        end = online.transitions_written
        if routed_from is None:  # written before segments recorded it (or the newest was cut by damage)
            log.info("replay %s: its segments do not say which %s rows its copies match; taken as its %d rows",
                     self.route_interventions_to, self.online, end)
            routed.mark_source(routed.transitions_written, end, durable=True)  # for a kill before its next commit
            return 0
        if routed_from > end:  # only where a damaged segment stopped the reopening early: kept, said
            log.warning("replay %s holds copies of %s rows up to %d, beyond the %d it holds; kept",
                        self.route_interventions_to, self.online, routed_from, end)
            routed_from = end
        start = max(routed_from, end - len(online))
        if start > routed_from:
            log.warning("replay %s: %s rows %d..%d have left the buffer; their intervened rows cannot be routed "
                        "again if the kill lost them", self.route_interventions_to, self.online, routed_from, start)
        copies = online.stored_batches(start, end, intervened_only=True)
        n = sum(len(b) for b in copies)
        routed.mark_source(routed.transitions_written + n, end if n else routed_from)
        for b in copies:
            routed.add(b)
        if n:
            log.info("replay %s: %d intervened rows of %s that its copies lacked routed again",
                     self.route_interventions_to, n, self.online)
        self.rows_rerouted += n
        return n

    def counts(self, batch_size: int) -> dict[str, int]:
        """Rows per buffer for a batch of ``batch_size`` (see the class docstring)."""
        weights = {k: p for k, p in self.proportions.items() if len(self.buffers[k]) > 0 and p > 0}
        if not weights:
            raise ValueError("cannot sample: every buffer with a positive proportion is empty")
        total = sum(weights.values())
        exact = {k: batch_size * p / total for k, p in weights.items()}
        counts = {k: int(v) for k, v in exact.items()}
        by_remainder = sorted(exact, key=lambda k: exact[k] - counts[k], reverse=True)
        for k in by_remainder[: batch_size - sum(counts.values())]:
            counts[k] += 1
        return counts

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TransitionBatch:
        """``batch_size`` rows, ``counts(batch_size)[k]`` of them from buffer ``k``."""
        parts = []
        for k, n in self.counts(batch_size).items():
            if n <= 0:
                continue
            buffer = self.buffers[k]
            idx = buffer.sample_indices(n, generator)
            part = buffer.gather(idx)
            # A recorded demonstration is flagged intervened too (a person acted in every step): told apart by
            # its actor id, so the intervention count is only what a person corrected while the policy acted.
            demo = buffer.actor_ids(idx) == DEMO_ACTOR_ID
            self._demos_sampled = self._demos_sampled + demo.sum()
            self._intervened_sampled = self._intervened_sampled + (part.intervened & ~demo).sum()
            parts.append(part)
        batch = concat_batches(parts)
        self.rows_sampled += len(batch)
        return batch

    @property
    def intervened_sampled(self) -> int:
        """Sampled rows a person intervened in while the policy acted (not demonstrations), since construction."""
        return int(self._intervened_sampled)

    @property
    def demos_sampled(self) -> int:
        """Sampled rows of loaded demonstrations (``DEMO_ACTOR_ID``), since construction."""
        return int(self._demos_sampled)

    def restore_sampled(self, rows: int, intervened: int, demos: int) -> None:
        """Continue the sampling counts from a resumed run's checkpoint."""
        self.rows_sampled, self._intervened_sampled, self._demos_sampled = rows, intervened, demos

    def state_dict(self) -> dict[str, Any]:
        """Every buffer's state, by name."""
        return {k: b.state_dict() for k, b in self.buffers.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        if set(state) != set(self.buffers):
            raise KeyError(f"saved buffers {sorted(state)} != {sorted(self.buffers)}")
        for k, b in self.buffers.items():
            b.load_state_dict(state[k])

    def flush(self) -> dict[str, tuple[int, int]]:
        """Commit every persisted buffer's pending rows, ``online`` first; the watermark of each, by name."""
        first = self.buffers[self.online].flush()
        return {k: first if k == self.online else b.flush() for k, b in self.buffers.items()}
