"""robot_rl's tasks in gymnasium's registry: ``robot_rl/<Task>-v0`` for ``gymnasium.make`` and ``make_vec``.

Every registered task name gets an id: its parts in CamelCase (``reach`` → ``robot_rl/Reach-v0``,
``reach_pixels`` → ``robot_rl/ReachPixels-v0``, ``mujoco/pick_cube`` → ``robot_rl/MujocoPickCube-v0``), with
``entry_point`` the single env (robot_rl/gym/single_env.py) and ``vector_entry_point`` the batched one
(robot_rl/gym/vector_env.py), so ``gymnasium.make_vec(id, num_envs=N)`` steps all ``N`` in one batched task
rather than ``N`` copies. Backends that take an id of their own (``maniskill``, ``isaacgym``) are registered
too and take it as a keyword (``gymnasium.make("robot_rl/Maniskill-v0", env_id="PickCube-v1")``); the
``gymnasium`` backend is not, as it wraps gymnasium envs that already have their ids.

gymnasium 1.x has no plugin entry point (it was removed in 1.0), so the ids exist once ``robot_rl.gym``
is imported; ``gymnasium.make("robot_rl.gym:robot_rl/Reach-v0")`` imports it by itself (gymnasium's
``module:id`` syntax).
"""

from __future__ import annotations

import gymnasium

from robot_rl.core.config import TASKS

#: gymnasium's namespace for robot_rl's tasks.
NAMESPACE = "robot_rl"
#: Task backends that are gymnasium envs already (not registered back into gymnasium).
SKIPPED = frozenset({"gym", "gymnasium"})


def gym_id(task_name: str) -> str:
    """The gymnasium id of a registered task name: ``mujoco/pick_cube`` → ``robot_rl/MujocoPickCube-v0``."""
    words = task_name.replace("/", "_").split("_")
    return f"{NAMESPACE}/{''.join(w[:1].upper() + w[1:] for w in words if w)}-v0"


def register_tasks() -> dict[str, str]:
    """Register every task (one id per config class, under its canonical name); ``{gym id: task name}``.

    Idempotent: ids already in gymnasium's registry are left as they are.
    """
    ids: dict[str, str] = {}
    for name in TASKS.names():
        cls = TASKS.get(name)
        if name in SKIPPED or TASKS.name_of(cls) != name:
            continue
        env_id = gym_id(name)
        ids[env_id] = name
        if env_id in gymnasium.registry:
            continue
        gymnasium.register(
            id=env_id,
            entry_point="robot_rl.gym.single_env:RobotRLEnv",
            vector_entry_point="robot_rl.gym.vector_env:make_vec",
            kwargs={"task_id": name},
            disable_env_checker=False,
        )
    return ids
