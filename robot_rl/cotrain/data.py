"""Demonstrations as supervised (observation, action) tensors for co-training.

A :class:`DemoSet` holds every step of a set of episodes: ``obs {key: [M, ...]}``, ``action`` — per-step
``[M, A]`` for Gaussian policies, or target chunks ``[M, H, A]`` with a validity ``mask [M, H]`` for
flow (action-chunk) policies — on the learner's device. Real episodes are split by episode into a
training part and a held-out part whose supervised loss is the forgetting monitor during RL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from robot_rl.core.config import ConfigError
from robot_rl.core.specs import EnvSpec
from robot_rl.cotrain.align import assert_aligned, rename_cameras
from robot_rl.data.episode import Episode


@dataclass
class DemoSet:
    """Supervised rows of demonstrations (see the module docstring)."""

    obs: dict[str, torch.Tensor]
    action: torch.Tensor
    mask: torch.Tensor | None = None
    episodes: int = 0

    def __len__(self) -> int:
        return int(self.action.shape[0])

    def rows(self, idx: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor | None]:
        """``(obs, action, mask)`` of rows ``idx``."""
        return ({k: v[idx] for k, v in self.obs.items()}, self.action[idx],
                None if self.mask is None else self.mask[idx])

    def sample(self, n: int, generator: torch.Generator) -> tuple[dict[str, torch.Tensor], torch.Tensor,
                                                                  torch.Tensor | None]:
        """``n`` rows drawn uniformly with replacement with ``generator``."""
        idx = torch.randint(len(self), (n,), generator=generator, device=generator.device)
        return self.rows(idx.to(self.action.device))


def episodes_to_demoset(episodes: list[Episode], spec: EnvSpec, device: torch.device | str) -> DemoSet:
    """Every step of ``episodes`` as rows for a policy acting in ``spec`` (chunks when its action is [H, A])."""
    if not episodes:
        raise ValueError("no demonstration episodes")
    if len(spec.action.shape) == 2:
        from robot_rl.policies.flow.sft import chunk_dataset

        chunks = chunk_dataset(episodes, spec, spec.action.shape[0])
        return DemoSet({k: v.to(device) for k, v in chunks.obs.items()}, chunks.actions.to(device).float(),
                       chunks.mask.to(device), len(episodes))
    obs = {k: torch.from_numpy(np.concatenate([np.asarray(ep.obs[k]) for ep in episodes])).to(device)
           for k in spec.observation}
    action = torch.from_numpy(np.concatenate([np.asarray(ep.action, np.float32) for ep in episodes])).to(device)
    action = action.reshape(-1, *spec.action.shape)
    low, high = spec.action.low, spec.action.high
    if low is not None or high is not None:
        action = action.clamp(low, high)
    return DemoSet(obs, action, None, len(episodes))


def load_aligned_episodes(path: Path | str, sim_spec: EnvSpec, camera_map: dict[str, str] | None = None,
                          what: str = "the real demonstrations") -> list[Episode]:
    """Episodes of ``path`` (episode store or LeRobotDataset v3), checked to align with ``sim_spec``."""
    from robot_rl.data.demos import read_episodes

    episodes, spec, _ = read_episodes(path)
    if not episodes:
        raise ConfigError(f"{path} holds no episodes")
    spec, episodes = rename_cameras(spec, episodes, camera_map or {})
    assert_aligned(sim_spec, spec, f"{what} in {path}")
    return episodes


def split_holdout(episodes: list[Episode], fraction: float, seed: int) -> tuple[list[Episode], list[Episode]]:
    """``(train, held_out)`` by whole episodes; at least one training episode is always kept."""
    n_hold = min(math.floor(len(episodes) * fraction), len(episodes) - 1)
    if n_hold <= 0:
        return episodes, []
    order = np.random.default_rng(seed).permutation(len(episodes))
    held = set(order[:n_hold].tolist())
    return ([ep for i, ep in enumerate(episodes) if i not in held],
            [ep for i, ep in enumerate(episodes) if i in held])
