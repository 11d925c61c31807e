"""MuJoCo arm tasks on the CPU backend: spec, stepping, auto-reset, determinism, parallel == serial,
rendering, domain-randomisation parameters and bad input."""


import numpy as np
import pytest
import torch
from needs import need_mujoco_rendering

pytest.importorskip("mujoco")  # MUJOCO_GL is chosen in conftest.py, before anything imports mujoco

from robot_rl.core.config import TASKS
from robot_rl.core.env import NonFiniteActionError
from robot_rl.sims.mujoco import MujocoReachConfig

pytestmark = pytest.mark.sim

NAMES = ["mujoco/reach", "mujoco/push", "mujoco/pick_cube", "mujoco/peg_insert"]


def _actions(env, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(env.num_envs, *env.spec.action.shape, generator=g) * 2 - 1 for _ in range(steps)]


@pytest.mark.parametrize("name", NAMES)
def test_spec_step_and_device(name):
    env = TASKS.get(name)(num_envs=3).make("cpu", seed=0)
    obs = env.reset()
    assert env.spec.extras["task"] == name
    for key, spec in env.spec.observation.items():
        spec.check(key, obs[key])
    res = env.step(torch.zeros(3, *env.spec.action.shape))
    for key, spec in env.spec.observation.items():
        spec.check(key, res.obs[key])
        spec.check(key, res.info["final_obs"][key])
    assert res.reward.shape == (3,) and res.reward.dtype == torch.float32
    assert res.terminated.dtype == torch.bool and res.truncated.dtype == torch.bool
    assert res.info["success"].dtype == torch.bool
    assert all(t.device.type == "cpu" for t in (res.reward, res.terminated, res.obs["state"]))
    env.close()


def test_action_dims_follow_control_and_gripper():
    assert TASKS.get("mujoco/reach")(num_envs=1).make("cpu", 0).spec.action.shape == (3,)
    assert TASKS.get("mujoco/reach")(num_envs=1, control="joint").make("cpu", 0).spec.action.shape == (6,)
    assert TASKS.get("mujoco/pick_cube")(num_envs=1).make("cpu", 0).spec.action.shape == (4,)


def test_ee_delta_moves_the_grip_site_where_asked():
    env = MujocoReachConfig(num_envs=2, start_noise=0.0).make("cpu", 0)
    grip = env.ix.site["grip"]
    before = env.readout.site_pos[:, grip].clone()
    for _ in range(3):
        env.step(torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0]]))
    moved = env.readout.site_pos[:, grip] - before
    # Commanded 3 × 3 cm along +x (world 0) and −z (world 1); the servos lag a little.
    assert 0.04 < moved[0, 0] < 0.1 and moved[0, 1:].abs().max() < 0.01
    assert -0.1 < moved[1, 2] < -0.04 and moved[1, :2].abs().max() < 0.01


def test_truncation_auto_reset_and_final_obs():
    env = MujocoReachConfig(num_envs=2, max_episode_steps=3).make("cpu", 0)
    env.reset()
    zero = torch.zeros(2, 3)
    for _ in range(2):
        res = env.step(zero)
        assert not (res.terminated | res.truncated).any()
    goal_before = env.readout.mocap_pos[:, env.ix.mocap["goal"]].clone()
    res = env.step(zero)
    assert res.truncated.all() and not res.terminated.any()
    assert (res.info["episode_length"] == 3).all()
    assert torch.allclose(res.info["episode_return"], res.info["episode_return"])
    # final_obs holds the old goal (state[16:19]); obs already shows the next episode's goal.
    assert torch.allclose(res.info["final_obs"]["state"][:, 16:19], goal_before)
    assert not torch.allclose(res.obs["state"][:, 16:19], goal_before)
    assert (env.episode_length == 0).all()


def test_success_terminates_with_bonus():
    env = MujocoReachConfig(num_envs=1).make("cpu", 0)
    ix = env.ix
    for _ in range(40):
        r = env.readout
        delta = r.mocap_pos[:, ix.mocap["goal"]] - r.site_pos[:, ix.site["grip"]]
        res = env.step((delta / env.cfg.action_scale).clamp(-1, 1))
        if res.terminated.any():
            break
    assert res.terminated.all() and res.info["success"].all() and not res.truncated.any()
    assert res.reward.item() > 0  # the success bonus outweighs distance and step cost


def test_same_seed_same_trajectory():
    def run(seed):
        env = TASKS.get("mujoco/push")(num_envs=2, max_episode_steps=5).make("cpu", seed)
        out = [env.reset()["state"]]
        for a in _actions(env, 8):
            out.append(env.step(a).obs["state"])
        return torch.stack(out)

    a, b = run(3), run(3)
    assert torch.equal(a, b)
    assert not torch.equal(a, run(4))


def test_start_states_are_drawn_only_for_ended_worlds():
    env = MujocoReachConfig(num_envs=3, max_episode_steps=2).make("cpu", 0)
    before = env.generator.get_state()
    res = env.step(torch.zeros(3, 3))
    assert not (res.terminated | res.truncated).any() and torch.equal(env.generator.get_state(), before)
    res = env.step(torch.zeros(3, 3))
    assert res.truncated.all() and not torch.equal(env.generator.get_state(), before)


def test_parallel_worlds_equal_serial_runs():
    """4 worlds stepped by 4 threads give bit-identical results to each world alone in its own env."""
    batch = TASKS.get("mujoco/pick_cube")(num_envs=4, num_threads=4, max_episode_steps=100).make("cpu", 0)
    state = batch.get_state()
    actions = _actions(batch, 6)
    batch_out = [batch.step(a).obs["state"] for a in actions]
    for i in range(4):
        single = TASKS.get("mujoco/pick_cube")(num_envs=1, num_threads=1, max_episode_steps=100).make("cpu", 0)
        single.set_state(state[i:i + 1])
        for t, a in enumerate(actions):
            assert torch.equal(single.step(a[i:i + 1]).obs["state"][0], batch_out[t][i])


def test_cpu_step_is_plain_mj_step_physics():
    """The backend's mj_step2 / mj_step / mj_step1 split gives bit-identical physics to frame_skip × mj_step,
    and its readout (sites, Jacobian) matches kinematics run on the new state."""
    import mujoco
    import numpy as np

    env = TASKS.get("mujoco/pick_cube")(num_envs=2, num_threads=1).make("cpu", 0)
    model = env.model
    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    plain = []
    for s in env.get_state().numpy():
        d = mujoco.MjData(model)
        mujoco.mj_setState(model, d, s, spec)
        plain.append(d)
    for a in _actions(env, 3):
        env.step(a)
        for i, d in enumerate(plain):
            d.ctrl[:] = env.backend._ctrl[i]
            for _ in range(env.cfg.frame_skip):
                mujoco.mj_step(model, d)
    for i, d in enumerate(plain):
        assert np.array_equal(d.qpos, env.backend.datas[i].qpos) and np.array_equal(d.qvel, env.backend.datas[i].qvel)
        mujoco.mj_kinematics(model, d)
        mujoco.mj_comPos(model, d)
        jacp, jacr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
        mujoco.mj_jacSite(model, d, jacp, jacr, env.ix.site["grip"])
        r = env.readout
        assert torch.equal(r.site_pos[i], torch.from_numpy(d.site_xpos).float())
        assert torch.equal(r.jac[i], torch.from_numpy(np.concatenate([jacp, jacr])[:, env.ix.arm_dof]).float())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("control", ["ee_delta", "joint"])
def test_numpy_and_torch_task_math_agree(name, control):
    """The CPU backend computes in float64 numpy, MJX in float32 torch: one code, the same answers."""
    env = TASKS.get(name)(num_envs=4, control=control, max_episode_steps=100).make("cpu", 0)
    for a in _actions(env, 5):
        env.step(a)
    host, dev = env.backend.task_readout(), env.readout
    assert isinstance(host.qpos, np.ndarray) and host.qpos.dtype == np.float64 and dev.qpos.dtype == torch.float32
    a = _actions(env, 1, seed=1)[0]
    ctrl_np, ctrl_t = env.controller(a.double().numpy(), host), env.controller(a, dev)
    assert isinstance(ctrl_np, np.ndarray) and ctrl_t.dtype == torch.float32
    np.testing.assert_allclose(ctrl_np, ctrl_t.numpy(), atol=1e-5)
    (r_np, s_np), (r_t, s_t) = env.cfg.evaluate(env.ix, host), env.cfg.evaluate(env.ix, dev)
    assert s_np.dtype == bool and np.array_equal(s_np, s_t.numpy())
    np.testing.assert_allclose(r_np, r_t.numpy(), atol=1e-4)
    np.testing.assert_allclose(env._observe(host)["state"], env._observe(dev)["state"], atol=1e-5)


def test_returned_tensors_are_not_overwritten_and_counters_are_shared():
    env = TASKS.get("mujoco/pick_cube")(num_envs=3, max_episode_steps=2).make("cpu", 0)
    acts = _actions(env, 3)
    res = env.step(acts[0])
    kept = [t.clone() for t in (res.obs["state"], res.reward, res.terminated, res.truncated,
                                res.info["success"], res.info["episode_return"], res.info["episode_length"])]
    later = env.step(acts[1])  # ends every episode: resets and new observations
    assert later.truncated.all()
    now = (res.obs["state"], res.reward, res.terminated, res.truncated,
           res.info["success"], res.info["episode_return"], res.info["episode_length"])
    assert all(torch.equal(k, t) for k, t in zip(kept, now))
    # Public counters are the ones stepped (reward schedules reset them in place).
    env.step(acts[2])
    env.episode_length[:] = 0
    assert not env.step(acts[0]).truncated.any()


def test_resetting_a_few_worlds_refreshes_their_readout_rows():
    env = TASKS.get("mujoco/push")(num_envs=16).make("cpu", 0)
    for a in _actions(env, 2):
        env.step(a)
    qpos, mocap = env.cfg.sample_start(env.ix, env.generator, 2, env.device)
    env.backend.set_start(np.array([3, 11]), qpos, mocap)  # copied row by row (2 of 16 worlds)
    rows = [a.copy() for a in env.backend.task_readout()]
    env.backend._gather(mocap=True)  # every world, as after a full reset
    assert all(np.array_equal(a, b) for a, b in zip(rows, env.backend.task_readout()))
    assert np.allclose(env.backend.task_readout().qpos[[3, 11]], qpos.double().numpy(), atol=1e-7)


def test_nan_action_rejected_and_nothing_applied():
    env = MujocoReachConfig(num_envs=2).make("cpu", 0)
    before = env.get_state()
    with pytest.raises(NonFiniteActionError, match=r"sub-envs \[1\]"):
        env.step(torch.tensor([[0.0, 0.0, 0.0], [float("nan"), 0.0, 0.0]]))
    assert torch.equal(env.get_state(), before)
    with pytest.raises(ValueError, match="does not match"):
        env.step(torch.zeros(2, 4))


def test_set_params_changes_only_the_named_parameter():
    env = TASKS.get("mujoco/push")(num_envs=3).make("cpu", 0)
    before = env.get_params()
    cube = env.param_labels("body_mass").index("cube")
    masses = before["body_mass"][[1]].clone()
    masses[0, cube] = 0.5
    env.set_params("body_mass", masses, env_ids=torch.tensor([1]))
    after = env.get_params()
    changed = after["body_mass"] != before["body_mass"]
    assert changed.sum() == 1 and changed[1, cube]
    for name in ("geom_friction", "dof_damping", "actuator_gain"):
        assert torch.equal(after[name], before[name])
    # A servo's bias follows its gain, so the joint still holds its target.
    kp = before["actuator_gain"].clone()
    kp[:, 0] *= 2
    env.set_params("actuator_gain", kp)
    m = env.backend.models[0]
    assert m.actuator_gainprm[0, 0] == -m.actuator_biasprm[0, 1] == kp[0, 0].item()
    with pytest.raises(KeyError, match="valid: body_mass"):
        env.set_params("mass", masses)
    with pytest.raises(ValueError, match=">= 0"):
        env.set_params("dof_damping", -torch.ones(3, env.model.nv))


def test_actuator_gain_reaches_the_simulation():
    """With the base joint's servo gain set to 0 the arm can no longer swing sideways."""
    def sideways(kp_scale):
        env = MujocoReachConfig(num_envs=1, start_noise=0.0).make("cpu", 0)
        kp = env.get_params()["actuator_gain"]
        kp[0, env.param_labels("actuator_gain").index("j1")] *= kp_scale
        env.set_params("actuator_gain", kp)
        grip = env.ix.site["grip"]
        start = env.readout.site_pos[0, grip, 1].item()
        for _ in range(4):
            env.step(torch.tensor([[0.0, 1.0, 0.0]]))
        return env.readout.site_pos[0, grip, 1].item() - start

    assert sideways(1.0) > 0.05 and abs(sideways(0.0)) < 0.02


def _pixels(env_cfg):
    need_mujoco_rendering()  # skips only without the GL library; with it, a renderer that fails is a failure
    return env_cfg.make("cpu", 0)


def test_pixels_are_non_constant_images_of_declared_shape():
    env = _pixels(TASKS.get("mujoco/pick_cube")(num_envs=2, obs="pixels", image_size=48, max_episode_steps=2))
    obs = env.reset()
    img = obs["image.front"]
    assert img.shape == (2, 48, 48, 3) and img.dtype == torch.uint8
    assert img.float().std() > 5
    env.spec.observation["state"].check("state", obs["state"])
    res = env.step(torch.zeros(2, 4))
    res = env.step(torch.zeros(2, 4))
    assert res.truncated.all()
    assert res.obs["image.front"].shape == (2, 48, 48, 3)
    frame = env.render()
    assert frame.shape == (240, 320, 3) and frame.float().std() > 5
    env.close()


def test_closing_one_pixel_env_leaves_another_envs_frames_intact():
    # mujoco.Renderer.close frees GL objects in the *current* context; ours makes its own current first.
    cfg = TASKS.get("mujoco/pick_cube")(num_envs=2, obs="pixels", image_size=32)
    first = _pixels(cfg)
    first.reset(0)
    second = cfg.make("cpu", 0)
    before = second.reset(0)["image.front"].clone()
    first.close()
    assert torch.equal(second.reset(0)["image.front"], before)
    second.close()


def test_state_pixels_gives_the_full_state_and_a_camera_and_select_drops_the_camera():
    from robot_rl.core.env import SelectObservation

    env = _pixels(TASKS.get("mujoco/pick_cube")(num_envs=2, obs="state_pixels", image_size=32,
                                                max_episode_steps=2))
    state_env = TASKS.get("mujoco/pick_cube")(num_envs=2, max_episode_steps=2).make("cpu", 0)
    assert env.spec.observation["state"] == state_env.spec.observation["state"]
    obs, ref = env.reset(3), state_env.reset(3)
    assert torch.equal(obs["state"], ref["state"]) and obs["image.front"].shape == (2, 32, 32, 3)
    policy_view = SelectObservation(env, ["state"])
    assert list(policy_view.spec.observation) == ["state"]
    policy_view.reset(3)
    for _ in range(2):
        res = policy_view.step(torch.zeros(2, 4))
        want = state_env.step(torch.zeros(2, 4))
    assert set(res.obs) == {"state"} and set(res.info["final_obs"]) == {"state"}
    assert res.truncated.all()
    assert torch.equal(res.info["final_obs"]["state"], want.info["final_obs"]["state"])
    assert policy_view.get_params().keys() == env.get_params().keys()  # the wrapped env's API passes through
    with pytest.raises(ValueError, match="cannot keep"):
        SelectObservation(env, ["image.top"])
    policy_view.close()


def test_scripted_pick_demonstrator_solves_pick_cube():
    from robot_rl.sims.mujoco.pick_expert import ScriptedPickDemonstrator

    env = TASKS.get("mujoco/pick_cube")(num_envs=8, max_episode_steps=40, action_scale=0.05).make("cpu", 0)
    expert = ScriptedPickDemonstrator()
    obs, ended, wins = env.reset(0), torch.zeros(8, dtype=torch.bool), torch.zeros(8, dtype=torch.bool)
    for _ in range(40):
        res = env.step(expert.act(obs)[0])
        wins |= res.terminated & ~ended
        ended |= res.terminated | res.truncated
        obs = res.obs
    assert ended.all() and wins.all()
    with pytest.raises(ValueError, match="pick_cube state"):
        expert.act({"state": torch.zeros(1, 25)})


def test_terminate_on_success_off_keeps_a_succeeding_episode_going_to_the_time_limit():
    from robot_rl.sims.mujoco.pick_expert import ScriptedPickDemonstrator

    env = TASKS.get("mujoco/pick_cube")(num_envs=4, max_episode_steps=30, action_scale=0.05,
                                        terminate_on_success=False).make("cpu", 0)
    expert, obs, succeeded = ScriptedPickDemonstrator(), env.reset(0), torch.zeros(4, dtype=torch.bool)
    for t in range(30):
        res = env.step(expert.act(obs)[0])
        assert not res.terminated.any()
        assert bool(res.truncated.all()) == (t == 29)
        succeeded |= res.info["success"]
        obs = res.obs
    assert succeeded.all() and res.info["success"].any()  # held at the goal to the end


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="camera"):
        MujocoReachConfig(camera="back").make("cpu", 0)
    with pytest.raises(ValueError, match="repeat"):
        MujocoReachConfig(obs="pixels", extra_cameras=("front",)).make("cpu", 0)
    with pytest.raises(ValueError, match="start_noise"):
        TASKS.get("mujoco/peg_insert")(start_noise=0.1).make("cpu", 0)
