"""The live progress line of `robot-rl train`: steps, steps/s, return, success rate, losses."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


class TrainProgress:
    """A rich progress bar over the env-step budget with the latest metrics beside it."""

    def __init__(self, total_steps: int, start_steps: int = 0, enabled: bool = True) -> None:
        self.enabled = enabled
        self.console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=24),
            TextColumn("{task.completed:>9,.0f}/{task.total:,.0f} steps"),
            TextColumn("{task.fields[rate]:>7} st/s"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[metrics]}"),
            console=self.console,
            disable=not enabled,
            refresh_per_second=4,
        )
        self._task: TaskID | None = None
        self._total = total_steps
        self._start = start_steps
        self._t0 = time.monotonic()

    def __enter__(self) -> TrainProgress:
        self._progress.__enter__()
        self._task = self._progress.add_task("train", total=self._total, completed=self._start, rate="-",
                                             metrics="")
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(None, None, None)

    def update(self, steps: int, metrics: dict[str, Any]) -> None:
        """Show ``steps`` done and the metrics (already formatted or floats)."""
        if self._task is None:
            return
        elapsed = max(time.monotonic() - self._t0, 1e-6)
        rate = (steps - self._start) / elapsed
        text = "  ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())
        self._progress.update(self._task, completed=steps, rate=f"{rate:,.0f}", metrics=text)

    def print(self, message: str) -> None:
        """Print a line above the bar."""
        self.console.print(message)


def transport_summary(m: dict[str, float]) -> str:
    """One line of a learner endpoint's ``metrics()``: rates, queues, acks pending, rejects.

    Per actor: transitions per second, weight lag and duplicates dropped.
    """
    rejects = {k.split("/", 1)[1]: int(v) for k, v in m.items() if k.startswith("rejects/") and v}
    lags = {k.split("/", 1)[1]: int(v) for k, v in m.items() if k.startswith("weight_lag/")}
    rates = {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("transitions_per_s/")}
    dups = {k.split("/", 1)[1]: int(v) for k, v in m.items() if k.startswith("duplicates/") and v}
    parts = [f"{m.get('transitions_per_s', 0.0):,.0f} tr/s", f"{m.get('mb_per_s', 0.0):.2f} MB/s",
             f"inbox {int(m.get('inbox', 0))}", f"acks pending {int(m.get('acks_pending', 0))}",
             f"actors {int(m.get('actors', 0))}"]
    if rates:
        parts.append("tr/s per actor " + ",".join(f"{a.removeprefix('actor')}:{v:,.0f}" for a, v in rates.items()))
    if lags:
        parts.append("lag " + ",".join(f"{a.removeprefix('actor')}:{v}" for a, v in lags.items()))
    if dups:
        parts.append("duplicates " + ",".join(f"{a.removeprefix('actor')}:{v}" for a, v in dups.items()))
    if rejects:
        parts.append("rejects " + ",".join(f"{k}={v}" for k, v in rejects.items()))
    return "  ".join(parts)
