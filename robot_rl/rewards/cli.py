"""`robot-rl reward train-classifier|train-prm`: train reward models from recorded episodes."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Union

import tyro


@dataclass
class TrainClassifierArgs:
    """Train a success classifier on an episode store or LeRobotDataset v3 and calibrate it.

    The threshold is chosen on held-out episodes to reach the target precision; --out gets model.pt,
    meta.json (with the threshold, precision, recall) and pr_curve.png.
    """

    data: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="DATA")]]
    """Episode store or LeRobotDataset v3 with camera observations and success labels."""
    out: Path
    """Checkpoint directory to write."""
    target_precision: float = 0.95
    """Precision the calibrated threshold must reach on the held-out episodes."""
    cameras: tuple[str, ...] = ()
    """Cameras to use (e.g. top wrist); default all."""
    label: Literal["success", "last_k"] = "success"
    """Per-frame success flags, or the last K frames of successful episodes."""
    last_k: int = 3
    """K for --label last_k."""
    held_out: float = 0.25
    """Fraction of episodes held out for calibration."""
    steps: int = 400
    """Gradient steps."""
    backbone: Path | None = None
    """Local state-dict file of pretrained CNN weights."""
    seed: int = 0
    """Seed."""


@dataclass
class TrainPRMArgs:
    """Train the built-in process reward model (progress between two frames for a language goal) on demos."""

    data: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="DATA")]]
    """Episode store or LeRobotDataset v3 of successful demos."""
    out: Path
    """Checkpoint directory to write."""
    instruction: str = ""
    """Language goal (default: each episode's task text)."""
    cameras: tuple[str, ...] = ()
    """Cameras to use; default all."""
    steps: int = 400
    """Gradient steps."""
    seed: int = 0
    """Seed."""


RewardVerb = Union[
    Annotated[TrainClassifierArgs, tyro.conf.subcommand("train-classifier")],
    Annotated[TrainPRMArgs, tyro.conf.subcommand("train-prm")],
]


@dataclass
class RewardArgs:
    """Reward models: a calibrated success classifier and a process reward model. See docs/rewards.md."""

    action: tyro.conf.OmitSubcommandPrefixes[RewardVerb]  # type: ignore[valid-type]
    """What to do."""


def run_reward(args: RewardArgs) -> int:
    """The `reward` verb: 0 on success, 2 on bad data."""
    from robot_rl.data.store import StoreError
    from robot_rl.rewards.data import RewardDataError

    a = args.action
    try:
        if isinstance(a, TrainClassifierArgs):
            from robot_rl.rewards.classifier import ClassifierConfig, train_classifier

            cfg = ClassifierConfig(cameras=a.cameras, label=a.label, last_k=a.last_k,
                                   target_precision=a.target_precision, held_out=a.held_out, steps=a.steps,
                                   backbone=a.backbone, seed=a.seed)
            print(train_classifier(a.data, a.out, cfg).summary())
            return 0
        from robot_rl.rewards.prm import PRMConfig, train_prm

        report = train_prm(a.data, a.out, PRMConfig(cameras=a.cameras, instruction=a.instruction, steps=a.steps,
                                                    seed=a.seed))
        print(report.summary())
        return 0
    except (RewardDataError, StoreError, ImportError) as e:
        print(f"robot-rl reward: error: {e}", file=sys.stderr)
        return 2
