"""The help gate's ``progress`` score: a process reward model's progress stalling over a window of steps.

With ``help.prm=<checkpoint>`` (from `robot-rl reward train-prm`) and ``help.goal`` (the instruction the model
was trained on), each step the model compares the camera frames of ``help.window`` steps ago with the newest
ones. Its progress delta is in [-1, 1]. The score is minus that delta: about 0 when the robot is stuck, negative
while it advances, positive when it moves away from the goal. The gate standardises it like every score, so a
stall after steady progress stands out.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np
import torch

from robot_rl.core.config import ConfigError


class ProgressStall:
    """The ``progress`` score of one robot's episode (``reset`` at every episode start)."""

    def __init__(self, checkpoint: str | Path, goal: str, window: int) -> None:
        from robot_rl.rewards.prm import ProcessRewardModel

        try:
            self.model = ProcessRewardModel.load(checkpoint, on_unseen="error")
        except FileNotFoundError as e:
            raise ConfigError(f"help.prm={checkpoint}: no process reward model there ({e}); train one with "
                              "`robot-rl reward train-prm`") from e
        if not goal or not self.model.tokenizer.is_known(goal):
            raise ConfigError(f"help.goal={goal!r}: the process reward model at {checkpoint} was not trained on this "
                              "instruction; set help.goal to the instruction of its demonstrations")
        self.goal = goal
        self.cameras = sorted(self.model.encoder.shapes)
        self.frames: deque[dict[str, np.ndarray]] = deque(maxlen=window + 1)

    def check(self, observed: dict[str, tuple[int, ...]]) -> None:
        """Refuse a robot whose cameras are not the model's (names and shapes), before anything moves."""
        for key in self.cameras:
            want = tuple(self.model.encoder.shapes[key])
            if key not in observed or tuple(observed[key]) != want:
                raise ConfigError(f"help.prm reads {key} {want}, the robot observes "
                                  f"{key} {observed.get(key)}; set robot.cameras to the model's cameras")

    def reset(self) -> None:
        """A new episode: progress is measured from its own frames."""
        self.frames.clear()

    def score(self, obs: dict[str, np.ndarray]) -> float | None:
        """Minus the progress from the oldest frame in the window to ``obs``; None on an episode's first step."""
        self.frames.append({k: np.asarray(obs[k]) for k in self.cameras})
        if len(self.frames) < 2:
            return None
        first, last = self.frames[0], self.frames[-1]
        with torch.no_grad():
            delta, _ = self.model({k: torch.from_numpy(v[None]) for k, v in first.items()},
                                  {k: torch.from_numpy(v[None]) for k, v in last.items()}, self.goal)
        return -float(delta[0])
