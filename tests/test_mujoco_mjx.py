"""The MJX backend against the CPU backend (needs jax; slow: compiling MJX takes about a minute on CPU)."""

import pytest
import torch

pytest.importorskip("mujoco")
pytest.importorskip("jax")
pytest.importorskip("mujoco.mjx")

import robot_rl.sims.mujoco  # noqa: F401 - registers the tasks
from robot_rl.core.config import TASKS


@pytest.mark.slow
@pytest.mark.sim
def test_mjx_matches_cpu_and_follows_the_contract():
    cpu = TASKS.get("mujoco/reach")(num_envs=2, max_episode_steps=3).make("cpu", 0)
    mjx = TASKS.get("mujoco/reach")(num_envs=2, max_episode_steps=3, backend="mjx").make("cpu", 0)
    assert mjx.spec.observation == cpu.spec.observation and mjx.spec.action == cpu.spec.action
    # Same seed, same start states (they come from the same torch generator).
    assert torch.allclose(mjx.reset()["state"], cpu.reset()["state"], atol=1e-5)
    g = torch.Generator().manual_seed(0)
    for _t in range(3):
        a = torch.rand(2, 3, generator=g) * 2 - 1
        rc, rm = cpu.step(a), mjx.step(a)
        assert torch.allclose(rc.info["final_obs"]["state"], rm.info["final_obs"]["state"], atol=1e-4)
        assert torch.allclose(rc.reward, rm.reward, atol=1e-3)
        assert torch.equal(rc.truncated, rm.truncated) and rm.obs["state"].device.type == "cpu"
    assert rm.truncated.all()  # auto-reset at the time limit, same new episodes as the CPU backend
    assert torch.allclose(rc.obs["state"], rm.obs["state"], atol=1e-5)
    before = mjx.get_params()
    damping = before["dof_damping"].clone()
    damping[1, 0] = 7.0
    mjx.set_params("dof_damping", damping)
    after = mjx.get_params()
    assert (after["dof_damping"] != before["dof_damping"]).sum() == 1
    assert all(torch.equal(after[k], before[k]) for k in ("body_mass", "geom_friction", "actuator_gain"))
