"""Loading demonstrations (an episode store or a LeRobotDataset v3) into a learner's demo buffer."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from robot_rl.config import ConfigError
from robot_rl.data.episode import Episode, to_transitions
from robot_rl.specs import EnvSpec
from robot_rl.transition import TransitionBatch

log = logging.getLogger(__name__)

#: Demo rows carry this actor id, so their episode streams never meet an actor's in a shared buffer.
DEMO_ACTOR_ID = -1


def read_episodes(path: Path | str) -> tuple[list[Episode], EnvSpec, str]:
    """All episodes of ``path``, its spec and its kind (``"episodes"`` or ``"lerobot"``)."""
    from robot_rl.data.lerobot_io import LeRobotReader, is_lerobot_dataset
    from robot_rl.data.store import EpisodeStore, is_store

    path = Path(path)
    if is_store(path):
        store = EpisodeStore(path)
        return list(store), store.spec, "episodes"
    if is_lerobot_dataset(path):
        reader = LeRobotReader(path)
        return list(reader), reader.spec, "lerobot"
    raise FileNotFoundError(f"{path} is neither an episode store (robot-rl data import/record) nor a "
                            "LeRobotDataset v3 directory")


def load_demos(path: Path | str, spec: EnvSpec, device: torch.device | str = "cpu") -> TransitionBatch:
    """Demonstrations at ``path`` as transitions for an env with ``spec``.

    Observation keys, shapes and dtypes and the action shape must match ``spec`` (else
    :class:`~robot_rl.specs.SpecMismatchError` with the differences); actions outside the spec's bounds are clamped
    into them, and the number clamped is logged.
    """
    episodes, demo_spec, kind = read_episodes(path)
    if not episodes:
        raise ValueError(f"{path} holds no episodes")
    spec.assert_compatible(demo_spec, what=f"the demos in {path}")
    batch, dropped = to_transitions(episodes, device)
    if dropped:
        log.info("%s: %d demo step(s) without a successor observation or with NaN were left out", path, dropped)
    low, high = spec.action.low, spec.action.high
    if low is not None or high is not None:
        clamped = batch.action.clamp(min=low, max=high)
        n = int((clamped != batch.action).reshape(len(batch), -1).any(dim=1).sum())
        if n:
            log.warning("%s: %d demo action(s) were outside [%s, %s] and were clamped", path, n, low, high)
        batch.action = clamped
    batch.actor_id = DEMO_ACTOR_ID
    log.info("loaded %d demo transitions from %d %s episodes in %s", len(batch), len(episodes), kind, path)
    return batch


def load_demos_into(storage: Any, path: Path | str, spec: EnvSpec, device: torch.device | str,
                    buffer: str = "demos") -> int:
    """Load the demos at ``path`` into ``storage``'s buffer ``buffer``; returns the rows added.

    ``storage`` must have named buffers (``add_to``), e.g. SAC with ``algo.demo_ratio > 0``.
    """
    add_to = getattr(storage, "add_to", None)
    buffers = getattr(storage, "buffers", {})
    if add_to is None or buffer not in buffers:
        raise ConfigError(f"loop.demos_path needs a learner with a {buffer!r} replay buffer; for SAC set "
                                "algo.demo_ratio (0.5 samples half of every batch from the demos)")
    batch = load_demos(path, spec, device)
    add_to(buffer, batch)
    return len(batch)
