"""Built-in torch tasks: specs, seeding, the auto-reset contract, dynamics by hand, scripted solvers."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, TypeVar

import pytest
import torch

from robot_rl.config_io import field_docs, flatten, from_dict, to_dict
from robot_rl.core.config import TASKS, ConfigError, TaskConfig
from robot_rl.core.env import NonFiniteActionError
from robot_rl.loop.config import resolve_train_config
from robot_rl.sims import TorchTask
from robot_rl.sims.pendulum import PendulumTask, angle_normalize
from robot_rl.sims.push import PushConfig, PushTask
from robot_rl.sims.reach import ReachConfig, ReachTask, forward_kinematics, inverse_kinematics, jacobian
from robot_rl.sims.reach_pixels import ReachPixelsTask
from robot_rl.sims.render2d import Capsule, Disc, rasterize

BUILTIN = ["reach", "reach_pixels", "push", "pendulum"]
T = TypeVar("T", bound=TorchTask)
DEVICES = ["cpu"] + ([pytest.param("cuda", marks=pytest.mark.gpu)] if torch.cuda.is_available() else [])


def make(name: str, n: int = 4, seed: int = 0, device: str = "cpu", **fields: Any) -> TorchTask:
    env = TASKS.get(name)(**fields).make(device, seed, num_envs=n)
    assert isinstance(env, TorchTask)
    return env


def make_as(cls: type[T], name: str, n: int = 4, seed: int = 0, **fields: Any) -> T:
    env = make(name, n, seed, **fields)
    assert isinstance(env, cls)
    return env


def state_of(env: TorchTask) -> dict[str, torch.Tensor]:
    names = ["q", "goal", "last_action", "pusher", "obj", "theta", "theta_dot", "episode_length",
             "episode_return"]
    return {k: getattr(env, k).clone() for k in names if hasattr(env, k)}


def force_success(env: TorchTask, rows: torch.Tensor) -> None:
    """Put sub-envs ``rows`` into a state where a zero action succeeds (terminal tasks only)."""
    if isinstance(env, ReachTask):
        env.q[rows] = inverse_kinematics(env.goal[rows], env.cfg.link1, env.cfg.link2)
    elif isinstance(env, PushTask):
        env.obj[rows] = env.goal[rows]
        env.pusher[rows] = env.goal[rows] - 0.2 * torch.sign(env.goal[rows])
    else:
        raise AssertionError(f"{type(env).__name__} has no terminal success")


def assert_obs_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], rows: slice | torch.Tensor) -> None:
    for k in a:
        torch.testing.assert_close(a[k][rows], b[k][rows])


# ----------------------------------------------------------------------------------------------
# Registry, configs, specs
# ----------------------------------------------------------------------------------------------


def test_builtin_tasks_registered_with_documented_fields():
    for name in BUILTIN:
        cls = TASKS.get(name)
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            assert docs.get(f.name), f"{name}.{f.name} has no attribute docstring"
        for algo, overrides in cls.presets.items():  # a preset tunes the task, the algorithm or the loop for it
            assert all(k.split(".", 1)[0] in ("task", "algo", "loop") for k in overrides), (name, algo)
            resolved = flatten(to_dict(resolve_train_config(task=name, algo=algo)))
            assert all(resolved[k] == v for k, v in overrides.items()), (name, algo)
    assert ReachConfig().num_envs == 32 and ReachConfig().max_episode_steps == 50
    assert ReachConfig().success_radius == 0.02 and PushConfig().dense is False
    cfg = from_dict(TaskConfig, {"type": "reach", "control": "joint", "num_envs": "8"})
    assert isinstance(cfg, ReachConfig) and cfg.control == "joint" and cfg.num_envs == 8
    with pytest.raises(ConfigError, match="ee"):
        from_dict(TaskConfig, {"type": "reach", "control": "cartesian"})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", BUILTIN)
def test_spec_shapes_and_dtypes(name: str, device: str):
    env = make(name, n=5, device=device)
    obs = env.reset()
    env.spec.check_obs(obs)
    assert all(v.device.type == device for v in obs.values())
    assert env.spec.to_dict()["action"]["low"] == -1.0 and env.spec.action.high == 1.0
    action = torch.rand(5, env.spec.action_dim, generator=torch.Generator().manual_seed(0)) * 2 - 1
    obs, reward, terminated, truncated, info = env.step(action.to(device))
    env.spec.check_obs(obs)
    env.spec.check_obs(info["final_obs"])
    assert reward.shape == (5,) and reward.dtype == torch.float32
    assert terminated.dtype == truncated.dtype == info["success"].dtype == torch.bool
    assert terminated.shape == truncated.shape == info["success"].shape == (5,)
    assert info["episode_return"].shape == (5,) and info["episode_length"].dtype == torch.int64
    frame = env.render()
    assert frame.shape == (env.render_size, env.render_size, 3) and frame.dtype == torch.uint8
    assert frame.float().std() > 0  # something besides the background was drawn


# ----------------------------------------------------------------------------------------------
# Seeding
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILTIN)
def test_reset_determinism(name: str):
    a, b, c = make(name, seed=3), make(name, seed=3), make(name, seed=4)
    oa, ob, oc = a.reset(), b.reset(), c.reset()
    assert_obs_equal(oa, ob, slice(None))
    assert not torch.equal(oa["state"], oc["state"])
    assert_obs_equal(c.reset(seed=3), oa, slice(None))
    gen = torch.Generator().manual_seed(1)
    # Same seed and actions give the same trajectories, auto-resets included (60 steps outlast a
    # reach episode; random actions also end some episodes early).
    for _ in range(20 if name == "reach_pixels" else 60):
        act = torch.rand(4, a.spec.action_dim, generator=gen) * 2 - 1
        ra, rb = a.step(act), b.step(act)
        assert_obs_equal(ra.obs, rb.obs, slice(None))
        assert torch.equal(ra.reward, rb.reward) and torch.equal(ra.truncated, rb.truncated)


# ----------------------------------------------------------------------------------------------
# Auto-reset contract
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILTIN)
def test_truncation_at_exactly_max_episode_steps(name: str):
    env = make(name, n=3, max_episode_steps=7)
    obs = env.reset()
    zero = torch.zeros(3, env.spec.action_dim)
    total = torch.zeros(3)
    for t in range(1, 7):
        obs, reward, terminated, truncated, info = env.step(zero)
        total += reward
        assert not (terminated | truncated).any(), f"ended early at step {t}"
        assert (info["episode_length"] == 0).all() and (info["episode_return"] == 0).all()
    before = {k: v.clone() for k, v in obs.items()}
    obs, reward, terminated, truncated, info = env.step(zero)
    assert truncated.all() and not terminated.any()
    assert (info["episode_length"] == 7).all()
    torch.testing.assert_close(info["episode_return"], total + reward)
    if name != "pendulum":  # a zero action leaves these states as they were
        assert_obs_equal(info["final_obs"], before, slice(None))
    assert not torch.equal(info["final_obs"]["state"], obs["state"]), "obs must be the next episode's"
    assert (env.episode_length == 0).all() and (env.episode_return == 0).all()
    assert_obs_equal(env._observe(), obs, slice(None))
    for _ in range(6):  # the new episode runs its full length again
        assert not env.step(zero).truncated.any()
    assert env.step(zero).truncated.all()


@pytest.mark.parametrize("name", ["reach", "reach_pixels", "push"])
def test_termination_auto_resets_only_finished_rows(name: str):
    env = make(name, n=4)
    env.reset()
    zero = torch.zeros(4, env.spec.action_dim)
    rewards = torch.zeros(4)
    for _ in range(3):
        rewards += env.step(zero).reward
    rows = torch.tensor([0, 2])
    force_success(env, rows)
    terminal_obs = env._observe()
    obs, reward, terminated, truncated, info = env.step(zero)
    expect = torch.tensor([True, False, True, False])
    assert torch.equal(terminated, expect) and torch.equal(info["success"], expect) and not truncated.any()
    # push: the sparse 1; reach: bonus 10 - step cost 2 - distance ~0.
    torch.testing.assert_close(reward[rows], torch.full((2,), 1.0 if name == "push" else 8.0), atol=1e-3, rtol=0)
    assert_obs_equal(info["final_obs"], terminal_obs, rows)
    assert_obs_equal(info["final_obs"], obs, torch.tensor([1, 3]))  # copies where nothing ended
    for k in obs:
        assert not torch.equal(obs[k][rows], terminal_obs[k][rows]), f"{k} was not reset"
    torch.testing.assert_close(info["episode_return"], torch.where(expect, rewards + reward, 0.0))
    assert torch.equal(info["episode_length"], torch.tensor([4, 0, 4, 0]))
    assert torch.equal(env.episode_length, torch.tensor([0, 4, 0, 4]))


@pytest.mark.parametrize("name", BUILTIN)
def test_non_finite_action_raises_and_changes_nothing(name: str):
    env = make(name, n=3)
    env.reset()
    env.step(torch.full((3, env.spec.action_dim), 0.5))
    before, obs_before = state_of(env), env._observe()
    rng = env.generator.get_state()
    for bad in (math.nan, math.inf):
        action = torch.zeros(3, env.spec.action_dim)
        action[1, 0] = bad
        with pytest.raises(NonFiniteActionError, match=r"\[1\]"):
            env.step(action)
    for k, v in state_of(env).items():
        assert torch.equal(v, before[k]), k
    assert_obs_equal(env._observe(), obs_before, slice(None))
    assert torch.equal(env.generator.get_state(), rng)
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(2, env.spec.action_dim))


@pytest.mark.parametrize("name", BUILTIN)
def test_out_of_bounds_actions_are_clamped(name: str):
    a, b = make(name, seed=5), make(name, seed=5)
    a.reset(), b.reset()
    big = torch.tensor([[7.0], [-3.0], [1.5], [-1.0]]).expand(4, a.spec.action_dim).contiguous()
    ra, rb = a.step(big), b.step(big.clamp(-1, 1))
    assert_obs_equal(ra.obs, rb.obs, slice(None))
    assert torch.equal(ra.reward, rb.reward)
    if hasattr(a, "last_action"):
        assert a.last_action.abs().max() <= 1.0


# ----------------------------------------------------------------------------------------------
# reach
# ----------------------------------------------------------------------------------------------


def test_reach_kinematics_by_hand():
    q = torch.tensor([[0.0, 0.0], [math.pi / 2, -math.pi / 2], [math.pi / 3, math.pi / 3]])
    elbow, ee = forward_kinematics(q, 0.5, 0.5)
    torch.testing.assert_close(elbow, torch.tensor([[0.5, 0.0], [0.0, 0.5], [0.25, 0.5 * math.sqrt(3) / 2]]))
    torch.testing.assert_close(ee, torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 0.5 * math.sqrt(3)]]))
    # J at q = (0, 0): moving q1 or q2 swings the tip along +y by l1+l2 and l2 respectively.
    torch.testing.assert_close(jacobian(q[:1], 0.5, 0.5)[0], torch.tensor([[0.0, 0.0], [1.0, 0.5]]))
    qr = torch.tensor([[0.3, -1.1], [2.0, 0.7]], dtype=torch.float64)
    auto = torch.autograd.functional.jacobian(lambda x: forward_kinematics(x, 0.6, 0.4)[1], qr)
    torch.testing.assert_close(jacobian(qr, 0.6, 0.4), torch.stack([auto[i, :, i] for i in range(2)]))
    targets = torch.tensor([[0.3, 0.4], [-0.7, 0.1], [0.0, -0.9]])
    for up in (True, False):
        torch.testing.assert_close(forward_kinematics(inverse_kinematics(targets, 0.5, 0.5, up), 0.5, 0.5)[1],
                                   targets, atol=1e-5, rtol=0)


def test_reach_observation_reward_and_goal_sampling_by_hand():
    env = make_as(ReachTask, "reach", n=2000, seed=1)
    r = torch.linalg.vector_norm(env.goal, dim=-1)
    assert r.min() >= 0.15 - 1e-6 and r.max() <= 0.95 + 1e-6
    # Uniform by area: the fraction inside radius ρ is (ρ² - r_min²) / (r_max² - r_min²) = 0.4 at ρ² = 0.3658.
    frac = (r**2 < 0.15**2 + 0.4 * (0.95**2 - 0.15**2)).float().mean()
    assert abs(float(frac) - 0.4) < 0.04
    assert torch.linalg.vector_norm(env.goal - env.end_effector(), dim=-1).min() >= 0.1  # never starts solved
    env = make_as(ReachTask, "reach", n=1)
    env.q[:] = torch.tensor([[math.pi / 2, -math.pi / 2]])
    env.goal[:] = torch.tensor([[0.5, 0.2]])
    obs, reward, terminated, *_ = env.step(torch.tensor([[0.0, 0.0]]))
    # ee (0.5, 0.5), goal (0.5, 0.2): distance 0.3 → reward -0.3 / 0.1 - 2 = -5; positions / reach 1.0.
    torch.testing.assert_close(reward, torch.tensor([-5.0]))
    expected = torch.tensor([[0.0, 0.0, 1.0, -1.0, 0.5, 0.5, 0.5, 0.2, 0.0, -0.3, 0.0, math.tanh(-6.0)]])
    torch.testing.assert_close(obs["state"], expected, atol=1e-6, rtol=0)
    # ee control, action (1, 0) = dx (0.05, 0). J = [[-0.5, 0], [0.5, 0.5]]; M = J Jᵀ + 0.05² I
    # = [[0.2525, -0.25], [-0.25, 0.5025]], det 0.0643813; y = M⁻¹ dx = (0.390253, 0.194156);
    # dq = Jᵀ y = (-0.098049, 0.097078). The end-effector moves by dx to first order (3 mm curvature).
    q0, before = env.q.clone(), env.end_effector().clone()
    env.step(torch.tensor([[1.0, 0.0]]))
    torch.testing.assert_close(env.q - q0, torch.tensor([[-0.098049, 0.097078]]), atol=2e-5, rtol=0)
    torch.testing.assert_close(env.end_effector() - before, torch.tensor([[0.05, 0.0]]), atol=4e-3, rtol=0)
    env.goal[:] = env.end_effector() + torch.tensor([[0.015, 0.0]])
    _, reward, terminated, _, info = env.step(torch.zeros(1, 2))
    assert terminated.all() and info["success"].all()
    torch.testing.assert_close(reward, torch.tensor([10.0 - 2.0 - 0.15]))
    # At the stretched pose a radial move is impossible: the damped step stays finite (here zero).
    env.q[:] = 0.0
    env.step(torch.tensor([[-1.0, 0.0]]))
    torch.testing.assert_close(env.q, torch.zeros(1, 2))


def test_reach_joint_control_by_hand():
    env = make_as(ReachTask, "reach", n=1, control="joint")
    q0 = env.q.clone()
    env.step(torch.tensor([[1.0, -0.5]]))
    torch.testing.assert_close(env.q, q0 + torch.tensor([[0.1, -0.05]]))


def _first_episode_success(env: ReachTask, controller) -> tuple[float, float]:
    n = env.num_envs
    finished = torch.zeros(n, dtype=torch.bool)
    success = torch.zeros(n, dtype=torch.bool)
    length = torch.zeros(n)
    env.reset(seed=11)
    for _ in range(env.max_episode_steps):
        res = env.step(controller(env))
        newly = (res.terminated | res.truncated) & ~finished
        success |= newly & res.info["success"]
        length = torch.where(newly, res.info["episode_length"].float(), length)
        finished |= newly
    assert finished.all()
    return float(success.float().mean()), float(length.mean())


def test_reach_scripted_controllers_solve_it():
    env = make_as(ReachTask, "reach", n=256)
    # ee control: the proportional step a = (goal - ee) / action_scale, which the magnified offset in the
    # observation's last two entries approximates.
    rate, mean_len = _first_episode_success(env, lambda e: e._observe()["state"][:, 10:12])
    assert rate == 1.0 and mean_len < 25
    rate, _ = _first_episode_success(env, lambda e: torch.zeros(e.num_envs, 2))
    assert rate < 0.05

    env = make_as(ReachTask, "reach", n=256, control="joint")
    l1, l2, scale = env.cfg.link1, env.cfg.link2, env.cfg.joint_step

    def damped_least_squares(e: ReachTask) -> torch.Tensor:
        # dq = Jᵀ (J Jᵀ + λ² I)⁻¹ (goal - ee), λ = 0.05, in units of joint_step.
        j = jacobian(e.q, l1, l2)
        err = (e.goal - e.end_effector()).unsqueeze(-1)
        dq = j.transpose(-1, -2) @ torch.linalg.solve(j @ j.transpose(-1, -2) + 0.05**2 * torch.eye(2), err)
        return (0.5 * dq.squeeze(-1) / scale).clamp(-1, 1)

    def joint_space_to_ik(e: ReachTask) -> torch.Tensor:
        diffs = [angle_normalize(inverse_kinematics(e.goal, l1, l2, up) - e.q) for up in (True, False)]
        nearer = diffs[0].abs().amax(-1, keepdim=True) <= diffs[1].abs().amax(-1, keepdim=True)
        return (torch.where(nearer, diffs[0], diffs[1]) / scale).clamp(-1, 1)

    rate, _ = _first_episode_success(env, damped_least_squares)
    assert rate > 0.9
    rate, mean_len = _first_episode_success(env, joint_space_to_ik)
    assert rate == 1.0 and mean_len < 25


def test_reach_pixels_shows_the_goal_and_hides_it_from_state():
    env = make_as(ReachPixelsTask, "reach_pixels", n=3)
    obs = env.reset()
    assert obs["state"].shape == (3, 4) and obs["image.top"].shape == (3, 64, 64, 3)
    torch.testing.assert_close(obs["state"], env._proprioception())
    extent, size = env.render_extent, env.image_size
    col = ((env.goal[:, 0] + extent) / (2 * extent) * size).long()
    row = ((extent - env.goal[:, 1]) / (2 * extent) * size).long()
    pixel = obs["image.top"][torch.arange(3), row, col]
    torch.testing.assert_close(pixel, torch.tensor([[60, 170, 75]] * 3, dtype=torch.uint8), atol=12, rtol=0)


# ----------------------------------------------------------------------------------------------
# pendulum
# ----------------------------------------------------------------------------------------------


def test_pendulum_matches_gymnasium():
    gym = pytest.importorskip("gymnasium")
    ref = gym.make("Pendulum-v1").unwrapped
    ref.reset(seed=0)
    env = make_as(PendulumTask, "pendulum", n=1)
    for th, thdot, a in [(0.3, -1.0, 0.5), (3.0, 7.9, -1.0), (-2.0, 0.2, 0.0), (1.0, -7.5, -0.7)]:
        ref.state = torch.tensor([th, thdot], dtype=torch.float64).numpy()
        env.theta[:], env.theta_dot[:] = th, thdot
        ref_obs, ref_reward, *_ = ref.step(torch.tensor([2.0 * a]).numpy())
        obs, reward, *_ = env.step(torch.tensor([[a]]))
        torch.testing.assert_close(obs["state"][0], torch.as_tensor(ref_obs, dtype=torch.float32), atol=1e-5,
                                   rtol=1e-5)
        assert abs(float(reward) - float(ref_reward)) < 1e-4


def test_pendulum_success_is_judged_at_the_last_step_and_energy_swing_up_succeeds():
    env = make_as(PendulumTask, "pendulum", n=64, max_episode_steps=200)
    env.reset()
    for _ in range(199):
        env.step(torch.zeros(64, 1))
    env.theta[:2] = torch.tensor([2 * math.pi + 0.1, math.pi])
    env.theta_dot[:2] = 0.0
    res = env.step(torch.zeros(64, 1))
    assert res.truncated.all() and res.info["success"][0] and not res.info["success"][1]

    def swing_up(e: PendulumTask) -> torch.Tensor:
        # Pump energy E = ½ I θ̇² + (mgl/2) cos θ towards the upright E* = 5 (dE/dt = θ̇ u), then PD.
        th, w = angle_normalize(e.theta), e.theta_dot
        energy = 0.5 * w**2 / 3 + 5.0 * torch.cos(th)
        u = torch.where(th.abs() < 0.5, -(10 * th + 2 * w), 10 * (5.0 - energy) * w)
        return (u / 2).clamp(-1, 1).unsqueeze(-1)

    env.reset(seed=2)
    for _ in range(200):
        res = env.step(swing_up(env))
    assert res.truncated.all() and res.info["success"].float().mean() > 0.9
    assert res.info["episode_return"].mean() > -250  # a trained SAC scores about -150


# ----------------------------------------------------------------------------------------------
# push
# ----------------------------------------------------------------------------------------------


def test_push_contact_by_hand():
    env = make_as(PushTask, "push", n=3)
    env.obj[:] = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.44, 0.0]])
    env.pusher[:] = torch.tensor([[-0.12, 0.0], [-0.12, 0.0], [0.32, 0.0]])
    env.goal[:] = torch.tensor([[-0.3, 0.3]] * 3)
    obs, reward, *_ = env.step(torch.tensor([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]]))
    # Row 0: pusher -0.12 → -0.08, contact distance 0.1 pushes the object to +0.02.
    # Row 1: moving away, nothing touches. Row 2: the wall holds the object at 0.5 - 0.06 = 0.44,
    # so the pusher is backed off to 0.44 - 0.1 = 0.34.
    torch.testing.assert_close(env.pusher, torch.tensor([[-0.08, 0.0], [-0.16, 0.0], [0.34, 0.0]]))
    torch.testing.assert_close(env.obj, torch.tensor([[0.02, 0.0], [0.0, 0.0], [0.44, 0.0]]))
    assert (reward == 0).all()  # sparse
    torch.testing.assert_close(obs["state"][0, :6], torch.tensor([-0.16, 0.0, 0.04, 0.0, -0.6, 0.6]))


def test_push_resets_are_valid_and_dense_reward_by_hand():
    env = make_as(PushTask, "push", n=2000, seed=3)
    gap = torch.linalg.vector_norm(env.obj - env.pusher, dim=-1)
    to_goal = torch.linalg.vector_norm(env.goal - env.obj, dim=-1)
    assert gap.min() >= 0.15 - 1e-6 and to_goal.min() >= 0.15 - 1e-6
    assert env.goal.abs().max() <= 0.4 + 1e-6 and env.pusher.abs().max() <= 0.46 + 1e-6
    assert env.obj.abs().max() <= 0.3 + 1e-6
    env = make_as(PushTask, "push", n=1, dense=True)
    env.obj[:], env.pusher[:], env.goal[:] = torch.tensor([[0.0, 0.0]]), torch.tensor([[-0.3, 0.0]]), 0.2
    _, reward, *_ = env.step(torch.zeros(1, 2))
    # -(|g - o| + 0.5 · (0.3 - 0.1)) / 0.5 = -(0.2√2 + 0.1) / 0.5
    torch.testing.assert_close(reward, torch.tensor([-(0.2 * math.sqrt(2) + 0.1) / 0.5]))


# ----------------------------------------------------------------------------------------------
# Rendering and throughput
# ----------------------------------------------------------------------------------------------


def test_rasterize_by_hand():
    center = torch.tensor([[0.0, 0.0], [0.5, 0.5]])
    bar = Capsule(torch.tensor([[-1.0, -0.875]] * 2), torch.tensor([[1.0, -0.875]] * 2), 0.15, (0, 0, 255))
    img = rasterize([Disc(center, 0.4, (255, 0, 0)), bar], size=8, extent=1.0, background=(0, 0, 0))
    # 8 px of 0.25 over [-1, 1]: pixel (row r, col c) has its centre at (-0.875 + 0.25 c, 0.875 - 0.25 r).
    # Coverage alpha = clamp(0.5 - signed_distance / 0.25, 0, 1).
    assert img.shape == (2, 8, 8, 3) and img.dtype == torch.uint8
    assert img[0, 3, 3].tolist() == [255, 0, 0]  # (-0.125, 0.125): 0.18 inside the disc, alpha 1
    assert img[1, 3, 3].tolist() == [0, 0, 0]  # 0.73 from (0.5, 0.5): outside
    assert img[1, 1, 5].tolist() == [255, 0, 0]  # (0.375, 0.625): 0.18 from (0.5, 0.5)
    assert img[0, 7, 0].tolist() == [0, 0, 255]  # on the bar's axis
    assert img[0, 6, 0].tolist() == [0, 0, 26]  # 0.25 from the axis: sd 0.1, alpha 0.1 → round(25.5)
    assert img[0, 0, 0].tolist() == [0, 0, 0]
    edge = rasterize([Disc(center[:1], 0.2, (255, 0, 0))], size=8, extent=1.0, background=(0, 0, 0))
    # (-0.125, 0.125) is 0.1768 from the centre: alpha = 0.5 + (0.2 - 0.1768) / 0.25 = 0.593 → 151.
    assert edge[0, 3, 3].tolist() == [151, 0, 0]


@pytest.mark.parametrize("name", ["reach", "push", "pendulum"])
def test_many_envs_step_on_cpu(name: str):
    env = make(name, n=4096)
    for _ in range(3):
        obs, reward, *_ = env.step(torch.rand(4096, env.spec.action_dim) * 2 - 1)
    env.spec.check_obs(obs)
    assert reward.shape == (4096,) and bool(torch.isfinite(reward).all())
