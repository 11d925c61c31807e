"""robot_rl's tasks as gymnasium envs (robot_rl/gym/): the VectorEnv, the registered ids, the single env.

Each check runs the adapter beside a twin of the same task built directly (same seed, same actions), so what
the adapter returns is compared with what the task itself computed.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium", reason="needs gymnasium: pip install 'robot-rl[gym]'")

import robot_rl.gym as rgym  # noqa: E402 - registers the robot_rl/<Task>-v0 ids
from robot_rl.core.config import TASKS  # noqa: E402
from robot_rl.sims.extras import installed  # noqa: E402


def twins(task: str, n: int, seed: int, **overrides):
    """The task as a gymnasium VectorEnv and the same task built directly, both reset with ``seed``."""
    venv = rgym.make_vec(task, n, seed=seed, **overrides)
    twin = TASKS.get(task)(**overrides).make("cpu", seed, num_envs=n)
    obs, info = venv.reset(seed=seed)
    twin_obs = twin.reset(seed=seed)
    return venv, twin, obs, info, twin_obs


def _canonical_tasks() -> list[str]:
    return sorted({TASKS.name_of(TASKS.get(n)) for n in TASKS.names()})


@pytest.mark.parametrize("name", _canonical_tasks())
def test_every_task_is_a_vector_env_or_says_what_to_install(name):
    cls = TASKS.get(name)
    extra = cls.extra or ("mujoco" if name.startswith("mujoco/") else None)
    if name == "dsrl":  # a view of a trained flow policy: it cannot be built without one
        with pytest.raises(ValueError, match="init_from"):
            rgym.make_vec(name, 2, seed=0)
        return
    if extra is not None and not installed(extra):
        with pytest.raises(ImportError, match=r"pip install 'robot-rl\[" + extra):
            rgym.make_vec(name, 2, seed=0)
        return
    venv = rgym.make_vec(name, 2, seed=0)
    try:
        spec = venv.task_env.spec
        assert venv.metadata["autoreset_mode"] is gym.vector.AutoresetMode.SAME_STEP
        assert venv.action_space.shape == (2, *spec.action.shape) and venv.action_space.dtype == np.float32
        keys = list(spec.observation)
        single = venv.single_observation_space
        assert isinstance(single, gym.spaces.Box if len(keys) == 1 else gym.spaces.Dict)
        obs, info = venv.reset(seed=1)
        assert obs in venv.observation_space and info == {}
        for _ in range(3):
            obs, reward, terminated, truncated, info = venv.step(venv.action_space.sample())
            assert obs in venv.observation_space
            assert reward.shape == (2,) and reward.dtype == np.float32
            assert terminated.dtype == truncated.dtype == np.bool_
        arrays = obs if isinstance(obs, dict) else {keys[0]: obs}
        for key, array in arrays.items():  # the task's own dtypes and shapes, batched
            assert array.dtype == np.dtype(spec.observation[key].dtype)
            assert array.shape == (2, *spec.observation[key].shape)
    finally:
        venv.close()


def test_steps_match_the_task_and_final_observations_are_the_finished_episodes():
    venv, twin, obs, _, twin_obs = twins("reach", 4, seed=3, max_episode_steps=5)
    np.testing.assert_array_equal(obs, twin_obs["state"].numpy())
    rng = np.random.default_rng(0)
    ended = 0
    for t in range(12):
        if t == 2:  # sub-env 0 reaches its goal now: it must end terminated, the others run to the time limit
            for env in (venv.task_env, twin):
                env.goal[0] = env.end_effector()[0]
        action = rng.uniform(-1, 1, (4, 2)).astype(np.float32)
        if t == 2:
            action[0] = 0.0
        obs, reward, terminated, truncated, info = venv.step(action)
        res = twin.step(torch.as_tensor(action))
        np.testing.assert_array_equal(obs, res.obs["state"].numpy())
        np.testing.assert_array_equal(reward, res.reward.numpy())
        np.testing.assert_array_equal(terminated, res.terminated.numpy())
        np.testing.assert_array_equal(truncated, res.truncated.numpy())
        done = terminated | truncated
        if t == 2:
            assert terminated[0] and not truncated[0] and info["final_info"]["success"][0]
        if not done.any():
            assert "final_obs" not in info and "final_info" not in info
            np.testing.assert_array_equal(info["success"], res.info["success"].numpy())
            continue
        ended += int(done.sum())
        np.testing.assert_array_equal(info["_final_obs"], done)
        for i in range(4):
            if done[i]:
                np.testing.assert_array_equal(info["final_obs"][i], res.info["final_obs"]["state"][i].numpy())
                assert not np.array_equal(info["final_obs"][i], obs[i])  # the returned row is the next episode's
            else:
                assert info["final_obs"][i] is None
        final = info["final_info"]
        np.testing.assert_array_equal(final["_episode_return"], done)
        np.testing.assert_array_equal(final["episode_return"][done], res.info["episode_return"].numpy()[done])
        np.testing.assert_array_equal(final["episode_length"][done], res.info["episode_length"].numpy()[done])
        np.testing.assert_array_equal(info["_success"], ~done)
    # sub-envs 1-3 hit the 5-step limit at steps 5 and 10; sub-env 0 succeeded at step 3, then hit the limit at 8
    assert ended == 8


def test_gymnasium_episode_statistics_agree_with_the_task():
    # gymnasium's own wrapper reads metadata["autoreset_mode"]: with SAME_STEP it starts a new episode in the
    # step that ended the old one. Its returns must be the task's.
    venv = gym.wrappers.vector.RecordEpisodeStatistics(rgym.make_vec("reach", 3, seed=0, max_episode_steps=4))
    venv.reset(seed=0)
    seen = 0
    for _ in range(9):
        _, _, _, _, info = venv.step(venv.action_space.sample())
        if "episode" in info:
            done = info["_episode"]
            final = info["final_info"]
            np.testing.assert_allclose(info["episode"]["r"][done], final["episode_return"][done], rtol=1e-5)
            np.testing.assert_array_equal(info["episode"]["l"][done], final["episode_length"][done])
            seen += int(done.sum())
    assert seen == 6


def test_reset_seeds_the_batch_and_refuses_what_it_cannot_do():
    venv = rgym.make_vec("push", 3)
    first, _ = venv.reset(seed=7)
    venv.step(venv.action_space.sample())
    again, _ = venv.reset(seed=7)
    np.testing.assert_array_equal(first, again)
    with pytest.raises(TypeError, match="one generator"):
        venv.reset(seed=[1, 2, 3])
    with pytest.raises(ValueError, match="does not match"):
        venv.step(np.zeros(2, dtype=np.float32))  # one sub-env's action given to the batch
    with pytest.raises(ValueError, match="non-finite"):
        venv.step(np.full((3, 2), np.nan, dtype=np.float32))


def test_overrides_and_configs_reach_the_task():
    venv = rgym.make_vec("reach", 2, seed=0, max_episode_steps=7, control="joint")
    assert venv.task_env.max_episode_steps == 7 and venv.task_env.cfg.control == "joint"
    noisy = rgym.make_vec("reach", 2, seed=0, randomize={"obs_noise": {"state": 0.1}})  # a nested section
    assert type(noisy.task_env).__name__ == "RandomizedVecEnv"
    cfg = dataclasses.replace(TASKS.get("reach")(), max_episode_steps=9)
    assert rgym.make_vec(cfg, 2, seed=0).task_env.max_episode_steps == 9
    with pytest.raises(Exception, match="valid keys"):
        rgym.make_vec("reach", 2, no_such_field=1)


def test_registered_ids_make_single_and_vector_envs():
    ids = rgym.register_tasks()
    assert {"robot_rl/Reach-v0", "robot_rl/ReachPixels-v0", "robot_rl/MujocoPickCube-v0"} <= set(ids)
    assert ids["robot_rl/MujocoPickCube-v0"] == "mujoco/pick_cube" and all(i in gym.registry for i in ids)
    vec = gym.make_vec("robot_rl/Reach-v0", num_envs=5, max_episode_steps=6)
    assert isinstance(vec, rgym.RobotRLVectorEnv) and vec.num_envs == 5 and vec.task_env.max_episode_steps == 6
    from gymnasium.utils.env_checker import check_env

    for gym_id in ("robot_rl/Reach-v0", "robot_rl/ReachPixels-v0"):  # a Box and a Dict observation
        env = gym.make(gym_id, render_mode="rgb_array")
        check_env(env.unwrapped, skip_render_check=False)
        frame = env.unwrapped.render()
        assert frame.dtype == np.uint8 and frame.shape[-1] == 3
    assert gym.make("robot_rl.gym:robot_rl/Push-v0").unwrapped.task_env.spec.extras["task"] == "push"


def test_single_env_ends_episodes_on_their_last_observation():
    env = rgym.RobotRLEnv("reach", max_episode_steps=3)  # the task's own time limit
    twin = TASKS.get("reach")(max_episode_steps=3).make("cpu", 0, num_envs=1)
    obs, _ = env.reset(seed=11)
    np.testing.assert_array_equal(obs, twin.reset(seed=11)["state"][0].numpy())
    for t in range(3):
        action = np.array([0.5, -0.5], dtype=np.float32)
        obs, reward, terminated, truncated, info = env.step(action)
        res = twin.step(torch.as_tensor(action)[None])
        assert reward == pytest.approx(float(res.reward[0]))
        assert truncated == (t == 2) and not terminated
    np.testing.assert_array_equal(obs, res.info["final_obs"]["state"][0].numpy())
    assert not np.array_equal(obs, res.obs["state"][0].numpy())  # not the next episode's first observation
    assert info["episode_length"] == 3 and info["episode_return"] == pytest.approx(float(res.info["episode_return"][0]))
    # gymnasium.make's own max_episode_steps is its TimeLimit wrapper, over the task's limit
    limited = gym.make("robot_rl/Reach-v0", max_episode_steps=2)
    limited.reset(seed=0)
    assert [limited.step(np.zeros(2, dtype=np.float32))[3] for _ in range(2)] == [False, True]


@pytest.mark.integration
def test_the_package_imports_without_gymnasium_and_names_the_pip_install():
    # The rsl_rl adapter needs no gymnasium; asking for the gymnasium parts then names the extra to install.
    code = (
        "import sys; sys.modules['gymnasium'] = None\n"
        "import robot_rl.gym as g\n"
        "try:\n    g.make_vec\nexcept ImportError as e:\n    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ERR" in out.stdout and "pip install 'robot-rl[gym]'" in out.stdout
