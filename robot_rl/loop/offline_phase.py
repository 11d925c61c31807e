"""The offline phase of an offline-to-online run: updates on recorded data before any env step.

:func:`pretrain` runs ``updates`` gradient steps of an off-policy algorithm on minibatches of
:class:`~robot_rl.data.offline.OfflineData` (with ``algo.cql_alpha > 0`` and ``algo.calql`` these are CQL or
Cal-QL updates), and every ``log_every`` updates records the training statistics and, for algorithms that can
estimate it (:class:`~robot_rl.core.algorithm.EstimatesTDError`), the TD error on the held-out episodes: the
offline phase's own learning curve. The critics start at Q = 0 while a task's values may be tens below it, so the
raw TD error grows as Q reaches its scale; ``heldout_td_rel`` (RMS TD error over |mean Q|) is the figure whose
rise would mean the critics diverge (benchmarks/RESULTS_offline_online.md). A progress bar shows it on a terminal.

What happens to the data afterwards is :attr:`OfflineConfig.keep_data`: kept in the demo buffer and sampled
alongside the online data (RLPD, Cal-QL's fine-tuning), or dropped so that online RL runs on fresh data only
(WSRL, after its warm-up rollouts of the pre-trained policy).
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from robot_rl.core.algorithm import EstimatesTDError
from robot_rl.core.data_parallel import DataParallel, draw_rows
from robot_rl.data.offline import OfflineData

log = logging.getLogger(__name__)


@dataclass
class OfflineConfig:
    """Pre-training on recorded data before the online run (``offline.*``; `robot-rl train --offline DATA`)."""

    data: str | None = None
    """An episode store or LeRobotDataset v3 recorded on this task (its spec must match). None: no offline phase."""
    updates: int = 10_000
    """Gradient updates of the offline phase."""
    heldout_fraction: float = 0.1
    """Share of the episodes kept out of training to measure the critics' TD error on."""
    log_every: int = 500
    """Updates between two points of the offline learning curve."""
    keep_data: bool = True
    """After the offline phase: keep the data in the demo buffer for online training (RLPD, Cal-QL), or drop it
    (WSRL: online RL on fresh data only; needs ``algo.demo_ratio=0``)."""
    conservative_online: bool = False
    """After the offline phase: keep the conservative term (``algo.cql_alpha``) online, as the Cal-QL paper
    fine-tunes; with ``algo.calql=true`` its clamp reads the Monte-Carlo returns the replay computes for finished
    episodes (rows of running episodes are not clamped). False: plain SAC online."""

    def __post_init__(self) -> None:
        if self.updates < 0 or self.log_every < 1 or not 0.0 <= self.heldout_fraction < 1.0:
            raise ValueError("offline.updates >= 0, offline.log_every >= 1 and offline.heldout_fraction in [0, 1)")


def check_actor_warmup(algo_cfg: Any, off: OfflineConfig) -> None:
    """Refuse ``algo.actor_bc_updates`` without an offline phase to run in, or as long as the phase itself."""
    from robot_rl.core.config import ActorWarmupConfig, ConfigError

    n = algo_cfg.actor_bc_updates if isinstance(algo_cfg, ActorWarmupConfig) else 0
    if n and (off.data is None or n >= off.updates):
        where = "without --offline DATA" if off.data is None else f"with offline.updates={off.updates}"
        raise ConfigError(f"algo.actor_bc_updates={n} {where}: the actor's behaviour-cloning warm-up is the start of "
                          f"an offline phase; give --offline DATA and more offline.updates than it, or set it to 0")


def pretrain(algo: Any, data: OfflineData, cfg: OfflineConfig, batch_size: int, seed: int = 0,
             on_point: Callable[[dict[str, float]], None] | None = None,
             progress: bool | None = None, data_parallel: DataParallel | None = None) -> list[dict[str, float]]:
    """Run the offline phase; returns its learning curve.

    One dict per point: ``update``, the algorithm's statistics, and ``heldout_td`` where measurable.
    ``progress``: a bar on stderr (default: when stderr is a terminal). ``data_parallel``: this process is one of
    several ranks, each holding the same data; every update draws ``batch_size`` rows for each rank and this rank
    trains on its own (``ranks × batch_size`` rows an update in all, as online).
    """
    from rich.markup import escape  # descriptions are rich markup: a [bracket] in the text is not a style
    from rich.progress import Progress

    g = torch.Generator().manual_seed(seed)
    n = len(data.train)
    curve: list[dict[str, float]] = []
    measures = data.heldout is not None and isinstance(algo, EstimatesTDError)
    show = sys.stderr.isatty() if progress is None else progress
    with Progress(disable=not show, transient=False) as bar:
        task = bar.add_task("offline updates", total=cfg.updates)
        for u in range(1, cfg.updates + 1):
            idx = draw_rows(partial(torch.randint, 0, n, generator=g), (batch_size,), data_parallel)
            stats = algo.update(data.train.index(idx.to(data.train.action.device)))
            bar.advance(task)
            if u % cfg.log_every == 0 or u == cfg.updates:
                point = {"update": float(u), **stats}
                if measures:
                    point["heldout_td"] = algo.td_error(data.heldout)
                    if "q_mean" in point:  # the TD error grows with |Q|: on the Q scale, a rise means something
                        point["heldout_td_rel"] = math.sqrt(point["heldout_td"]) / max(abs(point["q_mean"]), 1e-6)
                curve.append(point)
                keys = ("critic_loss", "q_mean", "heldout_td", "heldout_td_rel")
                shown = "  ".join(f"{k} {point[k]:.3g}" for k in keys if k in point)
                bar.update(task, description=escape(f"offline updates  {shown}"))
                if not show and progress is None:  # a log file or a pipe: a line per point instead of a bar
                    print(f"offline update {u:,}/{cfg.updates:,}: {shown}", file=sys.stderr, flush=True)
                if on_point is not None:
                    on_point(point)
    if curve:
        log.info("offline phase: %d updates on %d transitions; last %s", cfg.updates, n, curve[-1])
    return curve


def write_curve(curve: list[dict[str, float]], run_dir: Path) -> Path:
    """``<run_dir>/offline_curve.json`` (what docs/offline-to-online.md plots)."""
    path = run_dir / "offline_curve.json"
    path.write_text(json.dumps(curve, indent=1))
    return path
