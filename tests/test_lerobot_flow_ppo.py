"""Flow-Noise PPO on a LeRobot SmolVLA: the chain, its log-likelihood, what trains, and a training run.

Runs where lerobot and transformers are installed (CI's `.venv-lerobot` step); skips elsewhere.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("lerobot")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")

from robot_rl.checkpoint import load_latest
from robot_rl.core.transition import TransitionBatch
from robot_rl.loop.config import resolve_train_config
from robot_rl.policies.flow.lerobot_flow_ppo import LeRobotFlowNoisePolicy, LeRobotFlowPPOAlgorithm
from robot_rl.policies.flow.ppo import FlowPPOConfig
from robot_rl.sims.lang_reach import LangReachConfig


def _algo(ckpt: Path, seed: int = 0, **kw: object) -> LeRobotFlowPPOAlgorithm:
    spec = LangReachConfig(num_envs=1, chunk_horizon=8).make("cpu", 0).spec
    settings: dict[str, object] = {"rollout_length": 2, "num_minibatches": 1, "num_epochs": 2, "actor_lr": 1e-3, **kw}
    cfg = FlowPPOConfig(init_from=str(ckpt), **settings)  # type: ignore[arg-type]
    algo = cfg.build(spec, "cpu", seed)
    assert isinstance(algo, LeRobotFlowPPOAlgorithm)
    return algo


def test_zero_noise_chain_is_lerobots_own_sampler(smolvla_dir: Path) -> None:
    algo = _algo(smolvla_dir)
    policy = algo.policy
    env = LangReachConfig(num_envs=3, chunk_horizon=8).make("cpu", 0)
    obs = env.reset(seed=0)
    full = torch.randn(3, policy.chunk_size, policy.pad_dim, generator=torch.Generator().manual_seed(1))
    chain, _ = policy.run_chain(policy.prefix(obs), full, noise=False)
    with torch.no_grad():
        ours = policy.to_env(chain[:, -1])
    lerobot = policy.base.postprocess(policy.base.policy.predict_action_chunk(policy.base._batch(obs), noise=full))
    torch.testing.assert_close(ours, lerobot[:, :8, :2].float(), rtol=0, atol=0)
    # The env-shaped entry point agrees with the DSRL wrapper's noise → chunk map.
    x0 = full[:, :8, :2]
    torch.testing.assert_close(policy.sample(obs, x0), policy.base.sample(obs, x0), rtol=0, atol=0)


def test_chain_log_prob_is_the_gaussian_density_of_its_transitions(smolvla_dir: Path) -> None:
    algo = _algo(smolvla_dir)
    policy = algo.make_policy()
    policy.reseed(3)
    obs = LangReachConfig(num_envs=2, chunk_horizon=8).make("cpu", 0).reset(seed=1)
    action, extras = policy.act(obs)
    chain, log_prob = extras["chain"], extras["log_prob"]
    assert action.shape == (2, 8, 2) and chain.shape == (2, policy.num_steps + 1, 8, 8)
    assert float(action.abs().max()) <= 1.0
    # Direct: N(0, I) for x_0, then one velocity call per stored step, N(x_k + dt·v, σ_k²) for x_{k+1}.
    with torch.no_grad():
        ctx = policy.prefix(obs)
        expected = torch.distributions.Normal(0.0, 1.0).log_prob(chain[:, 0]).flatten(1).sum(-1)
        dt = -1.0 / policy.num_steps
        step_means = []
        for k in range(policy.num_steps):
            t = torch.full((2,), 1.0 + k * dt)
            mean = chain[:, k] + dt * policy.base.policy.model.denoise_step(ctx.pad_masks, ctx.kv, chain[:, k], t)
            step_means.append(mean)
            sigma = policy.log_sigma[k].exp()
            expected += torch.distributions.Normal(mean, sigma).log_prob(chain[:, k + 1]).flatten(1).sum(-1)
        torch.testing.assert_close(log_prob, expected, rtol=1e-5, atol=1e-3)
        # The learner's batched re-scoring of all steps at once gives the same means.
        torch.testing.assert_close(policy.chain_means(chain, ctx), torch.stack(step_means, 1), rtol=1e-4, atol=1e-5)
    assert math.isfinite(float(log_prob.sum()))


def _rollout(algo: LeRobotFlowPPOAlgorithm, n: int) -> None:
    env = LangReachConfig(num_envs=n, chunk_horizon=8).make("cpu", 2)
    policy, storage = algo.make_policy(), algo.make_storage(n)
    obs = env.reset(seed=2)
    for _ in range(algo.cfg.rollout_length):
        action, extras = policy.act(obs)
        r = env.step(action)
        storage.add(TransitionBatch(obs=obs, action=action, reward=r.reward, terminated=r.terminated,
                                    truncated=r.truncated, next_obs=r.info["final_obs"],
                                    intervened=torch.zeros(n, dtype=torch.bool),
                                    policy_version=torch.zeros(n, dtype=torch.int64), env_index=torch.arange(n),
                                    extras=extras))
        obs = r.obs
    algo._storage = storage  # type: ignore[attr-defined]


def test_one_update_trains_only_the_expert_and_sigma(smolvla_dir: Path) -> None:
    algo = _algo(smolvla_dir)
    trainable = set(algo.policy.trainable_names())
    assert "log_sigma" in trainable and all(n == "log_sigma" or ".lm_expert." in n or ".action_" in n
                                            for n in trainable)
    before = {n: p.detach().clone() for n, p in algo.policy.named_parameters()}
    ref_before = {n: p.detach().clone() for n, p in algo.reference.named_parameters()}
    critic_before = [p.detach().clone() for p in algo.critic.parameters()]
    actor = algo.make_policy()
    # Actor copies share the frozen VLM with the learner and own their trainable tensors.
    frozen_name = next(n for n in before if n not in trainable)
    params, actor_params = dict(algo.policy.named_parameters()), dict(actor.named_parameters())
    assert actor_params[frozen_name] is params[frozen_name]
    assert all(actor_params[n] is not params[n] for n in trainable)
    _rollout(algo, 3)
    stats = algo.update(algo._storage)  # type: ignore[attr-defined]
    assert all(math.isfinite(v) for v in stats.values())
    after = dict(algo.policy.named_parameters())
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed and changed <= trainable
    assert "log_sigma" in changed and any(".lm_expert." in n for n in changed)
    for n in before.keys() - trainable:
        assert torch.equal(before[n], after[n]), n  # the VLM backbone is bit-identical
    for n, p in algo.reference.named_parameters():
        assert torch.equal(ref_before[n], p), n  # the KL reference is the frozen initial model
    assert any(not torch.equal(a, b) for a, b in zip(critic_before, algo.critic.parameters(), strict=True))
    weights = algo.actor_weights()
    assert set(weights) == trainable
    assert sum(w.numel() for w in weights.values()) < sum(p.numel() for p in before.values()) / 2
    actor.load_actor_weights(weights)
    torch.testing.assert_close(dict(actor.named_parameters())["log_sigma"], after["log_sigma"])
    with pytest.raises(KeyError, match="missing"):
        actor.load_actor_weights({"log_sigma": weights["log_sigma"]})


def test_ppo_moves_the_smolvla_chunks_towards_a_rewarded_target(smolvla_dir: Path) -> None:
    """A bandit through the real VLA: reward −‖chunk − target‖², one chunk per step (γ = 0)."""
    from robot_rl.policies.flow.model import FlowVLAConfig

    algo = _algo(smolvla_dir, policy=FlowVLAConfig(init_noise_std=0.2), gamma=0.0, lam=0.0, rollout_length=4,
                 num_minibatches=2, num_epochs=4, reward_scale=1.0, kl_coef=1e-3, kl_target=500.0)
    env = LangReachConfig(num_envs=8, chunk_horizon=8).make("cpu", 0)
    target = torch.tensor([0.5, -0.5])
    probe = LangReachConfig(num_envs=16, chunk_horizon=8).make("cpu", 9).reset(seed=9)

    def greedy_reward() -> float:
        chunk, _ = algo.policy.act(probe, deterministic=True)
        return float(-(chunk - target).square().sum((-1, -2)).mean())

    before = greedy_reward()
    policy, storage = algo.make_policy(), algo.make_storage(8)
    obs = env.reset(seed=0)
    no = torch.zeros(8, dtype=torch.bool)
    for _ in range(12):
        for _ in range(4):
            action, extras = policy.act(obs)
            r = env.step(action)
            reward = -(action - target).square().sum((-1, -2))
            storage.add(TransitionBatch(obs=obs, action=action, reward=reward, terminated=no, truncated=no,
                                        next_obs=r.obs, intervened=no, policy_version=torch.zeros(8, dtype=torch.int64),
                                        env_index=torch.arange(8), extras=extras))
            obs = r.obs
        algo.update(storage)
        policy.load_actor_weights(algo.actor_weights())
    after = greedy_reward()
    assert after > before + 0.15 * abs(before), (before, after)


def test_unfreezing_trains_the_whole_vla_and_a_separate_reference(smolvla_dir: Path) -> None:
    algo = _algo(smolvla_dir, freeze_encoder=False)
    trainable = set(algo.policy.trainable_names())
    assert any(".vlm_with_expert.vlm." in n for n in trainable) and any("state_proj" in n for n in trainable)
    name = next(n for n in trainable if ".vlm_with_expert.vlm." in n)
    assert dict(algo.reference.named_parameters())[name] is not dict(algo.policy.named_parameters())[name]
    _rollout(algo, 2)
    before = dict(algo.reference.named_parameters())[name].detach().clone()
    algo.update(algo._storage)  # type: ignore[attr-defined]
    assert torch.equal(before, dict(algo.reference.named_parameters())[name])


def test_flow_ppo_trains_a_smolvla_in_the_loop_and_its_checkpoint_loads(smolvla_dir: Path, tmp_path: Path) -> None:
    from robot_rl.loop.runner import train

    cfg = resolve_train_config("lang_reach", "flow_ppo", overrides=[
        "task.num_envs=4", "task.chunk_horizon=8", f"algo.init_from={smolvla_dir}", "algo.rollout_length=2",
        "algo.num_minibatches=2", "algo.num_epochs=1", "loop.total_env_steps=64", "loop.eval_every_env_steps=32",
        "loop.eval_episodes=4", "loop.eval_num_envs=4", "run.torch_threads=1", f"run.root={tmp_path}", "run.name=rl",
        "run.progress=false"])
    result = train(cfg)
    assert result.updates == 8 and result.env_steps >= 64 and result.last_eval is not None
    state, meta, _ = load_latest(tmp_path / "rl")
    assert meta["updates"] == result.updates
    fresh = _algo(smolvla_dir, seed=7, rollout_length=2, num_minibatches=2, num_epochs=1)
    fresh.load_state_dict(state["algo"])
    for n, p in fresh.policy.named_parameters():
        if n in state["algo"]["policy"]:
            torch.testing.assert_close(p, state["algo"]["policy"][n], rtol=0, atol=0)
    assert set(state["actor_weights"]) == set(fresh.policy.trainable_names())
    assert isinstance(fresh.make_policy(), LeRobotFlowNoisePolicy)


# LeRobot's models and arms, in their own venv (.ci/run): seconds of CPU a test, not the unit tier.
pytestmark = pytest.mark.integration
