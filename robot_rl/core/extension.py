"""Run features as extensions: the contract a feature implements and the registry that finds it.

A run feature (a live view, a twin refit, a guide policy, co-training …) is not a branch in the runner. It
registers an :class:`ExtensionSpec` under a name: the name is also its config section (``viz.sink=rerun`` sets
the ``viz`` section, a dataclass of the spec's ``config`` class), and ``build`` makes the feature for one run,
or returns None when the section leaves it off. The runner iterates over what was built; it never names one.
A section sits at the config's top level, or inside a fixed section that the spec's ``parent`` names (the HIL
schedule's is ``loop.hil``, where its keys always were); a ``config`` of ``X | None`` is a section that is null
while the feature is off (``loop.hil: null``; ``loop.hil={}`` switches it on with X's defaults). A feature whose keys
were fixed fields before it became an extension lists them in ``moved`` (``loop.demos_path`` → ``demos.path``): a
config file or override with an old key still loads, with a deprecation line (:func:`moved_keys`).

Registration: a module calls :func:`register_extension` at import, and the module is listed under the
``robot_rl.extensions`` entry-point group (robot_rl's own ``pyproject.toml`` lists the built-ins; a third-party
package lists its own the same way), so :data:`EXTENSIONS` imports it at its first lookup.

The hooks, in the order a run calls them (every one optional: subclass :class:`BaseExtension`):

* ``adapt_task(task)`` — the task config each env of the run is made from;
* ``wrap_env(env, role)`` — each env the run makes (``role`` ``"train"`` or ``"eval"``);
* ``scalar_sinks(run)`` — sinks beside TensorBoard that get every logged scalar (``runlog.ScalarSink``);
* ``attach(run)`` — once the learner and the actors exist (:class:`RunHandle`): add a loss term or a batch source
  to the learner, take checkpointed state, register what to close;
* ``step_hook(index, actor)`` — a :class:`StepHook` for actor ``index`` (acts before/after the policy);
* ``start(run)`` — the actors are about to step, after the baseline evaluation: work they wait for (the HIL
  schedule's updates on demos);
* ``evaluated(env_steps, success_rate, mean_return)`` — after each evaluation;
* ``metrics()`` — scalars for the run log, every logging period (keys are prefixed with the section name);
* ``state()`` — JSON-able state a checkpoint keeps under the extension's name (``load_state`` gets it back on
  ``--resume``, before ``step_hook``);
* ``close()`` — the run ended (after the actors stopped).

And one question asked before a data-parallel run starts its ranks: ``single_process()``, why the feature needs the
run in one process (``""``: it trains data-parallel too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import torch

from robot_rl.core.config import TaskConfig
from robot_rl.core.data_parallel import DataParallel
from robot_rl.core.env import StepResult, VecEnv
from robot_rl.core.registry import Registry
from robot_rl.core.specs import EnvSpec

EnvRole = Literal["train", "eval"]
Obs = dict[str, torch.Tensor]


class RunHandle(Protocol):
    """What a run shows its extensions at :meth:`Extension.attach` (the runner implements it)."""

    @property
    def cfg(self) -> Any:
        """The whole run config (``TrainConfig``); a section is ``cfg.section(name)``."""

    @property
    def run_dir(self) -> Path:
        """The run directory."""

    @property
    def device(self) -> torch.device:
        """Where the learner's tensors live."""

    @property
    def spec(self) -> EnvSpec:
        """What the envs observe and take."""

    @property
    def learner(self) -> Any:
        """The :class:`~robot_rl.loop.learner.Learner`: its ``storage`` takes rows, ``updates`` counts."""

    @property
    def data_parallel(self) -> DataParallel | None:
        """The data-parallel group of this rank, else None."""

    @property
    def algo(self) -> Any:
        """The learner's :class:`~robot_rl.core.algorithm.Algorithm`."""

    @property
    def envs(self) -> list[VecEnv]:
        """The training envs of this process (one per actor thread; one spec-only env with actor processes)."""

    @property
    def resumed(self) -> bool:
        """The run continues from a checkpoint (``--resume``): work done on a fresh run only is skipped."""

    @property
    def remote(self) -> bool:
        """Actors run in other processes (`robot-rl learner`): step hooks are not called here."""

    @property
    def is_main(self) -> bool:
        """Rank 0 of a data-parallel run, or the only process."""

    @property
    def title(self) -> str:
        """``<task> / <algo>``: a name for the run in a viewer or a plot."""

    def config_dict(self) -> dict[str, Any]:
        """The run config as plain data (what ``config.yaml`` holds)."""

    def env_steps(self) -> int:
        """Transitions the learner has stored so far."""

    def log_scalars(self, metrics: Mapping[str, float], step: int, prefix: str = "") -> None:
        """Scalars to the run log (TensorBoard and the sinks) at ``step``."""

    def publish(self) -> None:
        """Publish the learner's weights and load them into the in-process actors (after changing them)."""

    def note(self, text: str) -> None:
        """A line for the person watching (the progress output)."""


@dataclass
class StepView:
    """One actor step as its hooks see it after the env stepped (tensors ``[N, …]``, N sub-envs)."""

    t: int
    """Steps this actor took before this one (``env_steps // N``)."""
    obs: Obs
    """The observation the action was chosen on."""
    action: torch.Tensor
    """``[N, A]``: the action that was sent."""
    intervened: torch.Tensor
    """``[N]`` bool: a human acted instead of the policy."""
    reward: torch.Tensor
    """``[N]``: the reward stored (after every hook's :meth:`StepHook.reward`)."""
    result: StepResult
    """What ``env.step`` returned."""
    done: torch.Tensor
    """``[N]`` bool: the episode ended (terminated or truncated)."""
    any_done: bool
    """``bool(done.any())``, computed once per step by the actor."""


class StepHook:
    """Acts in one actor's step; every method's default leaves the step as it is.

    Hooks run in the order of their extensions' names; each sees what the previous one returned.
    """

    def before_act(self, obs: Obs) -> Obs:
        """The observation the policy sees (``obs`` with non-finite rows zeroed)."""
        return obs

    def after_act(self, obs: Obs, action: torch.Tensor, extras: dict[str, torch.Tensor],
                  intervened: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """After the policy: replace ``action`` ``[N, A]``, add per-row ``extras``, mark ``intervened`` ``[N]``.

        ``obs`` is what the policy saw (:meth:`before_act`'s); sub-envs in quarantine (a non-finite observation) get
        a zero action after, except those marked ``intervened``: a human's action is sent as it came.
        """
        return action, extras, intervened

    def reward(self, reward: torch.Tensor) -> torch.Tensor:
        """The ``[N]`` reward stored for this step."""
        return reward

    def after_step(self, step: StepView) -> None:
        """The env stepped and the transition is built (before it is sent)."""

    def next_obs(self, result: StepResult, obs: Obs) -> Obs:
        """The observation the next step acts on (``obs``: the env's, or the previous hook's)."""
        return obs


@runtime_checkable
class Extension(Protocol):
    """One run feature, built by its :class:`ExtensionSpec` from its config section (module docstring)."""

    def adapt_task(self, task: TaskConfig) -> TaskConfig:
        """The task config the run's envs are made from (or ``task`` itself)."""

    def wrap_env(self, env: VecEnv, role: EnvRole) -> VecEnv:
        """``env`` as this feature wants the run to see it (or ``env`` itself)."""

    def scalar_sinks(self, run: RunHandle) -> list[Any]:
        """Sinks beside TensorBoard for every logged scalar (:class:`~robot_rl.runlog.ScalarSink`)."""

    def attach(self, run: RunHandle) -> None:
        """The learner and the actors exist: take what the feature needs."""

    def evaluated(self, env_steps: int, success_rate: float, mean_return: float) -> None:
        """An evaluation finished at ``env_steps``."""

    def step_hook(self, index: int, actor: Any) -> StepHook | None:
        """Hooks for actor ``index``'s step, or None."""

    def start(self, run: RunHandle) -> None:
        """The actors are about to step (after the baseline evaluation): work they must wait for."""

    def metrics(self) -> Mapping[str, float]:
        """Scalars since the last call (logged under ``<name>/``)."""

    def state(self) -> Any:
        """JSON-able state for a checkpoint (None: nothing to keep)."""

    def load_state(self, state: Any) -> None:
        """The :meth:`state` of the checkpoint a resumed run started from."""

    def close(self) -> None:
        """Release what the feature holds; called once, after the actors stopped."""

    def single_process(self) -> str:
        """Why the feature needs the run in one process, naming its key (``""``: it trains data-parallel too)."""


class BaseExtension:
    """No-op defaults for every hook of :class:`Extension`: subclass it and override what the feature needs."""

    def adapt_task(self, task: TaskConfig) -> TaskConfig:
        """Default: ``task``."""
        return task

    def wrap_env(self, env: VecEnv, role: EnvRole) -> VecEnv:
        """Default: ``env``."""
        return env

    def scalar_sinks(self, run: RunHandle) -> list[Any]:
        """Default: ``[]``."""
        return []

    def attach(self, run: RunHandle) -> None:
        """Default: nothing."""
        return None

    def evaluated(self, env_steps: int, success_rate: float, mean_return: float) -> None:
        """Default: nothing."""
        return None

    def step_hook(self, index: int, actor: Any) -> StepHook | None:
        """Default: nothing."""
        return None

    def start(self, run: RunHandle) -> None:
        """Default: nothing."""
        return None

    def metrics(self) -> Mapping[str, float]:
        """Default: ``{}``."""
        return {}

    def state(self) -> Any:
        """Default: nothing."""
        return None

    def load_state(self, state: Any) -> None:
        """Default: nothing."""
        return None

    def close(self) -> None:
        """Default: nothing."""
        return None

    def single_process(self) -> str:
        """Default: ``""`` (it trains data-parallel too)."""
        return ""


@dataclass(frozen=True)
class ExtensionSpec:
    """A registered feature: its config section's class and how to build it.

    ``build(section, run_config)`` returns the feature for one run, or None when ``section`` leaves it off (the
    default instance of ``config`` must leave it off; a ``config`` of ``X | None`` defaults to None). ``run_config``
    is the whole ``TrainConfig``. Building is cheap and opens nothing (each env the config makes builds the
    extensions again to ask ``adapt_task`` and ``wrap_env``); resources are opened in ``attach``. Extensions are
    called in ``(order, name)`` order. ``parent``: one of :data:`PARENTS`, where the section sits (``"loop"``:
    ``loop.<name>``; empty: the top level). ``loops``: of :data:`LOOPS`, the loops the feature runs in (its section
    is in their configs). ``moved``: old dotted key of the run config → the section's key that
    replaced it (``{"loop.demos_path": "path"}``), for configs written before the feature was an extension.
    """

    name: str
    config: Any
    build: Callable[[Any, Any], Extension | None]
    doc: str = ""
    order: int = 0
    parent: str = ""
    moved: Mapping[str, str] = field(default_factory=dict)
    loops: tuple[str, ...] = ("train",)


#: The fixed sections of a run config that hold extension sections besides its top level (``""``).
PARENTS = ("", "loop")

#: The loops that run extensions: ``train`` (`robot-rl train` and `robot-rl learner`: every hook) and ``deploy``
#: (`robot-rl deploy`'s actor on a robot, eval and learn mode: ``attach`` with a handle whose ``learner`` and
#: ``algo`` are None, as the learner runs in `deploy --role learner`; ``step_hook(0, deployer)`` on one robot,
#: N = 1; ``start``; ``metrics`` after each episode; ``close``; no checkpoints, no evaluations).
LOOPS = ("train", "deploy")

#: name → :class:`ExtensionSpec`; filled by the modules of the ``robot_rl.extensions`` entry-point group.
EXTENSIONS: Registry[ExtensionSpec] = Registry("extension", "robot_rl.extensions")


def register_extension(name: str, config: Any, doc: str = "", order: int = 0, parent: str = "",
                       moved: Mapping[str, str] | None = None, loops: tuple[str, ...] = ("train",)) -> Callable[
        [Callable[[Any, Any], Extension | None]], Callable[[Any, Any], Extension | None]]:
    """Decorator on a feature's build function: ``@register_extension("viz", VizConfig, "live view")``.

    ``order``: extensions with a lower one are called first (the offline phase attaches before a guide loads).
    ``parent``: the fixed section the config section sits in (``"loop"`` for ``loop.hil``; empty: the top level).
    ``moved``: the run config's old keys that the section's keys replace (``{"loop.demos_path": "path"}``).
    ``loops``: where the feature runs (:data:`LOOPS`; ``("train", "deploy")`` also on a robot in `robot-rl deploy`).
    """
    if parent not in PARENTS:
        raise ValueError(f"extension {name!r}: parent {parent!r} holds no extension sections; one of {PARENTS}")
    if not loops or set(loops) - set(LOOPS):
        raise ValueError(f"extension {name!r}: loops {loops!r}; each one of {LOOPS}")

    def decorate(build: Callable[[Any, Any], Extension | None]) -> Callable[[Any, Any], Extension | None]:
        EXTENSIONS.register(name)(ExtensionSpec(name, config, build, doc, order, parent, dict(moved or {}),
                                                 tuple(loops)))
        return build

    return decorate


def extension_order(names: Iterable[str]) -> list[str]:
    """``names`` in the order their extensions are called: ``(order, name)``."""
    return sorted(names, key=lambda n: (EXTENSIONS.get(n).order, n))


def extension_sections(parent: str = "", loop: str = "train") -> dict[str, Any]:
    """Section name → config class (or ``X | None``) of the extensions whose sections sit in ``parent``, by name.

    ``parent`` empty: the sections at the config's top level. ``loop``: only the extensions that run there.
    """
    specs = (EXTENSIONS.get(name) for name in EXTENSIONS.names())
    return {spec.name: spec.config for spec in specs if spec.parent == parent and loop in spec.loops}


def moved_keys() -> dict[str, str]:
    """Old dotted key of the run config → its key now, over every extension (``loop.demos_path`` → ``demos.path``)."""
    out: dict[str, str] = {}
    for spec in (EXTENSIONS.get(name) for name in EXTENSIONS.names()):
        section = f"{spec.parent}.{spec.name}" if spec.parent else spec.name
        out.update({old: f"{section}.{key}" for old, key in spec.moved.items()})
    return out
