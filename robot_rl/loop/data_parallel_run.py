"""A run as one of several data-parallel ranks (``torchrun … robot-rl train`` or ``run.distributed=ddp``).

Every rank builds the same runner with its own envs (seeded apart) and steps in lockstep with the others (PPO: one
rollout and one update per iteration; SAC: :mod:`robot_rl.loop.lockstep`); the algorithm averages gradients and
batch statistics over the ranks (:mod:`robot_rl.core.data_parallel`). Rank 0 owns the run directory: checkpoints,
logs, evaluations and the stop decision, which it broadcasts. The other ranks write only their ``train.log`` (and,
off-policy, their replay shard) under ``<run>/ranks/rank<N>/``.

It is the run strategy :class:`DataParallelRanks` (:mod:`robot_rl.loop.run_strategy`), not an extension
(:mod:`robot_rl.core.extension`), as it is a layout of the run, not a feature in it: it starts the processes and picks
each rank's device and directory before any extension is built; it changes how the runner builds its own parts (env
and RNG seeds, the update schedule, what a rank > 0 restores and writes, the stop vote each iteration), which no hook
replaces; and its collectives sit inside each algorithm's update (DDP-wrapped losses, the normaliser's statistics
gathered over ranks, per-row random draws shared out), which a loss term cannot wrap. The runner asks its strategy
where the layout decides; the offline phase reads the group (``RunHandle.data_parallel``); the extensions say whether
they need one process (``Extension.single_process``, :func:`check_combinations`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist

from robot_rl.core.algorithm import Algorithm, OffPolicyAlgorithm
from robot_rl.core.config import ConfigError
from robot_rl.core.data_parallel import DataParallel, SupportsDataParallel
from robot_rl.loop.actor import Actor
from robot_rl.loop.config import LoopConfig, TrainConfig
from robot_rl.loop.learner import Learner
from robot_rl.loop.learner_driver import LearnerDriver
from robot_rl.loop.lockstep import LockstepOffPolicyUpdates
from robot_rl.loop.run_context import RunContext, algo_name
from robot_rl.loop.updates import UpdateStrategy, make_updates
from robot_rl.replay.async_rollout import AsyncRolloutStorage

log = logging.getLogger(__name__)

#: Algorithms that train data-parallel; any other (a plugin's) says so instead of silently training alone. The
#: lockstep schedule (robot_rl.loop.lockstep) serves any off-policy learner; what is per algorithm is wrapping its
#: losses for DDP and sharing out its per-row random draws, each checked against one process on the ranks' batches
#: together (tests/test_data_parallel_*.py).
SUPPORTED = ("ppo", "sac", "iql", "flow_ppo", "hiors", "flow_qc", "fasttd3", "fastsac")


def check_combinations(cfg: TrainConfig) -> None:
    """Refuse, saying why, the extensions of the run that assume one process (each one's ``single_process()``)."""
    refused = [why for ext in cfg.build_extensions() if (why := ext.single_process())]
    if refused:
        raise ConfigError(f"run.distributed=ddp does not combine with {'; '.join(refused)}. Train in one process "
                          "(run.distributed=none), or scale the actors instead (robot-rl launch --actors N)")


def data_parallel_for(cfg: TrainConfig) -> DataParallel | None:
    """The process's rank layout when the run is data-parallel, else None; a clear error for a bad setup."""
    dp = DataParallel.from_environment()
    if cfg.run.distributed == "none" or (dp is not None and dp.world_size == 1):
        return None
    if dp is None:
        if cfg.run.distributed == "ddp":
            raise ConfigError("run.distributed=ddp needs its ranks started by torchrun: `robot-rl train "
                              "run.distributed=ddp …` does that itself, or run `torchrun --nproc-per-node N -m "
                              "robot_rl.cli train …`")
        return None
    return dp


def rank_device(cfg: TrainConfig, dp: DataParallel) -> str:
    """The device a rank trains on: its own GPU (LOCAL_RANK) when the run uses CUDA, else the CPU."""
    wants_cuda = cfg.run.device.startswith("cuda") or (cfg.run.device == "auto" and torch.cuda.is_available())
    if not wants_cuda:
        return "cpu"
    count = torch.cuda.device_count()
    if dp.local_rank >= count:
        raise ConfigError(f"rank {dp.rank} (local rank {dp.local_rank}) has no GPU: this machine has {count}; "
                          f"start at most {count} ranks per node (--nproc-per-node {count}) or set run.device=cpu")
    return f"cuda:{dp.local_rank}"


def prepare_rank(cfg: TrainConfig, dp: DataParallel, resume_dir: Path | None) -> tuple[TrainConfig, Path]:
    """Join the process group and agree on the run directory; the config and directory this rank runs with.

    Rank 0 names the run (a timestamped name could differ between ranks by a second) and owns it; ranks > 0
    write their ``train.log`` to ``<run>/ranks/rank<N>/`` and show no progress line.
    """
    name = algo_name(cfg)
    check_combinations(cfg)
    if name not in SUPPORTED:
        raise ConfigError(f"algorithm {name!r} does not train data-parallel yet; supported: {', '.join(SUPPORTED)} "
                          "(docs/scale-out.md). Why: its update does not average gradients over ranks. Train it in one "
                          "process (run.distributed=none), or with more actors (robot-rl launch --actors N)")
    device = rank_device(cfg, dp)
    dp.start(torch.device(device), cfg.loop.max_wait_s)
    main_dir = resume_dir if resume_dir is not None else RunContext.default_dir(cfg)
    box = [str(main_dir)]
    dist.broadcast_object_list(box, src=0)
    main_dir = Path(box[0])
    run = dataclasses.replace(cfg.run, device=device)
    if not dp.is_main:
        run = dataclasses.replace(run, progress=False, wandb=False)
    rank_dir = main_dir if dp.is_main else main_dir / "ranks" / f"rank{dp.rank}"
    return dataclasses.replace(cfg, run=run), rank_dir


def attach(algo: object, dp: DataParallel, resumed: bool) -> None:
    """Hand ``dp`` to the algorithm; on a resume every rank takes rank 0's whole state (optimiser moments too).

    DDP copies rank 0's parameters when it wraps a module, but not the optimiser's moments: ranks that resumed
    from different states would take different steps from the same averaged gradient.
    """
    if not isinstance(algo, SupportsDataParallel):
        raise ConfigError(f"{type(algo).__name__} cannot train data-parallel; supported: {', '.join(SUPPORTED)}")
    if resumed:
        box = [algo.state_dict() if dp.is_main else None]  # type: ignore[attr-defined]
        dist.broadcast_object_list(box, src=0)
        if not dp.is_main:
            algo.load_state_dict(box[0])  # type: ignore[attr-defined]
    algo.enable_data_parallel(dp)


def sync_counters(learner: Learner, dp: DataParallel) -> None:
    """Every rank takes rank 0's step, update and version counters and counts the whole run's env steps.

    A resume restores the counters on rank 0 only; equal counters end every rank's budget at the same iteration.
    """
    counters = torch.tensor([learner.transitions, learner.updates, learner.version], dtype=torch.float64)
    dist.broadcast(counters, src=0)
    learner.transitions, learner.updates, learner.version = (int(v) for v in counters.tolist())
    learner.ranks = dp.world_size


def torchrun_argv(argv: list[str], nproc: int) -> list[str]:
    """``python -m torch.distributed.run --nproc-per-node N -m robot_rl.cli ARGV``: the ranks of one machine."""
    import sys

    if nproc < 1:
        raise ConfigError(f"run.nproc_per_node must be >= 1, got {nproc}")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "robot_rl.cli", *argv]


def started_by_torchrun() -> bool:
    """Whether this process is a rank of a torchrun job."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


class DataParallelRanks:
    """The run strategy of one rank (:class:`~robot_rl.loop.run_strategy.RunStrategy`; the module docstring)."""

    def __init__(self, dp: DataParallel) -> None:
        self.dp = dp

    @property
    def data_parallel(self) -> DataParallel | None:
        """The group of this rank."""
        return self.dp

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the run; the others only their ``train.log`` and replay shard."""
        return self.dp.is_main

    def prepare(self, cfg: TrainConfig, run_dir: Path | None) -> tuple[TrainConfig, Path | None]:
        """Join the process group; this rank's device and directory (:func:`prepare_rank`)."""
        return prepare_rank(cfg, self.dp, run_dir)

    def env_seed(self, seed: int) -> int:
        """Each rank's envs start from their own seed (the same seed would make every rank collect the same data)."""
        return seed + 100_003 * self.dp.rank

    def check(self, algo: Algorithm, loop: LoopConfig, rollout: AsyncRolloutStorage | None) -> None:
        """Refuse asynchronous on-policy learning: it runs one learner."""
        if rollout is not None:
            raise ConfigError("asynchronous on-policy learning runs one learner: keep loop.on_policy_sync=true with "
                              "run.distributed=ddp")

    def restore(self, driver: LearnerDriver) -> dict[str, Any] | None:
        """Rank 0: its checkpoint. A rank > 0: its replay shard only (rank 0's state reaches it in :meth:`attach`)."""
        if self.dp.is_main:
            return driver.restore()
        driver.restore(checkpoint=False)
        log.info("rank %d resumes with its replay shard; the networks and counters come from rank 0", self.dp.rank)
        return None

    def attach(self, algo: Algorithm, learner: Learner, resumed: bool) -> None:
        """Hand the group to the algorithm (rank 0's state on a resume) and take rank 0's counters."""
        attach(algo, self.dp, resumed)
        sync_counters(learner, self.dp)

    def updates(self, learner: Learner, algo: Algorithm, actors: list[Actor], loop: LoopConfig,
                stop: threading.Event, remote: bool) -> UpdateStrategy:
        """On-policy: the rollouts of one process (each rank collects one); off-policy: lockstep."""
        if algo.on_policy:
            return make_updates(learner, algo, actors, loop, stop, remote)
        return LockstepOffPolicyUpdates(learner, cast(OffPolicyAlgorithm, algo), actors, loop, stop, self.dp)

    def agree_stop(self, reached: bool, device: torch.device) -> bool:
        """Rank 0 evaluates; every rank stops with it."""
        return self.dp.broadcast_flag(reached, device)

    def keep_shard(self, driver: LearnerDriver) -> bool:
        """A rank > 0 commits its replay shard for a resume; rank 0 writes the run."""
        if self.dp.is_main:
            return False
        driver.commit_replay()
        return True

    def close(self) -> None:
        """Leave the process group."""
        self.dp.stop()
