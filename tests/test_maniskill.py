"""The ManiSkill3 adapter follows the VecEnv contract: spec, same-step auto-reset, final_obs, success.

Runs on the CPU backends (``physx_cpu`` + ``sapien_cpu``, Vulkan through Mesa's lavapipe) and, where
CUDA is present, also on ``physx_cuda``. Envs are slow to build (about 1-2 s each, a rendering env
more), so each one is a module-scoped fixture shared by several tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from needs import need_vulkan_driver

gym = pytest.importorskip("gymnasium")
pytest.importorskip("mani_skill")

from robot_rl.core.config import TASKS  # noqa: E402
from robot_rl.core.env import NonFiniteActionError  # noqa: E402
from robot_rl.loop.config import resolve_train_config  # noqa: E402
from robot_rl.sims.maniskill import ManiSkillTaskConfig, ManiSkillVecEnv  # noqa: E402

CPU = {"sim_backend": "physx_cpu", "render_backend": "sapien_cpu"}
# ManiSkill 3.0.1 calls np.isnan on torch actions (CPU backend); numpy 2 warns about it on every step.
pytestmark = [pytest.mark.sim, pytest.mark.integration,  # SAPIEN's renderer: seconds of CPU a test
              pytest.mark.filterwarnings("ignore:__array_wrap__ must accept context:DeprecationWarning")]


def _make(cfg: ManiSkillTaskConfig, device: str = "cpu", seed: int = 0) -> ManiSkillVecEnv:
    need_vulkan_driver()  # skips only without a driver; with one, a scene that cannot be built is a failure
    return cfg.make(device, seed)


def _raw(env_id: str, **kwargs: object) -> gym.Env:
    import mani_skill.envs  # noqa: F401

    return gym.make(env_id, num_envs=1, obs_mode="state", **CPU, **kwargs)


@pytest.fixture(scope="module")
def pick():
    env = _make(ManiSkillTaskConfig(num_envs=2, max_episode_steps=4))
    yield env
    env.close()


def test_registered_spec_and_reset(pick):
    assert TASKS.get("maniskill") is ManiSkillTaskConfig
    assert pick.num_envs == 2 and pick.max_episode_steps == 4 and len(pick.envs) == 2
    assert pick.spec.observation["state"].shape == (42,)
    assert (pick.spec.action.shape, pick.spec.action.low, pick.spec.action.high) == ((8,), -1.0, 1.0)
    assert pick.spec.extras["control_mode"] == "pd_joint_delta_pos"
    obs = pick.reset(seed=5)
    pick.spec.check_obs(obs)
    assert obs["state"].device == pick.device
    # sub-env i is seeded with seed + i: different scenes
    assert not torch.equal(obs["state"][0], obs["state"][1])


def test_same_step_autoreset_matches_raw_maniskill(pick):
    raw = _raw("PickCube-v1", max_episode_steps=4)
    obs = pick.reset(seed=11)
    ref, _ = raw.reset(seed=11)
    torch.testing.assert_close(obs["state"][:1], ref)
    gen = torch.Generator().manual_seed(0)
    total = torch.zeros(())
    for t in range(4):
        a = torch.rand(2, 8, generator=gen) * 2 - 1
        rng = torch.get_rng_state()  # unseeded resets draw scenes from torch's global RNG
        res = pick.step(a)
        ref, r, _, _, info = raw.step(a[:1])
        total += r[0]
        assert res.reward[0].item() == pytest.approx(r[0].item(), abs=1e-6)
        assert bool(res.info["success"][0]) == bool(info["success"][0])
        for key in ("final_obs", "success", "episode_return", "episode_length"):
            assert res.info[key] is not None
        if t < 3:
            assert not (res.terminated | res.truncated).any()
            torch.testing.assert_close(res.obs["state"][:1], ref)
            torch.testing.assert_close(res.info["final_obs"]["state"], res.obs["state"])
            assert (res.info["episode_length"] == 0).all()
    # step 4 hits the time limit in both sub-envs: truncated, stats of the finished episodes, the
    # last observation in final_obs and the next episode's first one in obs.
    assert res.truncated.all() and not res.terminated.any()
    torch.testing.assert_close(res.info["final_obs"]["state"][:1], ref)
    assert res.info["episode_length"].tolist() == [4, 4]
    assert res.info["episode_return"][0].item() == pytest.approx(total.item(), rel=1e-5)
    torch.set_rng_state(rng)
    first, _ = raw.reset()  # the unseeded reset ManiSkill would do itself, from the same RNG state
    torch.testing.assert_close(res.obs["state"][:1], first)
    assert not torch.equal(res.obs["state"], res.info["final_obs"]["state"])
    res = pick.step(torch.zeros(2, 8))
    assert (res.info["episode_length"] == 0).all() and not (res.terminated | res.truncated).any()
    raw.close()


def test_step_outputs_on_device_with_spec_dtypes(pick):
    pick.reset(seed=0)
    res = pick.step(torch.zeros(2, 8))
    pick.spec.check_obs(res.obs)
    pick.spec.check_obs(res.info["final_obs"])
    assert res.reward.dtype == torch.float32 and res.reward.shape == (2,)
    assert res.terminated.dtype == torch.bool and res.truncated.dtype == torch.bool
    assert res.info["success"].dtype == torch.bool
    for t in [res.reward, res.terminated, res.truncated, *res.info["final_obs"].values(), res.info["success"],
              res.info["episode_return"], res.info["episode_length"]]:
        assert t.device == pick.device


def test_nan_rejected_before_anything_applied_and_actions_clamped(pick):
    obs = pick.reset(seed=3)
    steps = [int(e.unwrapped.elapsed_steps[0]) for e in pick.envs]
    bad = torch.zeros(2, 8)
    bad[1, 2] = float("nan")
    with pytest.raises(NonFiniteActionError, match=r"sub-envs \[1\]"):
        pick.step(bad)
    assert [int(e.unwrapped.elapsed_steps[0]) for e in pick.envs] == steps
    with pytest.raises(ValueError, match="does not match"):
        pick.step(torch.zeros(2, 7))
    clamped = pick.step(torch.ones(2, 8)).obs["state"]
    torch.testing.assert_close(pick.reset(seed=3)["state"], obs["state"])
    over = pick.step(torch.full((2, 8), 5.0)).obs["state"]
    torch.testing.assert_close(over, clamped)


@pytest.mark.parametrize("env_id, state_dim", [("PushCube-v1", 35), ("PegInsertionSide-v1", 43)])
def test_other_tasks_step(env_id, state_dim):
    env = _make(ManiSkillTaskConfig(env_id=env_id, num_envs=2))
    try:
        assert env.spec.observation["state"].shape == (state_dim,)
        obs = env.reset()
        env.spec.check_obs(obs)
        gen = torch.Generator().manual_seed(1)
        for _ in range(3):
            res = env.step(torch.rand(2, 8, generator=gen) * 2 - 1)
            env.spec.check_obs(res.obs)
            assert torch.isfinite(res.reward).all() and res.info["success"].shape == (2,)
        assert not torch.equal(res.obs["state"], obs["state"])
    finally:
        env.close()


def test_rgb_observations_and_render():
    env = _make(ManiSkillTaskConfig(num_envs=1, obs="rgb", image_size=32, render=True))
    try:
        assert set(env.spec.observation) == {"state", "image.base_camera"}
        assert env.spec.observation["image.base_camera"].shape == (32, 32, 3)
        # qpos 9 + qvel 9 + is_grasped 1 + tcp_pose 7 + goal_pos 3
        assert env.spec.observation["state"].shape == (29,)
        obs = env.reset()
        env.spec.check_obs(obs)
        res = env.step(torch.zeros(1, 8))
        env.spec.check_obs(res.obs)
        image = res.obs["image.base_camera"][0]
        assert image.float().std() > 5  # a scene, not a blank frame
        frame = env.render()
        assert frame is not None and frame.dtype == torch.uint8 and frame.dim() == 3 and frame.shape[-1] == 3
        assert frame.float().std() > 5
    finally:
        env.close()


def test_unknown_env_id_lists_registered_ids():
    with pytest.raises(ValueError, match="PickCube-v1"):
        ManiSkillTaskConfig(env_id="NoSuchTask-v0").make("cpu", 0)


def test_train_config_resolves_with_env_id():
    cfg = resolve_train_config("maniskill", "ppo", overrides=["task.env_id=PushCube-v1", "task.obs=rgb"])
    assert isinstance(cfg.task, ManiSkillTaskConfig)
    assert (cfg.task.env_id, cfg.task.obs, cfg.task.num_envs) == ("PushCube-v1", "rgb", 512)
    assert cfg.task.backends(torch.device("cpu")) == ("physx_cpu", "sapien_cpu")
    assert cfg.task.backends(torch.device("cuda:1")) == ("physx_cuda:1", "sapien_cuda:1")
    example = Path(__file__).resolve().parents[1] / "examples" / "maniskill_pickcube_ppo.yaml"
    cfg = resolve_train_config(config_file=example)
    assert isinstance(cfg.task, ManiSkillTaskConfig) and cfg.task.env_id == "PickCube-v1"
    assert (cfg.task.num_envs, cfg.algo.gamma) == (1024, 0.8)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (physx_cuda)")
def test_physx_cuda_batched_on_gpu_without_copies():
    env = _make(ManiSkillTaskConfig(num_envs=4, max_episode_steps=3), device="cuda")
    try:
        assert len(env.envs) == 1 and env.sim_device.type == "cuda"
        obs = env.reset(seed=0)
        assert obs["state"].device.type == "cuda" and obs["state"].shape == (4, 42)
        for _ in range(3):
            res = env.step(torch.zeros(4, 8, device="cuda"))
        assert res.truncated.all() and res.info["episode_length"].tolist() == [3] * 4
        assert res.reward.device.type == "cuda" and res.info["success"].device.type == "cuda"
        # nothing ended on the next step: the adapter hands ManiSkill's own tensor on
        raw_step = env.envs[0].step
        seen = {}

        def spy(a):
            out = raw_step(a)
            seen["obs"] = out[0]
            return out

        env.envs[0].step = spy
        res = env.step(torch.zeros(4, 8, device="cuda"))
        assert res.obs["state"].data_ptr() == seen["obs"].data_ptr()
    finally:
        env.close()
