"""Name registries: one per component family (tasks, algorithms, transports).

A registry maps a short name (``"reach"``, ``"sac"``) to a config class. The config class knows how to
build its component and imports optional backends only inside ``build``/``make``, so registering a
MuJoCo task never imports MuJoCo.

Components register themselves where they are defined (``@TASKS.register("reach")``). Nothing imports
them all: each registry names an entry-point group (``robot_rl.tasks``, ``robot_rl.algorithms``,
``robot_rl.transports``), and the first lookup of a name imports the modules listed there. The built-in
components are listed in robot_rl's own ``pyproject.toml``; a third-party package adds its task or
algorithm the same way, in its own ``[project.entry-points."robot_rl.tasks"]`` table.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from robot_rl.core.errors import UserError

T = TypeVar("T")


class UnknownNameError(KeyError, UserError):
    """Raised for a name that is not registered; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it readable.
        return str(self.args[0])


class PluginLoadError(ImportError):
    """A module named by an entry point failed to import; the message names the entry point."""


class Registry(Generic[T]):
    """A name → class mapping that rejects duplicates and explains unknown names.

    ``entry_point_group``: modules listed under that group are imported at the first lookup, so that
    their ``@register`` decorators run. ``resolver``: maps a name that is not registered as such to
    ``(entry, fields the name implies)`` (task ids such as ``maniskill/PickCube-v1``).
    """

    def __init__(self, kind: str, entry_point_group: str | None = None,
                 resolver: Callable[[str], tuple[T, dict[str, Any]]] | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self.resolver = resolver
        self._entries: dict[str, T] = {}
        self._plugins_loaded = entry_point_group is None
        self._plugin_count = 0

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@TASKS.register("reach")`` above a config class."""

        def decorate(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered by {self._entries[name]!r}")
            self._entries[name] = obj
            return obj

        return decorate

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test that registered a made-up entry cleans up with it)."""
        self._entries.pop(name, None)

    def load_plugins(self) -> None:
        """Import every module of this registry's entry-point group once (later calls do nothing)."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True  # before importing: a module that looks a name up must not recurse
        for ep in importlib.metadata.entry_points(group=str(self.entry_point_group)):
            self._plugin_count += 1
            try:
                ep.load()
            except ImportError as e:
                raise PluginLoadError(f"{self.kind} entry point {ep.name!r} ({ep.value}) failed to import: {e}") from e

    def get(self, name: str) -> T:
        """Return the entry for ``name`` or raise with the list of valid names."""
        self.load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; {self.valid_names_text()}") from None

    def resolve(self, name: str) -> tuple[T, dict[str, Any]]:
        """``(entry, fields the name implies)``: the registered entry, or what the resolver makes of ``name``."""
        self.load_plugins()
        if name in self._entries or self.resolver is None:
            return self.get(name), {}
        return self.resolver(name)

    def valid_names_text(self) -> str:
        """``valid <kind> names: a, b`` (with a hint when no entry point was found at all)."""
        self.load_plugins()
        text = f"valid {self.kind} names: {', '.join(sorted(self._entries)) or '(none registered)'}"
        if self.entry_point_group is not None and self._plugin_count == 0:
            text += (f" (no '{self.entry_point_group}' entry points were found: is robot_rl installed? "
                     "`pip install -e .` in the checkout registers the built-in components)")
        return text

    def name_of(self, obj: object) -> str:
        """The registered name of a class (or of an instance's class)."""
        cls = obj if isinstance(obj, type) else type(obj)
        for name, entry in self._entries.items():
            if entry is cls:
                return name
        raise UnknownNameError(f"{cls.__name__} is not a registered {self.kind}")

    def names(self) -> list[str]:
        """All registered names, sorted."""
        self.load_plugins()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self.load_plugins()
        return name in self._entries


@runtime_checkable
class Registered(Protocol):
    """A config base class whose subclasses are chosen by name.

    It declares ``registry: ClassVar[Registry[...]]`` (``RobotConfig.registry = ROBOTS``); check the class itself,
    ``isinstance(cls, Registered)``.
    """

    registry: Registry[Any]
