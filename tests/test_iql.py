"""IQL: the expectile value, the non-bootstrapping target, the clipped advantage weights, checkpoints, the CLI.

The expectile loss itself is checked by hand in tests/test_offline_rl_maths.py; here it is IQL that is tested.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from robot_rl.core.algorithm import EstimatesTDError
from robot_rl.core.config import ALGOS
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.iql import IQLConfig
from robot_rl.policies.sac_networks import SACPolicy
from robot_rl.replay.buffer import MixingSampler, ReplayBuffer

SPEC = EnvSpec(observation={"state": ArraySpec((2,), "float32")}, action=ArraySpec((1,), "float32", -1.0, 1.0))
SMALL: dict[str, Any] = {"actor_hidden": (32, 32), "critic_hidden": (32, 32), "batch_size": 16, "learning_starts": 0}


def _batch(obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor,
           next_obs: torch.Tensor | None = None, **extras: torch.Tensor) -> TransitionBatch:
    n = len(reward)
    no = torch.zeros(n, dtype=torch.bool)
    return TransitionBatch(obs={"state": obs}, action=action, reward=reward, terminated=terminated, truncated=no,
                           next_obs={"state": obs if next_obs is None else next_obs}, intervened=no,
                           policy_version=torch.zeros(n, dtype=torch.int64), env_index=torch.arange(n),
                           extras=dict(extras))


def _bandit(n: int, p_good: float = 0.3) -> tuple[TransitionBatch, torch.Tensor]:
    """One-step episodes from random states: the good action 0.5 is paid 1, bad ones in [-0.8, 0] are paid 0."""
    g = torch.Generator().manual_seed(0)
    obs = torch.rand((n, 2), generator=g) * 2 - 1
    good = torch.rand(n, generator=g) < p_good
    action = torch.where(good[:, None], torch.full((n, 1), 0.5), torch.rand((n, 1), generator=g) * -0.8)
    return _batch(obs, action, good.float(), torch.ones(n, dtype=torch.bool)), good


def _random(n: int, seed: int) -> TransitionBatch:
    g = torch.Generator().manual_seed(seed)
    return _batch(torch.randn(n, 2, generator=g), torch.rand(n, 1, generator=g) * 2 - 1, torch.randn(n, generator=g),
                  torch.rand(n, generator=g) < 0.2, torch.randn(n, 2, generator=g))


def _expectile(values: torch.Tensor, tau: float) -> float:
    """The τ-expectile of a sample, by bisection on ``Σ |τ − 1(v < e)|·(v − e) = 0`` (decreasing in e)."""
    lo, hi = float(values.min()), float(values.max())
    for _ in range(60):
        e = 0.5 * (lo + hi)
        diff = values.double() - e
        lo, hi = (e, hi) if float((torch.where(diff < 0, 1 - tau, tau) * diff).sum()) > 0 else (lo, e)
    return 0.5 * (lo + hi)


def test_on_a_bandit_v_is_the_expectile_of_q_and_the_actor_moves_to_the_good_action() -> None:
    data, good = _bandit(1024)
    # tau 0.05 rather than 0.005: the target critics must catch up with Q within a few hundred updates.
    cfg = IQLConfig(actor_hidden=(64, 64), critic_hidden=(64, 64), batch_size=256, tau=0.05, max_weight=3.0,
                    actor_lr=1e-3, critic_lr=1e-3, value_lr=1e-3)
    algo = cfg.build(SPEC, "cpu", 0)
    g = torch.Generator().manual_seed(1)
    for _ in range(300):
        stats = algo.update(data.index(torch.randint(0, len(data), (256,), generator=g)))
    with torch.no_grad():
        features = algo.actor.encoder(data.obs)
        v = algo.value(features).squeeze(-1)
        q = algo.critic_target(features, algo.unit_action(data.action)).min(dim=0).values
        weight = algo.awr_weights(q - v)
        action = algo.actor.act(data.obs, deterministic=True)[0]
    # Q fits the rewards: 1 on the good action, 0 on the bad ones (every row is terminal).
    assert q[good].mean().item() == pytest.approx(1.0, abs=0.05) and q[~good].abs().mean().item() < 0.05
    # The actions do not depend on the state, so V(s) is everywhere the 0.7-expectile of Q over the data's actions:
    # τp / (τp + (1 − τ)(1 − p)) = 0.5 for p = 0.3; the data's mean value is only p ≈ 0.3.
    target = _expectile(q, 0.7)
    assert target == pytest.approx(0.5, abs=0.03)
    # (V varies a little with s: the share of good actions near each state of 1024 random ones varies.)
    assert v.mean().item() == pytest.approx(target, abs=0.04) and v.std().item() < 0.12, (v.mean(), target)
    # Advantage weights: exp(3·0.5) = 4.5 on the good action, clipped at max_weight 3; exp(−1.5) ≈ 0.22 on bad ones.
    assert weight.max().item() == pytest.approx(3.0) and (weight[good] == weight.max()).float().mean() > 0.9
    assert weight[~good].max() < 0.7
    assert stats["awr_clipped_fraction"] == pytest.approx(float(good.float().mean()), abs=0.1)
    # Behaviour cloning of this data would act at its mean action, ≈ −0.14; the weights pull the actor towards 0.5.
    assert data.action.mean().item() < -0.1
    assert action.mean().item() > 0.3 and action.std().item() < 0.1, action.flatten()[:8]


def test_the_advantage_weights_are_clipped_without_overflow() -> None:
    algo = IQLConfig(**SMALL, beta=3.0, max_weight=100.0).build(SPEC, "cpu", 0)
    w = algo.awr_weights(torch.tensor([-1.0, 0.0, 1.0, 10.0, 1e4]))
    torch.testing.assert_close(w, torch.tensor([math.exp(-3.0), 1.0, math.exp(3.0), 100.0, 100.0]))


def test_a_terminated_row_does_not_bootstrap_and_a_truncated_or_n_step_row_does() -> None:
    algo = IQLConfig(**SMALL, gamma=0.9).build(SPEC, "cpu", 0)
    with torch.no_grad():  # V(s) = 5 everywhere
        algo.value[-1].weight.zero_()
        algo.value[-1].bias.fill_(5.0)
    obs, action = torch.zeros(3, 2), torch.zeros(3, 1)
    reward, terminated = torch.ones(3), torch.tensor([True, False, False])
    discount = torch.tensor([0.9, 0.9, 0.9**3])  # row 2 is a 3-step row: γ³ from the replay
    loss, q = algo.critic_loss(obs, action, reward, terminated, obs, discount)
    y = torch.tensor([1.0, 1.0 + 0.9 * 5.0, 1.0 + 0.9**3 * 5.0])
    expected = 0.5 * (q - y).square().mean(dim=1).sum()
    torch.testing.assert_close(loss, expected)
    # Without extras["discount"] the target uses γ; td_error is the mean over both critics of the squared error.
    batch = _batch(obs[:2], action[:2], reward[:2], terminated[:2])
    td = algo.td_error(batch)
    assert td == pytest.approx(float((q[:, :2] - y[:2]).square().mean()), rel=1e-5)
    assert isinstance(algo, EstimatesTDError)


def test_save_load_round_trip_gives_identical_actions_and_updates(tmp_path: Path) -> None:
    cfg = IQLConfig(**SMALL, normalize_obs=True, critic_layer_norm=True)
    a = cfg.build(SPEC, "cpu", 0)
    for i in range(3):
        a.update(_random(16, i))
    torch.save(a.state_dict(), tmp_path / "iql.pt")
    b = cfg.build(SPEC, "cpu", 123)
    b.load_state_dict(torch.load(tmp_path / "iql.pt", weights_only=True))
    obs = {"state": torch.randn(7, 2)}
    assert b.num_updates == 3 and b.actor.encoder.normalizer.count.item() == 48
    assert torch.equal(a.actor.act(obs, deterministic=True)[0], b.actor.act(obs, deterministic=True)[0])
    # Optimiser moments and normaliser statistics came along: the next updates match exactly.
    assert [a.update(_random(16, i)) for i in (3, 4)] == [b.update(_random(16, i)) for i in (3, 4)]
    # The published actor weights make a plain SAC policy act the same (actors, eval and export use it).
    policy = cfg.build_policy(SPEC, "cpu", seed=9)
    assert isinstance(policy, SACPolicy) and not any("critic" in k or "value" in k for k in a.actor_weights())
    policy.load_actor_weights(a.actor_weights())
    assert torch.equal(policy.act(obs, deterministic=True)[0], a.actor.act(obs, deterministic=True)[0])
    state = a.state_dict()
    del state["value_optim"]
    with pytest.raises(KeyError, match="value_optim"):
        b.load_state_dict(state)


def test_same_seed_same_parameters_different_seed_differs() -> None:
    algos = [IQLConfig(**SMALL).build(SPEC, "cpu", seed) for seed in (0, 0, 1)]
    stats = [[algo.update(_random(16, i)) for i in range(4)] for algo in algos]
    assert stats[0] == stats[1]
    state = [algo.state_dict() for algo in algos]
    for part in ("actor", "critic", "critic_target", "value"):
        for k, v in state[0][part].items():
            assert torch.equal(v, state[1][part][k]), (part, k)
    assert not torch.equal(state[0]["value"]["0.weight"], state[2]["value"]["0.weight"])


def test_co_training_adds_its_behaviour_cloning_term_to_the_actor_loss() -> None:
    from robot_rl.core.algorithm import SupervisedLoss

    cfg = IQLConfig(**SMALL)
    plain, hooked = cfg.build(SPEC, "cpu", 0), cfg.build(SPEC, "cpu", 0)
    assert isinstance(hooked, SupervisedLoss)
    demo_obs, demo_action = {"state": torch.zeros(4, 2)}, torch.full((4, 1), 1.0)  # a demo on the bound: finite
    bc = hooked.supervised_loss(demo_obs, demo_action)
    with torch.no_grad():  # the deterministic action's squared error in the unit box (action bounds ±1 here)
        mean, _ = hooked.actor.gaussian(hooked.actor.encode(demo_obs))
        by_hand = (torch.tanh(mean) - 1.0).square().sum(-1).mean()
    torch.testing.assert_close(bc, by_hand, rtol=1e-6, atol=0)
    calls: list[object] = []
    hooked.aux_hook = lambda algo: calls.append(algo) or 10.0 * algo.supervised_loss(demo_obs, demo_action)
    batch = _random(16, 0)
    plain.update(batch)
    hooked.update(batch)
    assert calls == [hooked]
    # The term moved the actor towards the demo's action, and only the actor: the critics saw the same batch.
    probe = {"state": torch.zeros(1, 2)}
    assert hooked.actor.act(probe, deterministic=True)[0] > plain.actor.act(probe, deterministic=True)[0]
    assert torch.equal(hooked.critic.q.weights[0], plain.critic.q.weights[0])


def test_storage_mixes_demos_like_sac() -> None:
    assert isinstance(IQLConfig(**SMALL).build(SPEC, "cpu", 0).make_storage(4), ReplayBuffer)
    algo = IQLConfig(**SMALL, demo_ratio=0.5, buffer_size=100, demo_buffer_size=50).build(SPEC, "cpu", 0)
    storage = algo.make_storage(4)
    batch = _random(8, 0)
    batch.intervened[:3] = True
    storage.add(batch)
    assert isinstance(storage, MixingSampler) and storage.buffers["demos"].capacity == 50
    assert len(storage.buffers["online"]) == 8 and len(storage.buffers["demos"]) == 3
    assert storage.counts(16) == {"online": 8, "demos": 8}
    assert math.isfinite(algo.update(storage.sample(16))["critic_loss"])


def test_registered_documented_and_bad_values_refused() -> None:
    from robot_rl.config_io import field_docs

    assert ALGOS.get("iql") is IQLConfig
    docs = field_docs(IQLConfig)
    undocumented = [f.name for f in dataclasses.fields(IQLConfig) if not docs.get(f.name)]
    assert not undocumented and "expectile" in docs, undocumented
    default = IQLConfig()
    assert (default.expectile, default.beta, default.max_weight, default.tau, default.gamma, default.batch_size) == (
        0.7, 3.0, 100.0, 0.005, 0.99, 256)
    bad: dict[str, Any]
    for bad, match in (({"expectile": 1.0}, "expectile must be in"), ({"expectile": 0.0}, "expectile"),
                       ({"beta": 0.0}, "beta"), ({"max_weight": -1.0}, "max_weight"), ({"tau": 0.0}, "tau"),
                       ({"demo_ratio": 1.0}, "demo_ratio"), ({"batch_size": 0}, "batch_size")):
        with pytest.raises(ValueError, match=match):
            IQLConfig(**bad)
    pixels = EnvSpec(observation={"state": ArraySpec((2,)), "image.front": ArraySpec((16, 16, 3), "uint8", 0, 255)},
                     action=SPEC.action)
    with pytest.raises(ValueError, match="state observations"):
        IQLConfig(**SMALL).build(pixels, "cpu", 0)


def _record_fake_data(root: Path, episodes: int) -> Path:
    from robot_rl.data.recorder import EpisodeRecorder, StoreSink
    from robot_rl.data.store import EpisodeStore
    from robot_rl.testing.fake_env import FakeVecEnv

    env = FakeVecEnv(num_envs=4, episode_length=10, seed=0)
    store = EpisodeStore.create(root, env.spec, fps=10, task="fake")
    rec = EpisodeRecorder(StoreSink(store), env.num_envs, task="fake", max_episodes=episodes)
    obs = env.reset(seed=0)
    rec.reset(obs)
    gen = torch.Generator().manual_seed(0)
    while not rec.full:
        # A noisy controller towards the origin: actions of mixed quality, as recorded attempts are.
        action = (-5.0 * obs["state"][:, :2] + 0.5 * torch.randn(4, 2, generator=gen)).clamp(-1, 1)
        result = env.step(action)
        rec.step(action, result)
        obs = result.obs
    rec.close()
    return root


TINY = ["loop.total_env_steps=400", "loop.eval_every_env_steps=200",
        "loop.eval_episodes=4", "run.progress=false", "algo.learning_starts=64", "algo.batch_size=32",
        "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]"]


def test_train_with_iql_from_the_command_line_and_eval_its_checkpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import robot_rl.testing  # noqa: F401 - registers the "fake" task
    from robot_rl.cli import main

    # A smoke budget: what is checked is that the verb runs IQL and its checkpoint loads, not what it learns.
    smoke = ["loop.total_env_steps=96", "loop.eval_every_env_steps=1000", "loop.eval_episodes=1",
             "run.progress=false", "algo.learning_starts=32", "algo.batch_size=16", "algo.actor_hidden=[16]",
             "algo.critic_hidden=[16]"]
    assert main(["train", "--task", "fake", "--algo", "iql", "--name", "online", f"run.root={tmp_path}", *smoke]) == 0
    summary = json.loads((tmp_path / "online" / "summary.json").read_text())
    # One update per transition from learning_starts on (utd_ratio 1).
    assert summary["env_steps"] >= 96 and summary["gradient_updates"] >= 96 - 32, summary
    assert "type: iql" in (tmp_path / "online" / "config.yaml").read_text()
    # The run's checkpoint loads as a policy for `robot-rl eval` (a SACPolicy built from the IQL config).
    assert main(["eval", str(tmp_path / "online"), "--episodes", "1"]) == 0
    assert "success" in capsys.readouterr().out


@pytest.mark.integration  # learns for seconds: 200 offline updates, then 400 env steps online
def test_iql_offline_then_online_from_the_command_line_fits_the_values_of_the_data(tmp_path: Path) -> None:
    import robot_rl.testing  # noqa: F401 - registers the "fake" task
    from robot_rl.cli import main

    data = _record_fake_data(tmp_path / "data", episodes=40)
    args = ["train", "--task", "fake", "--algo", "iql", "--offline", str(data), "--name", "offline",
            f"run.root={tmp_path}", *TINY, "algo.demo_ratio=0.5", "algo.expectile=0.9", "offline.updates=200",
            "offline.log_every=100"]
    assert main(args) == 0
    curve = json.loads((tmp_path / "offline" / "offline_curve.json").read_text())
    assert [p["update"] for p in curve] == [100, 200]
    assert all(math.isfinite(p["heldout_td"]) for p in curve) and curve[-1]["heldout_td"] < curve[0]["heldout_td"]
    # Rewards are −‖state‖ < 0: the values the offline phase learned are negative.
    assert curve[-1]["v_mean"] < 0 and curve[-1]["q_mean"] < 0
    summary = json.loads((tmp_path / "offline" / "summary.json").read_text())
    assert summary["gradient_updates"] >= 100, summary
