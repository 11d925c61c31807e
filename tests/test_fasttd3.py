"""FastTD3 (robot_rl/policies/td3.py) and FastSAC (robot_rl/policies/fastsac.py): the categorical projection,
target smoothing, delayed actor updates, learning a bandit and the pendulum, determinism, checkpoints and the
command line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

import robot_rl.sims  # noqa: F401 - registers the built-in tasks
from robot_rl.core.algorithm import MLPActor, SupervisedLoss
from robot_rl.core.config import TASKS
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.loop.evaluate import evaluate
from robot_rl.policies.distributional import DistributionalCritic, categorical_projection
from robot_rl.policies.fast_offpolicy import FastOffPolicyConfig, FastOffPolicyLearner
from robot_rl.policies.fastsac import FastSACConfig
from robot_rl.policies.td3 import TD3Algorithm, TD3Config

BANDIT = EnvSpec(observation={"state": ArraySpec((1,), "float32")},
                 action=ArraySpec((1,), "float32", low=-2.0, high=2.0))
SMALL = dict(actor_hidden=(32, 32), critic_hidden=(64, 64), num_atoms=21, batch_size=64)
CONFIGS: dict[str, type[FastOffPolicyConfig]] = {"fasttd3": TD3Config, "fastsac": FastSACConfig}


def test_categorical_projection_by_hand() -> None:
    # Atoms z = (-1, 0, 1), Δz = 1; next-state probabilities p = (0.2, 0.5, 0.3).
    # Row 0: r = 0.5, discount 0.5: Tz = 0.5 + 0.5·z = (0, 0.5, 1) → fractional indices b = Tz + 1 = (1, 1.5, 2):
    #   atom -1 lands on index 1 exactly (0.2 → z=0); atom 0 at 1.5 splits 0.25/0.25 between z=0 and z=1;
    #   atom 1 lands on index 2 (0.3 → z=1). Projection (0, 0.45, 0.55); mean 0.55 = 0.2·0 + 0.5·0.5 + 0.3·1.
    # Row 1: r = 1, discount 1: Tz = (0, 1, 2) clamps to (0, 1, 1): (0, 0.2, 0.8).
    # Row 2 (terminal): r = -0.25, discount 0: every atom at -0.25, b = 0.75: 0.25 to z=-1, 0.75 to z=0.
    support = torch.tensor([-1.0, 0.0, 1.0])
    probs = torch.tensor([[0.2, 0.5, 0.3]]).repeat(3, 1)
    out = categorical_projection(probs, torch.tensor([0.5, 1.0, -0.25]), torch.tensor([0.5, 1.0, 0.0]), support)
    assert torch.allclose(out, torch.tensor([[0.0, 0.45, 0.55], [0.0, 0.2, 0.8], [0.25, 0.75, 0.0]]), atol=1e-6)


def test_projection_keeps_mass_and_mean_inside_the_support() -> None:
    gen = torch.Generator().manual_seed(0)
    support = torch.linspace(-10, 10, 51)
    probs = torch.softmax(torch.randn(512, 51, generator=gen), dim=1)
    reward = torch.rand(512, generator=gen) * 2 - 1
    discount = torch.rand(512, generator=gen) * 0.9  # |r + d·z| ≤ 1 + 9 < 10: nothing is clamped
    out = categorical_projection(probs, reward, discount, support)
    assert torch.allclose(out.sum(1), torch.ones(512), atol=1e-5) and bool((out >= 0).all())
    assert torch.allclose((out * support).sum(1), reward + discount * (probs * support).sum(1), atol=1e-4)


def test_clipped_double_q_takes_the_member_with_the_lower_mean() -> None:
    critic = DistributionalCritic(3, (8,), 2, 3, -1.0, 1.0, layer_norm=True)
    high, low = torch.tensor([-9.0, -9.0, 9.0]), torch.tensor([9.0, -9.0, -9.0])
    logits = torch.stack([torch.stack([high, low]), torch.stack([low, high])])  # [E=2, B=2, K=3]
    target = critic.target(logits, torch.zeros(2), torch.ones(2), clipped=True)
    assert torch.allclose(target, torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]), atol=1e-6)
    mixed = critic.target(logits, torch.zeros(2), torch.ones(2), clipped=False)
    assert torch.allclose(mixed, torch.tensor([[0.5, 0.0, 0.5], [0.5, 0.0, 0.5]]), atol=1e-6)


def test_target_smoothing_noise_is_clipped() -> None:
    algo = TD3Config(**SMALL, policy_noise=5.0, noise_clip=0.3).build(BANDIT, "cpu", 0)
    with torch.no_grad():
        algo.actor.trunk[-1].weight.zero_()  # μ(s') = tanh(0) = 0: the target action is the smoothing noise
    noise = torch.randn(4096, 1, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        smoothed = algo.target_action(torch.zeros(4096, 1), noise)
    assert float(smoothed.abs().max()) == pytest.approx(0.3)
    assert float((smoothed.abs() == 0.3).float().mean()) > 0.9  # σ = 5: almost every draw hits the clip
    wide = TD3Config(**SMALL, policy_noise=5.0, noise_clip=3.0).build(BANDIT, "cpu", 0)
    with torch.no_grad():
        assert float(wide.target_action(torch.zeros(4096, 1), noise).abs().max()) == 1.0  # and the action bound


def bandit_batch(n: int, gen: torch.Generator) -> TransitionBatch:
    """One-step episodes of a 1-D bandit: reward −(a − 1.2)² for env actions a ∈ [−2, 2] (best a = 1.2)."""
    action = torch.rand(n, 1, generator=gen) * 4 - 2
    state = torch.ones(n, 1)
    return TransitionBatch(obs={"state": state}, next_obs={"state": state}, action=action,
                           reward=-(action[:, 0] - 1.2) ** 2, terminated=torch.ones(n, dtype=torch.bool),
                           truncated=torch.zeros(n, dtype=torch.bool), intervened=torch.zeros(n, dtype=torch.bool),
                           policy_version=torch.zeros(n, dtype=torch.int64), env_index=torch.arange(n) % 16)


def train_bandit(seed: int, updates: int, algo_name: str = "fasttd3", **overrides: object) -> FastOffPolicyLearner:
    cfg = CONFIGS[algo_name](**{**SMALL, "v_min": -11.0, "v_max": 0.0, **overrides})
    algo = cfg.build(BANDIT, "cpu", seed)
    storage = algo.make_storage(16)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(16):
        storage.add(bandit_batch(16, gen))
    for _ in range(updates):
        algo.update(storage.sample(algo.batch_size))
    return algo


@pytest.mark.integration
@pytest.mark.parametrize("algo_name", ["fasttd3", "fastsac"])
def test_a_bandit_is_learned_within_a_small_budget(algo_name: str) -> None:
    algo = train_bandit(0, 1000, algo_name)
    with torch.no_grad():
        action = float(algo.actor.deterministic_action({"state": torch.ones(1, 1)}))
    assert abs(action - 1.2) < 0.1, action


def test_delayed_actor_updates_every_policy_frequency_critic_updates() -> None:
    algo = train_bandit(0, 0, policy_frequency=3)
    assert isinstance(algo, TD3Algorithm)
    storage = algo.make_storage(16)
    storage.add(bandit_batch(256, torch.Generator().manual_seed(1)))
    changed = []
    for _ in range(12):
        before = [p.detach().clone() for p in algo.actor.trunk.parameters()]
        critic_before = algo.critic.q.weights[0].detach().clone()
        algo.update(storage.sample(64))
        changed.append(any(not torch.equal(b, p) for b, p in zip(before, algo.actor.trunk.parameters())))
        assert not torch.equal(critic_before, algo.critic.q.weights[0])  # the critic learns at every update
    assert changed == [False, False, True] * 4
    assert (algo.num_updates, algo.num_actor_updates) == (12, 4)


@pytest.mark.parametrize("algo_name", ["fasttd3", "fastsac"])
def test_training_is_deterministic_for_a_seed_on_cpu(algo_name: str) -> None:
    a, b, c = (train_bandit(seed, 40, algo_name) for seed in (3, 3, 4))
    for (k, va), vb in zip(a.state_dict()["critic"].items(), b.state_dict()["critic"].values()):
        assert torch.equal(va, vb), k
    assert all(torch.equal(x, y) for x, y in zip(a.actor.parameters(), b.actor.parameters()))
    assert not all(torch.equal(x, y) for x, y in zip(a.actor.parameters(), c.actor.parameters()))
    pa, pb = a.make_policy(), b.make_policy()  # the exploration noise is seeded too
    assert torch.equal(pa.act({"state": torch.ones(8, 1)})[0], pb.act({"state": torch.ones(8, 1)})[0])


@pytest.mark.parametrize("algo_name", ["fasttd3", "fastsac"])
def test_checkpoint_round_trip_continues_identically(algo_name: str) -> None:
    a = train_bandit(0, 10, algo_name)
    b = CONFIGS[algo_name](**{**SMALL, "v_min": -11.0, "v_max": 0.0}).build(BANDIT, "cpu", 99)
    saved = io.BytesIO()
    torch.save(a.state_dict(), saved)  # as a checkpoint does: in memory the optimisers' step counters would alias
    saved.seek(0)
    b.load_state_dict(torch.load(saved))
    batch = bandit_batch(64, torch.Generator().manual_seed(5))
    for _ in range(2):  # a critic-only update, then one with the actor
        assert a.update(batch)["critic_loss"] == b.update(batch)["critic_loss"]
    assert all(torch.equal(x, y) for x, y in zip(a.actor.parameters(), b.actor.parameters()))
    assert all(torch.equal(x, y) for x, y in zip(a.critic_target.parameters(), b.critic_target.parameters()))
    with pytest.raises(KeyError, match="missing"):
        b.load_state_dict({k: v for k, v in a.state_dict().items() if k != "generator"})


@pytest.mark.parametrize("algo_name", ["fasttd3", "fastsac"])
def test_the_actor_side_policy_takes_the_published_weights(algo_name: str) -> None:
    algo = train_bandit(0, 5, algo_name)
    policy = algo.cfg.build_policy(BANDIT, "cpu", seed=1)
    policy.load_actor_weights(algo.actor_weights())
    obs = {"state": torch.randn(16, 1)}
    assert torch.equal(policy.act(obs, deterministic=True)[0], algo.actor.deterministic_action(obs))
    explored = policy.act(obs)[0]
    assert bool((explored.abs() <= 2.0).all()) and not torch.equal(explored, policy.deterministic_action(obs))
    assert isinstance(policy, MLPActor) and policy.mlp_parts().output == "tanh_scale"


@pytest.mark.parametrize("algo_name", ["fasttd3", "fastsac"])
def test_behaviour_cloning_and_the_aux_hook(algo_name: str) -> None:
    algo = CONFIGS[algo_name](**{**SMALL, "v_min": -11.0, "v_max": 0.0}).build(BANDIT, "cpu", 0)
    assert isinstance(algo, SupervisedLoss)
    obs, demos = {"state": torch.ones(64, 1)}, torch.full((64, 1), 1.2)
    algo.prepare_supervised(obs)
    optim = torch.optim.Adam(algo.supervised_parameters(), lr=3e-3)
    for _ in range(200):
        optim.zero_grad()
        algo.supervised_loss(obs, demos).backward()
        optim.step()
    algo.finish_supervised()
    with torch.no_grad():
        assert float(algo.actor.deterministic_action({"state": torch.ones(1, 1)})) == pytest.approx(1.2, abs=0.05)
    # Co-training's extra actor loss is asked for at every actor update, and only then.
    calls: list[object] = []
    algo.aux_hook = calls.append
    storage = algo.make_storage(16)
    storage.add(bandit_batch(256, torch.Generator().manual_seed(0)))
    for _ in range(4):
        algo.update(storage.sample(64))
    assert calls == [algo] * algo.num_actor_updates and algo.num_actor_updates >= 2


def test_bad_settings_and_camera_tasks_are_refused() -> None:
    with pytest.raises(ValueError, match="std_min"):
        TD3Config(std_min=0.5, std_max=0.1).build(BANDIT, "cpu", 0)
    with pytest.raises(ValueError, match="v_min < v_max"):
        TD3Config(v_min=1.0, v_max=0.0).build(BANDIT, "cpu", 0)
    pixels = EnvSpec(observation={"state": ArraySpec((2,), "float32"), "image.front": ArraySpec((16, 16, 3), "uint8")},
                     action=BANDIT.action)
    with pytest.raises(ValueError, match="'state' vector only"):
        TD3Config(**SMALL).build(pixels, "cpu", 0)


def test_the_learner_rates_follow_the_number_of_sub_envs() -> None:
    algo = TD3Config(**SMALL, updates_per_step=2.0, learning_starts_steps=10).build(BANDIT, "cpu", 0)
    storage = algo.make_storage(1024)
    # 2 updates per vectorised step of 1024 sub-envs; 10 steps of them before the first update.
    assert algo.utd_ratio == pytest.approx(2 / 1024) and algo.learning_starts == 10_240
    assert storage.num_envs == 1024 and storage.capacity == 977  # 1e6 transitions split over the sub-envs
    algo.make_storage(2)
    assert algo.learning_starts == 64  # never fewer transitions than one batch


@pytest.mark.integration
def test_pendulum_improves_within_a_small_budget() -> None:
    task = TASKS.get("pendulum")
    env, eval_env = task(num_envs=32).make("cpu", 0), task(num_envs=10).make("cpu", 1)
    cfg = TD3Config(actor_hidden=(64, 64), critic_hidden=(128, 128), num_atoms=51, batch_size=256, v_min=-800.0,
                    v_max=0.0, updates_per_step=4.0)
    algo = cfg.build(env.spec, "cpu", 0)
    storage, policy = algo.make_storage(env.num_envs), algo.make_policy()
    before = evaluate(policy, eval_env, 10).mean_return
    obs, n = env.reset(seed=0), env.num_envs
    for _ in range(450):
        action, _ = policy.act(obs)
        res = env.step(action)
        done = (res.terminated | res.truncated)[:, None]
        next_obs = {k: torch.where(done, res.info["final_obs"][k], v) for k, v in res.obs.items()}
        storage.add(TransitionBatch(obs, action, res.reward, res.terminated, res.truncated, next_obs,
                                    torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.int64),
                                    torch.arange(n)))
        obs = res.obs
        if len(storage) >= algo.learning_starts:
            for _ in range(4):
                algo.update(storage.sample(algo.batch_size))
        policy.load_actor_weights(algo.actor_weights())
    after = evaluate(policy, eval_env, 10).mean_return
    # A random swing-up scores about −1,300; an upright, held pendulum −150 to −250.
    assert after > before + 400 and after > -700, (before, after)


@pytest.mark.parametrize("algo_name", ["fasttd3", "fastsac"])
@pytest.mark.integration
def test_train_from_the_command_line(tmp_path: Path, algo_name: str) -> None:
    from robot_rl.cli import main

    args = ["train", "--task", "pendulum", "--algo", algo_name, "--name", "f", f"run.root={tmp_path}",
            "loop.total_env_steps=1600", "loop.eval_every_env_steps=800", "loop.eval_episodes=4",
            "run.progress=false", "task.num_envs=8", "algo.batch_size=64", "algo.actor_hidden=[32,32]",
            "algo.critic_hidden=[32,32]", "algo.num_atoms=21", "algo.v_min=-800", "algo.v_max=0",
            "algo.updates_per_step=2"]
    assert main(args) == 0
    summary = json.loads((tmp_path / "f" / "summary.json").read_text())
    assert summary["env_steps"] >= 1600 and summary["gradient_updates"] > 0
    # Resume restores the learner (the replay is not persisted and refills from empty).
    assert main(["train", "--resume", str(tmp_path / "f"), "loop.total_env_steps=2400", "run.progress=false"]) == 0
    resumed = json.loads((tmp_path / "f" / "summary.json").read_text())
    assert resumed["env_steps"] >= 2400 and resumed["gradient_updates"] > summary["gradient_updates"]
