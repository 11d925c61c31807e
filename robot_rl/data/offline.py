"""Offline RL data: an episode store or a LeRobotDataset as transitions with their Monte-Carlo returns.

:func:`load_offline` reads every episode, checks it against the task's spec (every difference listed), sets
aside episodes with non-finite values whole (a NaN reward makes every return before it meaningless), splits off
held-out episodes for the offline phase's TD error, and adds each row's discounted return-to-go as
``extras["mc_return"]``: Cal-QL's reference value (:mod:`robot_rl.policies.offline_rl`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from robot_rl.core.config import ConfigError
from robot_rl.core.extras import MC_RETURN
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.data.episode import Episode, spec_of, to_transitions
from robot_rl.replay.returns import mc_returns

log = logging.getLogger(__name__)


@dataclass
class OfflineData:
    """What the offline phase trains and checks on."""

    train: TransitionBatch
    heldout: TransitionBatch | None
    """Whole episodes kept out of training (None with a single usable episode)."""
    episodes: int
    """Usable episodes (train and held out)."""
    quarantined: int
    """Episodes set aside for non-finite values."""


def _finite(ep: Episode) -> bool:
    arrays = [ep.reward, ep.action, *(v for v in ep.obs.values() if np.issubdtype(v.dtype, np.floating))]
    return all(bool(np.isfinite(a).all()) for a in arrays)


def _with_returns(episodes: list[Episode], gamma: float, device: torch.device | str) -> TransitionBatch:
    batch, _ = to_transitions(episodes, device)
    index = batch.env_index
    # An episode ends at its own last row (terminated, truncated, or cut by the recorder).
    end = torch.ones_like(index, dtype=torch.bool)
    end[:-1] = index[1:] != index[:-1]
    batch.extras[MC_RETURN.name] = mc_returns(batch.reward.double(), end, gamma).float()
    return batch


def load_offline(source: Path | str | list[Episode], spec: EnvSpec, gamma: float, heldout_fraction: float = 0.1,
                 seed: int = 0, device: torch.device | str = "cpu") -> OfflineData:
    """The transitions of ``source`` for a task with ``spec`` (module docstring).

    Errors: no episodes, or none usable (``ValueError``); a spec that does not match the task
    (:class:`~robot_rl.core.specs.SpecMismatchError`, the differences listed).
    """
    if isinstance(source, list):
        episodes, data_spec, where = source, (spec_of(source[0]) if source else spec), "the episodes given"
    else:
        from robot_rl.data.demos import read_episodes

        episodes, data_spec, _ = read_episodes(source)
        where = str(source)
    if not episodes:
        raise ConfigError(f"{where} holds no episodes: record or import some first (robot-rl record, robot-rl data)")
    spec.assert_compatible(data_spec, what=f"the offline data in {where}")
    usable = [ep for ep in episodes if _finite(ep)]
    quarantined = len(episodes) - len(usable)
    if quarantined:
        log.warning("%s: %d of %d episodes have NaN or infinite values and are left out", where, quarantined,
                    len(episodes))
    if not usable:
        raise ConfigError(f"every episode in {where} has NaN or infinite values; nothing to learn from")
    order = np.random.default_rng(seed).permutation(len(usable))
    n_held = min(len(usable) - 1, round(heldout_fraction * len(usable))) if heldout_fraction > 0 else 0
    if heldout_fraction > 0 and len(usable) > 1:
        n_held = max(n_held, 1)
    held = [usable[i] for i in sorted(order[:n_held])]
    train = [usable[i] for i in sorted(order[n_held:])]
    return OfflineData(_with_returns(train, gamma, device), _with_returns(held, gamma, device) if held else None,
                       len(usable), quarantined)
