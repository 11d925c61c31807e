"""Other libraries' PPO trained on robot_rl's ``reach`` through the shipped adapters (robot_rl/gym/sb3.py, rsl_rl.py).

Each adapter is first checked step by step against a twin of the task (what SB3 and rsl_rl read: terminal
observations, time-outs, episode records), then the library's own PPO trains on it for a few iterations: the
episodes it records must be the task's, and the return, success and value fit must improve (seeds are fixed;
the margins are a third or less of what every one of seeds 0-2 showed here).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.core.config import TASKS

ROOT = Path(__file__).resolve().parents[1]


def _record_episodes(task_env) -> list[tuple[int, float, bool]]:
    """Patch ``task_env.step`` to list ``(step, return, success)`` of every episode it ends, in env order."""
    ended: list[tuple[int, float, bool]] = []
    step = task_env.step
    count = [0]

    def recording(action):
        res = step(action)
        done = res.terminated | res.truncated
        returns, successes = res.info["episode_return"][done].tolist(), res.info["success"][done].tolist()
        ended.extend((count[0], r, s) for r, s in zip(returns, successes))
        count[0] += 1
        return res

    task_env.step = recording
    return ended


# ---- stable-baselines3 ----------------------------------------------------------------------------------------------


def _sb3():
    pytest.importorskip("stable_baselines3", reason="needs stable-baselines3: pip install 'robot-rl[sb3]'")
    from robot_rl.gym import sb3

    return sb3


def test_sb3_vec_env_reports_what_sb3_reads():
    sb3 = _sb3()
    from stable_baselines3.common.monitor import Monitor

    env = sb3.make_sb3_vec("reach", 3, seed=0, max_episode_steps=4)
    twin = TASKS.get("reach")(max_episode_steps=4).make("cpu", 0, num_envs=3)
    env.seed(5)
    obs = env.reset()
    np.testing.assert_array_equal(obs, twin.reset(seed=5)["state"].numpy())
    returns = np.zeros(3)
    for t in range(6):
        if t == 1:  # sub-env 0 reaches its goal: terminated, not a time-out
            for task in (env.env.task_env, twin):
                task.goal[0] = task.end_effector()[0]
        action = np.zeros((3, 2), dtype=np.float32) if t == 1 else np.full((3, 2), 0.3, dtype=np.float32)
        obs, reward, done, infos = env.step(action)
        res = twin.step(torch.as_tensor(action))
        np.testing.assert_array_equal(obs, res.obs["state"].numpy())
        assert reward.dtype == np.float32 and done.dtype == np.bool_
        returns += reward
        for i in range(3):
            if not done[i]:
                assert infos[i] == {}
                continue
            final = res.info["final_obs"]["state"][i].numpy()
            np.testing.assert_array_equal(infos[i]["terminal_observation"], final)
            assert not np.array_equal(infos[i]["terminal_observation"], obs[i])
            assert infos[i]["TimeLimit.truncated"] == bool(res.truncated[i]) == (not (t == 1 and i == 0))
            assert infos[i]["is_success"] == (t == 1 and i == 0)
            assert infos[i]["episode"]["r"] == pytest.approx(returns[i], rel=1e-5)
            assert infos[i]["episode"]["l"] == int(res.info["episode_length"][i])
            returns[i] = 0.0
    assert env.get_attr("max_episode_steps") == [4, 4, 4] and env.get_attr("render_mode", [1]) == [None]
    assert env.env_is_wrapped(Monitor) == [True] * 3
    assert env.env_method("get_params")[0]["link_length"].shape == (3, 2)
    with pytest.raises(ValueError, match="one batched"):
        env.set_attr("max_episode_steps", 9, indices=[0])


def test_sb3_ppo_trains_on_reach_through_the_adapter():
    sb3 = _sb3()
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    env = sb3.make_sb3_vec("reach", 64, seed=0)
    ended = _record_episodes(env.env.task_env)
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=1024, n_epochs=5, learning_rate=1e-3, seed=0,
                device="cpu", policy_kwargs={"net_arch": [64, 64]})
    mean_return, value_loss = [], []

    class Record(BaseCallback):
        def _on_rollout_end(self) -> None:  # the previous update's losses are still in the logger here
            mean_return.append(np.mean([e["r"] for e in self.model.ep_info_buffer]))
            value_loss.append(self.model.logger.name_to_value.get("train/value_loss"))

        def _on_step(self) -> bool:
            return True

    model.learn(64 * 64 * 10, callback=Record())
    assert model.num_timesteps == 64 * 64 * 10
    # SB3's episode records (from the adapter's Monitor-style infos) are the task's own episodes
    assert [e["r"] for e in model.ep_info_buffer] == pytest.approx([r for _, r, _ in ended[-100:]], rel=1e-5)
    assert all(0 < e["l"] <= 50 for e in model.ep_info_buffer)
    # seeds 0-2: mean return -504..-522 -> -315..-357, value loss 15-16k -> 6-7k
    assert mean_return[-1] > mean_return[0] + 100, mean_return
    assert all(math.isfinite(v) for v in value_loss[1:]) and value_loss[-1] < 0.7 * value_loss[1], value_loss


def test_sb3_ppo_takes_dict_observations():
    sb3 = _sb3()
    from stable_baselines3 import PPO

    env = sb3.make_sb3_vec("reach_pixels", 4, seed=0)
    assert sorted(env.observation_space.spaces) == ["image_top", "state"]  # no dots: SB3 names modules by key
    model = PPO("MultiInputPolicy", env, n_steps=16, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(64)
    assert model.num_timesteps == 64


@pytest.mark.slow  # a fresh interpreter imports torch and SB3 again: 5-9 s here
def test_the_sb3_example_runs_as_a_user_runs_it(capsys, monkeypatch):
    _sb3()
    import tyro

    script = ROOT / "examples" / "sb3_ppo_reach.py"
    spec = importlib.util.spec_from_file_location("sb3_ppo_reach", script)
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, example)  # dataclasses look their module up there
    spec.loader.exec_module(example)
    with pytest.raises(SystemExit) as exit_info:  # --help in-process (a subprocess costs the imports again)
        tyro.cli(example.Args, args=["--help"])
    assert exit_info.value.code == 0 and "--num-envs" in capsys.readouterr().out
    # 16 sub-envs x 64 steps x 2 iterations: episodes (50 steps) end, so progress lines print
    out = subprocess.run([sys.executable, str(script), "--num-envs", "16", "--iterations", "2", "--eval-episodes", "4"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "mean episode return" in out.stdout and "evaluation (4 episodes" in out.stdout, out.stdout


# ---- rsl_rl ---------------------------------------------------------------------------------------------------------


def _rsl_rl():
    pytest.importorskip("rsl_rl", reason="needs rsl-rl-lib: pip install 'robot-rl[rsl_rl]'")
    from robot_rl.gym import rsl_rl

    return rsl_rl


def test_rsl_rl_vec_env_reports_what_rsl_rl_reads():
    rsl = _rsl_rl()
    env = rsl.make_rsl_rl_env("reach", 3, seed=2, max_episode_steps=4)
    twin = TASKS.get("reach")(max_episode_steps=4).make("cpu", 2, num_envs=3)
    np.testing.assert_array_equal(env.get_observations()["policy"], twin.reset(seed=2)["state"])
    assert env.num_actions == 2 and env.max_episode_length == 4 and env.cfg["max_episode_steps"] == 4
    for t in range(5):
        action = torch.full((3, 2), 0.4)
        obs, reward, dones, extras = env.step(action)
        res = twin.step(action)
        torch.testing.assert_close(obs["policy"], res.obs["state"])  # the next episode's first rows, where done
        torch.testing.assert_close(reward, res.reward)
        assert dones.dtype == torch.long and dones.tolist() == (res.terminated | res.truncated).long().tolist()
        assert torch.equal(extras["time_outs"], res.truncated)
        assert env.episode_length_buf.tolist() == [(t + 1) % 4] * 3
        if t == 3:
            torch.testing.assert_close(extras["log"]["Episode/return"], res.info["episode_return"])
            assert extras["log"]["Episode/length"].tolist() == [4.0] * 3
        else:
            assert "log" not in extras
    with pytest.raises(NotImplementedError, match="init_at_random_ep_len=False"):
        env.episode_length_buf = torch.zeros(3, dtype=torch.long)


def _rsl_train_cfg() -> dict:
    return {
        "num_steps_per_env": 24, "save_interval": 10**9, "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": {"class_name": "PPO", "num_learning_epochs": 5, "num_mini_batches": 4, "clip_param": 0.2,
                      "gamma": 0.99, "lam": 0.95, "value_loss_coef": 1.0, "entropy_coef": 0.005, "learning_rate": 1e-3,
                      "max_grad_norm": 1.0, "use_clipped_value_loss": True, "schedule": "adaptive", "desired_kl": 0.01},
        "actor": {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": True,
                  "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu", "obs_normalization": True},
    }


@pytest.mark.integration
def test_rsl_rl_ppo_trains_on_reach_through_the_adapter(tmp_path):
    rsl = _rsl_rl()
    if int(importlib.metadata.version("rsl-rl-lib").split(".")[0]) < 5:
        pytest.skip("the runner config below is rsl-rl-lib 5's (actor/critic models): pip install 'rsl-rl-lib>=5'")
    from rsl_rl.runners import OnPolicyRunner

    env = rsl.make_rsl_rl_env("reach", 256, seed=0)
    ended = _record_episodes(env.env)
    torch.manual_seed(0)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints the models and every iteration
        runner = OnPolicyRunner(env, _rsl_train_cfg(), log_dir=str(tmp_path), device="cpu")
    losses: list[dict] = []
    update = runner.alg.update
    runner.alg.update = lambda: losses.append(update()) or losses[-1]
    with contextlib.redirect_stdout(io.StringIO()):
        runner.learn(12)
    assert runner.current_learning_iteration == 11 and len(losses) == 12
    assert all(math.isfinite(v) for d in losses for v in d.values()), losses
    # rsl_rl sums rewards until `dones` itself: its episode returns must be the task's, episode for episode
    assert list(runner.logger.rewbuffer) == pytest.approx([r for _, r, _ in ended[-100:]], rel=1e-5)
    # seeds 0-2: the value loss fell 10-12k -> 3-4k; the success rate from 0.01-0.02 (first 3 iterations'
    # episodes, mostly time-outs) to 0.15-0.46 (last 3)
    assert losses[-1]["value"] < 0.5 * losses[0]["value"], [d["value"] for d in losses]
    early = [s for step, _, s in ended if step < 3 * 24]
    late = [s for step, _, s in ended if step >= 9 * 24]
    assert np.mean(late) > np.mean(early) + 0.1, (np.mean(early), np.mean(late))
