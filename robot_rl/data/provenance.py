"""The task settings a recording was made under, and a warning when a run learns from it under others.

An episode store keeps its spec (shapes, dtypes, bounds), which :meth:`EnvSpec.assert_compatible` checks; but
two runs of one task with the same spec can still mean different things by the same numbers: an action of 1.0
is a 3 cm step at ``task.action_scale=0.03`` and a 5 cm one at ``0.05``; rewards come from ``task.reward``;
episodes end at ``task.max_episode_steps``. Recorders that know the task's config write it into the store's
``source.task_config`` (:func:`task_settings`); ``--offline`` and ``loop.demos_path`` compare it with the run's
(:func:`warn_if_task_differs`) and name every difference, so that a policy trained on 3 cm steps and evaluated on
5 cm ones is not a silent mystery.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Settings that change how a task is run (parallelism, threads, the physics engine's backend), not what its
#: observations, actions and rewards mean.
RUN_ONLY = frozenset({"num_envs", "num_threads", "backend", "device"})


def task_settings(task_cfg: Any) -> dict[str, Any]:
    """A task config as flat ``key → value`` (``type`` first): what a recorder writes as ``source.task_config``."""
    from robot_rl.config_io import flatten, to_dict

    return dict(flatten(to_dict(task_cfg)))


def task_differences(recorded: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """``key: recorded → run`` for every setting (outside :data:`RUN_ONLY`) the two do not share."""
    out = []
    for key in sorted(set(recorded) | set(run)):
        if key.split(".")[0] in RUN_ONLY:
            continue
        a, b = recorded.get(key, "(unset)"), run.get(key, "(unset)")
        if _norm(a) != _norm(b):
            out.append(f"task.{key}: {a!r} in the data, {b!r} in this run")
    return out


def _norm(v: Any) -> Any:
    return [_norm(x) for x in v] if isinstance(v, (list, tuple)) else v


def recorded_task_settings(path: Path | str) -> dict[str, Any] | None:
    """``source.task_config`` of the episode store at ``path``; ``None`` if it has none (or is not a store)."""
    from robot_rl.data.store import EpisodeStore, is_store

    if not is_store(Path(path)):
        return None
    source = EpisodeStore(path).meta.get("source") or {}
    settings = source.get("task_config") if isinstance(source, dict) else None
    return settings if isinstance(settings, dict) else None


def warn_if_task_differs(path: Path | str, task_cfg: Any, what: str) -> list[str]:
    """Log a warning naming every task setting the data at ``path`` was recorded under that this run changes.

    Returns the differences (empty when they agree, or when the data does not say: LeRobot datasets, stores
    written by recorders that did not know the task's config).
    """
    recorded = recorded_task_settings(path)
    if recorded is None:
        return []
    diffs = task_differences(recorded, task_settings(task_cfg))
    if diffs:
        log.warning("%s in %s was recorded under other task settings than this run's; its actions, rewards or "
                    "episode ends may mean something else here:\n  %s\nPass the data's values to this run (e.g. "
                    "task.KEY=VALUE), or record the data again with this run's settings.", what, path,
                    "\n  ".join(diffs))
    return diffs
