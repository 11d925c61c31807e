"""The ``reward`` section of ``robot-rl train``: learned rewards wrap the training envs, eval sees the same keys."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from needs import need_mujoco_rendering

pytest.importorskip("mujoco")  # MUJOCO_GL is chosen in conftest.py, before anything imports mujoco

from robot_rl.core.env import SelectObservation
from robot_rl.loop.config import resolve_train_config
from robot_rl.rewards.classifier import SuccessClassifier
from robot_rl.rewards.prm import ProcessRewardModel
from robot_rl.rewards.wrapper import ProgressShapingWrapper, RewardWrapper, pop_reward_terms
from robot_rl.sims.mujoco.env import MujocoVecEnv

pytestmark = pytest.mark.sim

GOAL = "pick up the red cube"
SHAPE = (16, 16, 3)


@pytest.fixture(autouse=True)
def _rendering() -> None:
    need_mujoco_rendering()  # the pick_cube task renders its camera (state_pixels)


@pytest.fixture
def models(tmp_path: Path) -> tuple[Path, Path]:
    torch.manual_seed(0)
    clf = SuccessClassifier({"image.front": SHAPE}, features=8, channels=4, threshold=0.5)
    clf.save(tmp_path / "clf")
    prm = ProcessRewardModel({"image.front": SHAPE}, features=8, channels=4, text_dim=8, buckets=64)
    prm.tokenizer.fit([GOAL, "open the drawer"])
    prm.save(tmp_path / "prm")
    return tmp_path / "clf", tmp_path / "prm"


def _cfg(tmp_path: Path, *extra: str):
    return resolve_train_config(task="mujoco/pick_cube", algo="sac", overrides=[
        "task.num_envs=2", "task.obs=state_pixels", "task.image_size=16", "task.max_episode_steps=5",
        f"run.root={tmp_path}", "run.progress=false", "replay.persist=false", *extra])


def test_train_envs_get_the_reward_models_and_eval_envs_only_the_policy_keys(tmp_path, models):
    clf, prm = models
    cfg = _cfg(tmp_path, f"reward.classifier={clf}", f"reward.prm={prm}", f"reward.goal={GOAL}",
               "reward.shaping_weight=2.0", "reward.policy_keys=[state]")
    train = cfg.make_env("cpu", 0)
    assert isinstance(train, SelectObservation) and isinstance(train.env, ProgressShapingWrapper)
    assert isinstance(train.env.env, RewardWrapper) and isinstance(train.env.env.env, MujocoVecEnv)
    assert train.env.gamma == cfg.algo.gamma and train.env.weight == 2.0  # the algorithm's γ keeps the optimum
    assert list(train.spec.observation) == ["state"]
    train.reset(0)
    res = train.step(torch.zeros(2, 4))
    assert set(res.obs) == {"state"} and set(res.info["reward_terms"]) == {"env", "shaping"}
    # The classifier replaced the env's reward (0 where it fires, −1 elsewhere); PRM shaping adds to that.
    classifier_term = torch.where(res.info["classifier_success"], 0.0, -1.0)
    assert torch.allclose(res.reward, classifier_term + res.info["reward_terms"]["shaping"])
    terms = pop_reward_terms([train])
    assert set(terms) == {"env", "classifier", "shaping"} and pop_reward_terms([train]) == {}
    ev = cfg.make_env("cpu", 0, num_envs=3, role="eval")
    assert isinstance(ev, SelectObservation) and isinstance(ev.env, MujocoVecEnv)  # no reward models in eval
    assert ev.spec.observation == train.spec.observation
    train.close()
    ev.close()


def test_reward_terms_reach_the_run_log_of_a_training_run(tmp_path, models):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from robot_rl.loop.runner import InProcessRunner

    clf, _ = models
    cfg = _cfg(tmp_path, f"reward.classifier={clf}", "reward.policy_keys=[state]", "run.name=r",
               "loop.total_env_steps=64", "loop.log_every_s=0", "algo.learning_starts=32", "algo.batch_size=16",
               "loop.eval_every_env_steps=1000000", "loop.eval_episodes=2")
    result = InProcessRunner(cfg).train()
    assert result.env_steps >= 64
    acc = EventAccumulator(str(tmp_path / "r" / "tb"))
    acc.Reload()
    assert {"reward/env", "reward/classifier"} <= set(acc.Tags()["scalars"])
    assert all(-1.0 <= e.value <= 0.0 for e in acc.Scalars("reward/classifier"))


def test_bad_reward_settings_fail_before_training(tmp_path, models):
    _, prm = models
    with pytest.raises(ValueError, match=r"reward\.goal"):
        _cfg(tmp_path, f"reward.prm={prm}").make_env("cpu", 0)
    with pytest.raises(FileNotFoundError, match="train-classifier"):
        _cfg(tmp_path, f"reward.classifier={tmp_path / 'missing'}").make_env("cpu", 0)
    with pytest.raises(ValueError, match="cannot keep"):
        _cfg(tmp_path, "reward.policy_keys=[image.side]").make_env("cpu", 0)
    from robot_rl.rewards.prm import UnseenInstructionError

    with pytest.raises(UnseenInstructionError, match="never saw"):
        _cfg(tmp_path, f"reward.prm={prm}", "reward.goal=fly to the moon").make_env("cpu", 0)
