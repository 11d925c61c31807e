"""Config base classes of the component families and their registries.

Every component family has a config base class bound to a :class:`~robot_rl.core.registry.Registry`:
:class:`TaskConfig` (``TASKS``), :class:`AlgoConfig` (``ALGOS``), :class:`TransportConfig`
(``TRANSPORTS``). A subclass registers under a short name where it is defined and builds its component,
importing optional backends lazily. The dict/YAML/override engine is :mod:`robot_rl.config_io`; a whole
run's config (``TrainConfig``) is :mod:`robot_rl.loop.config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from robot_rl.core.errors import UserError
from robot_rl.core.registry import Registry, UnknownNameError

if TYPE_CHECKING:
    import torch

    from robot_rl.core.algorithm import Algorithm, Policy
    from robot_rl.core.env import VecEnv
    from robot_rl.core.specs import EnvSpec
    from robot_rl.core.transport import LearnerLink, RemoteActorEndpoint


class ConfigError(ValueError, UserError):
    """A config file, override or option is wrong, or what it names cannot be used; the message says what to do.

    The command line prints it as one line (exit 2); a ``ValueError`` for Python callers.
    """


@dataclass
class TaskConfig:
    """Base for environment/task configs (registered in ``TASKS``).

    Simulated tasks derive from :class:`robot_rl.sims.base.SimTaskConfig`, which adds domain randomisation.
    """

    registry: ClassVar[Registry[type[TaskConfig]]]
    #: Dotted overrides applied when this task is trained with a given algorithm, e.g.
    #: ``{"ppo": {"task.num_envs": 1024}}``. Presets override only what differs.
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    #: The ``pip install 'robot-rl[extra]'`` that brings this task's simulator (``None``: pure torch).
    #: ``robot-rl tasks`` reads it; without it the extra is guessed from the module/name.
    extra: ClassVar[str | None] = None
    #: The field a task id ``<name>/<rest>`` sets to ``<rest>`` (``maniskill/PickCube-v1``).
    id_field: ClassVar[str] = "env_id"

    num_envs: int = 32
    """Parallel sub-environments per actor."""

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> VecEnv:
        """Build the batched environment (import optional simulators here, not at module level)."""
        raise NotImplementedError


@dataclass
class AlgoConfig:
    """Base for learner configs (registered in ``ALGOS``)."""

    registry: ClassVar[Registry[type[AlgoConfig]]]

    def build(self, spec: EnvSpec, device: torch.device | str, seed: int) -> Algorithm:
        """Build the algorithm for environments with ``spec``."""
        raise NotImplementedError

    def build_policy(self, spec: EnvSpec, device: torch.device | str, seed: int = 0) -> Policy:
        """The actor-side policy alone for environments with ``spec``: no critic, no optimiser.

        Its weights are placeholders (initialised from ``seed`` without touching the global RNG) until
        ``load_actor_weights`` brings the learner's or a checkpoint's ``actor_weights``; ``seed`` also seeds the
        policy's own sampling noise where it has one. Actor processes and ``robot_rl.policy_io.load_policy`` use it.
        """
        raise NotImplementedError(f"{type(self).__name__} must define build_policy(spec, device, seed)")


@dataclass
class TransportConfig:
    """Base for actor↔learner transports (registered in ``TRANSPORTS``); it builds its own endpoints."""

    registry: ClassVar[Registry[type[TransportConfig]]]
    #: Whether actors run as threads of the learner's process (``robot-rl train``) rather than as processes
    #: that connect to it (``robot-rl learner`` + ``robot-rl actor``).
    in_process: ClassVar[bool] = True

    def open_learner(self, spec: EnvSpec) -> LearnerLink:
        """The learner's side, listening; acknowledgements (where the transport has them) wait for ``confirm``."""
        raise NotImplementedError

    def connect_actor(self, spec: EnvSpec, actor_id: int, num_envs: int = 1) -> RemoteActorEndpoint:
        """An actor process's endpoint, connected to the learner (transports with ``in_process = False``).

        ``num_envs``: the actor's env count, its share of the learner against the other actors.
        """
        raise NotImplementedError


@runtime_checkable
class ChunkedTaskConfig(Protocol):
    """A task config whose env takes chunks of ``chunk_horizon`` actions per step (the language tasks)."""

    chunk_horizon: int


@runtime_checkable
class DiscountedConfig(Protocol):
    """An algorithm config with a discount factor (reward shaping by a process reward model needs it)."""

    gamma: float


@runtime_checkable
class OfflineTrainableConfig(DiscountedConfig, Protocol):
    """An off-policy algorithm config the offline phase can train: a discount and a minibatch size."""

    batch_size: int


@runtime_checkable
class ActorWarmupConfig(Protocol):
    """An algorithm config whose actor can clone the data for its first updates (``algo.actor_bc_updates``)."""

    actor_bc_updates: int


@runtime_checkable
class HasScriptedController(Protocol):
    """A task config that ships a controller solving the task from its own observations (``jsrl.guide=scripted``)."""

    def scripted_controller(self) -> Policy:
        """A fresh controller for this config's settings (its action scale); acting deterministically on request."""
        ...


@runtime_checkable
class OnPolicyConfig(Protocol):
    """An on-policy algorithm's config: actors wait for new weights after every ``rollout_length`` steps."""

    rollout_length: int


def _fields_of(cls: type) -> set[str]:
    import dataclasses

    return {f.name for f in dataclasses.fields(cls)}


def resolve_task_id(task_id: str) -> tuple[type[TaskConfig], dict[str, Any]]:
    """``(config class, fields the id sets)`` for a task id.

    A task ``type`` is a registered name (``reach``, ``mujoco/reach``) or ``<backend>/<id>``
    (``maniskill/PickCube-v1``, ``gymnasium/Pendulum-v1``): the config registered as ``<backend>`` with its
    ``id_field`` (``env_id``) set to ``<id>``. An exact registered name wins; otherwise the longest
    registered prefix whose config has an ``id_field`` takes the rest.
    """
    if task_id in TASKS:
        return TASKS.get(task_id), {}
    parts = task_id.split("/")
    for cut in range(len(parts) - 1, 0, -1):
        prefix, rest = "/".join(parts[:cut]), "/".join(parts[cut:])
        if prefix in TASKS and rest:
            cls = TASKS.get(prefix)
            if cls.id_field not in _fields_of(cls):
                raise UnknownNameError(f"task {prefix!r} takes no id, so {task_id!r} is not a task; "
                                       f"{known_tasks()}")
            return cls, {cls.id_field: rest}
    raise UnknownNameError(f"unknown task {task_id!r}; {known_tasks()}")


def known_tasks() -> str:
    """The valid task names and backend id patterns, for error messages."""
    names = TASKS.names()
    backends = [n for n in names if TASKS.get(n).id_field in _fields_of(TASKS.get(n))]
    return (f"{TASKS.valid_names_text()}; any id of a backend as "
            f"{', '.join(f'{b}/<{TASKS.get(b).id_field}>' for b in backends)} (`robot-rl tasks` lists them "
            "and what each needs)")


def task_id(task: TaskConfig) -> str:
    """The id that selects ``task``: its registered name, plus ``/<id>`` for a backend with an id field."""
    name = TASKS.name_of(task)
    value = getattr(task, type(task).id_field, None)
    return f"{name}/{value}" if isinstance(value, str) and value else name


TASKS: Registry[type[TaskConfig]] = Registry("task", "robot_rl.tasks", resolver=resolve_task_id)
ALGOS: Registry[type[AlgoConfig]] = Registry("algorithm", "robot_rl.algorithms")
TRANSPORTS: Registry[type[TransportConfig]] = Registry("transport", "robot_rl.transports")
TaskConfig.registry = TASKS
AlgoConfig.registry = ALGOS
TransportConfig.registry = TRANSPORTS


def ensure_registered() -> None:
    """Import every registered component (built-in and third-party entry points) so that their names resolve."""
    for registry in (TASKS, ALGOS, TRANSPORTS):
        registry.load_plugins()
