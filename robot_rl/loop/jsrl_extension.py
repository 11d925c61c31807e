"""The ``jsrl`` extension: a guide policy acts first in each episode and hands over as the learner succeeds.

Each actor gets its own :class:`~robot_rl.loop.jsrl.GuidedActing` (a copy of the guide, its own curriculum) as a
step hook; rows the guide acted in carry ``guided``. The curricula are kept in each checkpoint (``meta["jsrl"]``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

import torch

from robot_rl.core.algorithm import Policy
from robot_rl.core.config import ConfigError
from robot_rl.core.extension import BaseExtension, RunHandle, StepHook, StepView, register_extension
from robot_rl.core.extras import GUIDED
from robot_rl.loop.jsrl import JSRL_GUIDE_FILE, OFFLINE_GUIDE, GuidedActing, JSRLConfig, load_guide

log = logging.getLogger(__name__)


class GuidedStep(StepHook):
    """One actor's :class:`GuidedActing` in its step: the guide's actions replace the policy's, flagged ``guided``."""

    def __init__(self, guided: GuidedActing) -> None:
        self.guided = guided

    def after_act(self, obs: dict[str, torch.Tensor], action: torch.Tensor, extras: dict[str, torch.Tensor],
                  intervened: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """The guide acts on the sub-envs still in their first ``h`` steps."""
        action, guided = self.guided.act(obs, action)
        return action, {**extras, GUIDED.name: guided}, intervened

    def after_step(self, step: StepView) -> None:
        """Episode ends feed the curriculum."""
        self.guided.after_step(step.done, step.result.info["success"])


class JSRLExtension(BaseExtension):
    """Loads the guide at attach, one :class:`GuidedStep` per actor."""

    def __init__(self, section: JSRLConfig, run_cfg: Any) -> None:
        self.section = section
        self.run_cfg = run_cfg
        self.guide: Policy | None = None
        self.steps: list[GuidedStep] = []
        self._state: list[dict[str, int]] = []

    def attach(self, run: RunHandle) -> None:
        """Load the guide ``jsrl.guide`` names (after the offline phase, whose policy ``offline`` names)."""
        if run.algo.on_policy or run.remote:
            raise ConfigError("jsrl.guide runs in `robot-rl train` with an off-policy learner (algo=sac): "
                              "on-policy updates need the actions their own policy chose")
        guide_file = run.run_dir / JSRL_GUIDE_FILE
        if self.section.guide == OFFLINE_GUIDE and self.run_cfg.offline.data is not None and not guide_file.exists():
            # The offline phase (attached just before) left its policy in the learner; kept apart, since a resumed
            # run's weights are no longer the offline ones.
            torch.save(run.algo.actor_weights(), guide_file)
        self.guide = load_guide(self.section, self.run_cfg.task, run.run_dir, run.spec, run.device,
                                run.algo.make_policy)

    def load_state(self, state: Any) -> None:
        """The curricula of a resumed run, one per actor."""
        self._state = list(state or [])

    def step_hook(self, index: int, actor: Any) -> StepHook | None:
        """Actor ``index``'s guide (actor 0 gets the loaded policy, the others a copy)."""
        assert self.guide is not None
        step = GuidedStep(GuidedActing(self.section, self.guide if index == 0 else copy.deepcopy(self.guide),
                                       actor.env.num_envs, actor.env.device))
        if index < len(self._state):
            step.guided.schedule.load_state(self._state[index])
        if index == 0:
            log.info("jsrl: %s guides the first %d steps of each episode", self.section.guide,
                     step.guided.schedule.guide_steps)
        self.steps.append(step)
        return step

    def metrics(self) -> Mapping[str, float]:
        """``horizon`` and ``guided_fraction``, averaged over the actors (``jsrl/…``)."""
        each = [s.guided.pop_metrics() for s in self.steps]
        return {k: sum(m[k] for m in each) / len(each) for k in each[0]} if each else {}

    def state(self) -> Any:
        """Each actor's curriculum."""
        return [s.guided.schedule.state() for s in self.steps] or None


@register_extension("jsrl", JSRLConfig, "jump-start RL: a guide policy acts first in each episode "
                                        "(docs/offline-to-online.md)")
def build(section: JSRLConfig, run_cfg: Any) -> JSRLExtension | None:
    """The extension when ``jsrl.guide`` is set, else None."""
    return JSRLExtension(section, run_cfg) if section.guide is not None else None
