"""Replay ring buffer and mixing sampler: wrap-around numbers, consistent rows, exact proportions."""

import pytest
import torch

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.replay.buffer import MixingSampler, ReplayBuffer, concat_batches

SPEC = EnvSpec(observation={"state": ArraySpec((2,)), "image.front": ArraySpec((4, 4, 3), "uint8")},
               action=ArraySpec((3, 2), "float32", -1.0, 1.0))


def rows(values, intervened=None) -> TransitionBatch:
    """Rows whose every field encodes its id ``v``: state (v, −v), next state (v+1, −v−1), reward v."""
    v = torch.as_tensor(values, dtype=torch.float32)
    n = len(v)
    img = (v.to(torch.uint8)[:, None, None, None]).expand(n, 4, 4, 3).clone()
    return TransitionBatch(
        obs={"state": torch.stack([v, -v], 1), "image.front": img},
        action=v[:, None, None].expand(n, 3, 2).clone(),
        reward=v.clone(), terminated=(v % 2 == 0), truncated=torch.zeros(n, dtype=torch.bool),
        next_obs={"state": torch.stack([v + 1, -v - 1], 1), "image.front": img + 1},
        intervened=torch.zeros(n, dtype=torch.bool) if intervened is None else torch.as_tensor(intervened),
        policy_version=v.long(), env_index=torch.arange(n),
    )


def stored_rewards(buf: ReplayBuffer) -> list[float]:
    return buf.gather(torch.arange(len(buf))).reward.tolist()


def test_ring_wraps_around_and_overwrites_oldest():
    buf = ReplayBuffer(SPEC, capacity=5)
    buf.add(rows([0, 1, 2]))
    assert len(buf) == 3 and stored_rewards(buf) == [0, 1, 2]
    buf.add(rows([3, 4, 5, 6]))  # 3, 4 fill slots 3, 4; 5, 6 overwrite slots 0, 1
    assert len(buf) == 5 and stored_rewards(buf) == [5, 6, 2, 3, 4]
    buf.add(rows([7]))
    assert stored_rewards(buf) == [5, 6, 7, 3, 4]


def test_batch_larger_than_capacity_keeps_newest_rows_in_ring_order():
    buf = ReplayBuffer(SPEC, capacity=4)
    buf.add(rows([100]))  # position 1 afterwards
    buf.add(rows([0, 1, 2, 3, 4, 5]))  # row i would land at (1 + i) mod 4; only 2..5 survive
    assert stored_rewards(buf) == [3, 4, 5, 2]
    buf.add(rows([6]))  # next write position is (1 + 6) mod 4 = 3
    assert stored_rewards(buf) == [3, 4, 5, 6]


def test_sample_returns_consistent_rows_with_dtypes():
    buf = ReplayBuffer(SPEC, capacity=64)
    buf.add(rows(range(50)))
    s = buf.sample(200, generator=torch.Generator().manual_seed(0))
    v = s.reward
    assert s.obs["image.front"].dtype == torch.uint8 and s.action.shape == (200, 3, 2)
    torch.testing.assert_close(s.obs["state"], torch.stack([v, -v], 1))
    torch.testing.assert_close(s.next_obs["state"], torch.stack([v + 1, -v - 1], 1))
    assert torch.equal(s.next_obs["image.front"][:, 0, 0, 0].float(), v + 1)
    assert torch.equal(s.action[:, 2, 1], v) and torch.equal(s.terminated, v % 2 == 0)
    assert torch.equal(s.policy_version, v.long())
    assert len(set(v.tolist())) > 30  # drawn across the buffer, not a constant


def test_sample_is_deterministic_given_a_generator():
    buf = ReplayBuffer(SPEC, capacity=64)
    buf.add(rows(range(40)))
    a = buf.sample(32, generator=torch.Generator().manual_seed(3)).reward
    b = buf.sample(32, generator=torch.Generator().manual_seed(3)).reward
    c = buf.sample(32, generator=torch.Generator().manual_seed(4)).reward
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_empty_buffer_and_wrong_keys_are_errors():
    buf = ReplayBuffer(SPEC, capacity=4)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(1)
    bad = rows([1])
    bad.obs = {"state": bad.obs["state"]}
    with pytest.raises(KeyError):
        buf.add(bad)


def test_state_dict_round_trip(tmp_path):
    buf = ReplayBuffer(SPEC, capacity=6)
    buf.add(rows(range(9)))
    path = tmp_path / "buf.pt"
    torch.save(buf.state_dict(), path)
    other = ReplayBuffer(SPEC, capacity=6)
    other.load_state_dict(torch.load(path, weights_only=True))
    assert len(other) == 6 and stored_rewards(other) == stored_rewards(buf) == [6, 7, 8, 3, 4, 5]
    other.add(rows([9]))
    buf.add(rows([9]))
    assert stored_rewards(other) == stored_rewards(buf)
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(SPEC, capacity=7).load_state_dict(buf.state_dict())


def test_concat_batches():
    b = concat_batches([rows([1, 2]), rows([3])])
    assert b.reward.tolist() == [1, 2, 3] and b.obs["image.front"].shape == (3, 4, 4, 3)


def _mixer(p_demo: float) -> MixingSampler:
    online, demos = ReplayBuffer(SPEC, 100), ReplayBuffer(SPEC, 100)
    online.add(rows([0] * 20))
    demos.add(rows([1] * 20))
    return MixingSampler({"online": online, "demos": demos}, {"online": 1 - p_demo, "demos": p_demo})


@pytest.mark.parametrize(("p_demo", "batch", "expected_demo"), [(0.5, 256, 128), (0.3, 10, 3), (0.25, 7, 2)])
def test_mixing_proportions_are_exact(p_demo, batch, expected_demo):
    mixer = _mixer(p_demo)
    for seed in range(3):
        s = mixer.sample(batch, generator=torch.Generator().manual_seed(seed))
        assert len(s) == batch and int(s.reward.sum()) == expected_demo  # demo rows have reward 1


def test_mixing_falls_back_to_non_empty_buffers():
    online, demos = ReplayBuffer(SPEC, 10), ReplayBuffer(SPEC, 10)
    mixer = MixingSampler({"online": online, "demos": demos}, {"online": 0.5, "demos": 0.5})
    online.add(rows([0, 0]))
    assert mixer.counts(8) == {"online": 8}
    assert len(mixer.sample(8)) == 8


def test_interventions_go_to_both_buffers():
    mixer = _mixer(0.5)
    mixer.add(rows([5, 6, 7, 8], intervened=[False, True, False, True]))
    assert len(mixer.buffers["online"]) == 24 and len(mixer.buffers["demos"]) == 22
    assert stored_rewards(mixer.buffers["demos"])[-2:] == [6, 8]
    mixer.add_to("demos", rows([9]))
    assert len(mixer.buffers["demos"]) == 23 and len(mixer) == 47
    state = mixer.state_dict()
    fresh = _mixer(0.5)
    fresh.load_state_dict(state)
    assert stored_rewards(fresh.buffers["demos"]) == stored_rewards(mixer.buffers["demos"])


def test_sampled_demonstrations_are_not_counted_as_interventions():
    from dataclasses import replace

    from robot_rl.core.transition import DEMO_ACTOR_ID

    online, demos = ReplayBuffer(SPEC, 100), ReplayBuffer(SPEC, 100)
    mixer = MixingSampler({"online": online, "demos": demos}, {"online": 0.5, "demos": 0.5})
    # A recorded demonstration: a person acted in every step, so its rows are flagged intervened too.
    mixer.add_to("demos", replace(rows([1] * 20, intervened=[True] * 20), actor_id=DEMO_ACTOR_ID))
    mixer.add(rows([0] * 20))  # the policy acting alone
    mixer.sample(64, generator=torch.Generator().manual_seed(0))
    assert (mixer.rows_sampled, mixer.intervened_sampled, mixer.demos_sampled) == (64, 0, 32)
    # Online rows a person corrected land in both buffers: every sampled row is now a demo or an intervention.
    online2, demos2 = ReplayBuffer(SPEC, 100), ReplayBuffer(SPEC, 100)
    mixer = MixingSampler({"online": online2, "demos": demos2}, {"online": 0.5, "demos": 0.5})
    mixer.add_to("demos", replace(rows([1] * 20, intervened=[True] * 20), actor_id=DEMO_ACTOR_ID))
    mixer.add(rows([2] * 20, intervened=[True] * 20))
    batch = mixer.sample(64, generator=torch.Generator().manual_seed(0))
    demo_rows = int((batch.reward == 1).sum())  # the demo rows' reward is 1, the corrections' 2
    assert 0 < demo_rows < 32
    assert (mixer.intervened_sampled, mixer.demos_sampled) == (64 - demo_rows, demo_rows)
    mixer.restore_sampled(100, 40, 30)  # a resumed run continues its counts
    assert (mixer.rows_sampled, mixer.intervened_sampled, mixer.demos_sampled) == (100, 40, 30)


# ---- next_obs by index, n-step returns, frame stacks, action chunks ----------------------------

STATE = EnvSpec(observation={"state": ArraySpec((1,))}, action=ArraySpec((1,), "float32", -1.0, 1.0))


def episode(start: int, rewards: list[float], end: str = "terminated", env: int = 0) -> list[TransitionBatch]:
    """One stream's steps: obs s_i = start + i, next obs s_{i+1}; the last step ends the episode as ``end``."""
    out = []
    for i, r in enumerate(rewards):
        last = i == len(rewards) - 1
        out.append(TransitionBatch(
            obs={"state": torch.tensor([[start + i]], dtype=torch.float32)}, action=torch.tensor([[float(i)]]),
            reward=torch.tensor([r]), terminated=torch.tensor([last and end == "terminated"]),
            truncated=torch.tensor([last and end == "truncated"]),
            next_obs={"state": torch.tensor([[start + i + 1]], dtype=torch.float32)},
            intervened=torch.tensor([False]), policy_version=torch.tensor([0]), env_index=torch.tensor([env])))
    return out


def _fill(buf: ReplayBuffer, *episodes: list[TransitionBatch]) -> None:
    for ep in episodes:
        for b in ep:
            buf.add(b)


def test_each_observation_is_stored_once_and_episode_ends_are_not_chained():
    buf = ReplayBuffer(STATE, 100)
    _fill(buf, episode(0, [1, 2, 3]), episode(10, [4, 5]))
    # 5 transitions over 2 episodes: 5 successor slots + 2 episode starts (not 10 observations).
    assert len(buf) == 5 and buf.slots_written == 7
    s = buf.gather(torch.arange(5))
    assert s.obs["state"].flatten().tolist() == [0, 1, 2, 10, 11]
    assert s.next_obs["state"].flatten().tolist() == [1, 2, 3, 11, 12]  # the final obs 3 kept, not reset obs 10


def test_mismatching_observation_gets_its_own_slot():
    buf = ReplayBuffer(STATE, 100)
    steps = episode(0, [1, 1, 1, 1])
    _fill(buf, [steps[0], steps[2]])  # step 1 dropped (e.g. NaN at the actor): no false chaining
    s = buf.gather(torch.arange(2))
    assert s.obs["state"].flatten().tolist() == [0, 2] and buf.slots_written == 4


@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_n_step_returns_by_hand(end):
    g = 0.5
    buf = ReplayBuffer(STATE, 100, n_step=3, gamma=g)
    _fill(buf, episode(0, [1.0, 2.0, 4.0, 8.0], end=end), episode(100, [16.0, 32.0], end=end))
    s = buf.gather(torch.arange(6))
    # Row 0: 1 + .5·2 + .25·4 = 3, bootstrap from s3 with γ³; row 2: 4 + .5·8 = 8, ends at the episode end.
    assert s.reward.tolist() == [3.0, 2 + 0.5 * 4 + 0.25 * 8, 8.0, 8.0, 16 + 0.5 * 32, 32.0]
    assert s.extras["discount"].tolist() == [g**3, g**3, g**2, g, g**2, g]
    assert s.next_obs["state"].flatten().tolist() == [3, 4, 4, 4, 102, 102]
    ended = [False, True, True, True, True, True]
    assert (s.terminated if end == "terminated" else s.truncated).tolist() == ended
    assert not (s.truncated if end == "terminated" else s.terminated).any()  # truncation bootstraps


def test_n_step_stops_at_the_newest_row_of_a_stream():
    buf = ReplayBuffer(STATE, 100, n_step=3, gamma=0.5)
    _fill(buf, episode(0, [1.0, 2.0, 4.0, 8.0])[:2])  # the episode is still running
    s = buf.gather(torch.arange(2))
    assert s.reward.tolist() == [2.0, 2.0] and s.extras["discount"].tolist() == [0.25, 0.5]
    assert not s.terminated.any() and s.next_obs["state"].flatten().tolist() == [2, 2]


def test_frame_stack_is_built_at_sample_time_and_repeats_the_first_frame():
    buf = ReplayBuffer(STATE, 100, frame_stack=3)
    _fill(buf, episode(0, [0, 0, 0, 0]), episode(10, [0, 0]))
    s = buf.gather(torch.arange(6))
    assert s.obs["state"].shape == (6, 3, 1)
    assert s.obs["state"][:, :, 0].tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3], [10, 10, 10],
                                                [10, 10, 11]]
    assert s.next_obs["state"][:, :, 0].tolist()[3] == [2, 3, 4]


def test_action_chunks_from_the_episode_with_padding():
    buf = ReplayBuffer(STATE, 100, action_chunk=3)
    _fill(buf, episode(0, [0, 0, 0]), episode(10, [0, 0]))
    s = buf.gather(torch.arange(5))
    assert s.action.shape == (5, 3, 1)
    assert s.action[:, :, 0].tolist() == [[0, 1, 2], [1, 2, 2], [2, 2, 2], [0, 1, 1], [1, 1, 1]]
    assert s.extras["action_pad"].tolist()[1] == [False, False, True]


def test_interleaved_actors_and_envs_keep_their_own_streams():
    buf = ReplayBuffer(STATE, 100, n_step=2, gamma=1.0)
    a, b = episode(0, [1, 1, 1], env=0), episode(50, [10, 10, 10], env=0)
    for x, y in zip(a, b, strict=True):
        y.actor_id = 1  # same env_index, another actor: a separate stream
        buf.add(x)
        buf.add(y)
    s = buf.gather(torch.arange(6))
    assert s.reward.tolist() == [2, 20, 2, 20, 1, 10] and buf.slots_written == 8


def test_mixing_counts_by_hand_for_three_named_buffers():
    bufs = {k: ReplayBuffer(SPEC, 50) for k in ("online", "demos", "interventions")}
    for i, b in enumerate(bufs.values()):
        b.add(rows([i] * 10))
    mixer = MixingSampler(bufs, {"online": 0.5, "demos": 0.3, "interventions": 0.2}, route_interventions_to=None)
    # 10 rows: exact 5 / 3 / 2; 7 rows: 3.5 / 2.1 / 1.4 -> floors 3/2/1, the remainder to the largest fraction.
    assert mixer.counts(10) == {"online": 5, "demos": 3, "interventions": 2}
    assert mixer.counts(7) == {"online": 4, "demos": 2, "interventions": 1}
    s = mixer.sample(10, generator=torch.Generator().manual_seed(0))
    assert s.reward.tolist() == [0] * 5 + [1] * 3 + [2] * 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_buffer_samples_the_same_rows_as_cpu():
    cpu, gpu = (ReplayBuffer(STATE, 64, device=d, n_step=3, gamma=0.5, frame_stack=2) for d in ("cpu", "cuda"))
    for buf in (cpu, gpu):
        _fill(buf, episode(0, [1.0, 2.0, 4.0, 8.0]), episode(100, [16.0, 32.0], end="truncated"))
    idx = torch.arange(6)
    a, b = cpu.gather(idx), gpu.gather(idx.cuda()).to("cpu")
    for x, y in ((a.reward, b.reward), (a.obs["state"], b.obs["state"]), (a.next_obs["state"], b.next_obs["state"]),
                 (a.extras["discount"], b.extras["discount"]), (a.truncated, b.truncated)):
        assert torch.equal(x, y)
    assert gpu.sample(32).reward.is_cuda
