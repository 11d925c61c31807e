"""The ``cotrain`` section of a run config, and the λ(t) schedule of the auxiliary loss.

Kept free of torch (the CLI lists its keys); the ``cotrain`` extension (:mod:`robot_rl.cotrain.extension`) registers
it as a run config's section.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from robot_rl.core.config import ConfigError


@dataclass
class CotrainConfig:
    """Sim–real co-training (RL-Co): stage 1 SFT on real + sim demos, stage 2 RL + λ·supervised loss on real."""

    real_dataset: Path | None = None
    """Real-robot demonstrations (a LeRobotDataset v3 directory or an episode store); setting it turns
    co-training on. Its observations must align with the sim task's (same keys, cameras, image sizes)."""
    sim_dataset: Path | None = None
    """Simulated demonstrations for the stage-1 mix (same formats); null = stage 1 uses real demos only."""
    sft_steps: int = 0
    """Stage 1: gradient steps of SFT warm start on the real + sim mix before RL (0 = no stage 1, e.g.
    when the algorithm starts from an SFT checkpoint already)."""
    sft_real_fraction: float = 0.5
    """Stage 1: fraction of each SFT batch drawn from the real demos (the rest from the sim demos)."""
    sft_batch_size: int = 256
    """Stage 1: rows per SFT batch."""
    sft_lr: float = 1e-3
    """Stage 1: Adam learning rate of the actor's parameters."""
    weight: float = 0.1
    """Stage 2: λ, the weight of the auxiliary supervised loss on real batches (0 = plain RL)."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """How λ(t) changes with the learner's update count t: ``constant`` λ; ``linear`` or ``cosine`` decay
    from ``weight`` to ``final_weight`` over ``decay_updates`` updates (then held)."""
    final_weight: float = 0.0
    """λ at the end of a ``linear``/``cosine`` decay."""
    decay_updates: int = 10_000
    """Learner updates over which λ decays (``linear``/``cosine``)."""
    batch_size: int = 256
    """Stage 2: real-demo rows per auxiliary-loss batch (one batch per gradient step of the learner)."""
    holdout_fraction: float = 0.1
    """Real episodes held out from both stages; their supervised loss is logged during RL (forgetting)."""
    heldout_dataset: Path | None = None
    """A separate set of held-out real demonstrations to log the supervised loss on (then nothing is
    split off ``real_dataset``)."""
    camera_map: dict[str, str] = field(default_factory=dict)
    """Rename real cameras to the sim's names before alignment, e.g. ``{wrist_cam: wrist}``."""
    seed_offset: int = 17
    """The real-batch sampler is seeded with ``run.seed + seed_offset`` (its own stream: the RL's RNG is
    never touched, so λ = 0 reproduces plain RL exactly)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.sft_real_fraction <= 1.0:
            raise ValueError(f"cotrain.sft_real_fraction must be in [0, 1], got {self.sft_real_fraction}")
        if self.weight < 0 or self.final_weight < 0:
            raise ValueError(f"cotrain.weight and cotrain.final_weight must be >= 0, got {self.weight}, "
                             f"{self.final_weight}")
        if self.sft_steps < 0 or self.batch_size < 1 or self.sft_batch_size < 1 or self.decay_updates < 1:
            raise ValueError("cotrain.sft_steps must be >= 0 and batch sizes and decay_updates >= 1")
        if not 0.0 <= self.holdout_fraction < 1.0:
            raise ValueError(f"cotrain.holdout_fraction must be in [0, 1), got {self.holdout_fraction}")

    @property
    def enabled(self) -> bool:
        """Co-training is on when a real dataset is given."""
        return self.real_dataset is not None

    def weight_at(self, updates: int) -> float:
        """λ(t) after ``updates`` learner updates (see ``schedule``)."""
        if self.schedule == "constant":
            return self.weight
        frac = min(max(updates, 0) / self.decay_updates, 1.0)
        if self.schedule == "linear":
            shape = 1.0 - frac
        elif self.schedule == "cosine":
            shape = 0.5 * (1.0 + math.cos(math.pi * frac))
        else:
            raise ConfigError(f"cotrain.schedule {self.schedule!r} is not one of constant, linear, cosine")
        return self.final_weight + (self.weight - self.final_weight) * shape
