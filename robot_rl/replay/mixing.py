"""Named replay buffers (online, demos, interventions) sampled in set proportions."""

from __future__ import annotations

from typing import Any

import torch

from robot_rl.core.transition import DEMO_ACTOR_ID, TransitionBatch
from robot_rl.replay.buffer import ReplayBuffer, concat_batches


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
        self.buffers[self.online].add(batch)
        if self.route_interventions_to is not None:
            rows = batch.intervened.nonzero().flatten()
            if rows.numel():
                self.buffers[self.route_interventions_to].add(batch.index(rows))

    def add_to(self, name: str, batch: TransitionBatch) -> None:
        """Store ``batch`` in buffer ``name`` only (e.g. offline demonstrations)."""
        self.buffers[name].add(batch)

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
        """Commit every persisted buffer's pending rows; the watermark of each, by name."""
        return {k: b.flush() for k, b in self.buffers.items()}
