"""Jump-start RL (Uchendu et al., 2022): a guide policy rolls in, the learner takes over, the hand-over moves earlier.

For the first ``h`` steps of each episode a *guide* acts (an offline or SFT policy, or a scripted controller);
from step ``h`` on the learning policy acts. The learner thus starts from states the guide reaches, near the goal,
and learns backwards. ``h`` starts at ``horizon`` and shrinks by ``horizon / stages`` each time the learner's
success over the last ``window`` episodes reaches ``threshold``, down to 0 (plain online RL). Rows the guide
acted are flagged (``extras["guided"]``) so the learner and its logs can tell them apart.

:class:`GuidedActing` is the actor's side: each sub-env counts its own episode steps, the guide's action replaces
the learner's for the first ``h`` of them, and every finished episode feeds the curriculum. ``robot-rl train
jsrl.guide=runs/teacher`` (a run directory: its newest checkpoint's policy), ``jsrl.guide=offline`` (the
policy the offline phase left, frozen) or ``jsrl.guide=scripted`` (the task's scripted controller, where it has
one: :class:`~robot_rl.core.config.HasScriptedController`) switches it on (docs/offline-to-online.md).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from robot_rl.core.algorithm import Policy
from robot_rl.core.config import ConfigError, HasScriptedController, TaskConfig
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs

#: ``jsrl.guide`` value for the policy the offline phase pre-trained (``--offline DATA``), frozen.
OFFLINE_GUIDE = "offline"
#: ``jsrl.guide`` value for the task's own scripted controller.
SCRIPTED_GUIDE = "scripted"
#: Where ``jsrl.guide=offline`` keeps the offline phase's actor weights in the run directory.
JSRL_GUIDE_FILE = "jsrl_guide.pt"

log = logging.getLogger(__name__)


@dataclass
class JSRLConfig:
    """Jump-start RL (``jsrl.*``): who guides, and the hand-over curriculum."""

    guide: str | None = None
    """A run directory whose newest checkpoint's policy guides (e.g. a BC or offline-RL run); ``offline``: the
    policy this run's offline phase pre-trained, frozen before online training changes it; ``scripted``: the
    task's scripted controller (``mujoco/pick_cube``, ``mujoco/reach``). None: no JSRL."""
    deterministic: bool = True
    """The guide acts with its deterministic action (its best guess), not a sample."""
    horizon: int = 40
    """Guide steps at the start (usually the episode length)."""
    stages: int = 10
    """The horizon goes to 0 in this many equal steps."""
    threshold: float = 0.8
    """Learner success over ``window`` episodes that moves the hand-over earlier."""
    window: int = 20
    """Episodes the success is measured over (the window restarts after each move)."""

    def __post_init__(self) -> None:
        if self.horizon < 0 or self.stages < 1 or self.window < 1 or not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"jsrl: horizon >= 0, stages >= 1, window >= 1 and threshold in (0, 1] (got {self})")


class JSRLSchedule:
    """Who acts at each step of an episode, and the curriculum over episodes (module docstring)."""

    def __init__(self, config: JSRLConfig) -> None:
        self.config = config
        self.stage = 0
        self.history: list[tuple[int, int]] = []
        """``(episode index, new guide horizon)`` at every move."""
        self._results: deque[bool] = deque(maxlen=config.window)
        self.episodes = 0
        """Episodes recorded."""

    @property
    def guide_steps(self) -> int:
        """Steps the guide acts at the start of an episode now."""
        c = self.config
        return max(0, round(c.horizon * (c.stages - self.stage) / c.stages))

    def guide_acts(self, step: int) -> bool:
        """Whether the guide acts at ``step`` (0-based) of the current episode."""
        return step < self.guide_steps

    def state(self) -> dict[str, int]:
        """What a resumed run needs to go on where this curriculum stood."""
        return {"stage": self.stage, "episodes": self.episodes}

    def load_state(self, state: dict[str, int]) -> None:
        """Continue from :meth:`state` (the success window starts empty)."""
        self.stage, self.episodes = int(state["stage"]), int(state["episodes"])

    def end_episode(self, success: bool) -> bool:
        """Record an episode's outcome; True when the hand-over moved earlier."""
        self.episodes += 1
        self._results.append(bool(success))
        c = self.config
        full = len(self._results) == c.window
        if self.guide_steps == 0 or not full or sum(self._results) / c.window < c.threshold:
            return False
        self.stage += 1
        self._results.clear()
        self.history.append((self.episodes, self.guide_steps))
        return True


class GuidedActing:
    """One actor's JSRL: the guide acts for the first ``h`` steps of each sub-env's episode (module docstring).

    ``num_envs`` sub-envs on ``device``. :meth:`act` after the learner's policy chose its actions, :meth:`after_step`
    with each step's episode ends and successes.
    """

    def __init__(self, config: JSRLConfig, guide: Policy, num_envs: int, device: torch.device | str) -> None:
        self.schedule = JSRLSchedule(config)
        self.guide = guide
        self.deterministic = config.deterministic
        self.episode_step = torch.zeros(num_envs, dtype=torch.int64, device=device)
        self.guided_steps = 0
        self.steps = 0

    @torch.no_grad()
    def act(self, obs: Obs, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action to apply, guided [N])``: the guide's action on the sub-envs still in their first ``h`` steps."""
        guided = self.episode_step < self.schedule.guide_steps
        self.steps += guided.numel()
        if not bool(guided.any()):
            return action, guided
        self.guided_steps += int(guided.sum())
        guide_action, _ = self.guide.act(obs, deterministic=self.deterministic)
        mask = guided.reshape(-1, *([1] * (action.dim() - 1)))
        return torch.where(mask, guide_action.to(action.dtype), action), guided

    def after_step(self, done: torch.Tensor, success: torch.Tensor) -> None:
        """Count this step; every episode that ended (``done`` [N], ``success`` [N]) feeds the curriculum."""
        self.episode_step = torch.where(done, torch.zeros_like(self.episode_step), self.episode_step + 1)
        for ok in success[done].tolist():
            if self.schedule.end_episode(bool(ok)):
                log.info("jsrl: the guide now hands over after %d steps (%d episodes so far)",
                         self.schedule.guide_steps, self.schedule.episodes)

    def pop_metrics(self) -> dict[str, float]:
        """``horizon`` (guide steps now) and ``guided_fraction`` of the steps since the last call."""
        out = {"horizon": float(self.schedule.guide_steps),
               "guided_fraction": self.guided_steps / self.steps if self.steps else 0.0}
        self.guided_steps = self.steps = 0
        return out


def load_guide(cfg: JSRLConfig, task: TaskConfig, run_dir: Path, spec: EnvSpec, device: torch.device,
               fresh_policy: Callable[[], Policy]) -> Policy:
    """The policy ``cfg.guide`` names, in eval mode (``fresh_policy``: the learner's, for ``offline``'s weights)."""
    if cfg.guide == OFFLINE_GUIDE:
        path = run_dir / JSRL_GUIDE_FILE
        if not path.exists():
            raise ConfigError("jsrl.guide=offline guides with the policy of the offline phase: add --offline "
                              "DATA, or name a run directory (jsrl.guide=runs/NAME)")
        guide = fresh_policy()
        guide.load_actor_weights(torch.load(path, map_location=device, weights_only=True))
    elif cfg.guide == SCRIPTED_GUIDE:
        if not isinstance(task, HasScriptedController):
            raise ConfigError(f"jsrl.guide=scripted: the task {type(task).__name__} has no scripted controller "
                              "(mujoco/pick_cube and mujoco/reach have); name a run directory (jsrl.guide=runs/NAME) "
                              "or use jsrl.guide=offline with --offline DATA")
        guide = task.scripted_controller().to(device)
    else:
        from robot_rl.policy_io import load_policy

        guide = load_policy(Path(str(cfg.guide)), spec, device).policy
    return guide.eval()
