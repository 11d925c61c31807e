"""Executing action chunks on a per-step env: receding horizon or temporal ensembling.

A chunking policy predicts ``[N, H, A]`` at once. :class:`ChunkExecutor` turns that into one action
``[N, A]`` per env step:

- ``receding``: execute the first ``execute_steps`` actions of a chunk, then ask for a new one
  (``execute_steps = H``: open-loop chunks; ``1``: replan every step);
- ``ensemble`` (ACT's temporal ensembling): ask for a chunk every step; the action for time ``T`` is the
  weighted mean of every prediction made for ``T``, the ``i``-th oldest weighted ``exp(−m·i)``
  (``m = ensemble_decay``; ``m > 0`` trusts older predictions more, as in ACT).

Sub-envs that start a new episode (``reset(mask)``) drop what was planned for the old one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

ChunkFn = Callable[[], torch.Tensor]


@dataclass
class ChunkExecutorConfig:
    """How chunks are executed on a per-step env."""

    mode: Literal["receding", "ensemble"] = "receding"
    """``receding`` (execute ``execute_steps``, then replan) or ``ensemble`` (replan every step, average)."""
    execute_steps: int | None = None
    """``receding``: actions executed per chunk (null = the whole chunk)."""
    ensemble_decay: float = 0.01
    """``ensemble``: weight ``exp(−m·i)`` of the ``i``-th oldest prediction for a step."""


class ChunkExecutor:
    """Per-sub-env chunk bookkeeping for ``num_envs`` envs and chunks ``[H, A]``."""

    def __init__(self, cfg: ChunkExecutorConfig, num_envs: int, horizon: int, action_dim: int,
                 device: torch.device | str = "cpu") -> None:
        if cfg.mode not in ("receding", "ensemble"):
            raise ValueError(f"chunk execution mode must be 'receding' or 'ensemble', got {cfg.mode!r}")
        execute = cfg.execute_steps or horizon
        if not 1 <= execute <= horizon:
            raise ValueError(f"execute_steps must be in [1, horizon={horizon}], got {execute}")
        self.cfg, self.n, self.h, self.a = cfg, num_envs, horizon, action_dim
        self.execute = execute
        self.device = torch.device(device)
        self.chunk = torch.zeros(num_envs, horizon, action_dim, device=self.device)
        self.pos = torch.full((num_envs,), execute, dtype=torch.long, device=self.device)  # ≥ execute: replan
        self.acc = torch.zeros(num_envs, horizon, action_dim, device=self.device)
        self.wsum = torch.zeros(num_envs, horizon, device=self.device)
        self.count = torch.zeros(num_envs, horizon, device=self.device)
        self.replans = 0

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Forget the plans of sub-envs where ``mask`` ``[N]`` is True (all when None)."""
        m = torch.ones(self.n, dtype=torch.bool, device=self.device) if mask is None else mask.to(self.device)
        self.pos = torch.where(m, torch.full_like(self.pos, self.execute), self.pos)
        self.acc[m] = 0.0
        self.wsum[m] = 0.0
        self.count[m] = 0.0

    def act(self, predict: ChunkFn) -> torch.Tensor:
        """The action ``[N, A]`` for this step; calls ``predict()`` → ``[N, H, A]`` when a chunk is needed."""
        if self.cfg.mode == "receding":
            need = self.pos >= self.execute
            if bool(need.any()):
                chunk = self._check(predict())
                self.chunk = torch.where(need[:, None, None], chunk, self.chunk)
                self.pos = torch.where(need, torch.zeros_like(self.pos), self.pos)
                self.replans += 1
            action = self.chunk[torch.arange(self.n, device=self.device), self.pos]
            self.pos = self.pos + 1
            return action
        chunk = self._check(predict())
        self.replans += 1
        w = torch.exp(-self.cfg.ensemble_decay * self.count)
        self.acc += w.unsqueeze(-1) * chunk
        self.wsum += w
        self.count += 1
        action = self.acc[:, 0] / self.wsum[:, :1]
        # Shift one step: slot h + 1 becomes slot h; the new last slot has no prediction yet.
        self.acc = torch.cat([self.acc[:, 1:], torch.zeros_like(self.acc[:, :1])], dim=1)
        self.wsum = torch.cat([self.wsum[:, 1:], torch.zeros_like(self.wsum[:, :1])], dim=1)
        self.count = torch.cat([self.count[:, 1:], torch.zeros_like(self.count[:, :1])], dim=1)
        return action

    def _check(self, chunk: torch.Tensor) -> torch.Tensor:
        if tuple(chunk.shape) != (self.n, self.h, self.a):
            raise ValueError(f"predicted chunk is {list(chunk.shape)}, expected [{self.n}, {self.h}, {self.a}]")
        return chunk.to(self.device)
