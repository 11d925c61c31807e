"""Domain randomisation: exactly the named parameters change, per episode; noise and delays as specified."""

import pytest
import torch

from robot_rl.core.config import ConfigError
from robot_rl.core.env import NonFiniteActionError, StepResult, VecEnv, check_action
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.sims.base import ParamRange, RandomizeConfig
from robot_rl.sims.isaacgym import IsaacGymTaskConfig
from robot_rl.sims.randomize import RandomizedVecEnv, pop_summaries
from robot_rl.sims.reach import ReachConfig
from robot_rl.testing.fake_env import FakeVecEnv


def reach(randomize, num_envs=6, seed=0, **kw):
    return ReachConfig(num_envs=num_envs, randomize=randomize, **kw).make("cpu", seed=seed)


class CounterEnv(VecEnv):
    """state = [steps taken in this episode]; records the actions it is given; episodes of 5 steps."""

    def __init__(self, num_envs=3):
        self.spec = EnvSpec(observation={"state": ArraySpec((1,), "float32")},
                            action=ArraySpec((1,), "float32", -100.0, 100.0))
        self.num_envs, self.device, self.max_episode_steps = num_envs, torch.device("cpu"), 5
        self.t = torch.zeros(num_envs)
        self.applied = []

    def reset(self, seed=None):
        self.t.zero_()
        return {"state": self.t.unsqueeze(-1).clone()}

    def step(self, action):
        action = check_action(action, self.spec, self.num_envs)
        self.applied.append(action[:, 0].clone())
        self.t += 1
        final = {"state": self.t.unsqueeze(-1).clone()}
        truncated = self.t >= 5
        self.t[truncated] = 0
        zeros = torch.zeros(self.num_envs)
        return StepResult({"state": self.t.unsqueeze(-1).clone()}, zeros, torch.zeros_like(truncated), truncated,
                          {"final_obs": final, "success": torch.zeros_like(truncated), "episode_return": zeros,
                           "episode_length": zeros.long()})


def test_config_section_wraps_the_env_and_only_named_parameters_change():
    cfg = RandomizeConfig(params={"link_length": ParamRange(0.8, 0.9, indices=[1])})
    env = reach(cfg)
    assert isinstance(env, RandomizedVecEnv)
    nominal = ReachConfig(num_envs=6).make("cpu", seed=0).get_params()
    env.reset()
    p = env.get_params()
    assert torch.equal(p["link_length"][:, 0], nominal["link_length"][:, 0])  # index 0 not selected
    forearm = p["link_length"][:, 1] / 0.5
    assert ((forearm >= 0.8) & (forearm <= 0.9)).all() and forearm.unique().numel() == 6  # per world
    assert torch.equal(p["action_scale"], nominal["action_scale"])
    assert torch.equal(p["joint_step"], nominal["joint_step"])
    # The env really uses the sampled forearm: its end-effector follows the randomised kinematics.
    q = env.env.q
    ee = env.env.end_effector()
    expected_x = 0.5 * torch.cos(q[:, 0]) + p["link_length"][:, 1] * torch.cos(q[:, 0] + q[:, 1])
    assert torch.allclose(ee[:, 0], expected_x, atol=1e-6)
    assert ReachConfig(num_envs=2).make("cpu", seed=0).__class__.__name__ == "ReachTask"  # no section: no wrapper


def test_parameters_are_resampled_only_for_worlds_whose_episode_ended():
    env = reach(RandomizeConfig(params={"action_scale": ParamRange(-0.01, 0.01, mode="add")}), max_episode_steps=3)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    before = env.get_params()["action_scale"]
    assert ((before - 0.05).abs() <= 0.01).all()
    res = env.step(torch.zeros(6, 2))
    assert not (res.terminated | res.truncated).any() and torch.equal(env.get_params()["action_scale"], before)
    for _ in range(2):
        res = env.step(torch.rand(6, 2, generator=gen) * 0.0)
    done = res.terminated | res.truncated
    assert done.all()  # zero actions never reach the goal: all truncated at step 3
    after = env.get_params()["action_scale"]
    assert (after != before).all()
    summary = env.pop_summary()
    assert summary["episodes"] == 12 and 0.04 <= summary["action_scale/min"] <= summary["action_scale/max"] <= 0.06
    assert env.pop_summary() == {}  # popped


def test_new_episodes_start_with_observations_of_their_new_parameters():
    env = reach(RandomizeConfig(params={"link_length": ParamRange(0.6, 1.4)}), max_episode_steps=2)
    env.reset()
    for _ in range(2):
        res = env.step(torch.zeros(6, 2))
    assert res.truncated.all()
    # The returned first observation matches what the env computes with the resampled lengths.
    assert torch.allclose(res.obs["state"], env.env.observe()["state"])


def test_same_seed_same_samples_and_different_seed_different_samples():
    cfg = RandomizeConfig(params={"link_length": ParamRange(0.9, 1.1)}, obs_noise={"state": 0.05},
                          action_delay=(0, 2), obs_delay=(0, 1))

    def rollout(seed):
        env = reach(cfg, seed=seed, max_episode_steps=4)
        out = [env.reset()["state"], env.get_params()["link_length"]]
        gen = torch.Generator().manual_seed(1)
        for _ in range(10):
            out.append(env.step(torch.rand(6, 2, generator=gen) * 2 - 1).obs["state"])
        return [*out, env.get_params()["link_length"], env.action_delay, env.obs_delay]

    a, b, c = rollout(0), rollout(0), rollout(1)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[1], c[1])


def test_observation_noise_has_the_configured_std_and_keeps_final_obs_consistent():
    clean = reach(None, num_envs=256, seed=0)
    noisy = reach(RandomizeConfig(obs_noise={"state": 0.1}), num_envs=256, seed=0)
    diff = noisy.reset()["state"] - clean.reset()["state"]
    assert diff.std().item() == pytest.approx(0.1, rel=0.05) and diff.mean().abs().item() < 0.01
    res_n, res_c = noisy.step(torch.zeros(256, 2)), clean.step(torch.zeros(256, 2))
    step_diff = res_n.obs["state"] - res_c.obs["state"]
    assert step_diff.std().item() == pytest.approx(0.1, rel=0.05)
    done = res_n.terminated | res_n.truncated
    assert torch.equal(res_n.info["final_obs"]["state"][~done], res_n.obs["state"][~done])
    with pytest.raises(ConfigError, match="not a float observation key"):
        RandomizedVecEnv(FakeVecEnv(image=True), RandomizeConfig(obs_noise={"image.front": 1.0}), seed=0)


def test_action_delay_applies_the_action_of_k_steps_ago_and_refills_at_episode_start():
    base = CounterEnv()
    env = RandomizedVecEnv(base, RandomizeConfig(action_delay=(2, 2)), seed=0)
    env.reset()
    given = [torch.full((3, 1), float(i + 1)) for i in range(8)]
    for a in given:
        env.step(a)
    applied = [x[0].item() for x in base.applied]
    # Episode 1 (steps 1-5): first action held for 2 steps, then a lag of 2. Episode 2 starts at step 6.
    assert applied == [1, 1, 1, 2, 3, 6, 6, 6]
    with pytest.raises(NonFiniteActionError):
        env.step(torch.full((3, 1), float("nan")))
    assert len(base.applied) == 8  # the NaN action never reached the env


def test_per_world_action_delays_are_drawn_in_range():
    base = CounterEnv(num_envs=64)
    env = RandomizedVecEnv(base, RandomizeConfig(action_delay=(0, 3)), seed=0)
    env.reset()
    assert set(env.action_delay.tolist()) == {0, 1, 2, 3}
    for i in range(4):
        env.step(torch.full((64, 1), float(i + 1)))
    expected = torch.clamp(4 - env.action_delay, min=1).float()
    assert torch.equal(base.applied[-1], expected)


def test_observation_delay_shows_older_observations_and_delays_final_obs_alike():
    base = CounterEnv()
    env = RandomizedVecEnv(base, RandomizeConfig(obs_delay=(1, 1)), seed=0)
    seen = [env.reset()["state"][0, 0].item()]
    finals = []
    for _ in range(7):
        res = env.step(torch.zeros(3, 1))
        seen.append(res.obs["state"][0, 0].item())
        finals.append(res.info["final_obs"]["state"][0, 0].item())
    # True counters: 1 2 3 4 5(end, reset to 0) 1 2. Seen one step late; a new episode shows its first obs.
    assert seen == [0, 0, 1, 2, 3, 0, 0, 1]
    assert finals[4] == 4  # the finished episode's last observation, as the policy would have seen it
    assert finals[:4] == seen[1:5]


def test_bad_parameter_names_and_envs_without_parameters():
    with pytest.raises(ConfigError, match="has no parameter 'body_mass'; it has: action_scale, joint_step"):
        reach(RandomizeConfig(params={"body_mass": ParamRange(0.9, 1.1)}))
    with pytest.raises(ConfigError, match="exposes no parameters"):
        RandomizedVecEnv(FakeVecEnv(), RandomizeConfig(params={"body_mass": ParamRange(0.9, 1.1)}), seed=0)
    with pytest.raises(ConfigError, match="out of range"):
        reach(RandomizeConfig(params={"link_length": ParamRange(0.9, 1.1, indices=[2])}))


def test_isaacgym_fake_damping_randomised_and_nothing_else():
    cfg = IsaacGymTaskConfig(api="robot_rl.testing.fake_isaacgym", num_envs=4,
                             randomize=RandomizeConfig(params={"dof_damping": ParamRange(0.1, 0.3, mode="add")}))
    env = cfg.make("cpu", seed=0)
    nominal = env.get_params()
    env.reset()
    after = env.get_params()
    for name in nominal:
        if name != "dof_damping":
            assert torch.equal(after[name], nominal[name]), name
    added = after["dof_damping"] - nominal["dof_damping"]
    assert ((added >= 0.1 - 1e-6) & (added <= 0.3 + 1e-6)).all()
    assert torch.allclose(env.env.sim.damping, after["dof_damping"])  # the sim itself got the values
    merged = pop_summaries([env, FakeVecEnv()])
    assert merged["episodes"] == 4 and 0.1 <= merged["dof_damping/min"] <= merged["dof_damping/max"] <= 0.3
