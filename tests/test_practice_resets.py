"""``resets=physical``: between episodes the simulator places nothing; only a person's reset (counted) does."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("mujoco")

from robot_rl.hardware.sim_arm import SimulatedArmConfig
from robot_rl.hardware.sim_arm_server import SceneResets, make_world
from robot_rl.hardware.sim_so101 import SimSo101Config, So101Link
from robot_rl.hardware.sim_so101_world import HOME_DEG

pytestmark = pytest.mark.sim


def _world(robot: str, resets: str) -> Any:
    """The server's world in this process (no socket): the config the server would get."""
    if robot == "sim_arm":
        cfg = SimulatedArmConfig(cameras={}, resets=resets, seed=3).make()._server_config()
    else:
        cfg = So101Link(SimSo101Config(cameras={}, resets=resets, seed=3))._server_config()
    return make_world(cfg)


def _cube(world: Any) -> np.ndarray:
    return np.asarray(world.data.qpos[world.cube_q:world.cube_q + 3]).copy()


def _push_out_of_reach(world: Any, xy: tuple[float, float]) -> None:
    """What a sweep of the arm would do: the cube slides to ``xy`` (and falls off the SO-101's riser)."""
    world.data.qpos[world.cube_q:world.cube_q + 2] = xy
    world._mj.mj_forward(world.model, world.data)
    world.advance(0.5)


@pytest.mark.parametrize(("robot", "away"), [("sim_arm", (0.75, 0.0)), ("sim_so101", (0.45, 0.0))])
def test_a_cube_out_of_reach_stays_there_until_a_person_resets(robot: str, away: tuple[float, float]) -> None:
    world = _world(robot, "physical")
    resets = SceneResets(world, "physical")
    assert world.task()["in_reach"]
    _push_out_of_reach(world, away)
    there = _cube(world)
    assert not world.task()["in_reach"]
    for seed in range(3):  # three episodes come and go: nothing puts the cube back
        resets.episode_reset(seed)
        world.advance(0.3)
        np.testing.assert_allclose(_cube(world), there, atol=2e-3)
        assert not world.task()["in_reach"]
    assert resets.episode_resets == 3 and resets.human_resets == 0
    resets.human_reset(7)  # the person asked for puts it back
    assert world.task()["in_reach"] and resets.human_resets == 1
    lo, hi = np.asarray(world.cfg["cube_low"]), np.asarray(world.cfg["cube_high"])
    assert np.all(_cube(world)[:2] >= lo) and np.all(_cube(world)[:2] <= hi)


def test_physical_resets_leave_the_arm_where_it_is_and_teleport_resets_place_it() -> None:
    world = _world("sim_arm", "physical")
    world.command(np.array([0.3, 0.2, 0.25]), 0.0)  # move the gripper away from home
    world.advance(1.0)
    q = world.data.qpos[world.ix.arm_qpos].copy()
    SceneResets(world, "physical").episode_reset(1)
    world.advance(0.2)
    np.testing.assert_allclose(world.data.qpos[world.ix.arm_qpos], q, atol=0.02)  # held, not teleported home
    SceneResets(world, "teleport").episode_reset(1)
    assert np.abs(world.data.qpos[world.ix.arm_qpos] - q).max() > 0.1


def test_an_unknown_resets_mode_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="valid: teleport, physical"):
        SimulatedArmConfig(resets="magic")
    with pytest.raises(ValueError, match="valid: teleport, physical"):
        SimSo101Config(resets="magic")


@pytest.mark.integration
def test_through_the_process_an_episode_reset_leaves_the_lifted_cube_in_the_gripper() -> None:
    """The real path (client, wire, server): ``reset_task`` places nothing, ``human_reset`` does and is counted."""
    from waiting import wait_until

    from robot_rl.hardware.robot import HumanResettable, TaskRobot
    from robot_rl.hardware.sim_arm import pick_expert_action

    arm = SimulatedArmConfig(cameras={}, resets="physical", seed=3, time_scale=3.0, request_timeout_s=5.0).make()
    arm.connect()
    try:
        assert isinstance(arm, TaskRobot) and isinstance(arm, HumanResettable)

        def picked() -> bool:
            arm.send_action(pick_expert_action(arm.observe(), arm.config))
            return arm.task_status().success

        wait_until(picked, 30.0, "the scripted pick to succeed", poll_s=0.03, seen=lambda: arm.task_status().info)
        arm.reset_task(seed=5)  # a new episode: the cube stays in the closed gripper, up in the air
        arm.observe()
        assert arm.task_status().info["lifted_m"] >= arm.config.lift_height - 0.01
        arm.human_reset(seed=5)
        arm.observe()
        status = arm.task_status()
        assert abs(status.info["lifted_m"]) < 0.01 and status.info["in_reach"]
        stats = arm.sim_stats()
        assert stats["human_resets"] == 1 and stats["episode_resets"] == 1
    finally:
        arm.disconnect()


@pytest.mark.parametrize("robot", ["sim_arm", "sim_so101"])
def test_the_reset_policys_goal_holds_where_the_demos_start_and_not_after_a_push(robot: str) -> None:
    world = _world(robot, "physical")
    for seed in range(3):  # every start the simulator places is a goal of the reset policy
        SceneResets(world, "teleport").episode_reset(seed)
        world.advance(0.2)
        task = world.task()
        assert task["at_start"] and task["start_reward"] == 5.0, task
    _push_out_of_reach(world, (0.75, 0.0) if robot == "sim_arm" else (0.45, 0.0))
    task = world.task()
    assert not task["at_start"] and -1.0 <= task["start_reward"] < 0.0


@pytest.mark.parametrize("robot", ["sim_arm", "sim_so101"])
def test_the_reset_policys_goal_needs_the_arm_back_where_the_demos_start_too(robot: str) -> None:
    """A gripper left open above the cube, clear of it but far from the start pose, is not the demos' start."""
    world = _world(robot, "physical")
    SceneResets(world, "teleport").episode_reset(2)
    world.advance(0.2)
    if robot == "sim_arm":
        cube = _cube(world)
        world.command(np.array([cube[0], cube[1], cube[2] + 0.06]), 1.0)  # open, 6 cm above the cube
    else:
        world.command(np.asarray(HOME_DEG) + np.array([25.0, 0.0, 0.0, 0.0, 0.0]), 1.0)  # swung aside, jaws open
    world.advance(1.5)
    task = world.task()
    assert not task["at_start"] and -1.0 < task["start_reward"] < 0.0, task
    world.command(np.asarray(world.grip_area[0]) if robot == "sim_arm" else np.asarray(HOME_DEG, float), 1.0)
    world.advance(1.5)
    assert world.task()["at_start"], world.task()
