"""lang_reach task and demonstrator, SFT on recorded demos, and Flow-Noise PPO (SFT → RL) end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from robot_rl.core.config import ALGOS, ensure_registered
from robot_rl.core.specs import SpecMismatchError
from robot_rl.data.recorder import StoreSink, record_episodes
from robot_rl.data.store import EpisodeStore
from robot_rl.loop.config import resolve_train_config
from robot_rl.policies.flow.model import FlowVLAConfig
from robot_rl.policies.flow.ppo import FlowPPOConfig
from robot_rl.policies.flow.sft import FlowSFTConfig, train_sft
from robot_rl.sims.lang_reach import LangReachConfig, LangReachDemonstrator

TINY = dict(hidden=32, expert_layers=2, image_features=8, cnn_channels=4, cnn_layers=2, state_features=8,
            lang_features=8)
TINY_OVERRIDES = [f"algo.policy.{k}={v}" for k, v in TINY.items()]


def test_demonstrator_solves_every_episode_with_steps_and_with_chunks() -> None:
    for horizon in (1, 4):
        env = LangReachConfig(num_envs=16, image_size=16, chunk_horizon=horizon).make("cpu", 0)
        expert = LangReachDemonstrator(env)
        obs = env.reset()
        ended = succeeded = 0
        for _ in range(40 // horizon):
            action, _ = expert.act(obs)
            assert action.shape == (16, *env.spec.action.shape)
            r = env.step(action)
            ended += int((r.terminated | r.truncated).sum())
            succeeded += int(r.info["success"].sum())
            obs = r.obs
        assert ended > 16 and succeeded == ended
    assert obs["language"].dtype == torch.int64 and obs["image.top"].shape == (16, 16, 16, 3)


def test_chunk_env_stops_a_sub_env_at_success_within_the_chunk() -> None:
    env = LangReachConfig(num_envs=2, image_size=16, chunk_horizon=8).make("cpu", 0)
    env.reset()
    # Sub-env 0's goal is 10 cm away (two expert steps of 8 cm); sub-env 1 keeps its far goal.
    env.q[0] = torch.tensor([0.0, torch.pi / 2])  # end-effector at (0.5, 0.5), away from singular poses
    env.goal[0] = torch.tensor([0.6, 0.5])
    far = float(torch.linalg.vector_norm(env.goal[1] - env.end_effector()[1]))
    r = env.step(LangReachDemonstrator(env).act({})[0])
    assert bool(r.terminated[0]) and 1 <= int(r.info["episode_length"][0]) <= 3
    assert int(env.episode_length[0]) == 0  # auto-reset: a fresh episode starts there
    if far > 8 * 0.08 * 2**0.5:
        assert not bool(r.terminated[1]) and int(env.episode_length[1]) == 8


def test_instruction_picks_the_goal_among_the_targets() -> None:
    env = LangReachConfig(num_envs=64, image_size=16).make("cpu", 3)
    env.reset()
    for i in range(64):
        j = int(env.target_index[i])
        assert env.instruction(i) == f"reach the {env.colors[j]} target"
        torch.testing.assert_close(env.goal[i], env.targets[i, j])
    assert len(set(env.target_index.tolist())) == 3


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, LangReachConfig]:
    root = tmp_path_factory.mktemp("flow")
    task = LangReachConfig(num_envs=8, image_size=16)
    env = task.make("cpu", 0)
    store = EpisodeStore.create(root / "demos", env.spec, fps=20.0)
    record_episodes(env, LangReachDemonstrator(env), StoreSink(store), 12)
    cfg = FlowSFTConfig(policy=FlowVLAConfig(horizon=4, num_steps=3, **TINY), steps=10, eval_every=5,
                        eval_episodes=4, eval_num_envs=4, progress=False)
    result = train_sft(cfg, root / "demos", task, root / "sft")
    assert [s for s, _ in result.evaluations] == [5, 10]
    assert result.checkpoint is not None and result.checkpoint.is_dir()
    assert 0.0 <= result.evaluations[-1][1]["success_rate"] <= 1.0 and result.final_loss == result.final_loss
    return root, task


@pytest.mark.integration
def test_sft_then_flow_ppo_updates_and_logs_the_kl_guard(sft_run: tuple[Path, LangReachConfig]) -> None:
    root, _ = sft_run
    spec = LangReachConfig(num_envs=4, image_size=16, chunk_horizon=4).make("cpu", 0).spec
    cfg = FlowPPOConfig(policy=FlowVLAConfig(horizon=4, num_steps=3, **TINY), init_from=str(root / "sft"),
                        rollout_length=3, num_minibatches=2, num_epochs=2, actor_lr=1e-3, kl_target=1e-6)
    algo = cfg.build(spec, "cpu", 0)
    assert algo.freeze_encoder is False  # auto: our own policy's encoder trains with the expert
    encoder_before = {k: v.clone() for k, v in algo.policy.encoder.state_dict().items()}
    env = LangReachConfig(num_envs=4, image_size=16, chunk_horizon=4).make("cpu", 1)
    policy = algo.make_policy()
    storage = algo.make_storage(4)
    from robot_rl.core.transition import TransitionBatch

    obs = env.reset()
    kl_coefs = []
    for _ in range(2):
        for _ in range(3):
            action, extras = policy.act(obs)
            r = env.step(action)
            storage.add(TransitionBatch(obs=obs, action=action, reward=r.reward, terminated=r.terminated,
                                        truncated=r.truncated, next_obs=r.info["final_obs"],
                                        intervened=torch.zeros(4, dtype=torch.bool),
                                        policy_version=torch.zeros(4, dtype=torch.int64),
                                        env_index=torch.arange(4), extras=extras))
            obs = r.obs
        stats = algo.update(storage)
        policy.load_actor_weights(algo.actor_weights())
        kl_coefs.append(stats["kl_coef"])
        assert all(v == v for v in stats.values())  # finite, not NaN
    assert stats["kl_ref"] > 0.0  # the policy moved away from the SFT reference, and the guard saw it
    moved = algo.policy.encoder.state_dict()
    assert any(not torch.equal(v, moved[k]) for k, v in encoder_before.items())
    assert all(torch.equal(v, algo.reference.encoder.state_dict()[k]) for k, v in encoder_before.items())
    frozen = FlowPPOConfig(policy=cfg.policy, init_from=cfg.init_from, freeze_encoder=True).build(spec, "cpu", 0)
    assert not any(p.requires_grad for p in frozen.policy.encoder.parameters())
    assert kl_coefs[1] > kl_coefs[0]  # KL above target: the guard tightens
    state = algo.state_dict()
    fresh = cfg.build(spec, "cpu", 5)
    fresh.load_state_dict(state)
    assert fresh.kl_coef == algo.kl_coef


@pytest.mark.integration
def test_flow_ppo_runs_in_the_training_loop(sft_run: tuple[Path, LangReachConfig], tmp_path: Path) -> None:
    from robot_rl.loop.runner import train

    root, _ = sft_run
    assert "flow_ppo" in ALGOS.names()
    cfg = resolve_train_config("lang_reach", "flow_ppo", overrides=[
        "task.num_envs=4", "task.image_size=16", "task.chunk_horizon=4", f"algo.init_from={root / 'sft'}",
        "algo.policy.horizon=4", "algo.policy.num_steps=3", *TINY_OVERRIDES, "algo.rollout_length=2",
        "algo.num_minibatches=2", "algo.num_epochs=1", "loop.total_env_steps=16", "loop.eval_every_env_steps=8",
        "loop.eval_episodes=4", "loop.eval_num_envs=4", f"run.root={tmp_path}", "run.name=rl", "run.progress=false"])
    result = train(cfg)
    assert result.updates >= 2 and result.last_eval is not None
    assert (tmp_path / "rl" / "checkpoints" / "latest").is_file()


@pytest.mark.integration
def test_flow_ppo_rejects_a_per_step_task_and_a_mismatched_sft(sft_run: tuple[Path, LangReachConfig]) -> None:
    root, _ = sft_run
    step_spec = LangReachConfig(num_envs=2, image_size=16).make("cpu", 0).spec
    with pytest.raises(SpecMismatchError, match="action chunks"):
        FlowPPOConfig(policy=FlowVLAConfig(horizon=4, **TINY)).build(step_spec, "cpu", 0)
    spec8 = LangReachConfig(num_envs=2, image_size=16, chunk_horizon=8).make("cpu", 0).spec
    with pytest.raises(SpecMismatchError, match="does not fit"):
        FlowPPOConfig(policy=FlowVLAConfig(horizon=8, num_steps=3, **TINY),
                      init_from=str(root / "sft")).build(spec8, "cpu", 0)


def test_flow_sft_cli_records_trains_and_checkpoints(tmp_path: Path) -> None:
    from robot_rl.cli import main
    from robot_rl.policies.flow.sft import load_flow_policy

    tiny = [a for k, v in TINY.items() for a in (f"--sft.policy.{k.replace('_', '-')}", str(v))]
    argv = ["flow-sft", str(tmp_path / "demos"), "task.image_size=16", "task.num_envs=4", "--record", "4",
            "--out", str(tmp_path / "sft"), "--sft.steps", "2", "--sft.eval-every", "0", "--sft.eval-episodes", "2",
            "--sft.eval-num-envs", "2", "--sft.policy.horizon", "2", "--sft.policy.num-steps", "2",
            "--sft.no-progress", *tiny]
    assert main(argv) == 0
    policy, spec = load_flow_policy(tmp_path / "sft")
    assert policy.cfg.horizon == 2 and "language" in spec.observation
    assert (tmp_path / "sft" / "results.json").is_file()
    assert main(["flow-sft", str(tmp_path / "demos"), "algo.lr=1"]) == 2  # only task.* overrides


@pytest.mark.integration
def test_dsrl_noise_to_action_is_deterministic_and_sac_acts_in_noise_space(sft_run: tuple[Path, LangReachConfig]
                                                                          ) -> None:
    from robot_rl.policies.flow.dsrl import DSRLConfig

    root, _ = sft_run
    env = DSRLConfig(num_envs=3, init_from=str(root / "sft")).make("cpu", 0)
    obs = env.reset()
    assert env.spec.action.shape == (4, 2) and env.spec.action.high == 2.0
    assert obs["state"].shape == (3, env.spec.observation["state"].shape[0])
    raw = env._obs
    assert raw is not None
    noise = torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(0))
    a1, a2 = env.noise_to_action(raw, noise), env.noise_to_action(raw, noise.clone())
    torch.testing.assert_close(a1, a2, rtol=0, atol=0)
    assert not torch.equal(a1, env.noise_to_action(raw, -noise))
    assert float(a1.abs().max()) <= 1.0  # within the base task's action bounds
    ensure_registered()
    sac = ALGOS.get("sac")().build(env.spec, "cpu", 0)
    action, _ = sac.make_policy().act(obs)
    assert action.shape == (3, 4, 2) and float(action.abs().max()) <= 2.0
    r = env.step(action)
    assert r.obs["state"].shape == obs["state"].shape and r.info["final_obs"]["state"].shape == obs["state"].shape
    with pytest.raises(ValueError, match=r"task\.init_from"):
        DSRLConfig().make("cpu", 0)


def test_dsrl_sac_preset_keeps_the_noise_near_the_flows_training_distribution() -> None:
    # SAC's defaults collapsed DSRL in the benchmark (benchmarks/RESULTS_flow.md); the preset carries the fix.
    cfg = resolve_train_config("dsrl", "sac", overrides=["task.init_from=runs/x"])
    assert cfg.task.noise_bound == 1.5  # type: ignore[attr-defined]
    assert cfg.algo.init_temperature == 0.01 and cfg.algo.target_entropy == -32.0  # type: ignore[attr-defined]
    assert resolve_train_config("dsrl", "sac", overrides=["algo.init_temperature=0.5"]).algo.init_temperature == 0.5  # type: ignore[attr-defined]


def test_flow_ppo_moves_the_chunk_towards_higher_reward_on_a_bandit() -> None:
    """One-step bandit, reward = mean of the chunk's first action dim: PPO must push the deterministic chunk up.

    σ₀ = 0.3: PPO's clip region and the KL guard both scale with σ (a ratio or a KL budget allows a mean
    shift ∝ σ per step), so at σ = 0.05 the same ten updates move the mean by only 0.07 (−0.04 → 0.03).
    """
    from robot_rl.core.specs import ArraySpec, EnvSpec
    from robot_rl.core.transition import TransitionBatch

    torch.manual_seed(0)
    horizon, n = 4, 64
    spec = EnvSpec({"state": ArraySpec((3,), "float32")}, ArraySpec((horizon, 2), "float32", low=-1.0, high=1.0))
    policy_cfg = FlowVLAConfig(horizon=horizon, num_steps=5, hidden=64, expert_layers=2, state_features=16,
                               init_noise_std=0.3)
    cfg = FlowPPOConfig(policy=policy_cfg, rollout_length=4, actor_lr=1e-3, max_sigma=1.0, kl_target=50.0)
    algo = cfg.build(spec, "cpu", 0)
    actor = algo.make_policy()
    storage = algo.make_storage(n)
    obs = {"state": torch.zeros(n, 3)}
    start = float(algo.policy.act(obs, True)[0][..., 0].mean())
    for _ in range(10):
        for _ in range(cfg.rollout_length):
            chunk, extras = actor.act(obs)
            storage.add(TransitionBatch(obs, chunk, chunk[..., 0].mean(-1), torch.ones(n, dtype=torch.bool),
                                        torch.zeros(n, dtype=torch.bool), obs, torch.zeros(n, dtype=torch.bool),
                                        torch.zeros(n, dtype=torch.int64), torch.arange(n), extras))
        algo.update(storage)
        actor.load_actor_weights(algo.actor_weights())
    end = float(algo.policy.act(obs, True)[0][..., 0].mean())
    assert abs(start) < 0.2 and end > start + 0.5, (start, end)


def test_flow_ppo_sigma_bound_decays_and_the_kl_guard_ignores_the_decay() -> None:
    """σ's clamp falls linearly to final_max_sigma; the actors sample under it; unmoved means give KL ≈ 0."""
    from robot_rl.core.specs import ArraySpec, EnvSpec
    from robot_rl.core.transition import TransitionBatch

    torch.manual_seed(0)
    horizon, n = 4, 16
    spec = EnvSpec({"state": ArraySpec((3,), "float32")}, ArraySpec((horizon, 2), "float32", low=-1.0, high=1.0))
    policy_cfg = FlowVLAConfig(horizon=horizon, num_steps=3, hidden=32, expert_layers=1, state_features=8,
                               init_noise_std=0.3)
    # Zero learning rates: the means stay the SFT means, so any KL left would come from the σ decay alone.
    cfg = FlowPPOConfig(policy=policy_cfg, rollout_length=2, num_epochs=1, num_minibatches=1, actor_lr=0.0,
                        sigma_lr=0.0, critic_lr=0.0, max_sigma=0.3, final_max_sigma=0.1, sigma_decay_updates=4)
    algo = cfg.build(spec, "cpu", 0)
    assert [round(algo.sigma_bound(u), 6) for u in (0, 2, 4, 9)] == [0.3, 0.2, 0.1, 0.1]
    actor = algo.make_policy()
    storage = algo.make_storage(n)
    obs = {"state": torch.randn(n, 3)}
    for update in range(1, 6):
        for _ in range(cfg.rollout_length):
            chunk, extras = actor.act(obs)
            storage.add(TransitionBatch(obs, chunk, torch.zeros(n), torch.ones(n, dtype=torch.bool),
                                        torch.zeros(n, dtype=torch.bool), obs, torch.zeros(n, dtype=torch.bool),
                                        torch.zeros(n, dtype=torch.int64), torch.arange(n), extras))
        stats = algo.update(storage)
        actor.load_actor_weights(algo.actor_weights())
        assert stats["sigma_bound"] == pytest.approx(algo.sigma_bound(update))
        assert float(actor.log_sigma.detach().exp().max()) == pytest.approx(algo.sigma_bound(update), rel=1e-5)
        assert stats["kl_ref"] == pytest.approx(0.0, abs=1e-6)
    fresh = cfg.build(spec, "cpu", 1)
    fresh.load_state_dict(algo.state_dict())
    assert fresh.updates == 5 and fresh.sigma_bound() == pytest.approx(0.1)
    with pytest.raises(ValueError, match="final_max_sigma"):
        FlowPPOConfig(policy=policy_cfg, max_sigma=0.3, final_max_sigma=0.5).build(spec, "cpu", 0)
