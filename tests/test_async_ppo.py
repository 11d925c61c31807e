"""Asynchronous on-policy learning: the decoupled PPO loss by hand, the bounded-staleness rollout, and learning."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from robot_rl.core.config import ConfigError
from robot_rl.core.env import StepResult, VecEnv, check_action
from robot_rl.core.extras import ELEMENT_LOG_PROB, LOG_PROB
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.loop.actor import Actor
from robot_rl.loop.async_updates import AsyncOnPolicyUpdates, async_rollout
from robot_rl.loop.config import LoopConfig
from robot_rl.loop.learner import Learner
from robot_rl.policies import ppo as ppo_module
from robot_rl.policies.decoupled_ppo import decoupled_surrogate_loss
from robot_rl.policies.ppo import PPOConfig, clipped_surrogate_loss
from robot_rl.replay.async_rollout import AsyncRolloutStorage
from robot_rl.replay.rollout import RolloutStorage
from robot_rl.transport.inproc import InprocTransport

SPEC = EnvSpec({"state": ArraySpec((3,))}, ArraySpec((1,), low=-1.0, high=1.0))


class PointTarget(VecEnv):
    """``pos ← pos + 0.2·a``, reward ``−|target − pos|``, success within 0.1, 20 steps (tests/test_ppo.py's task)."""

    def __init__(self, num_envs: int, seed: int = 0) -> None:
        self.spec, self.num_envs, self.device = SPEC, num_envs, torch.device("cpu")
        self.gen = torch.Generator().manual_seed(seed)
        self.pos, self.target = torch.zeros(num_envs), torch.zeros(num_envs)
        self.t, self.ret = torch.zeros(num_envs, dtype=torch.long), torch.zeros(num_envs)

    def _obs(self) -> dict[str, torch.Tensor]:
        return {"state": torch.stack([self.pos, self.target, self.target - self.pos], -1)}

    def _reset(self, mask: torch.Tensor) -> None:
        pos = torch.rand(self.num_envs, generator=self.gen) * 2 - 1
        target = torch.rand(self.num_envs, generator=self.gen) * 2 - 1
        self.pos, self.target = torch.where(mask, pos, self.pos), torch.where(mask, target, self.target)
        self.t, self.ret = torch.where(mask, 0, self.t), torch.where(mask, 0.0, self.ret)

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        if seed is not None:
            self.gen.manual_seed(seed)
        self._reset(torch.ones(self.num_envs, dtype=torch.bool))
        return self._obs()

    def step(self, action: torch.Tensor) -> StepResult:
        action = check_action(action, self.spec, self.num_envs)
        self.pos = (self.pos + 0.2 * action[:, 0]).clamp(-2, 2)
        dist = (self.target - self.pos).abs()
        self.t += 1
        self.ret += -dist
        terminated = dist < 0.1
        truncated = (self.t >= 20) & ~terminated
        done = terminated | truncated
        info = {"final_obs": self._obs(), "success": terminated, "episode_return": torch.where(done, self.ret, 0.0),
                "episode_length": torch.where(done, self.t, 0)}
        self._reset(done)
        return StepResult(self._obs(), -dist, terminated, truncated, info)


def small_cfg(**kw: object) -> PPOConfig:
    base: dict[str, object] = dict(rollout_length=8, num_epochs=2, num_minibatches=2, actor_hidden=(32, 32),
                                   critic_hidden=(32, 32))
    base.update(kw)
    return PPOConfig(**base)  # type: ignore[arg-type]


def steps(algo: ppo_module.PPOAlgorithm, env: VecEnv, count: int, version: int = 0, actor_id: int = 0,
          seed: int = 0) -> list[TransitionBatch]:
    """``count`` consecutive steps of ``env`` under a fresh copy of the learner's policy, tagged ``version``."""
    torch.manual_seed(seed)
    policy, obs, out, n = algo.make_policy(), env.reset(seed=seed), [], env.num_envs
    for _ in range(count):
        action, extras = policy.act(obs)
        res = env.step(action)
        done = res.terminated | res.truncated
        nxt = {k: torch.where(done[:, None], res.info["final_obs"][k], v) for k, v in res.obs.items()}
        out.append(TransitionBatch(obs=obs, action=action, reward=res.reward, terminated=res.terminated,
                                   truncated=res.truncated, next_obs=nxt, intervened=torch.zeros(n, dtype=torch.bool),
                                   policy_version=torch.full((n,), version, dtype=torch.long),
                                   env_index=torch.arange(n), actor_id=actor_id, extras=extras))
        obs = res.obs
    return out


# --------------------------------------------------------------------------------------------
# The corrected loss, by hand
# --------------------------------------------------------------------------------------------


def test_decoupled_loss_by_hand() -> None:
    # Row 0 is on-policy (w = 1), row 1 has π_prox/π_behaviour = 1.5, row 2 has 3, clipped to the cap 2.
    log_prob = torch.tensor([math.log(1.5), math.log(0.5), math.log(1.1)], dtype=torch.float64)
    prox = torch.zeros(3, dtype=torch.float64)
    behaviour = -torch.tensor([0.0, math.log(1.5), math.log(3.0)], dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    # ρ = π/π_prox = 1.5, 0.5, 1.1 and ε = 0.2:
    #   row 0: max(−1·1.5, −1·1.2) = −1.2,             weight 1   → −1.2
    #   row 1: max(2·0.5, 2·0.8) = 1.6 (clip from below), weight 1.5 →  2.4
    #   row 2: max(−0.5·1.1, −0.5·1.1) = −0.55,        weight 2   → −1.1
    expected = (-1.2 + 2.4 - 1.1) / 3
    got = decoupled_surrogate_loss(log_prob, prox, behaviour, adv, clip=0.2, max_weight=2.0)
    assert float(got) == pytest.approx(expected, abs=1e-12)


def test_on_policy_rows_reduce_to_the_clipped_loss_bit_for_bit() -> None:
    gen = torch.Generator().manual_seed(0)
    old = torch.randn(64, generator=gen)
    adv = torch.randn(64, generator=gen)
    lp1 = (old + 0.3 * torch.randn(64, generator=gen)).requires_grad_()
    lp2 = lp1.detach().clone().requires_grad_()
    decoupled = decoupled_surrogate_loss(lp1, old, old, adv, 0.2, 2.0)
    clipped = clipped_surrogate_loss(lp2, old, adv, 0.2)
    assert torch.equal(decoupled, clipped)
    decoupled.backward()
    clipped.backward()
    assert lp1.grad is not None and lp2.grad is not None and torch.equal(lp1.grad, lp2.grad)


def test_a_fresh_asynchronous_rollout_updates_exactly_like_a_synchronous_one() -> None:
    # k = 0 and every row acted by the learner's weights: the same PPO step, bit for bit.
    sync_algo, async_algo = small_cfg().build(SPEC, "cpu", 0), small_cfg().build(SPEC, "cpu", 0)
    batches = steps(sync_algo, PointTarget(8, seed=1), 8)
    sync = sync_algo.make_storage(8)
    fresh = AsyncRolloutStorage(SPEC, 8, 8, "cpu", envs_per_actor=8, max_staleness=0)
    for b in batches:
        sync.add(b)
        fresh.add(b)
    assert fresh.is_full() and bool((fresh.behind() == 0).all())
    assert torch.equal(sync.truncated, fresh.truncated) and torch.equal(sync.obs["state"], fresh.obs["state"])
    s1, s2 = sync_algo.update(sync), async_algo.update(fresh)
    assert s1 == s2
    for (k, a), b in zip(sync_algo.policy.state_dict().items(), async_algo.policy.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    for a, b in zip(sync_algo.critic.parameters(), async_algo.critic.parameters(), strict=True):
        assert torch.equal(a, b)


def test_stale_rows_are_weighed_by_the_behaviour_and_clipped_against_the_learners_policy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    algo = small_cfg(num_epochs=1, num_minibatches=1).build(SPEC, "cpu", 0)
    batches = steps(algo, PointTarget(4, seed=2), 8, version=1)
    stored = torch.stack([b.extras[LOG_PROB.name] for b in batches])  # [T, N], the behaviour's
    with torch.no_grad():  # the learner has moved on since those rows were acted: v2 differs from v1
        next(algo.policy.actor.parameters()).add_(0.3)
    storage = AsyncRolloutStorage(SPEC, 4, 8, "cpu", envs_per_actor=4, max_staleness=1)
    for b in batches:
        storage.add(b)
    storage.advance(2)
    assert storage.is_full() and bool((storage.behind() == 1).all())
    seen: dict[str, torch.Tensor] = {}

    def spy(log_prob: torch.Tensor, prox: torch.Tensor, behaviour: torch.Tensor, *args: object) -> torch.Tensor:
        seen.update(log_prob=log_prob.detach(), prox=prox, behaviour=behaviour)
        return decoupled_surrogate_loss(log_prob, prox, behaviour, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ppo_module, "decoupled_surrogate_loss", spy)
    algo.update(storage)
    # One minibatch of every row: the behaviour's log-probabilities are the stored ones (a permutation of them),
    # the proximal ones are the learner's own at the start of the update (the first step's ρ is exactly 1).
    assert torch.equal(seen["behaviour"].sort().values, stored.flatten().sort().values)
    assert torch.equal(seen["log_prob"], seen["prox"])
    assert not torch.allclose(seen["prox"], seen["behaviour"])


# --------------------------------------------------------------------------------------------
# The bounded-staleness rollout
# --------------------------------------------------------------------------------------------


def _rows(actor: int, env_index: list[int], version: int, value: float, done: bool = False) -> TransitionBatch:
    n = len(env_index)
    obs = {"state": torch.full((n, 3), value)}
    nxt = {"state": torch.full((n, 3), value + 1.0)}
    return TransitionBatch(obs=obs, action=torch.zeros(n, 1), reward=torch.full((n,), value),
                           terminated=torch.full((n,), done), truncated=torch.zeros(n, dtype=torch.bool),
                           next_obs=nxt, intervened=torch.zeros(n, dtype=torch.bool),
                           policy_version=torch.full((n,), version, dtype=torch.long),
                           env_index=torch.tensor(env_index), actor_id=actor, extras={LOG_PROB.name: torch.zeros(n)})


def test_a_fast_actor_fills_the_rollout_without_waiting_for_a_slow_one() -> None:
    st = AsyncRolloutStorage(SPEC, 4, 3, "cpu", envs_per_actor=2, max_staleness=2)
    st.add(_rows(1, [0, 1], 0, 100.0))  # the slow actor: one step
    for t in range(6):
        assert not st.is_full()
        st.add(_rows(0, [0, 1], 0, float(t)))
    assert st.is_full()
    # Columns 0-1: the fast actor's steps 0-2; columns 2-3: its steps 3-5, each column consecutive.
    assert st.reward[:, 0].tolist() == [0.0, 1.0, 2.0] and st.reward[:, 3].tolist() == [3.0, 4.0, 5.0]
    assert len(st) == 4 * 3 + 2  # the slow actor's step stays staged for a later rollout
    st.clear()
    assert not st.is_full()


def test_a_block_beyond_k_versions_is_dropped_and_counted() -> None:
    st = AsyncRolloutStorage(SPEC, 2, 2, "cpu", envs_per_actor=2, max_staleness=1)
    st.add(_rows(0, [0, 1], 3, 0.0))
    st.add(_rows(0, [0, 1], 4, 1.0))  # a block acted by v3 and v4: its oldest row decides
    st.advance(5)  # v3 is 2 versions behind v5: more than k = 1
    assert st.dropped_rows == 4 and not st.is_full()
    st.add(_rows(0, [0, 1], 4, 2.0))
    st.add(_rows(0, [0, 1], 5, 3.0))
    assert st.is_full() and st.behind().tolist() == [[1, 1], [0, 0]]
    assert st.stats() == {"stale_rows_dropped": 4.0, "staleness_mean": 0.5, "staleness_max": 1.0}


def test_a_gap_in_a_column_truncates_the_step_before_it() -> None:
    st = AsyncRolloutStorage(SPEC, 1, 3, "cpu", envs_per_actor=1, max_staleness=0)
    # _rows' next_obs is value + 1: steps 0 → 1 follow on; 1 → 5 is a gap (rows of a quarantined sub-env dropped).
    for value in (0.0, 1.0, 5.0):
        st.add(_rows(0, [0], 0, value))
    assert st.is_full()
    assert st.truncated[:, 0].tolist() == [False, True, False]


def test_a_killed_actors_newest_staged_rows_are_marked_truncated() -> None:
    st = AsyncRolloutStorage(SPEC, 2, 3, "cpu", envs_per_actor=2, max_staleness=0)
    st.add(_rows(7, [0, 1], 0, 0.0))
    st.add(_rows(7, [1], 0, 1.0))
    st.truncate_actor(7)
    block = st._streams[7].blocks[0]
    col = block._columns[7]
    assert block.truncated[0, int(col[0])] and block.truncated[1, int(col[1])]
    assert not block.truncated[0, int(col[1])]


def test_asynchronous_on_policy_needs_k_and_an_algorithm_that_corrects() -> None:
    algo = small_cfg().build(SPEC, "cpu", 0)
    assert async_rollout(LoopConfig(), algo, SPEC, "cpu", 8, 8) is None  # the default: synchronous
    with pytest.raises(ConfigError, match=r"loop\.max_staleness=K"):
        async_rollout(LoopConfig(on_policy_sync=False), algo, SPEC, "cpu", 8, 8)
    algo.corrects_staleness = False  # type: ignore[misc]
    with pytest.raises(ConfigError, match=r"keep loop\.on_policy_sync=true"):
        async_rollout(LoopConfig(on_policy_sync=False, max_staleness=1), algo, SPEC, "cpu", 8, 8)


# --------------------------------------------------------------------------------------------
# Learning with two actors that never wait
# --------------------------------------------------------------------------------------------


@pytest.mark.integration  # ~4 s of CPU: training
def test_two_actors_that_never_wait_learn_point_to_target() -> None:
    # tests/test_ppo.py's bar (mean reward per step from below −0.6 to above −0.5) with two actors in one process
    # on a fixed schedule: actor 0 steps twice as often as actor 1 and loads new weights every step, actor 1 only
    # every third round, so rollouts mix versions and actor 1's oldest blocks go stale. Single-threaded: the
    # same seeds give the same run.
    torch.manual_seed(0)
    cfg = small_cfg(rollout_length=16, num_epochs=4, entropy_coef=0.0)
    algo = cfg.build(SPEC, "cpu", 0)
    loop = LoopConfig(on_policy_sync=False, max_staleness=1)
    storage = async_rollout(loop, algo, SPEC, "cpu", 32, 16)
    transport = InprocTransport(1024)
    learner = Learner(algo, SPEC, transport.learner_endpoint(), "cpu", 32, storage)
    learner.publish()
    actors = [Actor(PointTarget(16, seed=i), algo.make_policy(), transport.actor_endpoint(i), seed=i)
              for i in range(2)]
    for actor in actors:
        actor.sync_weights()
    updates = AsyncOnPolicyUpdates(learner, [], loop, threading.Event())
    updates.start()
    rewards: list[float] = []
    lags: list[float] = []
    budget, env_steps, rounds = 40_000, 0, 0
    while env_steps < budget:
        rounds += 1
        for actor, every, sync_every in ((actors[0], 1, 1), (actors[1], 2, 3)):
            if rounds % sync_every == 0:
                actor.sync_weights()
            if rounds % every == 0:
                env_steps += int(actor.step().reward.numel())
        while learner.pump(timeout_s=0):
            if storage is not None and storage.is_full():
                rewards.append(float(storage.reward.mean()))
                updates.iteration()
                lags.append(learner.last_stats["staleness_max"])
    assert storage is not None and learner.updates == len(rewards) >= 30
    assert storage.dropped_rows > 0  # actor 1's staleness went past k at times: dropped and counted
    assert max(lags) == 1  # rows up to k versions behind were learned from, with the correction
    first, last = rewards[0], sum(rewards[-3:]) / 3
    assert first < -0.6 and last > -0.5, (first, last)


# --------------------------------------------------------------------------------------------
# Flow-Noise PPO
# --------------------------------------------------------------------------------------------


def _flow() -> tuple[object, object]:
    from robot_rl.policies.flow.model import FlowVLAConfig
    from robot_rl.policies.flow.ppo import FlowPPOConfig
    from robot_rl.sims.lang_reach import LangReachConfig

    tiny = FlowVLAConfig(horizon=4, num_steps=3, hidden=32, expert_layers=2, image_features=8, cnn_channels=4,
                         cnn_layers=2, state_features=8, lang_features=8)
    env = LangReachConfig(num_envs=4, image_size=16, chunk_horizon=4).make("cpu", 1)
    return FlowPPOConfig(policy=tiny, rollout_length=3, num_minibatches=2, num_epochs=2), env


def _flow_steps(algo: object, env: VecEnv, count: int, version: int) -> list[TransitionBatch]:
    policy, obs, out, n = algo.make_policy(), env.reset(seed=0), [], env.num_envs  # type: ignore[attr-defined]
    for _ in range(count):
        action, extras = policy.act(obs)
        r = env.step(action)
        done = r.terminated | r.truncated
        nxt = {k: torch.where(done.view(-1, *[1] * (v.dim() - 1)), r.info["final_obs"][k], v) for k, v in r.obs.items()}
        out.append(TransitionBatch(obs=obs, action=action, reward=r.reward, terminated=r.terminated,
                                   truncated=r.truncated, next_obs=nxt, intervened=torch.zeros(n, dtype=torch.bool),
                                   policy_version=torch.full((n,), version, dtype=torch.int64),
                                   env_index=torch.arange(n), extras=extras))
        obs = r.obs
    return out


def test_flow_ppo_fresh_rows_train_as_before_and_stale_rows_use_the_actors_densities() -> None:
    from robot_rl.policies.flow.ppo import at_ratio_level

    cfg, env = _flow()
    sync_algo, async_algo = cfg.build(env.spec, "cpu", 0), cfg.build(env.spec, "cpu", 0)  # type: ignore[attr-defined]
    batches = _flow_steps(sync_algo, env, 3, version=0)  # type: ignore[arg-type]
    sync = sync_algo.make_storage(4)
    fresh = AsyncRolloutStorage(env.spec, 4, 3, "cpu", envs_per_actor=4, max_staleness=1)
    for b in batches:
        sync.add(b)
        fresh.add(b)
    assert fresh.is_full()
    # The actor's element densities are the learner's re-scoring of the same chain under the same weights.
    prox = async_algo._old_log_probs(fresh)
    elements = fresh.extras[ELEMENT_LOG_PROB.name]
    torch.testing.assert_close(at_ratio_level(elements.flatten(0, 1), "element").view_as(prox), prox)
    assert torch.equal(async_algo._behaviour_log_probs(fresh, prox), prox)  # fresh rows: weight 1 exactly
    sync_algo.update(sync)
    async_algo.update(fresh)
    for a, b in zip(sync_algo.policy.parameters(), async_algo.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    # Rows one version behind: the behaviour side is the actor's own densities, at the configured ratio level.
    for b in batches:
        fresh.add(b)
    fresh.advance(1)
    assert fresh.is_full() and bool((fresh.behind() == 1).all())
    prox = async_algo._old_log_probs(fresh)
    acted = at_ratio_level(fresh.extras[ELEMENT_LOG_PROB.name].flatten(0, 1), "element").view_as(prox)
    assert torch.equal(async_algo._behaviour_log_probs(fresh, prox), acted)
    assert not torch.allclose(prox, acted)  # the learner moved: the importance weights are not 1
    stats = async_algo.update(fresh)
    assert all(v == v for v in stats.values())


def test_rollout_storage_records_the_acting_version() -> None:
    st = RolloutStorage(SPEC, 2, 1)
    st.add(_rows(0, [0, 1], 7, 0.0))
    assert st.policy_version.tolist() == [[7, 7]] and st.behind() is None


@pytest.mark.integration  # actor threads beside the learner, for seconds
def test_robot_rl_train_with_two_actor_threads_that_never_wait(tmp_path: object) -> None:
    import json

    import robot_rl.testing  # noqa: F401 - registers the "fake" task
    from robot_rl.core.config import ensure_registered
    from robot_rl.loop.config import resolve_train_config
    from robot_rl.loop.runner import train

    ensure_registered()
    cfg = resolve_train_config(task="fake", algo="ppo", overrides=[
        f"run.root={tmp_path}", "run.name=r", "run.progress=false", "loop.eval_episodes=4",
        "loop.eval_every_env_steps=1000000", "algo.actor_hidden=[16,16]", "algo.critic_hidden=[16,16]",
        "loop.success_threshold=null", "loop.total_env_steps=1200", "loop.actor_threads=2", "task.num_envs=4",
        "algo.rollout_length=8", "loop.on_policy_sync=false", "loop.max_staleness=1"])
    result = train(cfg)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert result.env_steps >= 1200 and result.updates >= 2 and result.policy_version == result.updates + 1
    assert summary["stale_rows_dropped"] >= 0 and summary["discarded_rollouts"] == 0
