"""The graded HIL schedule in `robot-rl train`: offline demo updates, return-and-explore resets, human takeover."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco")

from robot_rl.data.episode import Episode, spec_of
from robot_rl.data.store import EpisodeStore
from robot_rl.hil.extension import HILStep
from robot_rl.human_loop.config import HILConfig
from robot_rl.human_loop.devices.base import TeleopReading
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.schedule import HILController
from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.runner import InProcessRunner
from robot_rl.sims.mujoco.tasks import MujocoReachConfig

pytestmark = pytest.mark.sim

OFFSET = slice(19, 22)  # goal − grip in mujoco/reach's state vector
SCALE = 0.03  # the task's action_scale: metres per unit action


def _expert(state: torch.Tensor) -> np.ndarray:
    return np.clip(state[OFFSET].numpy() / SCALE, -1, 1)


def _demo_store(path: Path, episodes: int = 3) -> Path:
    env = MujocoReachConfig(reward="sparse", num_envs=1).make("cpu", 5)
    obs = env.reset(5)
    eps = []
    for _ in range(episodes):
        rows: dict[str, list] = {k: [] for k in ("obs", "action", "reward", "term", "trunc", "succ")}
        while True:
            a = torch.from_numpy(_expert(obs["state"][0])).float()[None]
            res = env.step(a)
            for k, v in (("obs", obs["state"][0].numpy()), ("action", a[0].numpy()), ("reward", res.reward[0]),
                         ("term", res.terminated[0]), ("trunc", res.truncated[0]), ("succ", res.info["success"][0])):
                rows[k].append(np.asarray(v))
            if bool(res.terminated[0] | res.truncated[0]):
                final = res.info["final_obs"]["state"][0].numpy()
                obs = res.obs
                break
            obs = res.obs
        n = len(rows["reward"])
        eps.append(Episode(obs={"state": np.stack(rows["obs"]).astype(np.float32)},
                           final_obs={"state": final.astype(np.float32)},
                           action=np.stack(rows["action"]).astype(np.float32),
                           reward=np.array(rows["reward"], np.float32), terminated=np.array(rows["term"], bool),
                           truncated=np.array(rows["trunc"], bool), intervened=np.zeros(n, bool),
                           success=np.array(rows["succ"], bool), task="reach"))
    env.close()
    store = EpisodeStore.create(path, spec_of(eps[0]), fps=20, task="reach")
    for ep in eps:
        store.append(ep)
    return path


def test_train_runs_offline_then_return_and_explore_then_human_guided(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    demos = _demo_store(tmp_path / "demos")
    cfg = resolve_train_config(task="mujoco/reach", algo="sac", overrides=[
        f"run.root={tmp_path}", "run.name=hil", "run.progress=false", "run.torch_threads=1",
        "task.num_envs=2", "task.reward=sparse", "loop.total_env_steps=200", "loop.eval_episodes=2",
        "loop.eval_every_env_steps=100000", "loop.success_threshold=null", "replay.persist=false",
        "algo.learning_starts=64", "algo.batch_size=32", "algo.demo_ratio=0.5", f"loop.demos_path={demos}",
        "loop.hil={offline_updates: 12, return_steps: 120, reset_to_demo_prob: 1.0, device: scripted}"])
    runner = InProcessRunner(cfg)
    actor = runner.actors[0]
    hil = next(h.controller for h in actor.hooks if isinstance(h, HILStep))  # the hil extension's step hook
    assert isinstance(hil, HILController) and hil.returns.supported
    # The "human": steers sub-env 0 straight at its goal for the first 80 reads, then lets go.
    hil.attach_device(ScriptedDevice(lambda i: TeleopReading(
        0.0, np.r_[_expert(actor._obs["state"][0]), 0, 0, 0], engage=i < 80)))
    seen_updates: list[int] = []
    step = actor.step

    def watched_step() -> object:
        seen_updates.append(runner.learner.updates)
        return step()

    actor.step = watched_step  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="robot_rl"):
        result = runner.train()
    log = caplog.text
    # Offline: 12 updates on demos only, all before the first env step.
    assert "HIL phase offline: 12 updates" in log and seen_updates[0] == 12
    assert "HIL phase return_and_explore -> human_guided" in log
    # Human-guided steps are flagged: the demo buffer (HIL-SERL routing) got exactly those rows.
    demo_buf = runner.learner.storage.buffers["demos"]  # type: ignore[attr-defined]
    loaded = sum(len(ep) for ep in EpisodeStore(demos))
    assert hil.intervened_steps > 0 and len(demo_buf) == loaded + hil.intervened_steps
    # The human's successful episodes filled the pool; finished sub-envs restarted from those states.
    assert len(hil.returns.states) > 0 and hil.demo_resets > 0
    assert result.env_steps >= 200


def test_return_and_explore_puts_rows_into_demonstrated_states_exactly() -> None:
    env = MujocoReachConfig(reward="sparse", num_envs=3).make("cpu", 0)
    env.reset(0)
    hil = HILController(HILConfig(offline_updates=0, return_steps=10, reset_to_demo_prob=1.0), env, lambda: 0)
    state = env.get_state()
    hil.returns.add_states([state[1].clone()])
    env.step(torch.ones(3, 3))
    obs = hil.returns.reset_rows(torch.tensor([0, 2]))
    after = env.get_state()
    assert obs is not None and torch.equal(after[0], state[1]) and torch.equal(after[2], state[1])
    assert not torch.equal(after[1], state[1])  # row 1 kept its own (stepped) state
    env.close()


def test_offline_phase_without_demos_is_a_clear_error(tmp_path: Path) -> None:
    cfg = resolve_train_config(task="mujoco/reach", algo="sac", overrides=[
        f"run.root={tmp_path}", "run.progress=false", "task.num_envs=1", "loop.total_env_steps=10",
        "loop.eval_episodes=1", "replay.persist=false", "loop.hil={offline_updates: 5}"])
    with pytest.raises(ValueError, match="offline phase trains on demos"):
        InProcessRunner(cfg)
    with pytest.raises(ValueError, match="reset_to_demo_prob"):
        HILConfig(reset_to_demo_prob=2.0)


def test_human_keys_label_sub_env_0_reward_on_the_step_in_the_human_guided_phase() -> None:
    env = MujocoReachConfig(num_envs=2).make("cpu", 0)
    steps = {"n": 0}
    cfg = HILConfig(offline_updates=0, return_steps=40, human_success_reward=2.0, human_failure_reward=-3.0)
    events = {1: ("success",), 3: ("failure",)}  # device reads 1 and 3 (0-based): one key each
    hil = HILController(cfg, env, lambda: steps["n"], ScriptedDevice(
        lambda i: TeleopReading(0.0, np.zeros(6), engage=False, events=events.get(i, ()))))
    obs = env.reset(seed=0)
    bonus = []
    for _ in range(4):  # return-and-explore: keys are not read there
        action, _ = hil.act(obs, torch.zeros(2, 3))
        result = env.step(action)
        bonus.append((hil.reward(result.reward) - result.reward).tolist())
        obs = hil.after_step(result)
    assert bonus == [[0.0, 0.0]] * 4 and hil.human_successes == hil.human_failures == 0
    steps["n"] = 40  # the human-guided phase from here on
    hil.attach_device(ScriptedDevice(lambda i: TeleopReading(0.0, np.zeros(6), engage=False,
                                                             events=events.get(i, ()))))
    bonus = []
    for _ in range(5):
        action, _ = hil.act(obs, torch.zeros(2, 3))
        result = env.step(action)
        bonus.append((hil.reward(result.reward) - result.reward).tolist())
        obs = hil.after_step(result)
    np.testing.assert_allclose(bonus, [[0, 0], [2, 0], [0, 0], [-3, 0], [0, 0]], atol=1e-5)  # float32 rewards
    assert hil.human_successes == 1 and hil.human_failures == 1
    env.close()
