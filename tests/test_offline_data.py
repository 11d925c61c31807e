"""Offline data for offline-to-online RL: returns per episode, held-out episodes, and bad input refused or set aside."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.core.specs import ArraySpec, EnvSpec, SpecMismatchError
from robot_rl.data.episode import Episode
from robot_rl.data.offline import load_offline

SPEC = EnvSpec(observation={"state": ArraySpec((2,), "float32")}, action=ArraySpec((1,), "float32", -1.0, 1.0))


def _episode(rewards: list[float], terminated: bool = True, state_dim: int = 2) -> Episode:
    n = len(rewards)
    term = np.zeros(n, dtype=bool)
    term[-1] = terminated
    trunc = np.zeros(n, dtype=bool)
    trunc[-1] = not terminated
    return Episode(obs={"state": np.zeros((n, state_dim), dtype=np.float32)}, action=np.zeros((n, 1), np.float32),
                   reward=np.asarray(rewards, dtype=np.float32), terminated=term, truncated=trunc,
                   intervened=np.zeros(n, dtype=bool), success=term.copy(),
                   final_obs={"state": np.zeros(state_dim, dtype=np.float32)})


def test_each_row_carries_its_own_episodes_return_to_go() -> None:
    data = load_offline([_episode([1.0, 1.0, 1.0]), _episode([0.0, 2.0])], SPEC, gamma=0.5, heldout_fraction=0.0)
    assert data.heldout is None and data.episodes == 2 and data.quarantined == 0
    assert data.train.extras["mc_return"].tolist() == pytest.approx([1.75, 1.5, 1.0, 1.0, 2.0])


def test_whole_episodes_are_held_out() -> None:
    eps = [_episode([float(i)] * 4) for i in range(10)]
    data = load_offline(eps, SPEC, gamma=0.9, heldout_fraction=0.2, seed=3)
    assert data.heldout is not None and len(data.heldout) == 8 and len(data.train) == 32
    held = set(data.heldout.reward.tolist())
    assert len(held) == 2 and not held & set(data.train.reward.tolist())  # no episode on both sides


def test_bad_offline_data_is_refused_or_set_aside(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="holds no episodes"):
        load_offline([], SPEC, 0.9)
    with pytest.raises(SpecMismatchError, match="state"):
        load_offline([_episode([1.0], state_dim=3)], SPEC, 0.9)
    data = load_offline([_episode([1.0, float("nan")]), _episode([1.0, 1.0])], SPEC, 0.9, heldout_fraction=0.0)
    assert data.quarantined == 1 and data.episodes == 1 and len(data.train) == 2
    assert "1 of 2 episodes have NaN" in caplog.text
    with pytest.raises(ValueError, match="every episode"):
        load_offline([_episode([float("nan")])], SPEC, 0.9)
