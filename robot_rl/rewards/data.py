"""Labelled frames for reward models, from an episode store, a LeRobotDataset v3 or episodes in memory.

Frame labels (``success``): the episode contract says ``success[t]`` holds for the state *after*
step ``t``, so it labels ``obs[t+1]`` (and ``final_obs`` for the last step). Where ``final_obs`` is
missing (LeRobot datasets), ``obs[t]`` is labelled with ``success[t]`` instead, the approximation
LeRobot's own reward classifier makes. ``label="last_k"`` instead marks the last ``K`` frames of every
successful episode positive and every other frame negative (for data labelled only at episode end).
``label="first_k"`` trains a classifier of *initial states* (practice's reset reward, docs/practice.md): the first
``K`` frames of every episode are positive, the frames from ``2K`` on negative, and those between, where the scene
is still barely changed from its start, are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from robot_rl.core.errors import UserError
from robot_rl.data.episode import Episode

LabelRule = Literal["success", "last_k", "first_k"]


class RewardDataError(ValueError, UserError):
    """The data cannot train a reward model (no labels, wrong cameras, too few episodes)."""


@dataclass
class LabelledFrames:
    """``F`` frames: ``images[key]`` uint8 ``[F, H, W, C]``, ``label`` ``[F]`` bool, ``episode`` ``[F]`` int."""

    images: dict[str, np.ndarray]
    label: np.ndarray
    episode: np.ndarray

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def select(self, mask: np.ndarray) -> LabelledFrames:
        """The frames where ``mask`` holds."""
        return LabelledFrames({k: v[mask] for k, v in self.images.items()}, self.label[mask], self.episode[mask])


def load_episodes(source: Path | str | list[Episode]) -> tuple[list[Episode], str]:
    """Episodes of a path (episode store or LeRobotDataset v3) or a list; returns them and a task name."""
    if isinstance(source, list):
        return source, (source[0].task if source else "")
    from robot_rl.data.demos import read_episodes

    episodes, _spec, _kind = read_episodes(source)
    if not episodes:
        raise RewardDataError(f"{source} holds no episodes")
    return episodes, episodes[0].task


def camera_keys(episodes: list[Episode], cameras: tuple[str, ...] | list[str] | None = None) -> list[str]:
    """The ``image.<cam>`` keys to use: all the data has, or ``cameras`` (names with or without ``image.``)."""
    have = sorted(k for k in episodes[0].obs if k.startswith("image."))
    if not have:
        raise RewardDataError(f"the data has no camera (image.<cam>) observations; keys: {sorted(episodes[0].obs)}")
    if not cameras:
        return have
    want = [c if c.startswith("image.") else f"image.{c}" for c in cameras]
    missing = [c for c in want if c not in have]
    if missing:
        raise RewardDataError(f"camera(s) {missing} not in the data; it has {have}")
    return sorted(want)


def episode_frames(ep: Episode, keys: list[str]) -> tuple[dict[str, np.ndarray], bool]:
    """Frames ``obs[0..T-1]`` plus ``final_obs`` when present; returns them and whether it was appended."""
    if ep.final_obs is not None:
        return {k: np.concatenate([ep.obs[k], ep.final_obs[k][None]]) for k in keys}, True
    return {k: ep.obs[k] for k in keys}, False


def frame_labels(ep: Episode, has_final: bool, rule: LabelRule, last_k: int) -> np.ndarray:
    """Per-frame success labels of one episode (see the module docstring; ``first_k`` uses ``last_k`` as K)."""
    n = len(ep) + (1 if has_final else 0)
    if rule == "first_k":
        return np.arange(n) < last_k
    if rule == "last_k":
        lab = np.zeros(n, bool)
        if ep.is_success:
            lab[max(0, n - last_k):] = True
        return lab
    if has_final:
        return np.concatenate([[False], ep.success])
    return ep.success.copy()


def labelled_frames(episodes: list[Episode], keys: list[str], rule: LabelRule = "success",
                    last_k: int = 3) -> LabelledFrames:
    """All frames of ``episodes`` with labels; :class:`RewardDataError` if a class is missing."""
    images: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    labels, ep_ids = [], []
    for i, ep in enumerate(episodes):
        frames, has_final = episode_frames(ep, keys)
        lab = frame_labels(ep, has_final, rule, last_k)
        keep = np.ones(len(lab), bool)
        if rule == "first_k":  # the frames just after the start look like it: neither class
            keep[last_k:2 * last_k] = False
        for k in keys:
            images[k].append(frames[k][keep])
        labels.append(lab[keep])
        ep_ids.append(np.full(int(keep.sum()), i, np.int64))
    label = np.concatenate(labels)
    if not label.any():
        hint = ("no episode succeeded (success at its last step)" if rule == "last_k" else
                "no frame has success=True (LeRobot: the next.success feature); if only whole episodes are "
                "labelled, use --label last_k")
        raise RewardDataError(f"the data has no positive (success) labels: {hint}")
    if label.all():
        raise RewardDataError("every frame is labelled success; a classifier needs failures too")
    return LabelledFrames({k: np.concatenate(v) for k, v in images.items()}, label, np.concatenate(ep_ids))


def split_episodes(episodes: list[Episode], held_out: float, seed: int) -> tuple[list[int], list[int]]:
    """Episode indices ``(train, held_out)``, shuffled by ``seed``, successes and failures split alike."""
    if len(episodes) < 4:
        raise RewardDataError(f"need at least 4 episodes (train + held-out calibration), got {len(episodes)}")
    rng = np.random.default_rng(seed)
    train, val = [], []
    for group in ([i for i, e in enumerate(episodes) if e.is_success],
                  [i for i, e in enumerate(episodes) if not e.is_success]):
        order = rng.permutation(group).tolist()
        k = round(held_out * len(order)) if len(order) > 1 else 0
        val += order[:k]
        train += order[k:]
    if not val or not train:
        raise RewardDataError(f"held_out={held_out} leaves no episode for training or for calibration")
    return sorted(train), sorted(val)
