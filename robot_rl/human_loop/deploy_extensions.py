"""Extensions in `robot-rl deploy`'s actor loop: a training actor's step hooks, at the same points of a deploy tick.

An extension registered with ``loops=("train", "deploy")`` (robot_rl.core.extension) has its section in the deploy
config too (``counter.every=1`` on `robot-rl deploy`'s command line or in its YAML). The deploy actor builds it from
that section, attaches it with a :class:`DeployRun` (no learner here: it runs in `deploy --role learner`), asks
``step_hook(0, deployer)`` for the one robot (tensors ``[1, …]``) and calls, each tick:

* ``before_act(obs)`` — the observation the policy sees (the row keeps what the robot observed, as in training);
* ``after_act(obs, action, extras, intervened)`` — the policy's proposal, before the person's takeover (a person's
  action still wins); ``extras`` go into the row sent to the learner; ``intervened`` marks the row;
* ``reward(reward)`` — the reward stored for the step;
* ``after_step(step)`` — the transition is complete (:class:`~robot_rl.core.extension.StepView`, N = 1).

``start`` before the first episode, ``metrics()`` after each episode (in the episode's record, ``<name>/<key>``)
and ``close`` at the end. ``next_obs`` is not called: a robot's next observation is what it measures.

The learner of `deploy --mode learn` (`deploy --role learner`, :class:`~robot_rl.human_loop.hil_learner.HILLearner`)
runs the same extensions as `robot-rl learner` does (``remote``: the actors step elsewhere): ``attach`` with its
learner and algorithm, ``start``, ``metrics`` to its log, ``state`` in its checkpoints (``load_state`` on
``--resume``) and ``close``.
"""

from __future__ import annotations

import logging
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.config_io import to_dict
from robot_rl.core.algorithm import Policy
from robot_rl.core.data_parallel import DataParallel
from robot_rl.core.env import StepResult, VecEnv
from robot_rl.core.extension import EXTENSIONS, Extension, StepHook, StepView, extension_order
from robot_rl.core.specs import EnvSpec

log = logging.getLogger(__name__)


class DeployRun:
    """What a deploy actor, or its learner, shows its extensions at ``attach`` (a :class:`RunHandle`).

    The actor's has no ``learner`` nor ``algo`` (None) and steps here; the learner's (``learner``, ``algo``,
    ``publish`` given) is ``remote``: its actor steps on the robot.
    """

    def __init__(self, cfg: Any, run_dir: Path | None, spec: Callable[[], EnvSpec], steps: Callable[[], int],
                 learner: Any = None, algo: Any = None, device: torch.device | str = "cpu", resumed: bool = False,
                 publish: Callable[[], object] | None = None) -> None:
        self._cfg, self._run_dir, self._spec, self._steps = cfg, Path(run_dir or "."), spec, steps
        self._learner, self._algo, self._device, self._resumed = learner, algo, torch.device(device), resumed
        self._publish = publish

    @property
    def cfg(self) -> Any:
        """The :class:`~robot_rl.human_loop.deploy_config.DeployConfig`."""
        return self._cfg

    @property
    def run_dir(self) -> Path:
        """``--run-dir``, or the working directory."""
        return self._run_dir

    @property
    def device(self) -> torch.device:
        """The learner's device; the actor acts on the CPU."""
        return self._device

    @property
    def spec(self) -> EnvSpec:
        """What the policy observes and emits."""
        return self._spec()

    @property
    def learner(self) -> Any:
        """The learner (``deploy --role learner``); None in the actor."""
        return self._learner

    @property
    def data_parallel(self) -> DataParallel | None:
        """None: one robot, one process."""
        return None

    @property
    def algo(self) -> Any:
        """The learner's algorithm; None in the actor."""
        return self._algo

    @property
    def envs(self) -> list[VecEnv]:
        """None: a robot, not an env."""
        return []

    @property
    def resumed(self) -> bool:
        """The learner continues a run (``--resume``); an actor always starts fresh."""
        return self._resumed

    @property
    def remote(self) -> bool:
        """The learner's: its actor steps on the robot, in another process; the actor's: False."""
        return self._learner is not None

    @property
    def is_main(self) -> bool:
        """The only process of the actor."""
        return True

    @property
    def title(self) -> str:
        """``robot-rl deploy (<mode>)``, or ``robot-rl deploy (learner)``."""
        return f"robot-rl deploy ({'learner' if self._learner is not None else self._cfg.mode})"

    def config_dict(self) -> dict[str, Any]:
        """The deploy config as plain data."""
        return typing.cast(dict[str, Any], to_dict(self._cfg))

    def env_steps(self) -> int:
        """Steps the robot took so far (the learner: the transitions it stored)."""
        return self._steps()

    def log_scalars(self, metrics: Mapping[str, float], step: int, prefix: str = "") -> None:
        """To the log (deploy keeps no TensorBoard run)."""
        log.info("%s @ %d: %s", prefix or "extension", step, dict(metrics))

    def publish(self) -> None:
        """The learner publishes its weights; nothing in the actor (weights come from the learner)."""
        if self._publish is not None:
            self._publish()

    def note(self, text: str) -> None:
        """A line in the log."""
        log.warning("%s", text)


def _tensors(obs: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v).unsqueeze(0) for k, v in obs.items()}


class DeployHooks:
    """The deploy config's extensions and their hooks in the tick (see the module docstring)."""

    def __init__(self, cfg: Any, run: DeployRun, actor: Any) -> None:
        sections = cfg.extensions
        built = {name: EXTENSIONS.get(name).build(sections[name], cfg) for name in extension_order(sections)}
        self.extensions: dict[str, Extension] = {name: ext for name, ext in built.items() if ext is not None}
        self.hooks: list[StepHook] = []
        self.intervened = False
        """Whether a hook marked the last proposal as intervened."""
        for ext in self.extensions.values():
            ext.attach(run)
            hook = ext.step_hook(0, actor)
            if hook is not None:
                self.hooks.append(hook)
        self.run = run

    def start(self) -> None:
        """Before the first episode."""
        for ext in self.extensions.values():
            ext.start(self.run)

    def act(self, policy: Policy, obs: Mapping[str, np.ndarray],
            deterministic: bool) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
        """The policy's action on what ``before_act`` shows it, after ``after_act``; ``[A]`` and extras ``[1, …]``."""
        t_obs = _tensors(obs)
        for hook in self.hooks:
            t_obs = hook.before_act(t_obs)
        action, extras = policy.act(t_obs, deterministic=deterministic)
        action, extras = action[:1], {k: v[:1] for k, v in extras.items()}
        intervened = torch.zeros(1, dtype=torch.bool)
        for hook in self.hooks:
            action, extras, intervened = hook.after_act(t_obs, action, extras, intervened)
        self.intervened = bool(intervened[0])
        return action[0].numpy(), extras

    def reward(self, reward: float) -> float:
        """The reward stored for the step."""
        if not self.hooks:
            return reward
        r = torch.tensor([reward], dtype=torch.float32)
        for hook in self.hooks:
            r = hook.reward(r)
        return float(r[0])

    def after_step(self, row: Mapping[str, Any], t: int) -> None:
        """A completed transition ``row`` (what deploy records), as a :class:`StepView` of one env."""
        if not self.hooks:
            return
        done = torch.tensor([bool(row["terminated"] or row["truncated"])])
        reward = torch.tensor([row["reward"]], dtype=torch.float32)
        result = StepResult(_tensors(row["next_obs"]), reward, torch.tensor([bool(row["terminated"])]),
                            torch.tensor([bool(row["truncated"])]), {})
        view = StepView(t, _tensors(row["obs"]), torch.as_tensor(np.asarray(row["action"])).unsqueeze(0),
                        torch.tensor([bool(row["intervened"])]), reward, result, done, bool(done[0]))
        for hook in self.hooks:
            hook.after_step(view)

    def metrics(self) -> dict[str, float]:
        """Every extension's scalars since the last call, as ``<name>/<key>``."""
        return {f"{name}/{k}": float(v) for name, ext in self.extensions.items() for k, v in ext.metrics().items()}

    def close(self) -> None:
        """Close every extension (errors are logged: one must not keep the others open)."""
        for ext in self.extensions.values():
            try:
                ext.close()
            except Exception:
                log.exception("closing extension %s failed", type(ext).__name__)
