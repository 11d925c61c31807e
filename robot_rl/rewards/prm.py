"""A process reward model (VLAC style): ``(obs_t, obs_t+k, goal) → (progress delta in [-1, 1], P(done))``.

Built-in model: one CNN encodes both frames (per camera, :class:`~robot_rl.rewards.nets.CameraEncoder`),
a bag-of-words encoder over :class:`~robot_rl.tokenizer.HashTokenizer` ids encodes the goal, and an
MLP on ``[f_t, f_t+k, f_t+k − f_t, text]`` outputs ``tanh`` progress and a done logit.

Training pairs from demos (successful episodes, progress ``p(t) = t / (L − 1)`` over the ``L`` frames):

- forward pairs ``i < j``: target ``p(j) − p(i)``;
- reversed pairs ``(j, i)``: target ``p(i) − p(j) < 0`` (regress);
- stalled pairs ``(i, i)``: target 0 (no progress);
- mismatched instructions (another task's goal): target 0 and not done.

``done`` is the success label of the second frame (the last frame of a successful demo).

Unseen instructions: with ``on_unseen="error"`` (default) an instruction the model never saw in
training (fewer than half its words known) raises
:class:`~robot_rl.rewards.text.UnseenInstructionError`; with ``"zero"`` it scores 0 progress and 0
done probability (no shaping) and is counted in ``unseen_count``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from robot_rl.data.episode import Episode
from robot_rl.rewards.ckpt import load_model_dir, save_model_dir
from robot_rl.rewards.data import RewardDataError, camera_keys, episode_frames, load_episodes
from robot_rl.rewards.nets import CameraEncoder
from robot_rl.rewards.text import TextEncoder, UnseenInstructionError
from robot_rl.tokenizer import HashTokenizer

#: Instructions of other tasks, used as mismatched negatives when the data has a single task.
DISTRACTORS = ("open the top drawer", "push the blue block to the left", "pick up the red cube",
               "press the yellow button", "close the gripper and lift", "stack the cups")


@dataclass
class PRMConfig:
    """How to train a process reward model."""

    cameras: tuple[str, ...] = ()
    """Cameras to use; empty = every camera in the data."""
    instruction: str = ""
    """Language goal of every episode (default: each episode's task text)."""
    steps: int = 400
    """Gradient steps."""
    batch_size: int = 64
    """Pairs per step (a quarter each forward, reversed, stalled, mismatched)."""
    lr: float = 1e-3
    """Adam learning rate."""
    features: int = 64
    """CNN features per camera."""
    channels: int = 8
    """Channels of the first conv layer."""
    text_dim: int = 32
    """Text embedding size."""
    buckets: int = 1024
    """Hash buckets of the tokenizer."""
    seed: int = 0
    """Seed of initialisation and sampling."""


class ProcessRewardModel(nn.Module):
    """Two frames and a goal → progress delta ``[N]`` in [-1, 1] and done probability ``[N]``."""

    def __init__(self, image_shapes: dict[str, tuple[int, ...]], features: int = 64, channels: int = 8,
                 text_dim: int = 32, buckets: int = 1024, on_unseen: Literal["error", "zero"] = "error") -> None:
        super().__init__()
        self.encoder = CameraEncoder(image_shapes, features, channels)
        self.tokenizer = HashTokenizer(buckets)
        self.text = TextEncoder(buckets, text_dim)
        d = self.encoder.out_dim
        self.head = nn.Sequential(nn.Linear(3 * d + text_dim, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                                  nn.Linear(128, 2))
        self.on_unseen = on_unseen
        self.unseen_count = 0
        self.meta: dict[str, Any] = {}

    def raw(self, a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], goals: list[str]) -> torch.Tensor:
        """``[N, 2]``: pre-activation progress and done logit (training)."""
        fa, fb = self.encoder(a), self.encoder(b)
        ids, offsets = self.tokenizer.batch(goals, fa.device)
        return self.head(torch.cat([fa, fb, fb - fa, self.text(ids, offsets)], dim=-1))

    @torch.no_grad()
    def forward(self, obs_t: dict[str, torch.Tensor], obs_k: dict[str, torch.Tensor],  # type: ignore[override]
                goals: list[str] | str) -> tuple[torch.Tensor, torch.Tensor]:
        """Progress delta ``[N]`` in [-1, 1] and done probability ``[N]`` (see the module docstring)."""
        self.encoder.check(obs_t)
        self.encoder.check(obs_k)
        n = next(iter(obs_t.values())).shape[0]
        goals = [goals] * n if isinstance(goals, str) else list(goals)
        if len(goals) != n:
            raise ValueError(f"{len(goals)} goals for {n} frame pairs")
        known = torch.tensor([self.tokenizer.is_known(g) for g in goals])
        if not bool(known.all()):
            bad = sorted({g for g, k in zip(goals, known.tolist(), strict=True) if not k})
            if self.on_unseen == "error":
                raise UnseenInstructionError(f"instruction(s) {bad[:3]} are mostly words never seen in training; "
                                             "pass on_unseen='zero' to score them as no progress")
            self.unseen_count += int((~known).sum())
        out = self.raw(obs_t, obs_k, goals)
        delta, done = torch.tanh(out[:, 0]), torch.sigmoid(out[:, 1])
        mask = known.to(delta.device)
        return delta * mask, done * mask

    def save(self, out: Path | str) -> Path:
        """Write the checkpoint directory (weights, the tokenizer's seen ids, shapes)."""
        meta = {**self.meta, "image_shapes": self.encoder.shapes, "known_ids": sorted(self.tokenizer.known),
                "features": self.encoder.features, "text_dim": self.text.dim, "buckets": self.tokenizer.vocab_size,
                "channels": self.encoder.channels}
        return save_model_dir(out, "process_reward_model", self.state_dict(), meta)

    @classmethod
    def load(cls, path: Path | str, on_unseen: Literal["error", "zero"] = "error") -> ProcessRewardModel:
        """Read a directory written by :meth:`save`."""
        state, meta = load_model_dir(path, "process_reward_model")
        shapes = {k: tuple(v) for k, v in meta["image_shapes"].items()}
        model = cls(shapes, int(meta["features"]), int(meta["channels"]), int(meta["text_dim"]),
                    int(meta["buckets"]), on_unseen)
        model.load_state_dict(state)
        model.tokenizer.known = set(meta["known_ids"])
        model.meta = meta
        return model.eval()


@dataclass
class _Demo:
    frames: dict[str, np.ndarray]
    goal: str


def _demos(episodes: list[Episode], keys: list[str], instruction: str) -> list[_Demo]:
    out = []
    for ep in episodes:
        if not ep.is_success and ep.success.any():
            continue  # a failed attempt has no known progress curve
        frames, _ = episode_frames(ep, keys)
        out.append(_Demo(frames, instruction or ep.task))
    if not out:
        raise RewardDataError("no successful demos to learn progress from")
    if any(not d.goal for d in out):
        raise RewardDataError("episodes carry no task text; pass --instruction")
    return out


class PairSampler:
    """Draws training pairs from demos in one vectorised gather (frames of all demos concatenated)."""

    def __init__(self, demos: list[_Demo], distractors: list[str], seed: int) -> None:
        keys = list(demos[0].frames)
        self.frames = {k: np.concatenate([d.frames[k] for d in demos]) for k in keys}
        lengths = np.array([next(iter(d.frames.values())).shape[0] for d in demos])
        self.start, self.length = np.r_[0, np.cumsum(lengths)[:-1]], lengths
        self.goals = [d.goal for d in demos]
        self.distractors = distractors
        self.gen = np.random.default_rng(seed)

    def sample(self, batch: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], list[str],
                                          torch.Tensor, torch.Tensor]:
        """Frames a, b, goals, progress targets ``[B]`` and done targets ``[B]`` (module docstring)."""
        g = self.gen
        d = g.integers(0, len(self.goals), batch)
        n = self.length[d]
        i, j = (g.random(batch) * n).astype(int), (g.random(batch) * n).astype(int)
        i, j = np.minimum(i, j), np.maximum(i, j)
        kind = np.arange(batch) % 4  # 0 forward, 1 reversed, 2 stalled, 3 mismatched instruction
        j = np.where(kind == 2, i, j)
        i, j = np.where(kind == 1, j, i), np.where(kind == 1, i, j)
        delta = np.where(kind == 3, 0.0, (j - i) / np.maximum(n - 1, 1)).astype(np.float32)
        done = ((j == n - 1) & (kind != 3)).astype(np.float32)
        goals = [self.distractors[int(g.integers(len(self.distractors)))] if k == 3 else self.goals[e]
                 for k, e in zip(kind.tolist(), d.tolist(), strict=True)]
        a = {k: torch.from_numpy(v[self.start[d] + i]) for k, v in self.frames.items()}
        b = {k: torch.from_numpy(v[self.start[d] + j]) for k, v in self.frames.items()}
        return a, b, goals, torch.from_numpy(delta), torch.from_numpy(done)


@dataclass
class PRMReport:
    """What :func:`train_prm` produced."""

    out: Path | None
    model: ProcessRewardModel
    demos: int
    train_s: float
    final_loss: float

    def summary(self) -> str:
        """One line for the command line."""
        return (f"trained on {self.demos} demos in {self.train_s:.1f}s, final loss {self.final_loss:.4f}"
                + (f"; written to {self.out}" if self.out else ""))


def train_prm(source: Path | str | list[Episode], out: Path | str | None = None, cfg: PRMConfig | None = None,
              distractors: tuple[str, ...] = DISTRACTORS) -> PRMReport:
    """Train the built-in PRM on demos at ``source`` (store, LeRobotDataset v3 or episodes)."""
    cfg = cfg or PRMConfig()
    torch.manual_seed(cfg.seed)
    episodes, _ = load_episodes(source)
    keys = camera_keys(episodes, cfg.cameras)
    demos = _demos(episodes, keys, cfg.instruction)
    goals = sorted({d.goal for d in demos})
    # Mismatches come from other tasks' goals; with several tasks in the data, one demo's goal is a
    # mismatch for another demo (never for its own: sample_pairs draws a distractor per demo).
    others = [t for t in distractors if t not in goals]
    if not others:
        raise RewardDataError("need at least one distractor instruction that differs from the demos' goals")
    shapes = {k: tuple(int(x) for x in demos[0].frames[k].shape[1:]) for k in keys}
    model = ProcessRewardModel(shapes, cfg.features, cfg.channels, cfg.text_dim, cfg.buckets)
    model.tokenizer.fit(goals + list(distractors))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sampler = PairSampler(demos, others, cfg.seed)
    t0, loss_v = time.perf_counter(), float("nan")
    model.train()
    for _ in range(cfg.steps):
        a, b, g, delta, done = sampler.sample(cfg.batch_size)
        raw = model.raw(a, b, g)
        loss = nn.functional.mse_loss(torch.tanh(raw[:, 0]), delta) + \
            0.5 * nn.functional.binary_cross_entropy_with_logits(raw[:, 1], done)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_v = float(loss.detach())
    model.eval()
    model.meta = {"goals": goals, "config": asdict(cfg), "demos": len(demos)}
    if out is not None:
        model.save(out)
    return PRMReport(Path(out) if out is not None else None, model, len(demos), time.perf_counter() - t0, loss_v)


@torch.no_grad()
def episode_progress(model: ProcessRewardModel, frames: dict[str, np.ndarray], goal: str) -> np.ndarray:
    """Predicted progress of every frame relative to the first: ``delta(frame_0, frame_t)`` ``[L]``."""
    n = next(iter(frames.values())).shape[0]
    first = {k: torch.from_numpy(np.repeat(v[:1], n, 0)) for k, v in frames.items()}
    delta, _ = model(first, {k: torch.from_numpy(v) for k, v in frames.items()}, goal)
    return delta.numpy()


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1, ties sharing their average rank."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), np.float64)
    ranks[order] = np.arange(len(x))
    _, inverse = np.unique(x, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks)
    return (sums / np.bincount(inverse))[inverse]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation: Pearson's r of the (average-tie) ranks; 0 if either is constant."""
    rx, ry = _ranks(np.asarray(x, np.float64)), _ranks(np.asarray(y, np.float64))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = float(np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / denom) if denom > 0 else 0.0
