"""Q-chunking over a frozen LeRobot SmolVLA: best-of-N acting, the critic's update, weights, checkpoints, the loop.

Runs where lerobot and transformers are installed (CI's `.venv-lerobot` step); skips elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("lerobot")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")

from robot_rl.checkpoint import load_latest
from robot_rl.core.transition import TransitionBatch
from robot_rl.loop.config import resolve_train_config
from robot_rl.policies.flow.qchunk import FlowQCConfig
from robot_rl.policies.flow.qchunk_lerobot import LeRobotQCAlgorithm, LeRobotQCPolicy
from robot_rl.sims.lang_reach import LangReachConfig


def _env(n: int = 3):  # type: ignore[no-untyped-def]
    return LangReachConfig(num_envs=n, chunk_horizon=8, execute_steps=4).make("cpu", 0)


def _algo(ckpt: Path, seed: int = 0, **kw: object) -> LeRobotQCAlgorithm:
    settings: dict[str, object] = {"num_samples": 4, "target_samples": 3, "batch_size": 6, "execute_steps": 4,
                                   "learning_starts": 1, "critic_lr": 1e-3, **kw}
    algo = FlowQCConfig(init_from=str(ckpt), **settings).build(_env(1).spec, "cpu", seed)  # type: ignore[arg-type]
    assert isinstance(algo, LeRobotQCAlgorithm)
    return algo


def _batch(env, obs, action) -> TransitionBatch:  # type: ignore[no-untyped-def]
    r = env.step(action)
    n = env.num_envs
    return TransitionBatch(obs, action, r.reward, r.terminated, r.truncated, r.info["final_obs"],
                           torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.int64), torch.arange(n))


def test_acting_executes_the_vla_chunk_the_critic_scores_best(smolvla_dir: Path) -> None:
    algo = _algo(smolvla_dir)
    policy = algo.make_policy()
    assert isinstance(policy, LeRobotQCPolicy) and policy.base is not algo.actor.base  # its own pipelines ...
    for mine, learners in zip(policy.base.parameters(), algo.actor.base.parameters(), strict=True):
        assert mine is learners  # ... over the learner's VLA tensors: one VLA in memory
    env = _env()
    obs = env.reset(seed=1)
    chunk, _ = policy.act(obs, deterministic=True)
    assert chunk.shape == (3, 8, 2) and bool(((chunk >= -1) & (chunk <= 1)).all())
    torch.testing.assert_close(chunk, policy.act(obs, deterministic=True)[0], rtol=0, atol=0)
    # The chosen chunk is the VLA's chunk from the candidate noise with the highest critic score.
    with torch.no_grad():
        features = policy.features(obs)
        cands = policy.chunks(obs, policy.noise(3, True, features.device))
        best = policy.score(policy.critic, features, cands, "mean").argmax(dim=1)
    torch.testing.assert_close(chunk, cands[torch.arange(3), best], rtol=0, atol=0)
    # x0 = 0 leads the candidate set: it is lerobot's own sample from zero noise.
    zero = policy.base._bound(policy.base.sample(obs, torch.zeros(3, 8, 2)))
    torch.testing.assert_close(cands[:, 0], zero, rtol=1e-5, atol=1e-6)
    # Only the critic travels to actors: no VLA tensor is in the actor weights.
    assert algo.actor_weights() and all(k.startswith("critic.") for k in algo.actor_weights())


def test_the_critic_learns_the_chunk_td_target_and_the_vla_stays_frozen(smolvla_dir: Path) -> None:
    algo = _algo(smolvla_dir, reward_scale=0.05, critic_lr=3e-3)
    vla = {k: v.clone() for k, v in algo.actor.base.state_dict().items()}
    env = _env(6)
    obs = env.reset(seed=2)
    batch = _batch(env, obs, torch.rand(6, 8, 2) * 2 - 1)
    # The target by hand: r·scale + γ^E · (1 − term) · max_k min_j Q̄_j(s', VLA chunk k), same noise.
    state = algo.generator.get_state()
    target, _ = algo.td_target(batch.reward.float(), batch.terminated, batch.next_obs)
    algo.generator.set_state(state)
    x0 = torch.randn(6, 3, 8, 2, generator=algo.generator)
    with torch.no_grad():
        q = algo.actor.score(algo.critic_target, algo.actor.features(batch.next_obs),
                             algo.actor.chunks(batch.next_obs, x0), "min")
    expected = 0.05 * batch.reward + 0.99 ** 4 * (1 - batch.terminated.float()) * q.max(dim=1).values
    torch.testing.assert_close(target, expected, rtol=1e-5, atol=1e-5)
    algo.generator.set_state(state)
    losses = [algo.update(batch)["critic_loss"] for _ in range(60)]
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert algo.num_updates == 60
    for k, v in algo.actor.base.state_dict().items():
        torch.testing.assert_close(v, vla[k], rtol=0, atol=0)


def test_settings_it_cannot_honour_are_refused(smolvla_dir: Path) -> None:
    with pytest.raises(ValueError, match="best-of-N only"):
        _algo(smolvla_dir, actor="fql")
    with pytest.raises(NotImplementedError, match="one process"):
        _algo(smolvla_dir).enable_data_parallel(object())  # type: ignore[arg-type]


def test_flow_qc_trains_over_a_smolvla_in_the_loop_and_its_checkpoint_loads(smolvla_dir: Path,
                                                                          tmp_path: Path) -> None:
    from robot_rl.loop.runner import train

    cfg = resolve_train_config("lang_reach", "flow_qc", overrides=[
        "task.num_envs=2", "task.chunk_horizon=8", "task.execute_steps=4", f"algo.init_from={smolvla_dir}",
        "algo.execute_steps=4", "algo.num_samples=2", "algo.target_samples=2", "algo.batch_size=8",
        "algo.learning_starts=8", "algo.utd_ratio=0.5", "loop.total_env_steps=32", "loop.eval_every_env_steps=16",
        "loop.eval_episodes=2", "loop.eval_num_envs=2", "run.torch_threads=1", f"run.root={tmp_path}", "run.name=qc",
        "run.progress=false"])
    result = train(cfg)
    assert result.updates > 0 and result.env_steps >= 32 and result.last_eval is not None
    state, meta, _ = load_latest(tmp_path / "qc")
    assert meta["updates"] == result.updates
    assert set(state["actor_weights"]) == set(_algo(smolvla_dir).actor_weights())
    fresh = _algo(smolvla_dir, seed=7, num_samples=2, target_samples=2, batch_size=8, learning_starts=8)
    fresh.load_state_dict(state["algo"])
    assert fresh.num_updates == result.updates
    for k, v in fresh.actor.critic.state_dict().items():
        torch.testing.assert_close(v, state["algo"]["actor"][f"critic.{k}"], rtol=0, atol=0)


# LeRobot's models and arms, in their own venv (.ci/run): seconds of CPU a test, not the unit tier.
pytestmark = pytest.mark.integration
