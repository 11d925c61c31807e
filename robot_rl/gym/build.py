"""A robot_rl task's batched env from a task id and field overrides (no gymnasium needed).

The same resolution as ``robot-rl train --task``: a registered name (``reach``, ``mujoco/push``) or a backend
id (``maniskill/PickCube-v1``), then the config's fields set from keyword overrides, checked like a config
file (unknown keys name the valid ones; nested sections such as ``randomize`` take dicts).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from robot_rl.config_io import from_dict, merge_implied
from robot_rl.core.config import TASKS, TaskConfig

if TYPE_CHECKING:
    import torch

    from robot_rl.core.env import VecEnv


def task_config(task: str | TaskConfig, **overrides: Any) -> TaskConfig:
    """The config of ``task`` (an id or a config) with ``overrides`` (config field names) applied."""
    if isinstance(task, TaskConfig):
        if not overrides:
            return task
        from robot_rl.config_io import to_dict

        data = to_dict(task)
        data.update(overrides)
        return from_dict(TaskConfig, data, where=f"task {data.get('type', type(task).__name__)}")
    cls, implied = TASKS.resolve(task)
    data = merge_implied(dict(overrides), implied, where=f"task {task!r}")
    return from_dict(cls, data, where=f"task {task!r}")


def draw_seed(seed: int | None) -> int:
    """``seed``, or a fresh one from the OS when ``None`` (gymnasium's meaning of "unseeded")."""
    return int(seed) if seed is not None else random.SystemRandom().randrange(2**31)


def build_task_env(task: str | TaskConfig, num_envs: int | None = None, *, device: torch.device | str = "cpu",
                   seed: int | None = None, **overrides: Any) -> VecEnv:
    """Build ``task``'s batched :class:`~robot_rl.core.env.VecEnv` of ``num_envs`` sub-envs on ``device``.

    ``num_envs`` ``None`` keeps the config's ``num_envs``. A task whose simulator is not installed raises
    ``ImportError`` naming the ``pip install`` that brings it (the task's own ``make`` says so).
    """
    cfg = task_config(task, **overrides)
    if num_envs is not None and num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    return cfg.make(device, draw_seed(seed), num_envs=num_envs)
