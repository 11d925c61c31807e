"""The in-process actor↔learner loop on tiny budgets."""

import json

import torch

import robot_rl.testing  # noqa: F401 - registers the "fake" task
from robot_rl.core.config import ALGOS, ensure_registered
from robot_rl.core.transition import TransitionBatch
from robot_rl.loop.actor import Actor
from robot_rl.loop.learner import Learner
from robot_rl.testing import FakeVecEnv
from robot_rl.transport.inproc import InprocTransport

ensure_registered()


def _sac(spec, **kw):
    cfg = ALGOS.get("sac")(batch_size=16, learning_starts=32, utd_ratio=0.5, actor_hidden=(32, 32),
                           critic_hidden=(32, 32), **kw)
    return cfg.build(spec, "cpu", seed=0)


def _wire(env, algo, queue=64):
    t = InprocTransport(queue)
    learner = Learner(algo, env.spec, t.learner_endpoint(), "cpu", env.num_envs)
    learner.publish()
    actor = Actor(env, algo.make_policy(), t.actor_endpoint(0), seed=0, send_timeout_s=1.0)
    actor.sync_weights()
    return t, learner, actor


def test_weight_version_advances_and_actor_uses_it():
    env = FakeVecEnv(num_envs=4, episode_length=8)
    algo = _sac(env.spec)
    _, learner, actor = _wire(env, algo)
    seen_versions = []
    for _ in range(40):
        actor.sync_weights()
        batch = actor.step()
        seen_versions.append(int(batch.policy_version[0]))
        while learner.pump(0):
            pass
        if learner.update_off_policy(max_updates=10):
            learner.publish()
    assert learner.updates > 0
    assert learner.version > 1
    assert seen_versions[0] == 1 and seen_versions[-1] > 1, seen_versions
    # After syncing, the actor's policy holds exactly the learner's actor weights.
    actor.sync_weights()
    for k, v in algo.actor_weights().items():
        assert torch.equal(actor.policy.state_dict()[k].cpu(), v), k


def test_nan_from_env_is_reported_not_learned_from():
    env = FakeVecEnv(num_envs=4, episode_length=6, nan_at_step=3, nan_env=1)
    algo = _sac(env.spec)
    t, learner, actor = _wire(env, algo)
    for _ in range(12):
        actor.step()
        while learner.pump(0):
            pass
    assert actor.nonfinite_rows >= 1
    storage = learner.storage
    sample = storage.sample(len(storage))
    for v in (*sample.obs.values(), *sample.next_obs.values(), sample.reward):
        assert torch.isfinite(v).all()
    # Sub-env 1 was quarantined until its episode ended, then sent again.
    assert learner.transitions == 12 * 4 - actor.nonfinite_rows
    assert t.stats.rejected == {}


def test_learner_rejects_bad_batches_and_keeps_running():
    env = FakeVecEnv(num_envs=2)
    algo = _sac(env.spec)
    t, learner, actor = _wire(env, algo)
    good = actor.step()
    learner.pump(0)
    n = len(good)
    wrong_shape = TransitionBatch(**{**good.__dict__, "obs": {"state": torch.zeros(n, 5)}})
    nan_reward = TransitionBatch(**{**good.__dict__, "reward": torch.full((n,), float("nan"))})
    wrong_dtype = TransitionBatch(**{**good.__dict__, "action": good.action.double()})
    missing_key = TransitionBatch(**{**good.__dict__, "next_obs": {}})
    for bad in (wrong_shape, nan_reward, wrong_dtype, missing_key):
        assert not learner.ingest(bad)
    assert learner.ingest(good)
    assert t.stats.rejected == {"spec": 3, "nonfinite": 1}
    assert learner.transitions == 2 * n


def test_on_policy_round_trip_with_ppo():
    env = FakeVecEnv(num_envs=8, episode_length=5)
    algo = ALGOS.get("ppo")(rollout_length=6, num_epochs=1, num_minibatches=2).build(env.spec, "cpu", seed=0)
    _, learner, actor = _wire(env, algo)
    for it in range(3):
        for _ in range(algo.rollout_length):
            actor.step()
            while learner.pump(0):
                pass
        assert learner.update_on_policy()
        learner.publish()
        actor.sync_weights()
        assert actor.policy_version == it + 2
    assert learner.updates == 3
    assert "value_loss" in learner.last_stats


def _runner_cfg(tmp_path, algo: str, *extra: str):
    from robot_rl.loop.config import resolve_train_config

    return resolve_train_config(task="fake", algo=algo, overrides=[
        f"run.root={tmp_path}", "run.name=r", "run.progress=false", "loop.eval_episodes=4",
        "loop.eval_every_env_steps=200", "algo.actor_hidden=[16,16]", "algo.critic_hidden=[16,16]",
        "loop.success_threshold=null", *extra])


def test_runner_off_policy_survives_env_nan(tmp_path):
    from robot_rl.loop.runner import train

    cfg = _runner_cfg(tmp_path, "sac", "loop.total_env_steps=400", "task.nan_at_step=20",
                      "algo.learning_starts=50", "algo.batch_size=16")
    result = train(cfg)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["nonfinite_rows_dropped"] >= 1
    assert result.updates > 0 and result.env_steps >= 400


def test_runner_on_policy_discards_rollout_with_nan(tmp_path):
    from robot_rl.loop.runner import train

    cfg = _runner_cfg(tmp_path, "ppo", "loop.total_env_steps=320", "task.nan_at_step=3", "algo.rollout_length=8",
                      "task.num_envs=8")
    result = train(cfg)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["discarded_rollouts"] >= 1
    assert summary["nonfinite_rows_dropped"] >= 1
    assert result.updates >= 2


def test_runner_pixel_sac(tmp_path):
    from robot_rl.loop.runner import train

    cfg = _runner_cfg(tmp_path, "sac", "loop.total_env_steps=160", "task.image=true", "algo.learning_starts=40",
                      "algo.batch_size=8", "algo.image_channels=4", "algo.image_features=8")
    result = train(cfg)
    assert result.updates > 0 and result.policy_version >= 1
    assert (result.run_dir / "learning_curve.png").stat().st_size > 1000
