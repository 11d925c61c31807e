"""Held-out failures the success classifier calls a success: poses a policy would be rewarded for without the task.

Precision on held-out frames hides them: a failed episode whose last ten frames score 0.97 costs a few points of
precision, and the calibration then only raises the threshold past the ambiguous frames at the moment of success.
But a learning policy that reaches that pose is paid for it on every step, and learns it (on the simulated SO-101
under load, one seed's classifier judged 98 % of the policy's own training episodes a success while the task's
success at evaluation was 60 %; the held-out failure it fired on was an arm moved around the cell, its end frames
all above 0.94). So :func:`train_classifier <robot_rl.rewards.classifier.train_classifier>` names such episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_FRAMES = 3
"""Frames at or above the threshold that make a failed episode worth naming (a held pose, not one noisy frame)."""


@dataclass(frozen=True)
class FalseSuccess:
    """A held-out episode with no success label in which the classifier fires on ``frames`` frames."""

    episode: int
    """Its index in the episode store (``robot-rl data info`` lists them)."""
    frames: int
    length: int
    first: int
    """The first frame it fires on."""


def false_success_episodes(scores: np.ndarray, labels: np.ndarray, episode_of_frame: np.ndarray,
                           store_ids: list[int], threshold: float,
                           min_frames: int = MIN_FRAMES) -> list[FalseSuccess]:
    """Failed held-out episodes (no frame labelled success) with ``min_frames`` or more frames at ``threshold``.

    ``episode_of_frame`` indexes ``store_ids`` (the held-out episodes' store indices), as
    :class:`~robot_rl.rewards.data.LabelledFrames` numbers them. Most frames first.
    """
    found = []
    for local, store_id in enumerate(store_ids):
        mine = episode_of_frame == local
        if not mine.any() or labels[mine].any():
            continue
        fires = np.flatnonzero(scores[mine] >= threshold)
        if len(fires) >= min_frames:
            found.append(FalseSuccess(store_id, len(fires), int(mine.sum()), int(fires[0])))
    return sorted(found, key=lambda f: -f.frames)


def false_success_warning(found: list[FalseSuccess]) -> str:
    """Lines for the classifier's summary ("" when there is nothing to say)."""
    if not found:
        return ""
    named = ", ".join(f"{f.episode} ({f.frames} of {f.length} frames, from frame {f.first})" for f in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return (f"\nwarning: the classifier calls frames of held-out FAILED episodes a success at its threshold: "
            f"{named}{more}. A policy that reaches those poses is rewarded without doing the task, and learns them. "
            "Look at those frames, record more failures like them (robot-rl record --append, label them failure), "
            "and retrain; then check the classifier on frames of the policy (docs/rewards.md)")
