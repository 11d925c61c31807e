"""Device-resident replay: a preallocated ring buffer and a sampler mixing several buffers.

Every field lives in one tensor ``[capacity, ...]`` on the buffer's device with the spec's dtype
(images stay uint8), so adding and sampling are a handful of batched index operations with no
Python loop over rows. ``sample`` returns a :class:`~robot_rl.transition.TransitionBatch`; how the
buffer keeps ``next_obs`` internally (today a copy) is private and may change to an index into
``obs`` without changing this API.
"""

from __future__ import annotations

from typing import Any

import torch

from robot_rl.specs import EnvSpec
from robot_rl.transition import TransitionBatch

_ROW_FIELDS = ("action", "reward", "terminated", "truncated", "intervened", "policy_version", "env_index")


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


class ReplayBuffer:
    """A ring buffer of ``capacity`` transitions for observations and actions described by ``spec``.

    ``add`` writes rows at ``(pos + i) mod capacity``, overwriting the oldest once full; ``sample``
    draws rows uniformly with replacement using ``torch.randint`` on the buffer's device.
    """

    def __init__(self, spec: EnvSpec, capacity: int, device: torch.device | str = "cpu") -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.spec = spec
        self.capacity = int(capacity)
        self.device = torch.device(device)
        # torch.empty leaves pages untouched until written, so a large image buffer costs memory only
        # as it fills; only rows [0, size) are ever read.
        self._obs = {k: torch.empty(self.capacity, *s.shape, dtype=s.torch_dtype, device=self.device)
                     for k, s in spec.observation.items()}
        self._next_obs = {k: torch.empty_like(v) for k, v in self._obs.items()}
        self._rows: dict[str, torch.Tensor] = {
            "action": torch.empty(self.capacity, *spec.action.shape, dtype=spec.action.torch_dtype,
                                  device=self.device),
            "reward": torch.empty(self.capacity, dtype=torch.float32, device=self.device),
            "terminated": torch.empty(self.capacity, dtype=torch.bool, device=self.device),
            "truncated": torch.empty(self.capacity, dtype=torch.bool, device=self.device),
            "intervened": torch.empty(self.capacity, dtype=torch.bool, device=self.device),
            "policy_version": torch.empty(self.capacity, dtype=torch.int64, device=self.device),
            "env_index": torch.empty(self.capacity, dtype=torch.int64, device=self.device),
        }
        self._pos = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, batch: TransitionBatch) -> None:
        """Append ``B`` rows (wrapping around); if ``B > capacity`` only the newest ``capacity`` are kept."""
        n = len(batch)
        if n == 0:
            return
        if set(batch.obs) != set(self._obs) or set(batch.next_obs) != set(self._obs):
            raise KeyError(f"observation keys {sorted(batch.obs)} do not match the buffer's {sorted(self._obs)}")
        if n > self.capacity:
            batch = batch.index(slice(n - self.capacity, n))
            self._pos = (self._pos + n - self.capacity) % self.capacity
            n = self.capacity
        idx = (self._pos + torch.arange(n, device=self.device)) % self.capacity
        for k, dst in self._obs.items():
            dst.index_copy_(0, idx, batch.obs[k].to(self.device, dst.dtype))
            self._next_obs[k].index_copy_(0, idx, batch.next_obs[k].to(self.device, dst.dtype))
        for f, dst in self._rows.items():
            dst.index_copy_(0, idx, getattr(batch, f).to(self.device, dst.dtype))
        self._pos = (self._pos + n) % self.capacity
        self._size = min(self._size + n, self.capacity)

    def gather(self, idx: torch.Tensor) -> TransitionBatch:
        """The rows ``idx`` (``[B]`` int64 in ``[0, len)``) as a batch."""
        return _batch({k: v[idx] for k, v in self._obs.items()}, {k: v[idx] for k, v in self._next_obs.items()},
                      {f: t[idx] for f, t in self._rows.items()})

    def sample_indices(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[batch_size]`` uniform row indices (with replacement), drawn on the buffer's device."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        return torch.randint(0, self._size, (batch_size,), device=self.device, generator=generator)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TransitionBatch:
        """``batch_size`` transitions drawn uniformly with replacement."""
        return self.gather(self.sample_indices(batch_size, generator))

    def state_dict(self) -> dict[str, Any]:
        """The filled rows and the write position (the unused capacity is not saved)."""
        n = self._size
        return {"capacity": self.capacity, "pos": self._pos, "size": n,
                "obs": {k: v[:n].clone() for k, v in self._obs.items()},
                "next_obs": {k: v[:n].clone() for k, v in self._next_obs.items()},
                "rows": {f: t[:n].clone() for f, t in self._rows.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (capacity and keys must match)."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"buffer capacity {self.capacity} != saved {state['capacity']}")
        n = int(state["size"])
        for name, mine in (("obs", self._obs), ("next_obs", self._next_obs), ("rows", self._rows)):
            if set(state[name]) != set(mine):
                raise KeyError(f"saved {name} keys {sorted(state[name])} != {sorted(mine)}")
            for k, dst in mine.items():
                dst[:n].copy_(state[name][k])
        self._pos, self._size = int(state["pos"]), n


class MixingSampler:
    """Samples fixed proportions of each batch from named buffers (RLPD / HIL-SERL symmetric sampling).

    ``add`` stores every row in ``online`` and, when ``route_interventions_to`` names a buffer, also
    copies the rows with ``intervened`` set there (HIL-SERL keeps human corrections in the demo
    buffer as well as the online one). ``add_to(name, batch)`` loads demonstrations directly.

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
        parts = [self.buffers[k].sample(n, generator) for k, n in self.counts(batch_size).items() if n > 0]
        return concat_batches(parts)

    def state_dict(self) -> dict[str, Any]:
        """Every buffer's state, by name."""
        return {k: b.state_dict() for k, b in self.buffers.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        if set(state) != set(self.buffers):
            raise KeyError(f"saved buffers {sorted(state)} != {sorted(self.buffers)}")
        for k, b in self.buffers.items():
            b.load_state_dict(state[k])
