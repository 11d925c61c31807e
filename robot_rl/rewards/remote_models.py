"""Served reward models with the local models' call signatures.

A classifier's ``predict``/``decide`` and a PRM's ``(obs_t, obs_k, goals) → (delta, done)``, each over a
:class:`~robot_rl.rewards.service.RewardClient` with a deadline per request and a fallback when the server is late.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from robot_rl.core.config import ConfigError
from robot_rl.rewards.service import KINDS, RewardClient, Unavailable


class _Remote:
    """Shared deadline logic: wait ``max_wait_s`` while the server answers, not at all after a miss."""

    def __init__(self, client: RewardClient, kind: str, max_wait_s: float, connect_timeout_s: float) -> None:
        self.client, self.max_wait_s = client, max_wait_s
        info = client.info or client.describe(connect_timeout_s)
        if info["kind"] != kind:
            raise ConfigError(f"the reward server at {client.address} serves a {info['kind']}, not a {kind}")
        self.info = info
        self.shapes = {k: tuple(v[0]) for k, v in info["inputs"].items() if not k.startswith("first.")}
        self.healthy = True
        self.missed_at = 0.0
        self.late = 0
        self.answered = 0

    @property
    def cameras(self) -> list[str]:
        """The ``image.<cam>`` keys the served model reads."""
        return sorted(self.shapes)

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        """Frame shape per camera, as the server declared them."""
        return dict(self.shapes)

    def _ask(self, arrays: dict[str, np.ndarray], meta: dict[str, Any] | None = None) -> dict[str, np.ndarray] | None:
        if not self.healthy:  # any reply since the miss (even to an abandoned request) means it is back
            self.client.drain()
            self.healthy = self.client.last_reply > self.missed_at
        try:
            seq = self.client.submit(arrays, meta)
            out = self.client.result(seq, self.max_wait_s if self.healthy else 0.0)
        except Unavailable:
            self.late += 1
            self.healthy = False
            self.missed_at = time.monotonic()
            return None
        self.healthy = True
        self.answered += 1
        return out


def _np(obs: dict[str, torch.Tensor], keys: list[str], prefix: str = "") -> dict[str, np.ndarray]:
    return {prefix + k: obs[k].detach().cpu().numpy() for k in keys}


class RemoteClassifier(_Remote):
    """A served success classifier with the local one's ``predict`` (fallback: no success, counted)."""

    def __init__(self, client: RewardClient, max_wait_s: float = 0.05, connect_timeout_s: float = 5.0) -> None:
        super().__init__(client, KINDS[0], max_wait_s, connect_timeout_s)
        self.threshold = float(self.info["threshold"])

    def predict(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[N]`` bool decisions; all ``False`` when the reply missed its deadline."""
        return self.decide(obs)[0]

    def decide(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``([N] bool, [N] probability)``; ``(all False, None)`` when the reply missed its deadline."""
        n = next(iter(obs.values())).shape[0]
        device = next(iter(obs.values())).device
        out = self._ask(_np(obs, self.cameras))
        if out is None:
            return torch.zeros(n, dtype=torch.bool, device=device), None
        prob = torch.from_numpy(np.array(out["probability"])).to(device) if "probability" in out else None
        return torch.from_numpy(np.array(out["success"])).to(device), prob


class RemotePRM(_Remote):
    """A served PRM with the local ``(obs_t, obs_k, goals) → (delta, done)`` signature.

    Fallback when late: NaN progress, which :class:`~robot_rl.rewards.wrapper.ProgressShapingWrapper`
    reads as "unknown" and holds each sub-env's potential (shaping term ≈ 0, not a spurious drop);
    ``done`` 0.
    """

    def __init__(self, client: RewardClient, max_wait_s: float = 0.05, connect_timeout_s: float = 5.0) -> None:
        super().__init__(client, KINDS[1], max_wait_s, connect_timeout_s)

    def __call__(self, obs_t: dict[str, torch.Tensor], obs_k: dict[str, torch.Tensor],
                 goals: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Progress delta ``[N]`` and done probability ``[N]``."""
        n = next(iter(obs_k.values())).shape[0]
        device = next(iter(obs_k.values())).device
        arrays = {**_np(obs_t, self.cameras, "first."), **_np(obs_k, self.cameras)}
        goal_list = goals[:1] if len(set(goals)) == 1 else list(goals)
        out = self._ask(arrays, {"goals": goal_list})
        if out is None:
            return torch.full((n,), float("nan"), device=device), torch.zeros(n, device=device)
        return (torch.from_numpy(np.array(out["progress"])).to(device),
                torch.from_numpy(np.array(out["done"])).to(device))
