"""Typed dataclass configs with registries, YAML files and dotted overrides.

Every component family has a config base class bound to a :class:`~robot_rl.registry.Registry`:
:class:`TaskConfig` (``TASKS``), :class:`AlgoConfig` (``ALGOS``), :class:`TransportConfig`
(``TRANSPORTS``). A subclass registers under a short name and builds its component, importing
optional backends lazily. In YAML a registry-typed section names its class with ``type``::

    task: {type: reach, num_envs: 64}
    algo: {type: sac, actor_lr: 3.0e-4}

Resolution order for ``robot-rl train``: defaults of the chosen task and algorithm → the task's
preset for that algorithm → ``--config FILE.yaml`` → dotted overrides (``algo.batch_size=512``).
Unknown keys, tasks and algorithms fail with a message listing the valid names.

Task ids. A task ``type`` is a registered name (``reach``, ``mujoco/reach``) or
``<backend>/<id>`` (``maniskill/PickCube-v1``, ``gymnasium/Pendulum-v1``, ``isaacgym/cartpole``): the
config registered as ``<backend>`` with its ``id_field`` (``env_id``) set to ``<id>``
(:func:`resolve_task_id`). A saved config names the backend and the field separately
(``type: maniskill``, ``env_id: PickCube-v1``), which resolves to the same config.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import textwrap
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, Union

import yaml

from robot_rl.cotrain.config import CotrainConfig
from robot_rl.registry import Registry, UnknownNameError
from robot_rl.rewards.hil_config import HILConfig
from robot_rl.rewards.train_config import EnvRole, RewardModelsConfig

if TYPE_CHECKING:
    import torch

    from robot_rl.envs import VecEnv
    from robot_rl.policies.base import Algorithm
    from robot_rl.specs import EnvSpec

C = TypeVar("C")


class ConfigError(ValueError):
    """A config file or override is wrong; the message says which key and what is valid."""


# --------------------------------------------------------------------------------------------
# Component config bases
# --------------------------------------------------------------------------------------------


@dataclass
class ParamRange:
    """How one simulator parameter is randomised: a uniform sample per world, drawn at each reset."""

    low: float = 1.0
    """Lower end of the uniform range."""
    high: float = 1.0
    """Upper end of the uniform range."""
    mode: Literal["scale", "add"] = "scale"
    """``scale``: nominal × U(low, high); ``add``: nominal + U(low, high)."""
    indices: list[int] | None = None
    """Only these elements of the parameter's first per-world axis (e.g. bodies 2 and 3); null = all."""

    def __post_init__(self) -> None:
        if not self.low <= self.high:
            raise ConfigError(f"randomize range needs low <= high, got low={self.low}, high={self.high}")


@dataclass
class RandomizeConfig:
    """Domain randomisation of a task (``task.randomize``; see robot_rl/sims/randomize.py)."""

    params: dict[str, ParamRange] = field(default_factory=dict)
    """Simulator parameters by name (``body_mass``, ``geom_friction``, ``dof_damping``, ``actuator_gain``,
    ...; the env's ``get_params()`` lists them), each resampled per world at every episode start."""
    obs_noise: dict[str, float] = field(default_factory=dict)
    """Gaussian noise std per float observation key, e.g. ``{state: 0.01}``."""
    action_delay: tuple[int, int] = (0, 0)
    """Steps the applied action lags the policy's, uniform in [min, max] per world per episode."""
    obs_delay: tuple[int, int] = (0, 0)
    """Latency: steps the policy's observation lags the simulator, uniform in [min, max] per world per episode."""

    def __post_init__(self) -> None:
        for name, (lo, hi) in (("action_delay", self.action_delay), ("obs_delay", self.obs_delay)):
            if not 0 <= lo <= hi:
                raise ConfigError(f"randomize.{name} needs 0 <= min <= max, got [{lo}, {hi}]")
        for key, std in self.obs_noise.items():
            if not std >= 0:
                raise ConfigError(f"randomize.obs_noise.{key} must be >= 0, got {std}")

    def active(self) -> bool:
        """Whether anything is randomised at all."""
        return bool(self.params or any(self.obs_noise.values()) or max(self.action_delay) > 0
                    or max(self.obs_delay) > 0)


@dataclass
class TaskConfig:
    """Base for environment/task configs (registered in ``TASKS``).

    ``make`` of every subclass is wrapped (in ``__init_subclass__``) so that a task with a
    ``randomize`` section comes back inside :class:`robot_rl.sims.randomize.RandomizedVecEnv`: domain
    randomisation works for every backend without each ``make`` or each caller remembering it.
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
    randomize: RandomizeConfig | None = None
    """Domain randomisation (parameters, observation noise, action/observation delay); null = none."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        make = cls.__dict__.get("make")
        if make is not None:
            setattr(cls, "make", _with_randomization(make))  # noqa: B010 - mypy forbids assigning a method

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> VecEnv:
        """Build the batched environment (import optional simulators here, not at module level)."""
        raise NotImplementedError


def _with_randomization(make: Any) -> Any:
    @functools.wraps(make)
    def make_randomized(self: TaskConfig, device: torch.device | str, seed: int,
                        num_envs: int | None = None) -> VecEnv:
        env = make(self, device, seed, num_envs)
        if self.randomize is None or not self.randomize.active():
            return env
        from robot_rl.sims.randomize import RandomizedVecEnv

        # A subclass whose make calls super().make() gets the already wrapped env back: wrap once.
        return env if isinstance(env, RandomizedVecEnv) else RandomizedVecEnv(env, self.randomize, seed)

    return make_randomized


@dataclass
class AlgoConfig:
    """Base for learner configs (registered in ``ALGOS``)."""

    registry: ClassVar[Registry[type[AlgoConfig]]]

    def build(self, spec: EnvSpec, device: torch.device | str, seed: int) -> Algorithm:
        """Build the algorithm for environments with ``spec``."""
        raise NotImplementedError


@dataclass
class TransportConfig:
    """Base for actor↔learner transports (registered in ``TRANSPORTS``)."""

    registry: ClassVar[Registry[type[TransportConfig]]]


TASKS: Registry[type[TaskConfig]] = Registry("task")
ALGOS: Registry[type[AlgoConfig]] = Registry("algorithm")
TRANSPORTS: Registry[type[TransportConfig]] = Registry("transport")
TaskConfig.registry = TASKS
AlgoConfig.registry = ALGOS
TransportConfig.registry = TRANSPORTS


@TRANSPORTS.register("inproc")
@dataclass
class InprocTransportConfig(TransportConfig):
    """Actor threads and learner in one process, joined by bounded queues."""

    max_queued_batches: int = 8
    """Bound on transition batches waiting for the learner; a full queue paces the actors."""


@TRANSPORTS.register("zmq")
@dataclass
class ZmqTransportConfig(TransportConfig):
    """Learner and actors in separate processes or machines (`robot-rl learner` / `robot-rl actor`)."""

    address: str = "tcp://127.0.0.1:5555"
    """Where the learner binds and actors connect (`--bind` / `--connect` override it). Binding to
    127.0.0.1 keeps the learner off the network unless you say otherwise."""
    heartbeat_s: float = 0.5
    """Heartbeat interval both ways; a peer silent for 3 intervals is reported dead."""
    resend_after_s: float = 2.0
    """An unacknowledged chunk is resent after this long (and at once after a reconnect)."""
    outbox_size: int = 256
    """Chunks an actor keeps until acknowledged; when full, sends wait (the sampler is paced)."""
    inbox_size: int = 64
    """Validated chunks the learner holds before its loop takes them (unacknowledged beyond)."""
    server_secret_key: str | None = None
    """Learner: its CURVE `.key_secret` file; turns on encryption and authentication."""
    allowed_clients_dir: str | None = None
    """Learner: directory of actors' public `.key` files it accepts (everyone else is refused)."""
    server_public_key: str | None = None
    """Actor: the learner's public `.key` file (CURVE on)."""
    client_secret_key: str | None = None
    """Actor: its own `.key_secret` file (its `.key` must be in the learner's allow-list)."""
    outbox_policy: str = "block"
    """Actor, when `outbox_size` chunks are unacknowledged: `block` (sends wait: the sampler is paced by
    the learner) or `spill` (chunks go to checksummed files in `spill_dir`, resent later; never waits)."""
    spill_dir: str | None = None
    """Actor: directory for spilled chunks (`outbox_policy=spill`)."""
    spill_max_bytes: int = 1 << 30
    """Actor: bytes the spill directory may hold; chunks beyond are dropped, counted and logged."""
    copy_on_send: bool = True
    """Actor: copy each chunk when it is handed over, so an env or camera driver that reuses its buffers
    cannot change it afterwards; turn off only for envs that return fresh tensors (saves one copy)."""


@dataclass
class LoopConfig:
    """How the actor–learner loop runs and when it stops."""

    total_env_steps: int = 3_000_000
    """Budget of environment transitions (summed over sub-envs); training stops there at the latest."""
    success_threshold: float | None = 0.9
    """Stop as soon as an evaluation reaches this success rate (``null`` to always use the full budget)."""
    eval_episodes: int = 100
    """Episodes per evaluation (deterministic actions, fresh evaluation env)."""
    eval_every_env_steps: int = 10_000
    """Evaluate after every this many environment transitions."""
    eval_num_envs: int = 100
    """Sub-envs of the evaluation env (episodes run in parallel)."""
    checkpoint_every_s: float = 60.0
    """Save a checkpoint at most this often (and always at the end)."""
    log_every_s: float = 2.0
    """Scalars to TensorBoard / the progress line at most this often."""
    weight_sync_every_updates: int = 50
    """Off-policy: publish actor weights after every this many gradient updates."""
    actor_threads: int = 1
    """Off-policy: actor threads stepping their own env copy concurrently with the learner."""
    remote_actors: int = 1
    """`robot-rl learner` with an on-policy algorithm: actor processes whose envs fill one rollout."""
    max_wait_s: float = 60.0
    """Deadline on any wait for data or weights; exceeding it is an error, never a silent hang."""
    max_staleness: int | None = None
    """Actors stop exploring (pause the sim, hold the robot) while their weights are more than this many
    versions behind the learner's newest; counted and logged (``null``: never)."""
    actor_hz: float = 0.0
    """`robot-rl actor`: step the env at most this often (a control rate, e.g. 50); 0 = as fast as it runs."""
    demos_path: Path | None = None
    """Demonstrations loaded into the learner's demo buffer at the start (an episode store from `robot-rl
    data import|record`, or a LeRobotDataset v3 directory); needs a demo buffer, e.g. SAC with
    ``algo.demo_ratio=0.5``. On resume they are loaded only if the demo buffer came back empty."""
    demos_correction_weight: int = 1
    """Times each demo row labelled *correction* by rewind-and-correct recording (`robot-rl record`,
    docs/recording.md) is loaded; > 1 weights recovery behaviour up."""
    demos_rewind_weight: int = 1
    """Times each demo row labelled *rewind* is loaded (0 leaves the rewinds out)."""
    hil: HILConfig | None = None
    """Graded human-in-the-loop schedule (offline demos → return-and-explore → human-guided; docs/rewards.md);
    null = ordinary training."""


@dataclass
class ReplayConfig:
    """Crash-safe replay: off-policy buffers backed by checksummed segment files under ``<run>/replay/``."""

    persist: bool = True
    """Append every stored transition to disk so that a crash, Ctrl-C or `--resume` keeps the buffer
    (off-policy algorithms only). Costs a few % of learner throughput; see docs/replay-and-checkpoints.md."""
    segment_transitions: int = 2000
    """Rows per segment file: the most transitions a kill -9 can lose from the replay."""
    flush_every_s: float = 30.0
    """Also commit a (smaller) segment when this long has passed since the last one."""
    delete_evicted: bool = True
    """Delete segment files whose rows have all left the in-memory ring (bounds disk use to ~one buffer)."""


@dataclass
class RunConfig:
    """Where the run is written and what makes it reproducible."""

    name: str | None = None
    """Run directory name under ``root`` (default: ``<task>-<algo>-<timestamp>``)."""
    root: Path = Path("runs")
    """Parent directory for runs."""
    seed: int = 0
    """Seeds torch, numpy and the environments."""
    device: str = "auto"
    """``cpu``, ``cuda``, ``cuda:1`` … ``auto`` picks CUDA when available."""
    torch_threads: int = 0
    """Intra-op threads for torch (0 = auto: on CPU, the cores left after the actor threads; torch's
    default on GPU)."""
    progress: bool = True
    """Show the live progress line."""


def _default_task() -> TaskConfig:
    import robot_rl.sims  # noqa: F401 - registers the built-in tasks

    return TASKS.get("reach")()


def _default_algo() -> AlgoConfig:
    ensure_registered()

    return ALGOS.get("sac")()


@dataclass
class TrainConfig:
    """A whole run: task, algorithm, loop, transport and run settings."""

    task: TaskConfig = field(default_factory=_default_task)
    algo: AlgoConfig = field(default_factory=_default_algo)
    loop: LoopConfig = field(default_factory=LoopConfig)
    transport: TransportConfig = field(default_factory=InprocTransportConfig)
    run: RunConfig = field(default_factory=RunConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    cotrain: CotrainConfig = field(default_factory=CotrainConfig)
    """Sim–real co-training (RL-Co; docs/cotraining.md): on when ``cotrain.real_dataset`` is set."""
    reward: RewardModelsConfig = field(default_factory=RewardModelsConfig)
    """Learned rewards in the training envs (success classifier, PRM shaping) and the keys the policy sees
    (docs/rewards.md); off by default."""

    def make_env(self, device: Any, seed: int, num_envs: int | None = None, role: EnvRole = "train") -> VecEnv:
        """The task's env as this run's policy meets it: with the ``reward`` section applied.

        ``role="train"``: the reward models wrap it; ``"eval"``: only the policy's observation keys (evaluation
        scores the env's own success).
        """
        env = self.task.make(device, seed, num_envs=num_envs)
        if not self.reward.active:
            return env
        try:
            return self.reward.wrap(env, role, getattr(self.algo, "gamma", None))
        except BaseException:
            env.close()
            raise


# --------------------------------------------------------------------------------------------
# dict ⇄ dataclass
# --------------------------------------------------------------------------------------------


def ensure_registered() -> None:
    """Import the built-in tasks and algorithms so that their names resolve."""
    import robot_rl.policies.flow
    import robot_rl.policies.ppo
    import robot_rl.policies.sac
    import robot_rl.sims  # noqa: F401


def _registry_of(tp: Any) -> Registry[Any] | None:
    if isinstance(tp, type) and hasattr(tp, "registry") and dataclasses.is_dataclass(tp):
        return typing.cast(Registry[Any], tp.registry)  # type: ignore[attr-defined]
    return None


def to_dict(cfg: Any) -> Any:
    """A config as plain YAML-able data; registry-typed sections get their ``type`` name first."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        out: dict[str, Any] = {}
        reg = _registry_of(type(cfg))
        if reg is not None:
            out["type"] = reg.name_of(cfg)
        for f in dataclasses.fields(cfg):
            out[f.name] = to_dict(getattr(cfg, f.name))
        return out
    if isinstance(cfg, Path):
        return str(cfg)
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    return cfg


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert plain data to ``tp`` (strings from the command line included), or raise ConfigError."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none") and type(None) in args):
            if type(None) in args:
                return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError("; ".join(errors))
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if dataclasses.is_dataclass(value) and isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return from_dict(tp, value, where)
    if origin in (list, tuple) or tp in (list, tuple):
        if isinstance(value, str):
            value = yaml.safe_load(value)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        args = typing.get_args(tp)
        elem = args[0] if args else Any
        items = [_coerce(v, elem, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin is tuple or tp is tuple) else items
    if origin is dict or tp is dict:
        if isinstance(value, str):
            value = yaml.safe_load(value)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        args = typing.get_args(tp)
        if len(args) == 2:
            return {str(k): _coerce(v, args[1], f"{where}.{k}") for k, v in value.items()}
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        try:
            as_float = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
        if not as_float.is_integer():
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return int(as_float)
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    if tp is Path:
        return Path(str(value))
    if typing.get_origin(tp) is typing.Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, allowed))}")
        return value
    return value


def from_dict(cls: type[C], data: dict[str, Any], where: str = "config") -> C:
    """Build dataclass ``cls`` from ``data``, strictly.

    For a registry base class (``TaskConfig`` …) ``data["type"]`` picks the subclass. Missing keys keep
    their defaults; unknown keys raise :class:`ConfigError` naming the valid keys.
    """
    data = dict(data)
    reg = _registry_of(cls)
    target: type = cls
    if reg is not None:
        if "type" in data and reg is TASKS:
            target, implied = resolve_task_id(str(data.pop("type")))
            data = _merge_implied(data, implied, where)
        elif "type" in data:
            target = reg.get(str(data.pop("type")))
        elif not _is_registered(reg, cls):
            raise ConfigError(f"{where}: needs 'type'; valid {reg.kind} names: {', '.join(reg.names())}")
    hints = _field_types(target)
    names = {f.name for f in dataclasses.fields(target) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)} for {target.__name__}; "
            f"valid keys: {', '.join(sorted(names))}"
        )
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    return typing.cast(C, target(**kwargs))


def resolve_task_id(task_id: str) -> tuple[type[TaskConfig], dict[str, str]]:
    """``(config class, fields the id sets)`` for a task id (see the module docstring).

    An exact registered name wins (``mujoco/reach``); otherwise the longest registered prefix whose
    config has an ``id_field`` takes the rest (``maniskill/PickCube-v1`` → ``env_id="PickCube-v1"``).
    """
    if task_id in TASKS:
        return TASKS.get(task_id), {}
    parts = task_id.split("/")
    for cut in range(len(parts) - 1, 0, -1):
        prefix, rest = "/".join(parts[:cut]), "/".join(parts[cut:])
        if prefix in TASKS and rest:
            cls = TASKS.get(prefix)
            if cls.id_field not in {f.name for f in dataclasses.fields(cls)}:
                raise UnknownNameError(f"task {prefix!r} takes no id, so {task_id!r} is not a task; "
                                       f"{_known_tasks()}")
            return cls, {cls.id_field: rest}
    raise UnknownNameError(f"unknown task {task_id!r}; {_known_tasks()}")


def _known_tasks() -> str:
    names = TASKS.names()
    backends = [n for n in names if TASKS.get(n).id_field in {f.name for f in dataclasses.fields(TASKS.get(n))}]
    return (f"valid task names: {', '.join(names)}; any id of a backend as "
            f"{', '.join(f'{b}/<{TASKS.get(b).id_field}>' for b in backends)} (`robot-rl tasks` lists them "
            "and what each needs)")


def task_id(task: TaskConfig) -> str:
    """The id that selects ``task``: its registered name, plus ``/<id>`` for a backend with an id field."""
    name = TASKS.name_of(task)
    value = getattr(task, type(task).id_field, None)
    return f"{name}/{value}" if isinstance(value, str) and value else name


def _merge_implied(data: dict[str, Any], implied: dict[str, str], where: str) -> dict[str, Any]:
    for key, value in implied.items():
        if key in data and str(data[key]) != value:
            raise ConfigError(f"{where}: the task id sets {key}={value!r} but {key} is also given as {data[key]!r}")
        data[key] = value
    return data


def _is_registered(reg: Registry[Any], cls: type) -> bool:
    try:
        reg.name_of(cls)
        return True
    except KeyError:
        return False


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for p in parts[:-1]:
        child = node.get(p)
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {p!r} is not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``"algo.batch_size=512"`` → ``("algo.batch_size", 512)`` (values parsed as YAML scalars)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.key=value (e.g. algo.batch_size=512)")
    key, raw = text.split("=", 1)
    key = key.strip().lstrip("-")
    if not key:
        raise ConfigError(f"override {text!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def apply_overrides(cfg: C, overrides: dict[str, Any]) -> C:
    """A new config with dotted ``overrides`` applied (``{"task.type": "push"}`` switches the class).

    Changing a section's ``type`` rebuilds that section from the new class's defaults, keeping
    no fields of the old class.
    """
    tree = to_dict(cfg)
    for dotted, value in overrides.items():
        if dotted.endswith(".type") or dotted == "type":
            section = dotted[: -len(".type")] if dotted != "type" else ""
            node = tree
            for p in [s for s in section.split(".") if s]:
                if not isinstance(node.get(p), dict):
                    raise ConfigError(f"override {dotted!r}: {p!r} is not a section")
                node = node[p]
            if node.get("type") != value:
                node.clear()
                node["type"] = value
            continue
    for dotted, value in overrides.items():
        if dotted.endswith(".type") or dotted == "type":
            continue
        _set_path(tree, dotted, value)
    return from_dict(type(cfg), tree)


def load_yaml(path: Path | str) -> dict[str, Any]:
    """Read a YAML config file (a mapping), with a clear error when it is missing or malformed."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return data


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}`` (``type`` keys come first so classes switch before fields)."""
    out: dict[str, Any] = {}
    items = sorted(tree.items(), key=lambda kv: kv[0] != "type")
    for k, v in items:
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def resolve_train_config(
    task: str | None = None,
    algo: str | None = None,
    config_file: Path | str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> TrainConfig:
    """The resolution order of the module docstring, as one function (the CLI and tests call it)."""
    ensure_registered()
    file_tree = load_yaml(config_file) if config_file is not None else {}
    parsed = dict(parse_override(o) for o in overrides)
    task_name = task or parsed.get("task.type") or (file_tree.get("task") or {}).get("type") or "reach"
    algo_name = algo or parsed.get("algo.type") or (file_tree.get("algo") or {}).get("type") or "sac"
    task_cls, implied = resolve_task_id(str(task_name))
    algo_cls = ALGOS.get(str(algo_name))
    file_task = file_tree.get("task")
    if isinstance(file_task, dict) and str(file_task.get("type", task_name)) == str(task_name):
        _merge_implied(dict(file_task), implied, f"{config_file}: task")
    cfg = TrainConfig(task=task_cls(**typing.cast(dict[str, Any], implied)), algo=algo_cls())
    preset = task_cls.presets.get(str(algo_name), {})
    if preset:
        cfg = apply_overrides(cfg, dict(preset))
    if file_tree:
        file_flat = flatten(file_tree)
        file_flat.pop("task.type", None)
        file_flat.pop("algo.type", None)
        cfg = apply_overrides(cfg, file_flat)
    parsed.pop("task.type", None)
    parsed.pop("algo.type", None)
    if parsed:
        cfg = apply_overrides(cfg, parsed)
    return cfg


def save_yaml(cfg: Any, path: Path) -> None:
    """Write a config as YAML (``type`` keys first)."""
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


# --------------------------------------------------------------------------------------------
# Field docs, for `robot-rl config` and --help
# --------------------------------------------------------------------------------------------


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings (the string literal under each field), collected along the MRO."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        tree = ast.parse(source)
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for prev, node in itertools.pairwise(body):
            if (isinstance(prev, ast.AnnAssign) and isinstance(prev.target, ast.Name)
                    and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)):
                docs[prev.target.id] = " ".join(node.value.value.split())
    return docs


def describe(cfg: Any, prefix: str = "") -> list[tuple[str, Any, str]]:
    """``(dotted key, value, doc)`` for every field of a config tree."""
    rows: list[tuple[str, Any, str]] = []
    docs = field_docs(type(cfg))
    reg = _registry_of(type(cfg))
    if reg is not None:
        rows.append((f"{prefix}type", reg.name_of(cfg), f"one of: {', '.join(reg.names())}"))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            rows.extend(describe(value, f"{prefix}{f.name}."))
        else:
            rows.append((f"{prefix}{f.name}", to_dict(value), docs.get(f.name, "")))
    return rows
