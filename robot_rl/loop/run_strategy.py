"""How a training process sits in its run: alone (:class:`OneProcess`), or one of several data-parallel ranks.

A run strategy is the layout of the run, beside its extensions (:mod:`robot_rl.core.extension`), which are features
in it. The runner builds the same parts either way and asks its strategy wherever the layout decides: the seed of
this process's envs, what a resume restores here, how the algorithm joins the other ranks, which update schedule
runs, whether this process writes the run (evaluations, logs, checkpoints), how the stop is agreed, and what is kept
when the run ends. The data-parallel one is :class:`~robot_rl.loop.data_parallel_run.DataParallelRanks`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Protocol

import torch

from robot_rl.core.algorithm import Algorithm
from robot_rl.core.data_parallel import DataParallel
from robot_rl.loop.actor import Actor
from robot_rl.loop.config import LoopConfig, TrainConfig
from robot_rl.loop.data_parallel_run import DataParallelRanks, data_parallel_for
from robot_rl.loop.learner import Learner
from robot_rl.loop.learner_driver import LearnerDriver
from robot_rl.loop.updates import UpdateStrategy, make_updates
from robot_rl.replay.async_rollout import AsyncRolloutStorage


class RunStrategy(Protocol):
    """What differs between one process and data-parallel ranks; the runner names no layout."""

    @property
    def data_parallel(self) -> DataParallel | None:
        """The group of this rank (what the algorithm and the offline phase average over), or None alone."""
        ...

    @property
    def is_main(self) -> bool:
        """Whether this process writes the run: evaluations, logs, checkpoints (rank 0, or the only one)."""
        ...

    def prepare(self, cfg: TrainConfig, run_dir: Path | None) -> tuple[TrainConfig, Path | None]:
        """Before the runner is built: the config and run directory this process runs with."""
        ...

    def env_seed(self, seed: int) -> int:
        """The first seed of this process's training envs and actors (ranks collect apart)."""
        ...

    def check(self, algo: Algorithm, loop: LoopConfig, rollout: AsyncRolloutStorage | None) -> None:
        """Refuse, saying why, a schedule this layout cannot run (``rollout``: the asynchronous on-policy one)."""
        ...

    def restore(self, driver: LearnerDriver) -> dict[str, Any] | None:
        """On a resume: load what this process keeps; the checkpoint's metadata, or None when it has none."""
        ...

    def attach(self, algo: Algorithm, learner: Learner, resumed: bool) -> None:
        """Join the algorithm and the learner's counters to the layout, before the first weights are published."""
        ...

    def updates(self, learner: Learner, algo: Algorithm, actors: list[Actor], loop: LoopConfig,
                stop: threading.Event, remote: bool) -> UpdateStrategy:
        """How collection and learning interleave (:mod:`robot_rl.loop.updates`)."""
        ...

    def agree_stop(self, reached: bool, device: torch.device) -> bool:
        """Whether the run stops at the threshold, the same answer in every process (the main one's)."""
        ...

    def keep_shard(self, driver: LearnerDriver) -> bool:
        """At the end: True when this process only keeps its replay shard (committed here) and writes nothing else."""
        ...

    def close(self) -> None:
        """After the run, whatever it ended with."""
        ...


class OneProcess:
    """The whole run in this process (with actor threads here, or actor processes connected to it)."""

    @property
    def data_parallel(self) -> DataParallel | None:
        """None: no group."""
        return None

    @property
    def is_main(self) -> bool:
        """True: the only process writes the run."""
        return True

    def prepare(self, cfg: TrainConfig, run_dir: Path | None) -> tuple[TrainConfig, Path | None]:
        """``cfg`` and ``run_dir`` as given."""
        return cfg, run_dir

    def env_seed(self, seed: int) -> int:
        """``run.seed`` itself."""
        return seed

    def check(self, algo: Algorithm, loop: LoopConfig, rollout: AsyncRolloutStorage | None) -> None:
        """Every schedule runs in one process."""

    def restore(self, driver: LearnerDriver) -> dict[str, Any] | None:
        """The newest checkpoint and the replay's windows."""
        return driver.restore()

    def attach(self, algo: Algorithm, learner: Learner, resumed: bool) -> None:
        """Nothing to join."""

    def updates(self, learner: Learner, algo: Algorithm, actors: list[Actor], loop: LoopConfig,
                stop: threading.Event, remote: bool) -> UpdateStrategy:
        """The algorithm family's schedule: rollouts, asynchronous rollouts, or actor threads."""
        return make_updates(learner, algo, actors, loop, stop, remote)

    def agree_stop(self, reached: bool, device: torch.device) -> bool:
        """``reached``: nobody else votes."""
        return reached

    def keep_shard(self, driver: LearnerDriver) -> bool:
        """False: this process writes the run."""
        return False

    def close(self) -> None:
        """Nothing to leave."""


def run_strategy_for(cfg: TrainConfig) -> RunStrategy:
    """Ranks when this process was started as one of several (torchrun, ``run.distributed=ddp``), else one process."""
    dp = data_parallel_for(cfg)
    return OneProcess() if dp is None else DataParallelRanks(dp)
