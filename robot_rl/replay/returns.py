"""Monte-Carlo returns-to-go: of a batch of episodes (:func:`mc_returns`), and kept beside a replay ring online.

Cal-QL (Nakamoto et al., 2023) clamps the conservative term's policy Q from below by the return-to-go of the data's
behaviour, ``G_t = Σ_{i≥0} γ^i r_{t+i}`` to the episode's end. Offline, the loader computes it per episode
(:func:`mc_returns`); online, rows arrive a step at a time, so the return of a row is
known only once its episode has ended. :class:`EpisodeReturns` fills it in then: when a row ending an episode
(terminated or truncated) is added, it walks the episode back through the ring's ``prev_row`` links accumulating
``G ← r + γ·G``. Rows of episodes still running, and rows whose chain to the episode's end was broken, read NaN
(the Cal-QL clamp then leaves them alone). As with the offline data, a truncated episode's return does not
bootstrap past its end. Eviction is FIFO, so every later row of a live row's episode is live too: the returns
computed are exact for every row still in the ring.

The values live in memory only: a buffer reloaded from its segment log recomputes them for the episodes whose end
it reloaded (:meth:`EpisodeReturns.fill_all`).
"""

from __future__ import annotations

import torch


def mc_returns(reward: torch.Tensor, episode_end: torch.Tensor, gamma: float,
               bootstrap: torch.Tensor | None = None) -> torch.Tensor:
    """Discounted return-to-go of each row of consecutive transitions ``[T]`` (Cal-QL's reference values).

    ``episode_end[t]``: row ``t`` ends its episode (terminated or truncated); the sum restarts after it.
    ``bootstrap`` ``[T]``: a value added, discounted, at the end of a *truncated* episode (default 0: the
    Monte-Carlo return of what was observed). Rows after the last ``episode_end`` belong to an unfinished
    episode and get the return of what is there.
    """
    if reward.ndim != 1 or reward.shape != episode_end.shape:
        raise ValueError(f"reward {tuple(reward.shape)} and episode_end {tuple(episode_end.shape)} must be [T]")
    if not torch.isfinite(reward).all():
        bad = torch.nonzero(~torch.isfinite(reward)).flatten()[:5].tolist()
        raise ValueError(f"non-finite rewards at rows {bad}: quarantine them before computing returns")
    out = torch.empty_like(reward, dtype=torch.float64)
    running = 0.0
    for t in range(reward.shape[0] - 1, -1, -1):
        if bool(episode_end[t]):
            running = float(bootstrap[t]) if bootstrap is not None else 0.0
        running = float(reward[t]) + gamma * running
        out[t] = running
    return out.to(reward.dtype)


class EpisodeReturns:
    """``G_t`` per ring position (NaN until the row's episode ends); see the module docstring."""

    def __init__(self, capacity: int, gamma: float, device: torch.device) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.capacity, self.gamma = capacity, gamma
        self.values = torch.full((capacity,), float("nan"), device=device)

    def clear(self, first: int, n: int) -> None:
        """Forget the positions of absolute rows ``[first, first + n)`` before new rows are written there."""
        pos = torch.arange(first, first + n, device=self.values.device) % self.capacity
        self.values.index_fill_(0, pos, float("nan"))

    @torch.no_grad()
    def finish(self, ends: torch.Tensor, reward: torch.Tensor, prev_row: torch.Tensor, oldest: int) -> None:
        """Fill ``G`` along the episodes ending at the absolute rows ``ends`` ``[E]``.

        ``reward``/``prev_row``: the ring's per-position columns; ``oldest``: the oldest live absolute row. One
        batched step per row of the longest episode, whatever the number of episodes.
        """
        cur = ends.to(torch.int64)
        acc = torch.zeros(cur.shape, dtype=torch.float32, device=self.values.device)
        while True:
            live = cur >= oldest
            if not bool(live.any()):
                return
            pos = cur.clamp(min=0) % self.capacity
            acc = torch.where(live, reward.index_select(0, pos).float() + self.gamma * acc, acc)
            self.values.index_put_((pos[live],), acc[live])
            cur = torch.where(live, prev_row.index_select(0, pos), torch.full_like(cur, -1))

    def fill_all(self, first: int, last: int, done: torch.Tensor, reward: torch.Tensor, prev_row: torch.Tensor
                 ) -> None:
        """Recompute ``G`` for every episode that ends among the live absolute rows ``[first, last)``."""
        rows = torch.arange(first, last, device=self.values.device)
        ends = rows[done.index_select(0, rows % self.capacity)]
        if ends.numel():
            self.finish(ends, reward, prev_row, first)

    def read(self, pos: torch.Tensor) -> torch.Tensor:
        """``G`` at ring positions ``pos`` (NaN where unknown)."""
        return self.values.index_select(0, pos)
