"""lang_push: instructions pick block and side, contact physics, chunked steps, and the scripted demonstrator."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from robot_rl.core.config import TASKS, ensure_registered
from robot_rl.sims.lang_push import LangPushConfig, LangPushDemonstrator


def test_demonstrator_solves_episodes_with_steps_and_with_chunks_and_random_does_not() -> None:
    for horizon in (1, 4):
        env = LangPushConfig(num_envs=32, image_size=16, chunk_horizon=horizon).make("cpu", 0)
        expert = LangPushDemonstrator(env)
        obs = env.reset()
        ended = succeeded = 0
        for _ in range(120 // horizon):
            action, _ = expert.act(obs)
            assert action.shape == (32, *env.spec.action.shape)
            r = env.step(action)
            ended += int((r.terminated | r.truncated).sum())
            succeeded += int(r.info["success"].sum())
            obs = r.obs
        assert ended >= 32 and succeeded >= 0.95 * ended
    assert obs["image.top"].shape == (32, 16, 16, 3) and obs["language"].dtype == torch.int64
    env = LangPushConfig(num_envs=32, image_size=16).make("cpu", 1)
    env.reset()
    g = torch.Generator().manual_seed(0)
    wins = sum(int(env.step(torch.rand(32, 2, generator=g) * 2 - 1).info["success"].sum()) for _ in range(60))
    assert wins <= 3  # the task is not solved by flailing


def test_instruction_names_the_block_and_side_that_count() -> None:
    env = LangPushConfig(num_envs=64, image_size=16).make("cpu", 3)
    env.reset()
    seen = set()
    for i in range(64):
        colour, side = env.colors[int(env.block_index[i])], env.sides[int(env.side_index[i])]
        assert env.instruction(i) == f"push the {colour} block to the {side}"
        seen.add((colour, side))
    assert len(seen) == 8
    assert bool((env._progress() < 0).all())  # no episode starts solved
    # Moving the *other* block past the line does nothing; moving the named one succeeds.
    env.pusher[:] = torch.tensor([0.0, -0.45])
    other = 1 - env.block_index
    line = env.direction() * 0.45
    rows = torch.arange(64)
    env.blocks[rows, other] = line
    r = env.step(torch.zeros(64, 2))
    assert not bool(r.info["success"].any())
    env.blocks[rows, env.block_index] = line
    assert bool(env.step(torch.zeros(64, 2)).info["success"].all())


def test_pusher_moves_the_block_it_touches_and_walls_stop_both() -> None:
    env = LangPushConfig(num_envs=1, image_size=16).make("cpu", 0)
    env.reset()
    env.blocks[0] = torch.tensor([[0.0, 0.0], [0.3, 0.3]])
    env.pusher[0] = torch.tensor([-0.11, 0.0])
    env.step(torch.tensor([[1.0, 0.0]]))
    assert float(env.blocks[0, 0, 0]) > 0.02 and abs(float(env.blocks[0, 0, 1])) < 1e-6
    torch.testing.assert_close(env.blocks[0, 1], torch.tensor([0.3, 0.3]))  # untouched
    gap = float(torch.linalg.vector_norm(env.blocks[0, 0] - env.pusher[0]))
    assert gap >= 0.1 - 1e-5  # never overlapping
    env.blocks[0, 0] = torch.tensor([0.43, 0.0])
    env.pusher[0] = torch.tensor([0.33, 0.0])
    for _ in range(5):
        env.step(torch.tensor([[1.0, 0.0]]))
    assert float(env.blocks[0, :, 0].max()) <= 0.5 - 0.06 + 1e-6


def test_chunk_step_stops_at_success_and_registry_and_bad_settings() -> None:
    ensure_registered()
    assert "lang_push" in TASKS.names()
    env = LangPushConfig(num_envs=1, image_size=16, chunk_horizon=8).make("cpu", 0)
    env.reset()
    env.block_index[0], env.side_index[0] = 0, 1  # red to the right
    env.blocks[0] = torch.tensor([[0.2, 0.0], [-0.3, 0.3]])
    env.pusher[0] = torch.tensor([0.09, 0.0])
    r = env.step(torch.tensor([[[1.0, 0.0]] * 8]))
    assert bool(r.terminated[0]) and 1 <= int(r.info["episode_length"][0]) < 8
    with pytest.raises(ValueError, match="success_line"):
        LangPushConfig(success_line=0.95).make("cpu", 0)
    with pytest.raises(ValueError, match="execute_steps"):
        LangPushConfig(chunk_horizon=4, execute_steps=5).make("cpu", 0)
    with pytest.raises(TypeError, match="lang_push"):
        LangPushDemonstrator(object())


@pytest.mark.parametrize("config", ["lang_push", "lang_reach"])
def test_a_chunk_s_reward_is_its_steps_rewards_discounted_by_chunk_discount(config: str) -> None:
    """The same actions, one chunk step against the per-step env: Σ_k d^k r_k, and the spec names d."""
    from robot_rl.sims.lang_reach import LangReachConfig

    make = LangPushConfig if config == "lang_push" else LangReachConfig
    d, h = 0.5, 4
    chunked = make(num_envs=8, image_size=16, chunk_horizon=h, chunk_discount=d).make("cpu", 3)
    per_step = make(num_envs=8, image_size=16).make("cpu", 3)
    chunked.reset(seed=1), per_step.reset(seed=1)
    actions = torch.rand(8, h, 2, generator=torch.Generator().manual_seed(0)) * 2 - 1
    expected = torch.zeros(8)
    alive = torch.ones(8, dtype=torch.bool)
    for k in range(h):
        r = per_step.step(actions[:, k])
        expected += torch.where(alive, r.reward, torch.zeros(8)) * d**k
        alive &= ~(r.terminated | r.truncated)
    torch.testing.assert_close(chunked.step(actions).reward, expected)
    assert chunked.spec.extras["chunk_discount"] == d and "chunk_discount" not in per_step.spec.extras
    assert "chunk_discount" not in make(num_envs=2, image_size=16, chunk_horizon=h).make("cpu", 0).spec.extras
    with pytest.raises(ValueError, match="chunk_discount"):
        make(num_envs=2, image_size=16, chunk_horizon=h, chunk_discount=0.0).make("cpu", 0)


def test_flow_sft_cli_records_lang_push_demos_and_trains(tmp_path: Path) -> None:
    from robot_rl.cli import main
    from robot_rl.data.store import EpisodeStore
    from robot_rl.policies.flow.sft import load_flow_policy

    root = tmp_path
    tiny = {"hidden": 16, "expert-layers": 1, "image-features": 4, "cnn-channels": 4, "cnn-layers": 2,
            "state-features": 4, "lang-features": 8, "horizon": 2, "num-steps": 2}
    argv = ["flow-sft", str(root / "demos"), "task.image_size=16", "task.num_envs=2", "--task", "lang_push",
            "--record", "2", "--out", str(root / "sft"), "--sft.steps", "2", "--sft.eval-every", "0",
            "--sft.eval-episodes", "2", "--sft.eval-num-envs", "2", "--sft.no-progress",
            *[a for k, v in tiny.items() for a in (f"--sft.policy.{k}", str(v))]]
    assert main(argv) == 0
    store = EpisodeStore(root / "demos")
    assert len(list(store)) >= 2 and store.spec.observation["state"].shape == (4,)
    policy, spec = load_flow_policy(root / "sft")
    assert spec.observation["image.top"].shape == (16, 16, 3) and policy.cfg.horizon == 2
