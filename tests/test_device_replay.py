"""The ``[num_envs, capacity]`` device replay (robot_rl/replay/device_ring.py): uniform sampling, n-step windows
that stop at episode ends, refusal of non-finite rows, and the learner's storage contract."""

from __future__ import annotations

import math
import random

import pytest
import torch

from robot_rl.core.algorithm import ReplayStorage
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.replay.buffer import concat_batches as concat
from robot_rl.replay.device_ring import DeviceReplay

SPEC = EnvSpec(observation={"state": ArraySpec((2,), "float32")}, action=ArraySpec((1,), "float32", low=-1.0,
                                                                                     high=1.0))


def step_batch(env: list[int], t: list[int], episode: list[int], reward: list[float], terminated: list[bool],
               truncated: list[bool], actor_id: int = 0) -> TransitionBatch:
    """Rows whose observation is ``(episode, t)`` and next observation ``(episode, t + 1)``: every row names itself."""
    n = len(env)
    ep, tt = torch.tensor(episode, dtype=torch.float32), torch.tensor(t, dtype=torch.float32)
    return TransitionBatch(
        obs={"state": torch.stack([ep, tt], 1)}, next_obs={"state": torch.stack([ep, tt + 1], 1)},
        action=torch.zeros(n, 1), reward=torch.tensor(reward, dtype=torch.float32),
        terminated=torch.tensor(terminated), truncated=torch.tensor(truncated),
        intervened=torch.zeros(n, dtype=torch.bool), policy_version=torch.zeros(n, dtype=torch.int64),
        env_index=torch.tensor(env), actor_id=actor_id)


class Episodes:
    """A scripted vectorised run: each sub-env plays episodes of random length; keeps every row for checking."""

    def __init__(self, num_envs: int, seed: int, end_prob: float = 0.15) -> None:
        self.rng = random.Random(seed)
        self.num_envs, self.end_prob = num_envs, end_prob
        self.next_episode = num_envs
        self.episode = list(range(num_envs))
        self.t = [0] * num_envs
        self.rows: dict[tuple[int, int], tuple[float, bool, bool]] = {}  # (episode, t) -> reward, term, trunc

    def step(self) -> TransitionBatch:
        env = list(range(self.num_envs))
        reward = [self.rng.uniform(-1, 1) for _ in env]
        end = [self.rng.random() < self.end_prob for _ in env]
        terminated = [e and self.rng.random() < 0.5 for e in end]
        truncated = [e and not te for e, te in zip(end, terminated)]
        batch = step_batch(env, list(self.t), list(self.episode), reward, terminated, truncated)
        for i in env:
            self.rows[(self.episode[i], self.t[i])] = (reward[i], terminated[i], truncated[i])
            if end[i]:
                self.episode[i], self.t[i] = self.next_episode, 0
                self.next_episode += 1
            else:
                self.t[i] += 1
        return batch


def test_sampling_is_uniform_across_envs_and_time() -> None:
    # 4 sub-envs with 8 slots each; sub-env 3 sends only every other step, so the streams hold 8, 8, 8 and 6
    # steps after the ring wrapped: uniform over transitions gives every stored (stream, slot) the same share.
    replay = DeviceReplay(SPEC, 4, 8, generator=torch.Generator().manual_seed(0))
    for step in range(12):
        env = [0, 1, 2, 3] if step % 2 == 0 else [0, 1, 2]
        replay.add(step_batch(env, [step] * len(env), env, [0.0] * len(env), [False] * len(env),
                              [False] * len(env)))
    assert replay.stream_sizes().tolist() == [8, 8, 8, 6] and len(replay) == 30
    draws = 60_000
    e, slot, _ = replay.sample_slots(draws)
    counts = torch.zeros(4, 8)
    counts.index_put_((e, slot), torch.ones(draws), accumulate=True)
    cells = counts[counts > 0]
    assert cells.numel() == 30  # every stored step is drawn, and nothing else
    expected = draws / 30
    statistic = float(((cells - expected) ** 2 / expected).sum())
    assert statistic < 58.30, statistic  # the chi-squared 0.999 quantile at 29 degrees of freedom
    # The short stream gets 6/30 of the draws, not the 1/4 a per-env-uniform draw would give it.
    assert abs(float(counts[3].sum()) / draws - 6 / 30) < 0.01


def test_n_step_windows_never_cross_an_episode_boundary() -> None:
    gamma, n = 0.9, 4
    replay = DeviceReplay(SPEC, 6, 16, n_step=n, gamma=gamma, generator=torch.Generator().manual_seed(1))
    run = Episodes(6, seed=1)
    for _ in range(40):  # the rings wrap more than twice
        replay.add(run.step())
    assert len(replay) == 96
    # Every stored step as a window start (what sampling draws from), plus a sampled batch.
    e, slot = torch.arange(6).repeat_interleave(16), torch.arange(16).repeat(6)
    b = concat([replay.gather(e, slot), replay.sample(96)])
    newest = {}
    for (episode, t) in run.rows:
        newest[episode] = max(newest.get(episode, -1), t)
    for i in range(len(b)):
        episode, t = (int(x) for x in b.obs["state"][i].tolist())
        next_episode, next_t = (int(x) for x in b.next_obs["state"][i].tolist())
        assert next_episode == episode, "the window left its episode"
        m = next_t - t
        assert 1 <= m <= n and math.isclose(float(b.extras["discount"][i]), gamma**m, rel_tol=1e-6)
        # The window is as long as it can be: it stops only at n steps, an episode end, or the newest step.
        last = (episode, next_t - 1)
        _, term, trunc = run.rows[last]
        assert m == n or term or trunc or last[1] == newest[episode]
        assert not any(run.rows[(episode, t + k)][1] or run.rows[(episode, t + k)][2] for k in range(m - 1))
        expected = sum(gamma**k * run.rows[(episode, t + k)][0] for k in range(m))
        assert math.isclose(float(b.reward[i]), expected, rel_tol=1e-5, abs_tol=1e-5)
        assert bool(b.terminated[i]) == term and bool(b.truncated[i]) == trunc


def test_steps_of_one_sub_env_in_one_batch_are_chained_in_order() -> None:
    # A remote actor's chunk holds several steps per sub-env: rows of one sub-env are consecutive in time.
    replay = DeviceReplay(SPEC, 2, 8, n_step=3, gamma=0.5)
    replay.add(step_batch([0, 1, 0, 1, 0], [0, 0, 1, 1, 2], [0, 1, 0, 1, 0], [1.0, 2.0, 1.0, 2.0, 1.0],
                          [False] * 5, [False] * 5))
    b = replay.gather(torch.tensor([0, 1]), torch.tensor([0, 0]))
    assert b.reward.tolist() == [1.75, 3.0]  # 1 + .5 + .25 over three steps; 2 + 1 over the two stored
    assert b.next_obs["state"][:, 1].tolist() == [3.0, 2.0]
    with pytest.raises(ValueError, match="8 steps of one sub-env; it must be fewer than its 8 slots"):
        replay.add(step_batch([0] * 8, list(range(3, 11)), [0] * 8, [0.0] * 8, [False] * 8, [False] * 8))


def test_sampling_more_than_the_replay_holds_is_a_clear_error() -> None:
    replay = DeviceReplay(SPEC, 2, 8)
    with pytest.raises(ValueError, match="cannot sample 1 transitions from a replay holding 0"):
        replay.sample(1)
    replay.add(step_batch([0, 1], [0, 0], [0, 1], [0.0, 0.0], [False, False], [False, False]))
    with pytest.raises(ValueError, match=r"cannot sample 3 transitions from a replay holding 2.*learning_starts"):
        replay.sample(3)
    assert len(replay.sample(2)) == 2


def test_non_finite_rows_are_refused_and_break_the_window() -> None:
    replay = DeviceReplay(SPEC, 2, 8, n_step=3, gamma=1.0)
    replay.add(step_batch([0, 1], [0, 0], [0, 1], [1.0, 1.0], [False] * 2, [False] * 2))
    replay.add(step_batch([0, 1], [1, 1], [0, 1], [float("nan"), 1.0], [False] * 2, [False] * 2))
    replay.add(step_batch([0, 1], [2, 2], [0, 1], [1.0, 1.0], [False] * 2, [False] * 2))
    assert replay.nonfinite_rows == 1 and len(replay) == 5
    assert replay.stream_sizes().tolist() == [2, 3]
    # Sub-env 0 lost its step 1: step 0's window must not run on into step 2 across the gap.
    b = replay.gather(torch.tensor([0, 1]), torch.tensor([0, 0]))
    assert b.reward.tolist() == [1.0, 3.0] and b.next_obs["state"][:, 1].tolist() == [1.0, 3.0]
    every = replay.gather(torch.tensor([0, 0, 1, 1, 1]), torch.tensor([0, 1, 0, 1, 2]))
    assert bool(torch.isfinite(every.reward).all()) and bool(torch.isfinite(replay.sample(5).reward).all())
    bad_obs = step_batch([0], [3], [0], [0.0], [False], [False])
    bad_obs.obs["state"][0, 0] = float("inf")
    replay.add(bad_obs)
    assert replay.nonfinite_rows == 2 and len(replay) == 5


def test_more_sub_envs_than_built_for_is_a_clear_error() -> None:
    replay = DeviceReplay(SPEC, 3, 8)
    replay.add(step_batch([0, 1], [0, 0], [0, 1], [0.0] * 2, [False] * 2, [False] * 2, actor_id=0))
    replay.add(step_batch([0], [0], [2], [0.0], [False], [False], actor_id=1))  # a second actor's sub-env 0
    assert replay.stream_sizes().tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="built for 3 sub-envs"):
        replay.add(step_batch([1], [0], [3], [0.0], [False], [False], actor_id=1))


def test_it_is_the_learners_replay_storage() -> None:
    replay = DeviceReplay(SPEC, 2, 8)
    assert isinstance(replay, ReplayStorage)
    batch = step_batch([0], [0], [0], [0.0], [False], [False])
    batch.obs = batch.next_obs = {"other": torch.zeros(1, 2)}
    with pytest.raises(KeyError, match="observation keys"):
        replay.add(batch)
