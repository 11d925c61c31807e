"""The gymnasium adapter follows the VecEnv contract: spec, same-step auto-reset, final_obs, success."""

import sys

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

from robot_rl.core.config import TASKS  # noqa: E402
from robot_rl.core.env import NonFiniteActionError  # noqa: E402
from robot_rl.sims.gymnasium import GymnasiumTaskConfig  # noqa: E402


class BoundsEnv(gym.Env):
    """1-d state; per-dimension action bounds [-1, 1] × [0, 4]; success and termination when a[1] > 3."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 4.0], np.float32))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        success = bool(action[1] > 3.0)
        obs = np.array([self.t + 10 * action[1]], np.float32)
        return obs, float(action[0]), success, False, {"is_success": success}


gym.register("RobotRLBounds-v0", entry_point=BoundsEnv, max_episode_steps=4)


def test_registered_and_pendulum_spec():
    assert TASKS.get("gym") is GymnasiumTaskConfig
    env = GymnasiumTaskConfig(num_envs=2).make("cpu", seed=0)
    assert env.spec.observation["state"].shape == (3,)
    assert (env.spec.action.shape, env.spec.action.low, env.spec.action.high) == ((1,), -2.0, 2.0)
    assert env.max_episode_steps == 200 and env.num_envs == 2
    obs = env.reset()
    assert obs["state"].shape == (2, 3) and obs["state"].dtype == torch.float32
    env.close()


def test_same_step_autoreset_matches_a_plain_gymnasium_env():
    seed, actions = 7, [0.5, -2.0, 1.0]
    env = GymnasiumTaskConfig(num_envs=2, max_episode_steps=3).make("cpu", seed=seed)
    ref = gym.make("Pendulum-v1", max_episode_steps=3)  # sub-env 0 is seeded with `seed`
    obs = env.reset()
    ref_obs, _ = ref.reset(seed=seed)
    np.testing.assert_allclose(obs["state"][0].numpy(), ref_obs)
    total = 0.0
    for t, a in enumerate(actions):
        res = env.step(torch.full((2, 1), a))
        ref_obs, r, *_ = ref.step(np.array([a], np.float32))
        total += r
        assert res.reward[0].item() == pytest.approx(r, rel=1e-5)
        np.testing.assert_allclose(res.info["final_obs"]["state"][0].numpy(), ref_obs, rtol=1e-6)
        if t < 2:
            assert not res.truncated.any() and torch.equal(res.obs["state"], res.info["final_obs"]["state"])
            assert res.info["episode_length"].tolist() == [0, 0]
    assert res.truncated.tolist() == [True, True] and not res.terminated.any()
    # The returned obs is already the next episode's first observation (the env continues its RNG).
    np.testing.assert_allclose(res.obs["state"][0].numpy(), ref.reset()[0], rtol=1e-6)
    assert res.info["episode_length"].tolist() == [3, 3]
    assert res.info["episode_return"][0].item() == pytest.approx(total, rel=1e-5)
    assert res.info["success"].tolist() == [False, False]
    res = env.step(torch.zeros(2, 1))
    assert res.info["episode_return"].tolist() == [0.0, 0.0]
    env.close()


def test_actions_are_clamped_and_nan_is_rejected():
    env = GymnasiumTaskConfig(num_envs=1).make("cpu", seed=0)
    ref = gym.make("Pendulum-v1")
    env.reset()
    ref.reset(seed=0)
    res = env.step(torch.tensor([[10.0]]))
    _, r, *_ = ref.step(np.array([2.0], np.float32))
    assert res.reward.item() == pytest.approx(r, rel=1e-5)
    with pytest.raises(NonFiniteActionError):
        env.step(torch.tensor([[float("nan")]]))


def test_per_dimension_bounds_are_rescaled_and_success_is_read_from_final_info():
    env = GymnasiumTaskConfig(env_id="RobotRLBounds-v0", num_envs=2).make("cpu", seed=0)
    assert (env.spec.action.low, env.spec.action.high) == (-1.0, 1.0)
    env.reset()
    # Row 0: a = (0, 0) ↦ (0, 2), no success. Row 1: a = (0.5, 0.9) ↦ (0.5, 3.8), success and terminated.
    res = env.step(torch.tensor([[0.0, 0.0], [0.5, 0.9]]))
    assert res.terminated.tolist() == [False, True]
    assert res.info["success"].tolist() == [False, True]
    np.testing.assert_allclose(res.obs["state"][:, 0].numpy(), [1 + 20.0, 0.0])  # row 1 already reset
    np.testing.assert_allclose(res.info["final_obs"]["state"][:, 0].numpy(), [21.0, 1 + 38.0], rtol=1e-6)
    assert res.reward.tolist() == pytest.approx([0.0, 0.5])
    assert res.info["episode_return"].tolist() == pytest.approx([0.0, 0.5])
    assert res.info["episode_length"].tolist() == [0, 1]


def test_missing_gymnasium_gives_an_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    with pytest.raises(ImportError, match=r"pip install 'robot-rl\[gym\]'"):
        GymnasiumTaskConfig().make("cpu", seed=0)


def test_sac_trains_on_gym_transitions():
    from robot_rl.core.transition import TransitionBatch
    from robot_rl.policies.sac import SACConfig

    env = GymnasiumTaskConfig(num_envs=2, max_episode_steps=5).make("cpu", seed=0)
    algo = SACConfig(actor_hidden=(16,), critic_hidden=(16,), batch_size=8).build(env.spec, "cpu", seed=0)
    storage = algo.make_storage(env.num_envs)
    obs = env.reset()
    for _ in range(6):
        action, _ = algo.actor.act(obs)
        assert action.abs().max() <= 2.0
        res = env.step(action)
        storage.add(TransitionBatch(obs=obs, action=action, reward=res.reward, terminated=res.terminated,
                                    truncated=res.truncated, next_obs=res.info["final_obs"],
                                    intervened=torch.zeros(2, dtype=torch.bool),
                                    policy_version=torch.zeros(2, dtype=torch.int64), env_index=torch.arange(2)))
        obs = res.obs
    assert len(storage) == 12
    stats = algo.update(storage.sample(8))
    assert np.isfinite(list(stats.values())).all()


class DictObsEnv(gym.Env):
    """A gym_hil-like nested Dict observation: two float Boxes and two cameras; 3-step episodes."""

    observation_space = gym.spaces.Dict({
        "agent_pos": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
        "pixels": gym.spaces.Dict({"front": gym.spaces.Box(0, 255, (4, 5, 3), np.uint8),
                                   "wrist": gym.spaces.Box(0, 255, (4, 5, 3), np.uint8)}),
        "environment_state": gym.spaces.Box(-np.inf, np.inf, (2, 1), np.float32),
    })
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _obs(self):
        t = float(self.t)
        return {"agent_pos": np.full(3, t, np.float32),
                "pixels": {"front": np.full((4, 5, 3), self.t, np.uint8), "wrist": np.full((4, 5, 3), 100, np.uint8)},
                "environment_state": np.full((2, 1), -t, np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, False, self.t >= 3, {"succeed": self.t >= 3}


gym.register("RobotRLDictObs-v0", entry_point=DictObsEnv)


def test_dict_observations_map_to_state_and_image_keys():
    env = GymnasiumTaskConfig(env_id="RobotRLDictObs-v0", num_envs=2).make("cpu", seed=0)
    assert set(env.spec.observation) == {"state", "image.front", "image.wrist"}
    assert env.spec.observation["state"].shape == (5,)
    front = env.spec.observation["image.front"]
    assert front.shape == (4, 5, 3) and front.dtype == "uint8"
    assert env.spec.extras["state_layout"] == [["agent_pos", 3], ["environment_state", 2]]
    obs = env.reset()
    assert obs["state"].dtype == torch.float32 and obs["image.front"].dtype == torch.uint8
    for _ in range(3):
        res = env.step(torch.zeros(2, 1))
    assert res.truncated.all()
    # The finished episode's last observation (t = 3) comes from final_info/final_obs, the new one is t = 0.
    assert res.info["final_obs"]["state"][0].tolist() == [3, 3, 3, -3, -3]
    assert int(res.info["final_obs"]["image.front"][0, 0, 0, 0]) == 3
    assert res.obs["state"][0].tolist() == [0, 0, 0, 0, 0] and int(res.obs["image.front"][1].max()) == 0
    assert res.info["success"].tolist() == [True, True]  # gym_hil's "succeed" key


@pytest.mark.integration
def test_async_vector_env_matches_sync():
    results = []
    for vector in ("sync", "async"):
        env = GymnasiumTaskConfig(num_envs=2, vector=vector, max_episode_steps=3).make("cpu", seed=5)
        steps = [env.reset()["state"]]
        for a in (0.5, -1.0, 2.0, 0.0):
            res = env.step(torch.full((2, 1), a))
            steps += [res.obs["state"], res.reward, res.info["final_obs"]["state"], res.truncated.float()]
        assert env.spec.extras["gym_id"] == "Pendulum-v1" and env.max_episode_steps == 3
        env.close()
        results.append(steps)
    for s, a in zip(*results, strict=True):
        torch.testing.assert_close(s, a)


def test_prefixed_task_id_builds_the_env():
    from robot_rl.loop.config import resolve_train_config

    cfg = resolve_train_config(task="gymnasium/MountainCarContinuous-v0", overrides=["task.num_envs=2"])
    env = cfg.task.make("cpu", seed=0)
    assert env.spec.extras["gym_id"] == "MountainCarContinuous-v0" and env.spec.observation["state"].shape == (2,)
    env.close()
    with pytest.raises(gym.error.Error):
        GymnasiumTaskConfig(env_id="NoSuchEnv-v0").make("cpu", seed=0)


@pytest.mark.sim
@pytest.mark.integration
def test_gymnasium_mujoco_env_sync_and_async():
    pytest.importorskip("mujoco")
    for vector in ("sync", "async"):
        env = GymnasiumTaskConfig(env_id="InvertedPendulum-v5", num_envs=2, vector=vector).make("cpu", seed=0)
        assert env.spec.observation["state"].shape == (4,) and env.spec.action.shape == (1,)
        env.reset()
        for _ in range(3):
            res = env.step(torch.zeros(2, 1))
        assert torch.isfinite(res.obs["state"]).all() and res.reward.tolist() == [1.0, 1.0]
        env.close()


def _gym_hil_usable() -> None:
    """Skip unless gym_hil and a MuJoCo it supports are installed (gym-hil pins mujoco < 3.9)."""
    pytest.importorskip("gym_hil")
    from importlib.metadata import requires

    import mujoco
    from packaging.requirements import Requirement

    for req in map(Requirement, requires("gym-hil") or []):
        if req.name == "mujoco" and mujoco.__version__ not in req.specifier:
            pytest.skip(f"gym_hil needs mujoco{req.specifier}, mujoco {mujoco.__version__} is installed")


@pytest.mark.sim
def test_gym_hil_panda_state_env():
    _gym_hil_usable()
    env = GymnasiumTaskConfig(env_id="gym_hil/PandaPickCubeBase-v0", num_envs=1).make("cpu", seed=0)
    assert env.spec.observation["state"].shape == (21,)
    assert env.spec.extras["state_layout"] == [["agent_pos", 18], ["environment_state", 3]]
    assert env.spec.action.shape == (7,) and env.max_episode_steps == 100
    env.reset()
    for _ in range(3):
        res = env.step(torch.zeros(1, 7))
    assert torch.isfinite(res.obs["state"]).all() and res.info["success"].tolist() == [False]
    env.close()


@pytest.mark.parametrize("preset", [None, "egl"])
@pytest.mark.integration
def test_gymnasium_make_picks_a_headless_gl_backend(preset):
    """gym_hil's Panda envs open a MuJoCo renderer in ``__init__`` even without cameras, so on a machine without a
    display ``make`` chooses ``MUJOCO_GL`` (osmesa on CPU, if its library is there) before mujoco is imported, as
    the MuJoCo backend does; a ``MUJOCO_GL`` the user set is kept. A fresh process: the choice is made once."""
    import ctypes.util
    import os
    import subprocess

    code = ("import os; from robot_rl.sims.gymnasium import GymnasiumTaskConfig; "
            "GymnasiumTaskConfig(env_id='Pendulum-v1').make('cpu', seed=0).close(); "
            "print('MUJOCO_GL=' + os.environ.get('MUJOCO_GL', ''))")
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY", "PYOPENGL_PLATFORM")}
    if preset:
        env["MUJOCO_GL"] = preset
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    expected = preset or ("osmesa" if ctypes.util.find_library("OSMesa") else "")
    assert f"MUJOCO_GL={expected}" in out.stdout.splitlines()
