"""Optional simulator backends: which pip extra brings which module, checked without importing it.

Every backend module imports its simulator inside ``make`` through :func:`require`, so that a missing
extra fails at make time with the ``pip install`` line that fixes it, and ``robot-rl tasks`` can say
what is installed by asking :func:`installed` (``importlib.util.find_spec``: the simulator is located,
never imported, so listing tasks stays fast and cannot crash on a broken GPU driver).
"""

from __future__ import annotations

import importlib
import importlib.util
import types
from dataclasses import dataclass

__all__ = ["EXTRAS", "Extra", "TaskInfo", "extra_for", "install_hint", "installed", "require", "task_catalog"]


@dataclass(frozen=True)
class Extra:
    """One optional dependency group of ``robot-rl``."""

    name: str
    """The extra's name: ``pip install 'robot-rl[<name>]'``."""
    modules: tuple[str, ...]
    """Top-level modules the backend imports (all must be present)."""
    brings: str
    """What the extra installs, in words."""
    note: str = ""
    """What pip cannot do for this backend (shown by ``robot-rl tasks``)."""


EXTRAS: dict[str, Extra] = {e.name: e for e in (
    Extra("gym", ("gymnasium",), "gymnasium (any registered env id)"),
    Extra("mujoco", ("mujoco",), "MuJoCo (batched arm tasks, gymnasium's MuJoCo envs)"),
    Extra("maniskill", ("mani_skill",), "ManiSkill3 with SAPIEN",
          note="also needs a Vulkan driver; on CPU, Mesa >= 25 lavapipe"),
    Extra("isaacgym", ("isaacgym",), "isaacgym-stubs (types only)",
          note="Isaac Gym Preview 4 itself comes from NVIDIA's download, for Python 3.8: docs/sims-isaacgym.md"),
)}


def install_hint(extra: str) -> str:
    """``pip install 'robot-rl[extra]'`` (and the backend's note, if any)."""
    e = EXTRAS.get(extra)
    hint = f"pip install 'robot-rl[{extra}]'"
    return f"{hint}; {e.note}" if e is not None and e.note else hint


def installed(extra: str) -> bool:
    """Whether every module of ``extra`` can be found (located with ``find_spec``, not imported)."""
    e = EXTRAS.get(extra)
    if e is None:
        raise KeyError(f"unknown extra {extra!r}; known extras: {', '.join(EXTRAS)}")
    return all(_findable(m) for m in e.modules)


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, or a broken parent
        return False


def require(module: str, extra: str, what: str | None = None) -> types.ModuleType:
    """Import ``module`` or raise ``ImportError`` naming the ``pip install`` that brings it.

    ``what`` names the caller in the message (``"the 'gym' task"``). A module that is installed but
    fails to import (a missing system library, say) keeps its own error in the message.
    """
    who = what or f"this task ({extra})"
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        missing = isinstance(e, ModuleNotFoundError) and e.name in (module, top)
        if missing or (e.name is None and not _findable(top)):
            raise ImportError(f"{who} needs {top}, which is not installed: {install_hint(extra)}") from e
        raise ImportError(f"{who} needs {module}, which is installed but failed to import ({e}); "
                          f"reinstall with {install_hint(extra)}") from e


def extra_for(module_name: str, task_name: str) -> str | None:
    """Guess the extra of a task config that does not declare one, from its module or task name."""
    for part in (*module_name.split("."), task_name.split("/")[0]):
        if part in EXTRAS:
            return part
    if "gymnasium" in module_name.split("."):
        return "gym"
    return None


@dataclass(frozen=True)
class TaskInfo:
    """One row of ``robot-rl tasks``."""

    names: tuple[str, ...]
    """The registered names of one config class (aliases after the first)."""
    backend: str
    """``torch`` for the built-in tasks, else the extra's name."""
    installed: bool
    """Whether the backend's modules can be found."""
    install: str
    """What to run to get the backend ("" when nothing is needed)."""
    id_hint: str
    """How to name an env of the backend (``gymnasium/<env_id>``), "" for a fixed task."""
    summary: str
    """The first line of the config's docstring."""


def task_catalog() -> list[TaskInfo]:
    """Every registered task with its backend and whether that is installed (no simulator is imported)."""
    import dataclasses

    from robot_rl.core.config import TASKS, TaskConfig, ensure_registered

    ensure_registered()
    by_class: dict[type[TaskConfig], list[str]] = {}
    for name in TASKS.names():
        by_class.setdefault(TASKS.get(name), []).append(name)
    rows = []
    for cls, names in by_class.items():
        canonical = TASKS.name_of(cls)
        names = [canonical, *[n for n in names if n != canonical]]
        extra = cls.extra or extra_for(cls.__module__, canonical)
        fields = {f.name for f in dataclasses.fields(cls)}
        id_hint = " | ".join(f"{n}/<{cls.id_field}>" for n in names) if cls.id_field in fields else ""
        doc = (cls.__doc__ or "").strip().splitlines()
        rows.append(TaskInfo(
            names=tuple(names), backend=extra or "torch", installed=installed(extra) if extra else True,
            install=install_hint(extra) if extra else "", id_hint=id_hint, summary=doc[0] if doc else ""))
    return sorted(rows, key=lambda r: (r.backend != "torch", r.backend, r.names[0]))
