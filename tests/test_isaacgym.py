"""The Isaac Gym adapter against the fake tensor API: spec, step, auto-reset, devices, NaN, stability."""

import math

import numpy as np
import pytest
import torch

from robot_rl.core.env import NonFiniteActionError
from robot_rl.sims.isaacgym import IsaacGymTask, IsaacGymTaskConfig
from robot_rl.testing import fake_isaacgym

FAKE = "robot_rl.testing.fake_isaacgym"

ARM_URDF = """<?xml version="1.0"?>
<robot name="arm2">
  <link name="base"><inertial><mass value="1"/><inertia ixx="0.1" iyy="0.1" izz="0.1"/></inertial></link>
  <joint name="shoulder" type="revolute">
    <parent link="base"/><child link="upper"/><axis xyz="0 0 1"/>
    <limit lower="-2.0" upper="2.0" effort="50" velocity="10"/><dynamics damping="0.1"/>
  </joint>
  <link name="upper">
    <inertial><origin xyz="0.25 0 0"/><mass value="1"/><inertia ixx="0.01" iyy="0.02" izz="0.02"/></inertial>
    <collision><geometry><box size="0.5 0.05 0.05"/></geometry></collision>
  </link>
  <joint name="elbow" type="revolute">
    <parent link="upper"/><child link="fore"/><axis xyz="0 0 1"/>
    <limit lower="-2.5" upper="2.5" effort="30" velocity="10"/><dynamics damping="0.1"/>
  </joint>
  <link name="fore">
    <inertial><origin xyz="0.2 0 0"/><mass value="0.5"/><inertia ixx="0.005" iyy="0.01" izz="0.01"/></inertial>
    <collision><geometry><box size="0.4 0.05 0.05"/></geometry></collision>
  </link>
</robot>
"""


def push_state(env):
    """Send the DOF state buffer to the sim for every env (writing the buffer alone changes nothing)."""
    env.gym.set_dof_state_tensor_indexed(env.sim, fake_isaacgym.unwrap_tensor(env.dof_state),
                                         fake_isaacgym.unwrap_tensor(env.actor_ids), env.num_envs)


def cartpole(num_envs=4, **kw):
    return IsaacGymTaskConfig(api=FAKE, num_envs=num_envs, **kw).make("cpu", seed=0)


@pytest.fixture
def arm_path(tmp_path):
    path = tmp_path / "arm2.urdf"
    path.write_text(ARM_URDF)
    return path


def test_cartpole_spec_reset_and_tensor_views():
    env = cartpole(num_envs=3)
    assert env.spec.observation["state"].shape == (4,)
    assert (env.spec.action.shape, env.spec.action.low, env.spec.action.high) == ((1,), -1.0, 1.0)
    assert env.spec.extras["dof_names"] == ["slider_to_cart", "cart_to_pole"]
    obs = env.reset()
    assert obs["state"].shape == (3, 4) and obs["state"].dtype == torch.float32
    assert obs["state"][:, 0].abs().max() <= 0.1 and obs["state"][:, 1].abs().max() <= 0.25
    # dof_pos/dof_vel are views of the acquired sim buffer, not copies.
    assert env.dof_pos.data_ptr() == env.dof_state.data_ptr()
    assert torch.equal(obs["state"][:, 2], env.dof_pos[:, 1])
    # The reset reached the sim: after a refresh the buffer still holds the reset state.
    env.gym.refresh_dof_state_tensor(env.sim)
    assert torch.equal(env.dof_pos[:, 1], obs["state"][:, 2])
    env.close()


def test_effort_pushes_the_cart_and_the_pole_tips_the_other_way():
    env = cartpole(num_envs=2)
    env.reset()
    env.set_params("dof_damping", torch.zeros(2, 2))
    env.dof_pos[:] = 0.0
    env.dof_vel[:] = 0.0
    push_state(env)
    res = env.step(torch.tensor([[1.0], [-1.0]]))
    x, xd, th = res.obs["state"][:, 0], res.obs["state"][:, 1], res.obs["state"][:, 2]
    assert xd[0] > 0 > xd[1] and x[0] > 0 > x[1]
    assert th[0] < 0 < th[1]  # the cart's acceleration tips the pole backwards
    # 20 N on 1 kg for 1/30 s, semi-implicit Euler in 4 substeps of 1/120 s: v = 20/30, x = 20·(1+2+3+4)/120².
    assert xd[0].item() == pytest.approx(20.0 / 30.0, rel=1e-4)
    assert x[0].item() == pytest.approx(20.0 * 10 / 120**2, rel=1e-4)


def test_same_step_autoreset_on_truncation_and_failure():
    env = cartpole(num_envs=2, max_episode_steps=5)
    env.reset(seed=3)
    for t in range(5):
        res = env.step(torch.zeros(2, 1))
        if t < 4:
            assert not (res.terminated | res.truncated).any()
            assert torch.equal(res.obs["state"], res.info["final_obs"]["state"])
    assert res.truncated.all() and not res.terminated.any()
    assert res.info["episode_length"].tolist() == [5, 5]
    assert res.info["success"].all()  # still upright after 5 steps
    # obs is the next episode's start (small angle, new draw), final_obs the last state of this one.
    assert not torch.equal(res.obs["state"], res.info["final_obs"]["state"])
    assert res.obs["state"][:, 2].abs().max() <= 0.1
    assert torch.equal(res.obs["state"][:, 2], env.dof_pos[:, 1])
    # A pole past 90° terminates as a failure with the -2 reward.
    env.dof_pos[0, 1] = 2.0
    res = env.step(torch.zeros(2, 1))
    assert not res.terminated.any()  # the buffer alone is not the sim (as in Isaac Gym)
    env.dof_pos[0, 1] = 2.0
    push_state(env)
    res = env.step(torch.zeros(2, 1))
    assert res.terminated.tolist() == [True, False] and res.reward[0].item() == -2.0
    assert not res.info["success"][0] and res.info["episode_length"][0] == 2
    assert res.obs["state"][0, 2].abs() <= 0.1


def test_nan_actions_are_rejected_before_anything_moves():
    env = cartpole(num_envs=2)
    env.reset()
    before = env.dof_state.clone()
    with pytest.raises(NonFiniteActionError):
        env.step(torch.tensor([[0.5], [float("nan")]]))
    assert torch.equal(env.dof_state, before)
    with pytest.raises(ValueError, match="action shape"):
        env.step(torch.zeros(3, 1))


def test_balancing_controller_runs_hundreds_of_steps_stably_and_succeeds():
    env = cartpole(num_envs=8, max_episode_steps=100)
    obs = env.reset(seed=1)
    failures = successes = 0
    for _ in range(300):
        s = obs["state"]
        action = (10 * s[:, 2] + 2 * s[:, 3] + 0.3 * s[:, 0] + 0.5 * s[:, 1]).clamp(-1, 1).unsqueeze(-1)
        res = env.step(action)
        assert torch.isfinite(res.obs["state"]).all() and torch.isfinite(res.reward).all()
        failures += int(res.terminated.sum())
        successes += int((res.truncated & res.info["success"]).sum())
        obs = res.obs
    assert failures == 0 and successes == 24  # 3 full episodes in each of 8 envs
    # Without control the pole falls in every env.
    env.reset(seed=1)
    fell = torch.zeros(8, dtype=torch.bool)
    for _ in range(100):
        fell |= env.step(torch.zeros(8, 1)).terminated
    assert fell.all()


def test_urdf_arm_with_position_control_reaches_its_targets(arm_path):
    cfg = IsaacGymTaskConfig(api=FAKE, num_envs=4, env_id=str(arm_path), max_episode_steps=200, pd_stiffness=40.0,
                             pd_damping=4.0)
    env = cfg.make("cpu", seed=0)
    assert env.control == "position" and env.num_dofs == 2
    assert env.spec.observation["state"].shape == (6,) and env.spec.action.shape == (2,)
    obs = env.reset()
    done_ok = torch.zeros(4, dtype=torch.bool)
    lo, hi = env._ranges()
    for _ in range(200):
        # The action maps linearly onto each joint's range: aim straight at the target.
        target = env.target
        action = (2 * (target - lo) / (hi - lo) - 1).clamp(-1, 1)
        res = env.step(action)
        assert ((env.dof_pos >= lo - 1e-6) & (env.dof_pos <= hi + 1e-6)).all()
        done_ok |= res.terminated & res.info["success"]
        obs = res.obs
    assert done_ok.all() and torch.isfinite(obs["state"]).all()


class ArmTask(IsaacGymTask):
    """A user task class: hold the shoulder at zero (reward −|q0|), never terminates."""

    asset_file = "arm2.urdf"

    def __init__(self, cfg, num_envs, device, seed, asset, bonus=0.0):
        self.bonus = bonus
        super().__init__(cfg, num_envs, device, seed, asset)

    def _configure(self, props):
        return [0]

    def _sample_reset(self):
        return 0.5 * torch.ones(self.num_envs, self.num_dofs), torch.zeros(self.num_envs, self.num_dofs)

    def _observe(self):
        return {"state": self.dof_pos.clone()}

    def _reward_and_status(self):
        r = -self.dof_pos[:, 0].abs() + self.bonus
        return r, torch.zeros_like(r, dtype=torch.bool), self.dof_pos[:, 0].abs() < 0.1


def test_user_task_class_by_path(arm_path):
    cfg = IsaacGymTaskConfig(api=FAKE, num_envs=2, env_id=f"{__name__}:ArmTask", asset_root=str(arm_path.parent),
                             task_kwargs={"bonus": 1.0}, control="effort")
    env = cfg.make("cpu", seed=0)
    assert isinstance(env, ArmTask) and env.bonus == 1.0 and env.spec.action.shape == (1,)
    env.reset()
    res = env.step(torch.full((2, 1), -1.0))
    assert res.obs["state"][0, 0] < 0.5  # negative torque on the shoulder
    assert res.reward[0].item() == pytest.approx(1.0 - res.obs["state"][0, 0].abs().item())


def test_bad_ids_and_fake_strictness(arm_path):
    with pytest.raises(ValueError, match=r"'cartpole', a \.urdf"):
        IsaacGymTaskConfig(api=FAKE, env_id="anymal").make("cpu", seed=0)
    with pytest.raises(FileNotFoundError):
        IsaacGymTaskConfig(api=FAKE, env_id="missing.urdf").make("cpu", seed=0)
    with pytest.raises(ValueError, match="not a subclass"):
        IsaacGymTaskConfig(api=FAKE, env_id="math:sqrt").make("cpu", seed=0)
    env = cartpole(num_envs=2)
    env.gym.simulate(env.sim)  # the fake, like Isaac Gym, needs fetch_results before a refresh
    with pytest.raises(RuntimeError, match="fetch_results"):
        env.gym.refresh_dof_state_tensor(env.sim)
    with pytest.raises(ValueError, match="float32"):
        wrong = fake_isaacgym.unwrap_tensor(torch.zeros(2, 2, dtype=torch.float64))
        env.gym.set_dof_actuation_force_tensor(env.sim, wrong)


def test_params_read_write_through_actor_properties():
    env = cartpole(num_envs=3)
    params = env.get_params()
    assert set(params) == {"dof_damping", "dof_stiffness", "dof_friction", "body_mass", "geom_friction",
                           "actuator_gain"}
    assert params["body_mass"].shape == (3, 3) and params["body_mass"][0].tolist() == pytest.approx([1, 1, 0.1])
    assert params["geom_friction"].shape == (3, 3) and params["actuator_gain"].shape == (3, 1)
    mass = params["body_mass"].clone()
    mass[1, 2] = 0.3
    env.set_params("body_mass", mass)
    assert env.gym.get_actor_rigid_body_properties(env.envs[1], 0)[2].mass == pytest.approx(0.3)
    assert env.gym.get_actor_rigid_body_properties(env.envs[0], 0)[2].mass == pytest.approx(0.1)
    assert env.sim.mass[:, 1].tolist() == pytest.approx([0.1, 0.3, 0.1])  # the pole's mass, per env
    damping = params["dof_damping"].clone()
    damping[2] = torch.tensor([0.5, 0.25])
    env.set_params("dof_damping", damping)
    props = env.gym.get_actor_dof_properties(env.envs[2], 0)
    assert np.allclose(props["damping"], [0.5, 0.25]) and env.sim.damping[2].tolist() == [0.5, 0.25]
    with pytest.raises(KeyError, match="parameters:"):
        env.set_params("link_length", damping)
    with pytest.raises(ValueError, match="finite"):
        env.set_params("dof_damping", torch.full((3, 2), math.nan))


def test_device_placement_cpu():
    env = cartpole(num_envs=2)
    res = env.step(torch.zeros(2, 1))
    tensors = [res.obs["state"], res.reward, res.terminated, res.truncated, *res.info["final_obs"].values(),
               res.info["success"], res.info["episode_return"], res.info["episode_length"]]
    assert all(t.device.type == "cpu" for t in tensors)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the GPU pipeline")
def test_device_placement_cuda():
    env = IsaacGymTaskConfig(api=FAKE, num_envs=4).make("cuda", seed=0)
    assert env.sim.params.use_gpu_pipeline and env.dof_state.device.type == "cuda"
    res = env.step(torch.zeros(4, 1, device="cuda"))
    assert res.obs["state"].device.type == "cuda" and res.reward.device.type == "cuda"


def test_actuator_gain_set_params_scales_the_force_the_sim_receives():
    env = cartpole(num_envs=2)
    env.reset()
    env.set_params("dof_damping", torch.zeros(2, 2))
    gain = torch.tensor([[1.0], [0.25]])  # multiplies the action: env 1 pushes with a quarter of the 20 N
    env.set_params("actuator_gain", gain)
    gain[1, 0] = 4.0  # the caller's tensor is copied: a later edit must not leak into the sim
    env.dof_pos[:] = 0.0
    env.dof_vel[:] = 0.0
    push_state(env)
    xd = env.step(torch.tensor([[1.0], [1.0]])).obs["state"][:, 1]
    assert xd[0].item() == pytest.approx(20.0 / 30.0, rel=1e-4)
    assert xd[1].item() == pytest.approx(5.0 / 30.0, rel=1e-4)
