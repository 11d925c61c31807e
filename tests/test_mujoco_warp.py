"""The MuJoCo Warp backend against the CPU backend, on Warp's CPU device (needs ``mujoco-warp``; slow: Warp compiles
its kernels on first use, about two minutes on a fresh 2-core machine, then caches them). CI runs this file in a
step of its own after the suite, with the extra installed (.ci/run)."""

import pytest
import torch

pytest.importorskip("mujoco")
pytest.importorskip("mujoco_warp", reason="backend=warp needs mujoco-warp: pip install 'robot-rl[warp]'")

import robot_rl.sims.mujoco  # noqa: F401 - registers the tasks
from robot_rl.core.config import TASKS

pytestmark = [pytest.mark.slow, pytest.mark.sim]


@pytest.mark.parametrize("task", ["mujoco/reach", "mujoco/pick_cube"])
def test_warp_matches_cpu_and_follows_the_contract(task: str) -> None:
    cpu = TASKS.get(task)(num_envs=3, max_episode_steps=4).make("cpu", 0)
    warp = TASKS.get(task)(num_envs=3, max_episode_steps=4, backend="warp").make("cpu", 0)
    assert warp.spec.observation == cpu.spec.observation and warp.spec.action == cpu.spec.action
    # Same seed, same start states (they come from the same torch generator).
    torch.testing.assert_close(warp.reset()["state"], cpu.reset()["state"], rtol=0, atol=1e-5)
    g = torch.Generator().manual_seed(0)
    for _ in range(6):  # past the time limit: one auto-reset of every world
        a = torch.rand(3, *cpu.spec.action.shape, generator=g) * 2 - 1
        rc, rw = cpu.step(a), warp.step(a)
        torch.testing.assert_close(rw.info["final_obs"]["state"], rc.info["final_obs"]["state"], rtol=0, atol=1e-4)
        torch.testing.assert_close(rw.reward, rc.reward, rtol=0, atol=1e-3)
        assert torch.equal(rc.truncated, rw.truncated) and torch.equal(rc.terminated, rw.terminated)
        assert rw.obs["state"].device.type == "cpu" and rw.obs["state"].dtype == torch.float32
    torch.testing.assert_close(rw.obs["state"], rc.obs["state"], rtol=0, atol=1e-4)


def test_warp_loads_a_cpu_state_and_sets_parameters_per_world() -> None:
    cpu = TASKS.get("mujoco/push")(num_envs=2, max_episode_steps=10).make("cpu", 0)
    warp = TASKS.get("mujoco/push")(num_envs=2, max_episode_steps=10, backend="warp").make("cpu", 0)
    cpu.reset(), warp.reset()
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        cpu.step(torch.rand(2, 3, generator=g) * 2 - 1)
    state = cpu.get_state()
    warp.set_state(state)  # the CPU backend's state, mjSTATE_INTEGRATION layout, warm start included
    torch.testing.assert_close(warp.get_state(), state, rtol=0, atol=1e-5)
    a = torch.rand(2, 3, generator=g) * 2 - 1
    torch.testing.assert_close(warp.step(a).obs["state"], cpu.step(a).obs["state"], rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match="does not match this env's"):
        warp.set_state(state[:1])

    before = warp.get_params()
    damping = before["dof_damping"].clone()
    damping[1, 0] = 7.0
    warp.set_params("dof_damping", damping)
    after = warp.get_params()
    assert (after["dof_damping"] != before["dof_damping"]).sum() == 1
    assert all(torch.equal(after[k], before[k]) for k in ("body_mass", "geom_friction", "actuator_gain"))
    gain = before["actuator_gain"].clone()
    gain[0] *= 1.5
    warp.set_params("actuator_gain", gain[:1], env_ids=torch.tensor([0]))
    torch.testing.assert_close(warp.get_params()["actuator_gain"], gain.to(torch.float64), rtol=0, atol=1e-4)
    # The changed gain moves world 0 away from the CPU backend's world (world 1's gain is unchanged: checked above).
    cpu_obs, warp_obs = cpu.step(a).obs["state"], warp.step(a).obs["state"]
    assert float((cpu_obs[0] - warp_obs[0]).abs().max()) > 1e-4
    with pytest.raises(ValueError, match="NaN"):
        warp.set_params("body_mass", torch.full_like(before["body_mass"], float("nan")))
