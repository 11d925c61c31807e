"""Configs as plain data: dataclass ⇄ dict, YAML files, dotted overrides and field docs.

A registry-typed section (``TaskConfig``, ``AlgoConfig``, ``TransportConfig``) names its class with
``type``; in YAML::

    task: {type: reach, num_envs: 64}
    algo: {type: sac, actor_lr: 3.0e-4}

Unknown keys, tasks and algorithms fail with :class:`~robot_rl.core.config.ConfigError` (or
:class:`~robot_rl.core.registry.UnknownNameError`) listing the valid names; a value a config's own
``__post_init__`` rejects with a ``ValueError`` becomes a ``ConfigError`` too. Nothing here knows a component:
the engine works on any dataclass tree.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import logging
import re
import textwrap
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, Union

import yaml

from robot_rl.core.config import ConfigError
from robot_rl.core.registry import Registered, Registry

C = TypeVar("C")
log = logging.getLogger(__name__)


_SECTIONS = "robot_rl.sections"
_MOVED = "robot_rl.moved"


def open_sections(provider: Callable[[], dict[str, Any]], moved: Callable[[], dict[str, str]] | None = None) -> Any:
    """A ``dict[str, Any]`` dataclass field whose entries are sections at the config's top level.

    ``provider()`` maps each section name to its dataclass (a registry's, so that a new section needs no edit of
    the config class); a missing section gets that class's defaults, or None for a section typed ``X | None``
    (null while off, like an optional fixed section). In YAML and overrides the sections look like any fixed one
    (``viz: {sink: rerun}``, ``viz.sink=rerun``). ``moved()``: old dotted key → the key that replaced it, both
    from the config holding the field (``loop.demos_path`` → ``demos.path``); :func:`from_dict` moves an old key
    it finds, with a deprecation line, so files written before the move still load.
    """
    return dataclasses.field(default_factory=lambda: {k: _section_default(tp) for k, tp in provider().items()},
                             metadata={_SECTIONS: provider, _MOVED: moved})


def _open_fields(cls: type) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    return [(f.name, f.metadata[_SECTIONS]) for f in dataclasses.fields(cls) if _SECTIONS in f.metadata]


def open_section_attr(cfg: Any, name: str) -> Any:
    """``cfg.<name>`` for a section in ``cfg``'s open sections (field ``extensions``); AttributeError otherwise.

    A config's ``__getattr__`` calls it, so that an open section reads like a fixed one (``cfg.viz``).
    """
    sections = cfg.__dict__.get("extensions") if not name.startswith("__") else None
    if sections is not None and name in sections:
        return sections[name]
    raise AttributeError(f"{type(cfg).__name__} has no attribute or extension section {name!r}")


def _move_keys(cls: type, data: dict[str, Any], where: str) -> dict[str, Any]:
    """``data`` with the old keys of ``cls``'s open sections under their new names (copied where changed).

    An old key given beside its new one wins: the new one may be a default that :func:`to_dict` wrote back.
    """
    for f in dataclasses.fields(cls):
        moved = f.metadata.get(_MOVED)
        for old, new in (moved() if moved is not None else {}).items():
            *old_path, old_key = old.split(".")
            node: Any = data
            for p in old_path:
                node = node.get(p) if isinstance(node, dict) else None
            if not isinstance(node, dict) or old_key not in node:
                continue
            log.warning("%s: %s is now %s; the old key stops working in the next release", where, old, new)
            data = _copy_path(data, old_path)
            value = _walk(data, old_path).pop(old_key)
            *new_path, new_key = new.split(".")
            data = _copy_path(data, new_path)
            _walk(data, new_path)[new_key] = value
    return data


def _copy_path(data: dict[str, Any], path: list[str]) -> dict[str, Any]:
    """A copy of ``data`` whose dicts along ``path`` are copies (created where missing or null)."""
    out = dict(data)
    node = out
    for p in path:
        child = node.get(p)
        if child is not None and not isinstance(child, dict):
            raise ConfigError(f"{'.'.join(path)}: {p!r} is not a section")
        node[p] = dict(child or {})
        node = node[p]
    return out


def _walk(data: dict[str, Any], path: list[str]) -> dict[str, Any]:
    for p in path:
        data = data[p]
    return data


def _section_default(tp: Any) -> Any:
    """An open section's value when a config leaves it out: ``X()``, or None for ``X | None``."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        return None
    return tp()


def _registry_of(tp: Any) -> Registry[Any] | None:
    if isinstance(tp, type) and isinstance(tp, Registered) and dataclasses.is_dataclass(tp):
        return tp.registry
    return None


def to_dict(cfg: Any) -> Any:
    """A config as plain YAML-able data; registry-typed sections get their ``type`` name first."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        out: dict[str, Any] = {}
        reg = _registry_of(type(cfg))
        if reg is not None:
            out["type"] = reg.name_of(cfg)
        for f in dataclasses.fields(cfg):
            if _SECTIONS in f.metadata:  # open sections: each at the top level, under its own name
                out.update({k: to_dict(v) for k, v in getattr(cfg, f.name).items()})
            else:
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


def _coerce_int(value: Any, where: str) -> int:
    """An integer from ``3``, ``"3"``, ``5e4``, ``"0x10"`` or ``"1_000"`` (texts parse_override keeps as text)."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if isinstance(value, str):
        try:
            return int(value.replace("_", ""), 0)
        except ValueError:
            pass
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
    if not as_float.is_integer():
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    return int(as_float)


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
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        return _coerce_int(value, where)
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
            target, implied = reg.resolve(str(data.pop("type")))
            data = merge_implied(data, implied, where)
        elif not _is_registered(reg, cls):
            raise ConfigError(f"{where}: needs 'type'; valid {reg.kind} names: {', '.join(reg.names())}")
    data = _move_keys(target, data, where)
    hints = _field_types(target)
    names = {f.name for f in dataclasses.fields(target) if f.init}
    for field_name, provider in _open_fields(target):
        names.discard(field_name)
        classes = provider()
        names |= set(classes)
        data[field_name] = {k: (_coerce(data.pop(k), tp, f"{where}.{k}") if k in data else _section_default(tp))
                            for k, tp in classes.items()}
        hints[field_name] = Any
    unknown = sorted(set(data) - names - {n for n, _ in _open_fields(target)})
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)} for {target.__name__}; "
            f"valid keys: {', '.join(sorted(names))}"
        )
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    try:
        return typing.cast(C, target(**kwargs))
    except ConfigError:
        raise
    except ValueError as e:  # the config's own check of these values (__post_init__): the user's to fix
        raise ConfigError(str(e)) from e


def merge_implied(data: dict[str, Any], implied: dict[str, Any], where: str) -> dict[str, Any]:
    """``data`` with the fields a task id implies; a conflicting explicit value is a :class:`ConfigError`."""
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
        if child is None:
            # An optional section that is off (``task.randomize: null``) or a mapping entry not there yet
            # (``params.body_mass``): a key inside creates it; the typed build rejects keys that do not exist.
            child = node[p] = {}
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
    return key, _unless_yaml11_only(value, raw.strip())


def _unless_yaml11_only(value: Any, text: str) -> Any:
    """``text`` itself where YAML 1.1 alone reads it as a bool or an int (``off``, ``yes``, ``0755``, ``1:30``).

    ``--name off`` must name a run ``off``, not ``False``; bool and int fields still take these texts
    (:func:`_coerce` reads ``on``/``off``/``yes``/``no`` and decimal digits).
    """
    if isinstance(value, bool) and text.lower() not in ("true", "false"):
        return text
    if isinstance(value, int) and not isinstance(value, bool) and not re.fullmatch(r"[-+]?(0|[1-9][0-9_]*)", text):
        return text
    return value


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
        if _SECTIONS in f.metadata:
            for name, section in value.items():
                if section is None:  # an optional section that is off: one row, its class's summary as the doc
                    rows.append((f"{prefix}{name}", None, _first_paragraph(f.metadata[_SECTIONS]().get(name))))
                else:
                    rows.extend(describe(section, f"{prefix}{name}."))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            rows.extend(describe(value, f"{prefix}{f.name}."))
        else:
            rows.append((f"{prefix}{f.name}", to_dict(value), docs.get(f.name, "")))
    return rows


def _first_paragraph(tp: Any) -> str:
    """The first paragraph of the docstring of ``tp``'s dataclass (``X`` or ``X | None``), on one line."""
    options = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
    doc = next((inspect.getdoc(t) for t in options if isinstance(t, type) and dataclasses.is_dataclass(t)), None)
    return " ".join((doc or "").split("\n\n")[0].split())
