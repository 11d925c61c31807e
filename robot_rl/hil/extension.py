"""The ``hil`` extension: `robot-rl train` through the graded human-in-the-loop schedule (``loop.hil``).

Each actor gets a :class:`~robot_rl.hil.schedule.HILController` as a step hook (the teleop device, one person's,
drives actor 0's sub-env 0): the human's action replaces the policy's after every other hook's (``intervened``),
the success/failure keys add to sub-env 0's reward, and finished sub-envs restart from demonstrated states. Before
the actors step, the offline phase trains on the demo buffer (:func:`~robot_rl.hil.schedule.run_offline_phase`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from robot_rl.core.config import ConfigError
from robot_rl.core.env import StepResult
from robot_rl.core.extension import BaseExtension, RunHandle, StepHook, register_extension
from robot_rl.hil.config import HILConfig

if TYPE_CHECKING:
    from robot_rl.hil.schedule import HILController


class HILStep(StepHook):
    """One actor's :class:`HILController` in its step."""

    def __init__(self, controller: HILController) -> None:
        self.controller = controller

    def after_act(self, obs: dict[str, torch.Tensor], action: torch.Tensor, extras: dict[str, torch.Tensor],
                  intervened: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """The human's action on sub-env 0 while they take over (flagged ``intervened``)."""
        action, human = self.controller.act(obs, action)
        return action, extras, intervened | human

    def reward(self, reward: torch.Tensor) -> torch.Tensor:
        """Sub-env 0's reward with this step's success/failure key added (human-guided phase)."""
        return self.controller.reward(reward)

    def next_obs(self, result: StepResult, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``obs``, or the observation after return-and-explore put finished sub-envs into demonstrated states."""
        after = self.controller.after_step(result)
        return obs if after is result.obs else after


class HILExtension(BaseExtension):
    """Checks the run at attach, one controller per actor, the offline phase at the start."""

    def __init__(self, section: HILConfig, run_cfg: Any) -> None:
        self.section = section
        self.seed = int(run_cfg.run.seed)
        self.run: RunHandle | None = None
        self.controllers: list[HILController] = []

    def attach(self, run: RunHandle) -> None:
        """Refuse what the schedule cannot run with; fail now on an empty demo buffer, not after the actors start."""
        from robot_rl.hil.schedule import demo_buffer

        if run.algo.on_policy or run.remote:
            raise ConfigError("loop.hil runs with an off-policy algorithm in `robot-rl train` (e.g. algo=sac)")
        if self.section.offline_updates > 0:
            demo_buffer(run.learner)
        self.run = run

    def step_hook(self, index: int, actor: Any) -> StepHook | None:
        """Actor ``index``'s controller; actor 0's has the teleop device."""
        from robot_rl.hil.schedule import HILController

        assert self.run is not None
        learner = self.run.learner
        controller = HILController(self.section, actor.env, lambda: int(learner.transitions),
                                   self.section.make_device() if index == 0 else None, seed=self.seed + index)
        self.controllers.append(controller)
        return HILStep(controller)

    def start(self, run: RunHandle) -> None:
        """The offline phase: ``offline_updates`` updates on the demo buffer (a resumed run that updated skips it)."""
        from robot_rl.hil.schedule import run_offline_phase

        if run.learner.updates == 0:
            run_offline_phase(run.learner, self.section.offline_updates)

    def single_process(self) -> str:
        """One person's teleop device, which one process owns."""
        return "loop.hil (one operator's teleop device, which one process owns)"

    def close(self) -> None:
        """Disconnect the teleop device."""
        if self.controllers:
            self.controllers[0].close()


# After the other extensions (order 10): the human's action wins over a JSRL guide's, as it did before.
@register_extension("hil", HILConfig | None, "graded human-in-the-loop schedule: offline demos → return-and-explore → "
                                             "human-guided (loop.hil; docs/rewards.md)", order=10, parent="loop")
def build(section: HILConfig | None, run_cfg: Any) -> HILExtension | None:
    """The extension when ``loop.hil`` is set, else None."""
    return HILExtension(section, run_cfg) if section is not None else None
