"""SimulatedArm options for HIL learning benchmarks: faster-than-real-time physics, the dense pick reward."""

from __future__ import annotations

import time
from dataclasses import asdict

import numpy as np
import pytest

pytest.importorskip("mujoco")
pytest.importorskip("msgpack")

from robot_rl.hardware.sim_arm import SimulatedArmConfig, pick_expert_action
from robot_rl.hardware.sim_arm_server import SimArmWorld, unpack_array

pytestmark = pytest.mark.sim


@pytest.mark.integration
def test_time_scale_runs_the_physics_that_many_times_faster_than_the_wall_clock():
    arm = SimulatedArmConfig(cameras={}, time_scale=3.0).make()
    arm.connect()  # MuJoCo is installed: an arm that does not start is a failure, not a skip
    try:
        s0, t0 = arm.sim_stats()["sim_time"], time.monotonic()
        time.sleep(1.5)  # the measurement window: long against the delay of a request on a loaded machine
        s1, t1 = arm.sim_stats()["sim_time"], time.monotonic()
    finally:
        arm.disconnect()
    ratio = (s1 - s0) / (t1 - t0)
    # Generous for a loaded 2-core machine, and still far from real time (1) and from free-running.
    assert 2.0 < ratio < 4.0, f"simulated {s1 - s0:.3f}s in {t1 - t0:.3f}s of wall clock"
    with pytest.raises(ValueError, match="time_scale"):
        SimulatedArmConfig(time_scale=0.0)


def _state(world: SimArmWorld) -> dict[str, np.ndarray]:
    s = world.state()
    parts = [unpack_array(s["joints"]), unpack_array(s["ee_pose"]), [s["gripper"]], unpack_array(s["cube"])]
    return {"state": np.concatenate(parts).astype(np.float32)}


def test_dense_reward_is_a_cost_until_success_so_succeeding_pays_most():
    # Success ends the episode: a positive reward per step before it would make hovering with the cube
    # worth more than lifting it. Every step before success must cost (<= 0); success pays 5.
    cfg = SimulatedArmConfig(cameras={}, reward="dense", max_step_m=0.02)
    world = SimArmWorld(asdict(cfg))
    world.reset(3)
    rewards, success = [], False
    for _ in range(40):
        obs = _state(world)
        a = pick_expert_action(obs, cfg)
        world.command(np.concatenate([obs["state"][6:9] + a[:3] * cfg.max_step_m, np.zeros(3)]), (a[6] + 1) / 2)
        world.advance(0.1)
        task = world.task()
        rewards.append(task["reward"])
        if task["success"]:
            success = True
            break
    assert success, "the scripted pick should succeed within 40 steps"
    assert rewards[-1] == 5.0
    assert all(-1.0 <= r <= 0.0 for r in rewards[:-1])
    assert rewards[-2] > rewards[0]  # closer, grasped and lifted costs less than far away
