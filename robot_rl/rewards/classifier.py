"""A binary success classifier on camera frames, with its threshold calibrated for precision.

Training (``robot-rl reward train-classifier DATA --out DIR``): frames of the training episodes
with their success labels (:mod:`~robot_rl.rewards.data`), a small CNN per camera (or one shared;
optionally initialised from a local weights file) or a pretrained ResNet-10/18 trunk from a local file
(``encoder``; frozen, with a trainable head per camera), BCE with the positives up-weighted to balance
the classes, and DrQ random shifts. Calibration: on held-out *episodes* (never frames of training
episodes) the threshold is the lowest score whose precision reaches ``target_precision``, which
maximises recall subject to the precision target: a false success teaches the policy the wrong
thing, a missed one only slows it down. ``DIR`` gets ``model.pt``, ``meta.json`` (threshold,
precision, recall, cameras, shapes) and ``pr_curve.png``.
"""

from __future__ import annotations

import logging
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from robot_rl.core.config import ConfigError
from robot_rl.data.episode import Episode
from robot_rl.policies.modules.pretrained import check_image_encoder
from robot_rl.rewards.audit import save_anchors
from robot_rl.rewards.ckpt import load_model_dir, save_model_dir
from robot_rl.rewards.data import (
    LabelledFrames,
    LabelRule,
    RewardDataError,
    camera_keys,
    labelled_frames,
    load_episodes,
    split_episodes,
)
from robot_rl.rewards.false_success import FalseSuccess, false_success_episodes, false_success_warning
from robot_rl.rewards.nets import CameraEncoder, TrunkCameraEncoder, random_shift

log = logging.getLogger(__name__)


@dataclass
class ClassifierConfig:
    """How to train and calibrate a success classifier."""

    cameras: tuple[str, ...] = ()
    """Cameras to use (``top`` or ``image.top``); empty = every camera in the data."""
    label: LabelRule = "success"
    """``success``: per-frame success flags; ``last_k``: the last K frames of successful episodes; ``first_k``: the
    first K frames of every episode (a classifier of initial states: practice's reset reward)."""
    last_k: int = 3
    """K for ``label=last_k`` and ``label=first_k``."""
    target_precision: float = 0.95
    """Calibrate the threshold to reach this precision on the held-out episodes."""
    min_threshold: float = 0.5
    """The threshold never goes below this probability. Held-out frames come from the same demos and fumbles as
    the training frames, so they rarely show a pose a policy will try; at full recall the threshold would follow
    the hardest positive frame down (to 0.0007 on sim_so101's pick, where 60 % of frames of an arm moved around
    without the cube then read as success, against 0.7 % at 0.5). A reward needs one detected frame of a success
    that lasts many, not every frame. 0 restores the recall-first choice."""
    held_out: float = 0.25
    """Fraction of episodes kept for calibration (split alike among successes and failures)."""
    steps: int = 400
    """Gradient steps."""
    batch_size: int = 64
    """Frames per step."""
    lr: float = 3e-3
    """Adam learning rate."""
    features: int = 64
    """CNN output features per camera."""
    channels: int = 16
    """Channels of the first conv layer (then twice that)."""
    shared_encoder: bool = False
    """One CNN for every camera (same shapes needed) instead of one per camera."""
    augment_pad: int = 2
    """Random-shift augmentation in pixels (0 = off)."""
    encoder: Literal["cnn", "resnet10", "resnet18"] = "cnn"
    """Camera encoder: ``cnn`` (the small CNN above) or a ResNet trunk shared by the cameras, with a trainable
    spatial-embedding head per camera (``features`` each); its weights come from ``backbone``."""
    backbone: Path | None = None
    """Local weights file: with ``cnn`` a state dict of the same small CNN (see :meth:`CameraEncoder.load_backbone`),
    with ``resnet10``/``resnet18`` a torchvision-layout ResNet (e.g. torchvision's resnet18 ``state_dict``)."""
    freeze_backbone: bool | None = None
    """Keep the pretrained weights fixed; null = fixed for a ResNet trunk, trained for the small CNN."""
    seed: int = 0
    """Seed of the split, the initialisation and the batches."""


class SuccessClassifier(nn.Module):
    """Frames → success probability; ``threshold`` turns it into a decision (calibrated, stored with it)."""

    def __init__(self, image_shapes: dict[str, tuple[int, ...]], features: int = 64, channels: int = 16,
                 shared: bool = False, threshold: float = 0.5, encoder: str = "cnn", freeze: bool = True) -> None:
        super().__init__()
        check_image_encoder(encoder, "encoder")
        self.encoder_kind = encoder
        self.encoder: CameraEncoder | TrunkCameraEncoder = (
            CameraEncoder(image_shapes, features, channels, shared=shared) if encoder == "cnn"
            else TrunkCameraEncoder(image_shapes, encoder, features, freeze))
        self.head = nn.Sequential(nn.Linear(self.encoder.out_dim, 64), nn.ReLU(), nn.Linear(64, 1))
        self.threshold = threshold
        self.meta: dict[str, Any] = {}

    @property
    def cameras(self) -> list[str]:
        """The ``image.<cam>`` keys it reads."""
        return self.encoder.keys

    def logits(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[N]`` logits of ``{"image.<cam>": [N, H, W, C]}`` (extra keys are ignored)."""
        return self.head(self.encoder(images)).squeeze(-1)

    @torch.no_grad()
    def probability(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[N]`` success probabilities of a batched observation (shape-checked first)."""
        self.encoder.check(obs)
        return torch.sigmoid(self.logits(obs))

    @torch.no_grad()
    def predict(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[N]`` bool: probability ≥ the calibrated threshold."""
        return self.probability(obs) >= self.threshold

    def decide(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``([N] bool, [N] probability)``: the decision and what it was taken on."""
        prob = self.probability(obs)
        return prob >= self.threshold, prob

    def save(self, out: Path | str) -> Path:
        """Write the checkpoint directory (weights + meta with the threshold)."""
        meta = {**self.meta, "threshold": self.threshold, "image_shapes": self.encoder.shapes,
                "features": self.encoder.features, "shared": self.encoder.shared, "channels": self.encoder.channels,
                "encoder": self.encoder_kind}
        return save_model_dir(out, "success_classifier", self.state_dict(), meta)

    @classmethod
    def load(cls, path: Path | str) -> SuccessClassifier:
        """Read a directory written by :meth:`save` (weights with ``weights_only=True``)."""
        state, meta = load_model_dir(path, "success_classifier")
        shapes = {k: tuple(v) for k, v in meta["image_shapes"].items()}
        model = cls(shapes, int(meta["features"]), int(meta["channels"]), bool(meta["shared"]),
                    float(meta["threshold"]), encoder=str(meta.get("encoder", "cnn")))
        model.load_state_dict(state)
        model.meta = meta
        return model.eval()


@dataclass
class Calibration:
    """The chosen threshold and what it achieves on the held-out frames."""

    threshold: float
    precision: float
    recall: float
    target_precision: float
    reached: bool
    positives: int
    negatives: int
    curve: dict[str, list[float]] = field(default_factory=dict)


def calibrate(scores: np.ndarray, labels: np.ndarray, target_precision: float,
              min_threshold: float = 0.0) -> Calibration:
    """The lowest threshold, not below ``min_threshold``, whose precision on ``(scores, labels)`` is ≥ the target.

    Precision is not monotone in the threshold, so every candidate (each distinct score) is checked
    and the one with the highest recall among those meeting the target wins. If none does, the
    threshold is set above every score (the classifier never fires) and ``reached`` is False.
    """
    if not 0.0 < target_precision <= 1.0:
        raise ConfigError(f"target_precision must be in (0, 1], got {target_precision}")
    if not 0.0 <= min_threshold < 1.0:
        raise ConfigError(f"min_threshold must be in [0, 1), got {min_threshold}")
    labels = labels.astype(bool)
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], labels[order]
    tp, fp = np.cumsum(y), np.cumsum(~y)
    # Only the last index of each run of equal scores is a valid cut (a threshold takes ties together).
    last = np.r_[s[1:] != s[:-1], True]
    tp, fp, cut = tp[last], fp[last], s[last]
    precision = tp / np.maximum(tp + fp, 1)
    recall = tp / max(int(y.sum()), 1)
    ok = (precision >= target_precision) & (cut >= min_threshold)
    curve = {"precision": precision.tolist(), "recall": recall.tolist(), "threshold": cut.tolist()}
    pos, neg = int(y.sum()), int((~y).sum())
    if not ok.any():
        return Calibration(float(np.nextafter(np.float32(s.max()), np.float32(2.0))), 1.0, 0.0,
                           target_precision, False, pos, neg, curve)
    best = int(np.flatnonzero(ok)[np.argmax(recall[ok])])
    return Calibration(float(cut[best]), float(precision[best]), float(recall[best]), target_precision, True,
                       pos, neg, curve)


def plot_pr_curve(cal: Calibration, path: Path | str, title: str = "success classifier") -> Path:
    """Write the held-out precision–recall curve with the chosen operating point as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot(cal.curve["recall"], cal.curve["precision"], lw=1.5, label="held-out PR curve")
    ax.axhline(cal.target_precision, color="grey", ls="--", lw=1, label=f"target precision {cal.target_precision:g}")
    ax.plot([cal.recall], [cal.precision], "o", color="C3",
            label=f"threshold {cal.threshold:.3f}: P={cal.precision:.3f} R={cal.recall:.3f}")
    ax.set(xlabel="recall", ylabel="precision", xlim=(0, 1.02), ylim=(0, 1.02))
    ax.set_title("\n".join(textwrap.wrap(title, 55)), fontsize=9)  # a long task text must not run off the figure
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def _batches(frames: LabelledFrames, batch: int, gen: np.random.Generator
             ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    idx = gen.integers(0, len(frames), batch)
    return {k: torch.from_numpy(v[idx]) for k, v in frames.images.items()}, torch.from_numpy(frames.label[idx])


@torch.no_grad()
def score_frames(model: SuccessClassifier, frames: LabelledFrames, batch: int = 512) -> np.ndarray:
    """Success probabilities ``[F]`` of labelled frames."""
    model.eval()
    out = [model.probability({k: torch.from_numpy(v[i:i + batch]) for k, v in frames.images.items()})
           for i in range(0, len(frames), batch)]
    return torch.cat(out).numpy()


#: Below this many successful held-out episodes the summary warns that the calibration is rough.
MIN_CALIBRATION_SUCCESSES = 10


@dataclass
class ClassifierReport:
    """What :func:`train_classifier` produced."""

    out: Path | None
    calibration: Calibration
    train_frames: int
    held_out_frames: int
    train_s: float
    model: SuccessClassifier
    held_out_episodes: int = 0
    """Episodes the threshold was chosen on; their frames are correlated, so this, not the frame count, is what
    the precision estimate rests on."""
    held_out_successes: int = 0
    """Of those, episodes with a success label."""
    false_successes: list[FalseSuccess] = field(default_factory=list)
    """Held-out failed episodes the classifier fires on at its threshold (a policy would learn those poses)."""

    def summary(self) -> str:
        """One paragraph for the command line."""
        c = self.calibration
        status = "reached" if c.reached else "NOT reached (the classifier never fires; add data or lower the target)"
        head = (f"trained on {self.train_frames} frames in {self.train_s:.1f}s" if self.train_frames
                else "recalibrated (weights unchanged)")
        return (f"{head}; calibrated on {self.held_out_frames} held-out frames of {self.held_out_episodes} episodes "
                f"({c.positives} success frames): threshold {c.threshold:.4f}, precision {c.precision:.3f}, "
                f"recall {c.recall:.3f}; target precision {c.target_precision:g} {status}"
                + self._few_episodes_warning() + false_success_warning(self.false_successes)
                + (f"\nwritten to {self.out} (model.pt, meta.json, anchors.pt, pr_curve.png)" if self.out else ""))

    def _few_episodes_warning(self) -> str:
        if not self.held_out_episodes or self.held_out_successes >= MIN_CALIBRATION_SUCCESSES:
            return ""
        return (f"\nwarning: only {self.held_out_successes} successful of {self.held_out_episodes} held-out episodes: "
                f"frames within an episode look alike, so one episode can move the precision by up to "
                f"1/{max(self.held_out_successes, 1)}. Record more episodes (at least {MIN_CALIBRATION_SUCCESSES} "
                "successful held out) or raise --held-out, then `robot-rl reward calibrate --fresh`")


def train_classifier(source: Path | str | list[Episode], out: Path | str | None = None,
                     cfg: ClassifierConfig | None = None) -> ClassifierReport:
    """Train on ``source`` (episode store, LeRobotDataset v3 or episodes), calibrate, and save to ``out``."""
    cfg = cfg or ClassifierConfig()
    torch.manual_seed(cfg.seed)
    episodes, task = load_episodes(source)
    keys = camera_keys(episodes, cfg.cameras)
    train_ids, val_ids = split_episodes(episodes, cfg.held_out, cfg.seed)
    train = labelled_frames([episodes[i] for i in train_ids], keys, cfg.label, cfg.last_k)
    val = labelled_frames([episodes[i] for i in val_ids], keys, cfg.label, cfg.last_k)
    shapes = {k: tuple(int(x) for x in train.images[k].shape[1:]) for k in keys}
    freeze = cfg.freeze_backbone if cfg.freeze_backbone is not None else cfg.encoder != "cnn"
    model = SuccessClassifier(shapes, cfg.features, cfg.channels, cfg.shared_encoder, encoder=cfg.encoder,
                              freeze=freeze)
    if cfg.backbone is not None:
        n = model.encoder.load_backbone(cfg.backbone, freeze)
        log.info("loaded %d pretrained tensors from %s", n, cfg.backbone)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
    pos_weight = torch.tensor(float((~train.label).sum()) / max(float(train.label.sum()), 1.0))
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=pos_weight)
    gen = np.random.default_rng(cfg.seed)
    tgen = torch.Generator().manual_seed(cfg.seed)
    t0 = time.perf_counter()
    model.train()
    for _ in range(cfg.steps):
        images, label = _batches(train, cfg.batch_size, gen)
        if cfg.augment_pad:
            images = {k: random_shift(v, cfg.augment_pad, tgen) for k, v in images.items()}
        loss = loss_fn(model.logits(images), label.float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    train_s = time.perf_counter() - t0
    scores = score_frames(model, val)
    cal = calibrate(scores, val.label, cfg.target_precision, cfg.min_threshold)
    model.threshold = cal.threshold
    false = false_success_episodes(scores, val.label, val.episode, val_ids, cal.threshold)
    model.meta = {"task": task, "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
                  "calibration": {k: v for k, v in asdict(cal).items() if k != "curve"},
                  "train_episodes": len(train_ids), "held_out_episodes": len(val_ids),
                  "false_success_episodes": [asdict(f) for f in false]}
    model.eval()
    if out is not None:
        model.save(out)
        save_anchors(model, [train, val], out)  # what a reward audit measures a fire's novelty against
        plot_pr_curve(cal, Path(out) / "pr_curve.png", title=f"success classifier ({task or 'task'})")
    return ClassifierReport(Path(out) if out is not None else None, cal, len(train), len(val), train_s, model,
                            len(val_ids), _successful(episodes, val_ids), false)


def recalibrate_classifier(model_dir: Path | str, source: Path | str | list[Episode], target_precision: float,
                           held_out: Literal["training_split", "all"] = "training_split") -> ClassifierReport:
    """Choose a new threshold for a trained classifier without retraining it; rewrite ``model_dir``.

    ``held_out="training_split"``: ``source`` is the data the classifier was trained on, and only its
    held-out episodes (the same split, from the stored ``held_out`` fraction and seed) are scored;
    ``"all"``: ``source`` holds fresh episodes the classifier never saw, and all are scored. The
    weights are unchanged; ``meta.json`` gets the new threshold and calibration, ``pr_curve.png`` the
    new operating point.
    """
    model = SuccessClassifier.load(model_dir)
    conf = model.meta.get("config", {})
    episodes, task = load_episodes(source)
    keys = camera_keys(episodes, tuple(model.cameras))
    if held_out == "training_split":
        _, ids = split_episodes(episodes, float(conf.get("held_out", 0.25)), int(conf.get("seed", 0)))
        if len(episodes) != int(model.meta.get("train_episodes", 0)) + int(model.meta.get("held_out_episodes", 0)):
            raise RewardDataError(
                f"{len(episodes)} episodes, but the classifier was trained on "
                f"{model.meta.get('train_episodes')} + {model.meta.get('held_out_episodes')} held out: this is not "
                "its training data, so its held-out split cannot be rebuilt (use held_out='all' / --fresh for "
                "episodes it never saw)")
    else:
        ids = list(range(len(episodes)))
    frames = labelled_frames([episodes[i] for i in ids], keys, conf.get("label", "success"), int(conf.get("last_k", 3)))
    # Classifiers trained before the floor existed (no min_threshold in their config) keep the recall-first choice.
    scores = score_frames(model, frames)
    cal = calibrate(scores, frames.label, target_precision, float(conf.get("min_threshold", 0.0)))
    model.threshold = cal.threshold
    false = false_success_episodes(scores, frames.label, frames.episode, ids, cal.threshold)
    model.meta["calibration"] = {k: v for k, v in asdict(cal).items() if k != "curve"}
    model.meta["false_success_episodes"] = [asdict(f) for f in false]
    model.meta.setdefault("config", {})["target_precision"] = target_precision
    model.save(model_dir)
    plot_pr_curve(cal, Path(model_dir) / "pr_curve.png",
                  title=f"success classifier ({task or model.meta.get('task') or 'task'}), recalibrated")
    return ClassifierReport(Path(model_dir), cal, 0, len(frames.label), 0.0, model, len(ids),
                            _successful(episodes, ids), false)


def _successful(episodes: list[Episode], ids: list[int]) -> int:
    return sum(bool(np.asarray(episodes[i].success).any()) for i in ids)
