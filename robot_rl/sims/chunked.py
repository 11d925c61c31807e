"""Action-chunk execution and scripted chunk demonstrators, shared by the language tasks.

A chunk task accepts one action ``[N, A]`` or a chunk ``[N, H, A]`` and executes the chunk's first
``execute_steps`` actions (receding horizon). Rewards add up over the executed actions (``Σ_k d^k r_k`` with
the task's ``chunk_discount`` d, 1 by default), and a sub-env stops executing its chunk at the step it succeeds or
runs out of time; success terminates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch

from robot_rl.core.env import StepResult, check_action, wrapped_envs
from robot_rl.core.transition import Obs
from robot_rl.sims.torch_task import TorchTask


def execute_chunk(task: TorchTask, action: torch.Tensor, execute_steps: int,
                  apply: Callable[[torch.Tensor, torch.Tensor], None], discount: float = 1.0) -> StepResult:
    """Run ``action`` (one step or a chunk) on ``task``; ``apply(a [N, A], alive [N])`` moves the scene.

    The chunk's reward is ``Σ_k discount^k · r_k`` over its executed steps (a critic over chunks that discounts
    by γ per step backs up exactly this when ``discount = γ``).

    ``apply`` must leave sub-envs with ``alive`` False unchanged; the task's ``_reward_and_status`` and
    ``_finish_step`` (auto-reset, episode bookkeeping) do the rest.
    """
    action = check_action(action.to(task.device), task.spec, task.num_envs)
    chunk = action if action.dim() == 3 else action.unsqueeze(1)
    reward = torch.zeros(task.num_envs, device=task.device)
    success = torch.zeros(task.num_envs, dtype=torch.bool, device=task.device)
    alive = torch.ones(task.num_envs, dtype=torch.bool, device=task.device)
    for k in range(execute_steps if action.dim() == 3 else 1):
        apply(chunk[:, k], alive)
        r, _, succ = task._reward_and_status()
        reward += torch.where(alive, r, torch.zeros_like(r)) * discount**k
        success |= succ & alive
        task.episode_length += alive.long()
        alive &= ~succ & (task.episode_length < task.max_episode_steps)
    return task._finish_step(reward, success, success)  # success terminates


def check_chunk_discount(discount: float) -> None:
    """Raise ``ValueError`` unless ``0 < discount <= 1``."""
    if not 0.0 < discount <= 1.0:
        raise ValueError(f"chunk_discount must be in (0, 1], got {discount}")


def chunk_extras(extras: dict[str, Any], discount: float) -> dict[str, Any]:
    """A chunk task's spec extras: ``chunk_discount`` named when it is not 1 (a learner reads it from the spec)."""
    return {**extras, "chunk_discount": discount} if discount != 1.0 else dict(extras)


class ChunkDemonstrator:
    """Scripted expert of a chunk task: ``act(obs)`` returns what the env's action spec asks for.

    It reads the task's privileged state through its ``expert_chunk(horizon)``, not the observation; use it
    to record demos (:func:`robot_rl.data.recorder.record_episodes`). Subclasses name ``task_type`` and
    ``task_id`` (for the error when given another env).
    """

    task_type: ClassVar[type]
    task_id: ClassVar[str]

    def __init__(self, env: Any) -> None:
        inner = next((e for e in wrapped_envs(env) if isinstance(e, self.task_type)), None)
        if inner is None:
            raise TypeError(f"{type(self).__name__} needs a {self.task_id} env, got {type(env).__name__}")
        self.env: Any = inner

    def act(self, obs: Obs, deterministic: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(action, {})``: one step ``[N, A]`` or a chunk ``[N, H, A]``, matching the env's spec."""
        shape = self.env.spec.action.shape
        chunk = self.expert_chunk(shape[0] if len(shape) == 2 else 1)
        return (chunk if len(shape) == 2 else chunk[:, 0]), {}

    def expert_chunk(self, horizon: int) -> torch.Tensor:
        """``[N, horizon, A]`` expert actions from the current state."""
        return self.env.expert_chunk(horizon)  # type: ignore[no-any-return]
