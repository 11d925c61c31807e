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
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, Union

import yaml

from robot_rl.registry import Registry

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
class TaskConfig:
    """Base for environment/task configs (registered in ``TASKS``)."""

    registry: ClassVar[Registry[type[TaskConfig]]]
    #: Dotted overrides applied when this task is trained with a given algorithm, e.g.
    #: ``{"ppo": {"task.num_envs": 1024}}``. Presets override only what differs.
    presets: ClassVar[dict[str, dict[str, Any]]] = {}

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


# --------------------------------------------------------------------------------------------
# dict ⇄ dataclass
# --------------------------------------------------------------------------------------------


def ensure_registered() -> None:
    """Import the built-in tasks and algorithms so that their names resolve."""
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
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
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
        if "type" in data:
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
    task_cls = TASKS.get(str(task_name))
    algo_cls = ALGOS.get(str(algo_name))
    cfg = TrainConfig(task=task_cls(), algo=algo_cls())
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
