"""PPO: maths by hand, rollout placement, determinism, save/load, and a small learning check."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from robot_rl.config_io import field_docs, from_dict
from robot_rl.core.config import ALGOS, AlgoConfig, ConfigError
from robot_rl.core.env import StepResult, VecEnv, check_action
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.ppo import (
    PPOAlgorithm,
    PPOConfig,
    PPOPolicy,
    adaptive_lr,
    clipped_surrogate_loss,
    gaussian_kl,
    gaussian_log_prob,
    value_loss,
)
from robot_rl.replay.rollout import RolloutStorage, compute_gae, iter_minibatches

# --------------------------------------------------------------------------------------------
# A 1-D point-to-target task, batched in torch
# --------------------------------------------------------------------------------------------


class PointTarget(VecEnv):
    """``pos ← pos + 0.2·a``; reward ``−|target − pos|``; success (terminal) within 0.1; 20 steps max.

    ``state = [pos, target, target − pos]`` (so the task is easy for a linear-ish policy).
    """

    def __init__(self, num_envs: int, seed: int = 0) -> None:
        self.spec = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((1,), low=-1.0, high=1.0))
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        self.max_episode_steps = 20
        self.gen = torch.Generator().manual_seed(seed)
        self.pos = torch.zeros(num_envs)
        self.target = torch.zeros(num_envs)
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.ret = torch.zeros(num_envs)

    def _obs(self) -> dict[str, torch.Tensor]:
        return {"state": torch.stack([self.pos, self.target, self.target - self.pos], -1)}

    def _reset(self, mask: torch.Tensor) -> None:
        pos = torch.rand(self.num_envs, generator=self.gen) * 2 - 1
        target = torch.rand(self.num_envs, generator=self.gen) * 2 - 1
        self.pos = torch.where(mask, pos, self.pos)
        self.target = torch.where(mask, target, self.target)
        self.t = torch.where(mask, 0, self.t)
        self.ret = torch.where(mask, 0.0, self.ret)

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        if seed is not None:
            self.gen.manual_seed(seed)
        self._reset(torch.ones(self.num_envs, dtype=torch.bool))
        return self._obs()

    def step(self, action: torch.Tensor) -> StepResult:
        action = check_action(action, self.spec, self.num_envs)
        self.pos = (self.pos + 0.2 * action[:, 0]).clamp(-2, 2)
        dist = (self.target - self.pos).abs()
        success = dist < 0.1
        reward = -dist
        self.t += 1
        self.ret += reward
        terminated = success
        truncated = (self.t >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        final = self._obs()
        info = {"final_obs": final, "success": success, "episode_return": torch.where(done, self.ret, 0.0),
                "episode_length": torch.where(done, self.t, 0)}
        self._reset(done)
        return StepResult(self._obs(), reward, terminated, truncated, info)


SPEC = PointTarget(1).spec


def small_cfg(**kw: object) -> PPOConfig:
    base: dict[str, object] = dict(rollout_length=8, num_epochs=2, num_minibatches=2, actor_hidden=(32, 32),
                                   critic_hidden=(32, 32))
    base.update(kw)
    return PPOConfig(**base)  # type: ignore[arg-type]


def collect(algo: PPOAlgorithm, env: VecEnv, policy: PPOPolicy, storage: RolloutStorage,
            obs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], float]:
    """Fill ``storage`` with one rollout (the loop's job, written out); returns the last obs, mean reward."""
    rewards: list[torch.Tensor] = []
    n = env.num_envs
    while not storage.is_full():
        action, extras = policy.act(obs)
        res = env.step(action)
        done = res.terminated | res.truncated
        next_obs = {k: torch.where(done[:, None], res.info["final_obs"][k], v) for k, v in res.obs.items()}
        storage.add(TransitionBatch(
            obs=obs, action=action, reward=res.reward, terminated=res.terminated, truncated=res.truncated,
            next_obs=next_obs, intervened=torch.zeros(n, dtype=torch.bool),
            policy_version=torch.zeros(n, dtype=torch.long), env_index=torch.arange(n), extras=extras))
        rewards.append(res.reward)
        obs = res.obs
    return obs, float(torch.stack(rewards).mean())


def train(seed: int, iterations: int, num_envs: int = 16, **kw: object) -> tuple[PPOAlgorithm, list[float]]:
    algo = small_cfg(**kw).build(SPEC, "cpu", seed)
    env = PointTarget(num_envs, seed=seed)
    obs = env.reset()
    storage = algo.make_storage(num_envs)
    policy = algo.make_policy()
    mean_rewards = []
    for _ in range(iterations):
        obs, mean_reward = collect(algo, env, policy, storage, obs)
        algo.update(storage)
        policy.load_actor_weights(algo.actor_weights())
        mean_rewards.append(mean_reward)
    return algo, mean_rewards


def one_step_batch(n: int, env_index: list[int], actor_id: int = 0, value: float = 0.0) -> TransitionBatch:
    b = len(env_index)
    obs = {"state": torch.full((b, 3), value)}
    return TransitionBatch(
        obs=obs, action=torch.zeros(b, 1), reward=torch.full((b,), value), terminated=torch.zeros(b, dtype=torch.bool),
        truncated=torch.zeros(b, dtype=torch.bool), next_obs=obs, intervened=torch.zeros(b, dtype=torch.bool),
        policy_version=torch.zeros(b, dtype=torch.long), env_index=torch.tensor(env_index), actor_id=actor_id,
        extras={"log_prob": torch.full((b,), value)})


# --------------------------------------------------------------------------------------------
# Maths by hand
# --------------------------------------------------------------------------------------------


def test_gae_by_hand_with_termination_and_truncation() -> None:
    # Column 0: step 1 is truncated (bootstrap from V(final obs) = 3.0, not from values[2]),
    # step 3 terminates (no bootstrap). Column 1: no episode end, the last step bootstraps V = 2.
    gamma, lam = 0.9, 0.8  # γλ = 0.72
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 0.0], [1.0, 1.0]])
    values = torch.tensor([[0.5, 0.0], [1.0, 0.0], [0.2, 0.0], [0.4, 0.0]])
    next_values = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.4, 0.0], [0.6, 2.0]])
    terminated = torch.tensor([[False, False], [False, False], [False, False], [True, False]])
    truncated = torch.tensor([[False, False], [True, False], [False, False], [False, False]])
    adv, ret = compute_gae(rewards, values, next_values, terminated, terminated | truncated, gamma, lam)
    # Column 0:
    #   δ3 = 1 − 0.4 = 0.6                     A3 = 0.6
    #   δ2 = 2 + 0.9·0.4 − 0.2 = 2.16          A2 = 2.16 + 0.72·0.6 = 2.592
    #   δ1 = 0 + 0.9·3.0 − 1.0 = 1.7           A1 = 1.7 (truncation cuts the recursion)
    #   δ0 = 1 + 0.9·1.0 − 0.5 = 1.4           A0 = 1.4 + 0.72·1.7 = 2.624
    # Column 1: δ3 = 1 + 0.9·2 = 2.8, then A_t = 0.72·A_{t+1}.
    expected_adv = torch.tensor([[2.624, 0.72**3 * 2.8], [1.7, 0.72**2 * 2.8], [2.592, 0.72 * 2.8], [0.6, 2.8]])
    torch.testing.assert_close(adv, expected_adv)
    torch.testing.assert_close(ret, expected_adv + values)
    torch.testing.assert_close(ret[:, 0], torch.tensor([3.124, 2.7, 2.792, 1.0]))


def test_clipped_surrogate_by_hand() -> None:
    ratio = torch.tensor([1.5, 0.5, 1.1, 0.7])
    adv = torch.tensor([1.0, 1.0, -2.0, -1.0])
    old = torch.tensor([0.3, -1.0, 0.0, 2.0])
    # rows: max(−1.5, −1.2) = −1.2; max(−0.5, −0.8) = −0.5; max(2.2, 2.2) = 2.2; max(0.7, 0.8) = 0.8
    loss = clipped_surrogate_loss(old + ratio.log(), old, adv, clip=0.2)
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 2.2 + 0.8) / 4)


def test_value_loss_by_hand() -> None:
    values, old, returns = torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5]), torch.tensor([2.0, 0.0])
    # row 0: max((1−2)², (0.7−2)²) = 1.69; row 1: max(0², (0.3−0)²) = 0.09
    assert value_loss(values, old, returns, clip=0.2).item() == pytest.approx((1.69 + 0.09) / 2)
    assert value_loss(values, old, returns, clip=None).item() == pytest.approx(0.5)


def test_gaussian_helpers_match_torch_distributions() -> None:
    g = torch.Generator().manual_seed(0)
    x, mu, mu2 = (torch.randn(5, 3, generator=g) for _ in range(3))
    log_std, log_std2 = torch.tensor([-0.5, 0.0, 0.3]), torch.tensor([0.1, -0.2, 0.0])
    p = torch.distributions.Normal(mu, log_std.exp())
    q = torch.distributions.Normal(mu2, log_std2.exp())
    torch.testing.assert_close(gaussian_log_prob(x, mu, log_std), p.log_prob(x).sum(-1))
    torch.testing.assert_close(gaussian_kl(mu, log_std, mu2, log_std2),
                               torch.distributions.kl_divergence(p, q).sum(-1))


def test_adaptive_lr_rule() -> None:
    assert adaptive_lr(1e-3, 0.03, 0.01) == pytest.approx(1e-3 / 1.5)  # kl > 2·desired
    assert adaptive_lr(1e-3, 0.004, 0.01) == pytest.approx(1.5e-3)  # kl < desired/2
    assert adaptive_lr(1e-3, 0.01, 0.01) == 1e-3  # in the band
    assert adaptive_lr(1e-3, 0.0, 0.01) == 1e-3  # kl = 0 (nothing moved) is not a reason to grow
    assert adaptive_lr(1.2e-5, 1.0, 0.01) == 1e-5  # lower bound
    assert adaptive_lr(8e-3, 1e-4, 0.01) == 1e-2  # upper bound


def test_adaptive_schedule_shrinks_lr_when_kl_is_high_and_fixed_keeps_it() -> None:
    algo, _ = train(0, 1, desired_kl=1e-9, lr=1e-3)
    assert algo.lr < 1e-3
    assert algo.optimizer.param_groups[0]["lr"] == algo.lr
    fixed, _ = train(0, 1, schedule="fixed", desired_kl=1e-9, lr=1e-3)
    assert fixed.lr == 1e-3


# --------------------------------------------------------------------------------------------
# Rollout storage
# --------------------------------------------------------------------------------------------


def test_rollout_placement_by_env_index_and_pieces() -> None:
    st = RolloutStorage(SPEC, num_envs=4, length=2)
    st.add(one_step_batch(4, [2, 3], value=1.0))  # first piece of step 0
    st.add(one_step_batch(4, [0, 1], value=2.0))  # second piece
    assert len(st) == 4 and not st.is_full()
    # Two steps of sub-env 1 and one of sub-envs 0, 3 in one batch (rows of one env in time order)...
    batch = one_step_batch(4, [1, 0, 3, 1], value=5.0)
    batch.reward = torch.tensor([5.0, 6.0, 7.0, 8.0])
    with pytest.raises(OverflowError):  # ...which overflows sub-env 1 (it already has step 0)
        st.add(batch)
    st.add(one_step_batch(4, [1, 0, 3, 2], value=3.0))
    assert st.is_full() and len(st) == 8
    # Columns are assigned in first-seen order: env 2 → 0, 3 → 1, 0 → 2, 1 → 3.
    torch.testing.assert_close(st.reward, torch.tensor([[1.0, 1.0, 2.0, 2.0], [3.0, 3.0, 3.0, 3.0]]))
    torch.testing.assert_close(st.extras["log_prob"], st.reward)
    st.clear()
    assert len(st) == 0 and not st.is_full()
    batch = one_step_batch(4, [0, 0, 1, 2, 3, 1, 2, 3])  # two whole steps in one batch
    batch.reward = torch.arange(8.0)
    st.add(batch)
    assert st.is_full()
    torch.testing.assert_close(st.reward, torch.tensor([[3.0, 4.0, 0.0, 2.0], [6.0, 7.0, 1.0, 5.0]]))


def test_rollout_rejects_extras_that_do_not_match() -> None:
    st = RolloutStorage(SPEC, num_envs=2, length=2)
    st.add(one_step_batch(2, [0, 1]))
    wrong_shape = one_step_batch(2, [0, 1])
    wrong_shape.extras = {"log_prob": torch.zeros(2, 3)}
    with pytest.raises(ValueError):
        st.add(wrong_shape)
    wrong_key = one_step_batch(2, [0, 1])
    wrong_key.extras = {"value": torch.zeros(2)}
    with pytest.raises(KeyError):
        st.add(wrong_key)
    assert len(st) == 2  # nothing was written by the rejected batches


def test_rollout_several_actors_get_their_own_columns() -> None:
    st = RolloutStorage(SPEC, num_envs=4, length=1)
    st.add(one_step_batch(4, [0, 1], actor_id=7, value=1.0))
    st.add(one_step_batch(4, [0, 1], actor_id=9, value=2.0))
    assert st.is_full()
    torch.testing.assert_close(st.reward[0], torch.tensor([1.0, 1.0, 2.0, 2.0]))
    with pytest.raises(OverflowError):
        st.add(one_step_batch(4, [2], actor_id=11))
    with pytest.raises(IndexError):
        st.add(one_step_batch(4, [4], actor_id=7))


def test_minibatches_cover_every_row_once_per_epoch() -> None:
    t = torch.arange(12.0).reshape(3, 4)
    seen = [mb["x"] for mb in iter_minibatches({"x": t, "y": t * 2}, num_minibatches=3, num_epochs=2)]
    assert len(seen) == 6 and all(s.shape == (4,) for s in seen)
    for epoch in (seen[:3], seen[3:]):
        assert sorted(torch.cat(epoch).tolist()) == list(range(12))


# --------------------------------------------------------------------------------------------
# Policy and algorithm
# --------------------------------------------------------------------------------------------


def test_registered_builds_and_takes_overrides() -> None:
    assert ALGOS.get("ppo") is PPOConfig
    assert isinstance(PPOConfig().build(SPEC, "cpu", 0), PPOAlgorithm)
    assert PPOAlgorithm.on_policy
    cfg = from_dict(AlgoConfig, {"type": "ppo", "actor_hidden": [64, 64], "schedule": "fixed"})
    assert isinstance(cfg, PPOConfig) and cfg.actor_hidden == (64, 64) and cfg.schedule == "fixed"
    with pytest.raises(ConfigError):
        from_dict(AlgoConfig, {"type": "ppo", "schedule": "cosine"})
    assert all(field_docs(PPOConfig).get(f.name) for f in dataclasses.fields(PPOConfig))


def test_act_clamps_action_and_scores_the_raw_sample() -> None:
    algo = small_cfg(init_noise_std=5.0).build(SPEC, "cpu", 0)
    policy = algo.make_policy()
    obs = {"state": torch.randn(256, 3)}
    action, extras = policy.act(obs)
    raw = extras["raw_action"]
    assert action.shape == raw.shape == (256, 1) and extras["log_prob"].shape == (256,)
    assert action.abs().max() <= 1.0 and raw.abs().max() > 1.0
    torch.testing.assert_close(action, raw.clamp(-1, 1))
    mean = policy.actor(policy.normalize(obs["state"]))
    expected = torch.distributions.Normal(mean, 5.0).log_prob(raw).sum(-1)
    torch.testing.assert_close(extras["log_prob"], expected)
    det, _ = policy.act(obs, deterministic=True)
    torch.testing.assert_close(det, mean.clamp(-1, 1))


def test_actor_weights_hold_no_critic_or_optimiser_and_make_a_policy() -> None:
    algo, _ = train(0, 1)
    weights = algo.actor_weights()
    assert not any("critic" in k or "optim" in k or "exp_avg" in k for k in weights)
    assert {"std_param", "normalizer.mean", "normalizer.var", "normalizer.count"} <= set(weights)
    assert all(v.device.type == "cpu" for v in weights.values())
    fresh = small_cfg().build(SPEC, "cpu", 123).make_policy()
    fresh.load_actor_weights(weights)
    obs = {"state": torch.randn(8, 3)}
    torch.testing.assert_close(fresh.act(obs, True)[0], algo.make_policy().act(obs, True)[0])
    assert float(weights["normalizer.count"]) == 8 * 16  # the learner folded in one rollout


def test_same_seed_same_params_different_seed_differs() -> None:
    a, _ = train(3, 2)
    b, _ = train(3, 2)
    c, _ = train(4, 2)
    for (k, va), vb in zip(a.state_dict()["critic"].items(), b.state_dict()["critic"].values()):
        torch.testing.assert_close(va, vb, msg=k)
    for va, vb in zip(a.policy.state_dict().values(), b.policy.state_dict().values()):
        torch.testing.assert_close(va, vb)
    assert not torch.equal(a.policy.std_param, c.policy.std_param)


def test_state_dict_round_trip_restores_optimiser_normaliser_and_lr() -> None:
    src, _ = train(0, 2)
    state = copy.deepcopy(src.state_dict())
    dst = small_cfg().build(SPEC, "cpu", 99)
    dst.load_state_dict(state)
    assert dst.lr == src.lr and dst.optimizer.param_groups[0]["lr"] == src.lr
    for k, v in src.policy.state_dict().items():
        torch.testing.assert_close(dst.policy.state_dict()[k], v, msg=k)
    assert float(dst.policy.normalizer.count) == 2 * 8 * 16  # type: ignore[arg-type]
    s_opt, d_opt = src.optimizer.state_dict()["state"], dst.optimizer.state_dict()["state"]
    assert s_opt.keys() == d_opt.keys()
    for i in s_opt:
        torch.testing.assert_close(d_opt[i]["exp_avg_sq"], s_opt[i]["exp_avg_sq"])
    # The same next rollout gives the same update (optimiser moments and shuffle RNG restored).
    env = PointTarget(16, seed=5)
    obs = env.reset()
    storage = src.make_storage(16)
    collect(src, env, src.make_policy(), storage, obs)
    twin = copy.deepcopy(storage)
    stats_src, stats_dst = src.update(storage), dst.update(twin)
    assert stats_src == pytest.approx(stats_dst)
    for (k, v), w in zip(src.critic.state_dict().items(), dst.critic.state_dict().values()):
        torch.testing.assert_close(w, v, msg=k)
    with pytest.raises(KeyError):
        dst.load_state_dict({k: v for k, v in state.items() if k != "optimizer"})


def test_value_targets_bootstrap_from_next_obs_not_the_next_row() -> None:
    algo = small_cfg(rollout_length=3, normalize_obs=False).build(SPEC, "cpu", 0)
    st = algo.make_storage(1)
    rows = [one_step_batch(1, [0], value=v) for v in (0.1, 0.2, 0.3)]
    rows[0].truncated[:] = True  # step 0 ends by time limit; its successor is next_obs, not obs[1]
    rows[1].terminated[:] = True  # step 1 is terminal: its successor's value must not matter
    for r in rows:
        r.next_obs = {"state": r.obs["state"] + 1.0}
        st.add(r)
    _, _, base = algo.value_targets(st)
    st.obs["state"][1] += 10.0  # the row after the truncation: only its own value may change
    st.obs["state"][2] += 10.0
    _, _, moved_rows = algo.value_targets(st)
    assert moved_rows[0, 0] == base[0, 0]
    st.next_obs["state"][1] += 10.0  # successor of the terminal step: no effect on step 1
    _, _, after_term = algo.value_targets(st)
    torch.testing.assert_close(after_term, moved_rows)
    st.next_obs["state"][0] += 10.0  # the final obs of the truncated episode: R_0 must change by γ·ΔV
    _, _, after_trunc = algo.value_targets(st)
    v_final_old = algo.critic(torch.full((1, 3), 1.1)).squeeze()
    v_final_new = algo.critic(torch.full((1, 3), 11.1)).squeeze()
    assert (after_trunc[0, 0] - moved_rows[0, 0]).item() == pytest.approx(
        0.99 * (v_final_new - v_final_old).item(), rel=1e-4)


def test_value_targets_shortcut_matches_evaluating_every_next_obs() -> None:
    # value_targets reuses V(obs[t+1]) where next_obs[t] is that same observation; the result must
    # equal GAE with the critic run on every next_obs.
    algo, _ = train(0, 1)
    env = PointTarget(16, seed=1)
    st = algo.make_storage(16)
    collect(algo, env, algo.make_policy(), st, env.reset())
    assert bool(st.done.any())
    values, adv, ret = algo.value_targets(st)
    with torch.no_grad():
        norm = algo.policy.normalize
        v = algo.critic(norm(st.obs["state"])).squeeze(-1)
        nv = algo.critic(norm(st.next_obs["state"])).squeeze(-1)
    exp_adv, exp_ret = compute_gae(st.reward, v, nv, st.terminated, st.done, 0.99, 0.95)
    torch.testing.assert_close(values, v)
    torch.testing.assert_close(adv, exp_adv)
    torch.testing.assert_close(ret, exp_ret)


def test_update_clears_storage_and_reports_stats() -> None:
    algo = small_cfg().build(SPEC, "cpu", 0)
    st = algo.make_storage(16)
    with pytest.raises(RuntimeError):
        algo.update(st)
    env = PointTarget(16)
    collect(algo, env, algo.make_policy(), st, env.reset())
    stats = algo.update(st)
    assert len(st) == 0
    assert set(stats) >= {"value_loss", "surrogate_loss", "entropy", "kl", "lr", "noise_std"}
    assert all(math.isfinite(v) for v in stats.values())
    assert stats["noise_std"] == pytest.approx(float(algo.policy.log_std().detach().exp().mean()))


def test_learns_point_to_target() -> None:
    # About 1 s on an idle 2-core CPU.
    _, rewards = train(0, 40, num_envs=32, rollout_length=16, num_epochs=4, entropy_coef=0.0)
    # Mean reward per step is −(mean distance to the target); a random policy drifts away
    # (≈ −0.8), a good one closes in at 0.2 per step and is reset on success.
    first, last = rewards[0], sum(rewards[-3:]) / 3
    assert first < -0.6 and last > -0.5, (first, last)
