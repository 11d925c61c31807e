"""Loading demonstrations (an episode store or a LeRobotDataset v3) into a learner's demo buffer.

Rewind-and-correct (RaC) weighting: episodes recorded with `robot-rl record` label each step as
none / rewind / correction (:data:`~robot_rl.data.episode.SEGMENT_NAMES`). :class:`RaCWeights` gives each
label a whole-number weight; the loader repeats every row that many times (0 drops it), so a buffer that
samples uniformly samples correction steps ``correction_weight`` times as often as unlabelled ones.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.algorithm import NamedBufferStorage
from robot_rl.core.config import ConfigError
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import DEMO_ACTOR_ID, TransitionBatch
from robot_rl.data.episode import SEGMENT_CORRECTION, SEGMENT_NONE, SEGMENT_REWIND, Episode, to_transitions

log = logging.getLogger(__name__)



@dataclass
class RaCWeights:
    """Sampling weight of demo rows by their rewind-and-correct label (whole numbers; 0 drops the rows)."""

    correction_weight: int = 3
    """Weight of rows the operator marked as a correction (the recovery behaviour to learn)."""
    rewind_weight: int = 1
    """Weight of rows marked as a rewind (moving back to a familiar state; 0 leaves them out)."""
    base_weight: int = 1
    """Weight of unlabelled rows."""

    def __post_init__(self) -> None:
        for name in ("correction_weight", "rewind_weight", "base_weight"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ConfigError(f"RaC {name} must be a whole number >= 0, got {v!r}")


def rac_weights(segment: np.ndarray | torch.Tensor, correction_weight: int = 3, rewind_weight: int = 1,
                base_weight: int = 1) -> np.ndarray:
    """Per-row weight ``[N]`` int64 for RaC labels ``segment`` ``[N]`` (0 none, 1 rewind, 2 correction)."""
    seg = segment.detach().cpu().numpy() if isinstance(segment, torch.Tensor) else np.asarray(segment)
    cfg = RaCWeights(correction_weight, rewind_weight, base_weight)
    table = {SEGMENT_NONE: cfg.base_weight, SEGMENT_REWIND: cfg.rewind_weight,
             SEGMENT_CORRECTION: cfg.correction_weight}
    unknown = set(np.unique(seg).tolist()) - set(table)
    if unknown:
        raise ConfigError(f"unknown RaC segment label(s) {sorted(unknown)}; valid: {sorted(table)}")
    out = np.zeros(seg.shape, dtype=np.int64)
    for label, w in table.items():
        out[seg == label] = w
    return out


def apply_rac_weights(batch: TransitionBatch, weights: RaCWeights | None) -> TransitionBatch:
    """Repeat each row of ``batch`` by its RaC weight and drop the ``segment`` extra (buffers do not store it).

    Rows keep their order (a row's copies are adjacent). Without labels or weights the batch is unchanged.
    """
    segment = batch.extras.pop("segment", None)
    if segment is None or weights is None:
        return batch
    w = rac_weights(segment, weights.correction_weight, weights.rewind_weight, weights.base_weight)
    if (w == 1).all():
        return batch
    rows = torch.from_numpy(np.repeat(np.arange(len(batch)), w)).to(batch.action.device)
    return batch.index(rows)


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


def load_demos(path: Path | str, spec: EnvSpec, device: torch.device | str = "cpu",
               rac: RaCWeights | None = None) -> TransitionBatch:
    """Demonstrations at ``path`` as transitions for an env with ``spec``.

    ``rac`` repeats rows by their rewind-and-correct label (:class:`RaCWeights`); without it every row
    appears once.

    Observation keys, shapes and dtypes and the action shape must match ``spec`` (else
    :class:`~robot_rl.core.specs.SpecMismatchError` with the differences); actions outside the spec's bounds are clamped
    into them, and the number clamped is logged.
    """
    episodes, demo_spec, kind = read_episodes(path)
    if not episodes:
        raise ConfigError(f"{path} holds no episodes")
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
    n_rows = len(batch)
    batch = apply_rac_weights(batch, rac)
    if len(batch) != n_rows:
        log.info("%s: RaC weights turned %d demo rows into %d", path, n_rows, len(batch))
    batch.actor_id = DEMO_ACTOR_ID
    log.info("loaded %d demo transitions from %d %s episodes in %s", len(batch), len(episodes), kind, path)
    return batch


def load_demos_into(storage: Any, path: Path | str, spec: EnvSpec, device: torch.device | str,
                    buffer: str = "demos", rac: RaCWeights | None = None) -> int:
    """Load the demos at ``path`` into ``storage``'s buffer ``buffer``; returns the rows added.

    ``storage`` must have named buffers (``add_to``), e.g. SAC with ``algo.demo_ratio > 0``.
    """
    if not isinstance(storage, NamedBufferStorage) or buffer not in storage.buffers:
        raise ConfigError(f"demos.path needs a learner with a {buffer!r} replay buffer; for SAC set "
                                "algo.demo_ratio (0.5 samples half of every batch from the demos)")
    batch = load_demos(path, spec, device, rac=rac)
    storage.add_to(buffer, batch)
    return len(batch)
