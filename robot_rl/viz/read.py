"""Reading an ``.rrd`` recording back with Rerun's own reader (``rerun.chunk.RrdReader``): for tests and scripts.

>>> series = read_rrd("runs/reach-sac/viz.rrd")      # doctest: +SKIP
>>> series["/action/policy"].steps[:3], series["/reward"].values[:3]   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robot_rl.viz.rerun_sink import import_rerun


@dataclass
class RrdSeries:
    """One entity's temporal rows, sorted by ``env_step``: the step, and the first component's value per row."""

    steps: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    component: str = ""

    def __len__(self) -> int:
        return len(self.steps)


def read_rrd(path: Path | str, timeline: str = "env_step") -> dict[str, RrdSeries]:
    """Entity path (``/action/human`` …) → its rows on ``timeline``, from the first recording in ``path``.

    Static rows (recording properties) are left out. The value of a row is its main component's batch as a list:
    ``Scalars:scalars`` → the floats (one per dimension), ``TextLog:text`` → ``[text]``, ``Image:buffer`` →
    ``[pixel bytes as ints]`` (``bytes(value[0])`` is the HWC image's ``tobytes()``).
    """
    import_rerun()
    from rerun.chunk import RrdReader

    out: dict[str, RrdSeries] = {}
    for chunk in RrdReader(str(path)).stream().to_chunks():
        if chunk.is_static or timeline not in chunk.timeline_names:
            continue
        batch = chunk.to_record_batch()
        names = [n for n in batch.schema.names if ":" in n]
        main = [n for n in names if n.endswith((":scalars", ":text", ":buffer"))] or names
        series = out.setdefault(chunk.entity_path, RrdSeries(component=main[0] if main else ""))
        steps = batch.column(timeline).to_pylist()
        values = batch.column(series.component).to_pylist() if series.component else [None] * len(steps)
        series.steps.extend(int(s) for s in steps)
        series.values.extend(values)
    for series in out.values():
        order = sorted(range(len(series.steps)), key=series.steps.__getitem__)
        series.steps = [series.steps[i] for i in order]
        series.values = [series.values[i] for i in order]
    return out
