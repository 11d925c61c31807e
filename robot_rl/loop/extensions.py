"""The run's extensions (robot_rl.core.extension): built from their config sections, called in name order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from robot_rl.core.extension import EXTENSIONS, Extension, RunHandle, extension_order


class RunExtensions:
    """The extensions a run config switches on, in the order they are called, with the calls the loop makes."""

    def __init__(self, cfg: Any) -> None:
        self.active: dict[str, Extension] = {}
        sections = cfg.sections()
        for name in extension_order(sections):
            ext = EXTENSIONS.get(name).build(sections[name], cfg)
            if ext is not None:
                self.active[name] = ext

    def __iter__(self) -> Iterator[Extension]:
        return iter(self.active.values())

    def attach(self, run: RunHandle, actors: list[Any], on_close: Callable[[Callable[[], None]], None],
               state: dict[str, Any] | None) -> None:
        """Each extension meets the run, hooks into the actors' steps and is closed with the run.

        Closed after the actors stopped (``train`` stops them before closing); ``state``: a resumed checkpoint's.
        """
        for name, ext in self.active.items():
            ext.attach(run)
            on_close(ext.close)
            if state is not None and name in state:
                ext.load_state(state[name])
            for i, actor in enumerate(actors):
                hook = ext.step_hook(i, actor)
                if hook is not None:
                    actor.hooks.append(hook)

    def start(self, run: RunHandle) -> None:
        """The actors are about to step: each extension's work they wait for."""
        for ext in self.active.values():
            ext.start(run)

    def metrics(self) -> dict[str, float]:
        """Every extension's scalars since the last call, as ``<name>/<key>``."""
        return {f"{name}/{k}": float(v) for name, ext in self.active.items() for k, v in ext.metrics().items()}

    def state(self) -> dict[str, Any]:
        """The checkpointed state of the extensions that keep any, by name (top-level keys of a checkpoint's meta)."""
        return {name: s for name, ext in self.active.items() if (s := ext.state()) is not None}

