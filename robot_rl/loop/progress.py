"""The live progress line of `robot-rl train`: steps, steps/s, return, success rate, losses."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

#: The metrics kept first when the line is narrow: the run's progress toward success before its losses.
PRIORITY = ("success", "return")
#: Bar widths: full, and on a terminal narrower than ``WIDE`` columns.
BAR, NARROW_BAR, WIDE = 24, 10, 120


def fit_fields(fields: list[tuple[str, str]], width: int) -> str:
    """``fields`` (``(name, text)`` in display order) that fit in ``width`` columns, two spaces apart.

    Whole fields or none: those named in :data:`PRIORITY` are taken first, then the others in order, so a
    narrow terminal drops the losses before the success rate (never half a number, as rich's ellipsis did).
    """
    first = [i for name in PRIORITY for i, (n, _) in enumerate(fields) if n == name]
    order = first + [i for i in range(len(fields)) if i not in first]
    kept: set[int] = set()
    used = 0
    for i in order:
        need = len(fields[i][1]) + (2 if kept else 0)
        if used + need <= width:
            kept.add(i)
            used += need
    return "  ".join(text for i, (_, text) in enumerate(fields) if i in kept)


class TrainProgress:
    """A rich progress bar over the env-step budget with the latest metrics beside it.

    The step count and the elapsed time always show; after them, as many of the rate, return, success and the
    losses as fit the terminal's width (:func:`fit_fields`).
    """

    def __init__(self, total_steps: int, start_steps: int = 0, enabled: bool = True) -> None:
        self.enabled = enabled
        self.console = Console(stderr=True)
        bar = BAR if self.console.width >= WIDE else NARROW_BAR
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=bar),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} steps"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[tail]}"),
            console=self.console,
            disable=not enabled,
            refresh_per_second=4,
        )
        # What the columns before the metrics take at most: name, bar, steps, a clock under 10 h, 4 gaps.
        self._fixed = len("train") + bar + len(f"{total_steps:,}/{total_steps:,} steps") + len("0:00:00") + 4
        self._task: TaskID | None = None
        self._total = total_steps
        self._start = start_steps
        self._t0 = time.monotonic()

    def __enter__(self) -> TrainProgress:
        self._progress.__enter__()
        self._task = self._progress.add_task("train", total=self._total, completed=self._start, tail="")
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(None, None, None)

    def update(self, steps: int, metrics: dict[str, Any]) -> None:
        """Show ``steps`` done and the metrics (already formatted or floats)."""
        if self._task is None:
            return
        elapsed = max(time.monotonic() - self._t0, 1e-6)
        rate = (steps - self._start) / elapsed
        fields = [("rate", f"{rate:,.0f} st/s")]
        fields += [(k, f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}") for k, v in metrics.items()]
        tail = fit_fields(fields, self.console.width - self._fixed - 1)
        self._progress.update(self._task, completed=steps, tail=escape(tail))

    def print(self, message: str) -> None:
        """Print a line above the bar (as it is: a path's [brackets] are not markup)."""
        self.console.print(message, markup=False)


def transport_summary(m: dict[str, float]) -> str:
    """One line of a learner endpoint's ``metrics()``: rates, queues, acks pending, rejects.

    Per actor: transitions per second, share of them, weight lag, duplicates dropped and transitions the actor
    dropped (``loop.on_backlog=drop``); the window's fairness (Jain's index per env).
    """
    rejects = {k.split("/", 1)[1]: int(v) for k, v in m.items() if k.startswith("rejects/") and v}
    shares = {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("share/")}
    dropped = {k.split("/", 1)[1]: int(v) for k, v in m.items() if k.startswith("dropped/") and v}
    lags = {k.split("/", 1)[1]: int(v) for k, v in m.items() if k.startswith("weight_lag/")}
    rates = {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("transitions_per_s/")}
    dups = {k.split("/", 1)[1]: int(v) for k, v in m.items() if k.startswith("duplicates/") and v}
    parts = [f"{m.get('transitions_per_s', 0.0):,.0f} tr/s", f"{m.get('mb_per_s', 0.0):.2f} MB/s",
             f"inbox {int(m.get('inbox', 0))}", f"acks pending {int(m.get('acks_pending', 0))}",
             f"actors {int(m.get('actors', 0))}"]
    if rates:
        parts.append("tr/s per actor " + ",".join(f"{a.removeprefix('actor')}:{v:,.0f}" for a, v in rates.items()))
    if shares:
        parts.append("share " + ",".join(f"{a.removeprefix('actor')}:{v:.0%}" for a, v in shares.items()))
    if "fairness" in m:
        parts.append(f"fairness {m['fairness']:.2f}")
    if dropped:
        parts.append("DROPPED " + ",".join(f"{a.removeprefix('actor')}:{v}" for a, v in dropped.items()))
    if lags:
        parts.append("lag " + ",".join(f"{a.removeprefix('actor')}:{v}" for a, v in lags.items()))
    if dups:
        parts.append("duplicates " + ",".join(f"{a.removeprefix('actor')}:{v}" for a, v in dups.items()))
    if rejects:
        parts.append("rejects " + ",".join(f"{k}={v}" for k, v in rejects.items()))
    return "  ".join(parts)


def actor_totals(m: dict[str, float]) -> dict[str, dict[str, int]]:
    """Per actor, from a learner endpoint's ``metrics()``: transitions accepted and transitions the actor dropped."""
    out: dict[str, dict[str, int]] = {}
    for key, v in m.items():
        kind, _, actor = key.partition("/")
        if kind in ("transitions", "dropped") and actor.startswith("actor"):
            out.setdefault(actor.removeprefix("actor"), {"transitions": 0, "dropped": 0})[kind] = int(v)
    return out


def short_metrics(metrics: dict[str, float]) -> dict[str, Any]:
    """The few metrics the progress line shows, formatted."""
    keep = ("return", "success", "critic_loss", "actor_loss", "alpha", "value_loss", "surrogate_loss",
            "kl")
    out: dict[str, Any] = {k: metrics[k] for k in keep if k in metrics}
    if "success" in out:
        out["success"] = f"{out['success']:.0%}"
    if "stale_rows_dropped" in metrics:  # asynchronous on-policy: mean lag of the last rollout, rows dropped
        out["stale"] = f"{metrics['staleness_mean']:.1f}v drop {metrics['stale_rows_dropped']:,.0f}"
    if "transport/transitions_per_s" in metrics:
        rejects = sum(v for k, v in metrics.items() if k.startswith("transport/rejects/"))
        out["net"] = (f"{metrics['transport/transitions_per_s']:,.0f}tr/s "
                      f"{metrics['transport/mb_per_s']:.1f}MB/s acks {metrics['transport/acks_pending']:.0f} "
                      f"lag {metrics['transport/weight_lag_max']:.0f} rej {rejects:.0f}")
        if "transport/fairness" in metrics:
            out["net"] += f" fair {metrics['transport/fairness']:.2f}"
        dropped = sum(v for k, v in metrics.items() if k.startswith("transport/dropped/"))
        if dropped:
            out["net"] += f" DROPPED {dropped:,.0f}tr"
    return out


class RecentEpisodes:
    """Returns and successes of the last 100 finished episodes, for the progress line."""

    def __init__(self, keep: int = 100) -> None:
        self.keep = keep
        self.returns: list[float] = []
        self.successes: list[bool] = []

    def add(self, stats: Any) -> None:
        """Keep the newest of an actor's :meth:`~robot_rl.loop.actor.Actor.pop_episode_stats`."""
        self.returns = (self.returns + stats.returns)[-self.keep:]
        self.successes = (self.successes + stats.successes)[-self.keep:]
