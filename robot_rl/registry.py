"""Name registries: one per component family (tasks, algorithms, transports).

A registry maps a short name (``"reach"``, ``"sac"``) to a config class. The config class knows how to
build its component and imports optional backends only inside ``build``/``make``, so registering a
MuJoCo task never imports MuJoCo.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """Raised for a name that is not registered; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it readable.
        return str(self.args[0])


class Registry(Generic[T]):
    """A name → class mapping that rejects duplicates and explains unknown names."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@TASKS.register("reach")`` above a config class."""

        def decorate(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered by {self._entries[name]!r}")
            self._entries[name] = obj
            return obj

        return decorate

    def get(self, name: str) -> T:
        """Return the entry for ``name`` or raise with the list of valid names."""
        try:
            return self._entries[name]
        except KeyError:
            valid = ", ".join(sorted(self._entries)) or "(none registered)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; valid {self.kind} names: {valid}") from None

    def name_of(self, obj: object) -> str:
        """The registered name of a class (or of an instance's class)."""
        cls = obj if isinstance(obj, type) else type(obj)
        for name, entry in self._entries.items():
            if entry is cls:
                return name
        raise UnknownNameError(f"{cls.__name__} is not a registered {self.kind}")

    def names(self) -> list[str]:
        """All registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries
