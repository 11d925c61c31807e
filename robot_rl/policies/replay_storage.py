"""The replay an off-policy learner (SAC, IQL) samples from: one buffer, or online and demo buffers mixed.

Shared so that every off-policy learner treats demonstrations and interventions the same way: with
``demo_ratio > 0`` a :class:`~robot_rl.replay.buffer.MixingSampler` draws that fraction of each batch from the
``demos`` buffer (RLPD, HIL-SERL symmetric sampling), and intervened rows land in both buffers.
"""

from __future__ import annotations

from typing import Protocol

import torch

from robot_rl.core.config import ConfigError
from robot_rl.core.specs import EnvSpec
from robot_rl.replay.buffer import MixingSampler, ReplayBuffer


class ReplaySettings(Protocol):
    """The config fields the replay is built from (SAC's and IQL's configs have them)."""

    buffer_size: int
    demo_buffer_size: int
    demo_ratio: float
    n_step: int
    gamma: float


def check_demo_ratio(demo_ratio: float) -> None:
    """Raise ``ValueError`` unless ``0 <= demo_ratio < 1`` (a batch made only of demos learns nothing online)."""
    if not 0.0 <= demo_ratio < 1.0:
        raise ConfigError(f"demo_ratio must be in [0, 1), got {demo_ratio}")


def make_replay(spec: EnvSpec, device: torch.device, cfg: ReplaySettings,
                track_returns: bool = False) -> ReplayBuffer | MixingSampler:
    """A replay buffer, or with ``demo_ratio > 0`` a :class:`MixingSampler` over ``online``/``demos``.

    ``storage.buffers["demos"]`` (or ``storage.add_to("demos", batch)``) takes demonstrations;
    intervened rows added with ``storage.add`` land in both buffers (HIL-SERL). ``track_returns``: sampled rows
    carry their episode's Monte-Carlo return (``extras["mc_return"]``, NaN while it runs; Cal-QL online).
    """
    online = ReplayBuffer(spec, cfg.buffer_size, device, n_step=cfg.n_step, gamma=cfg.gamma,
                          track_returns=track_returns)
    if cfg.demo_ratio <= 0:
        return online
    demos = ReplayBuffer(spec, cfg.demo_buffer_size, device, n_step=cfg.n_step, gamma=cfg.gamma,
                         track_returns=track_returns)
    return MixingSampler({"online": online, "demos": demos}, {"online": 1.0 - cfg.demo_ratio, "demos": cfg.demo_ratio})
