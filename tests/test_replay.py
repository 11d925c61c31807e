"""Replay ring buffer and mixing sampler: wrap-around numbers, consistent rows, exact proportions."""

import pytest
import torch

from robot_rl.replay.buffer import MixingSampler, ReplayBuffer, concat_batches
from robot_rl.specs import ArraySpec, EnvSpec
from robot_rl.transition import TransitionBatch

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
