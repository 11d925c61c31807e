"""CPU ranks over gloo in spawned processes, for the data-parallel equivalence tests (PPO, SAC, IQL).

A test's rank function ``fn(rank, world, port, out)`` (module level, so that ``spawn`` can pickle it) calls
:func:`join` first, saves what it measured to ``f"{out}.{rank}"`` and calls :func:`leave`; :func:`run_ranks`
starts the ranks and returns what each saved.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from robot_rl.core.data_parallel import DataParallel


def join(rank: int, world: int, port: int) -> DataParallel:
    """This process as rank ``rank`` of ``world`` on 127.0.0.1:``port`` (one torch thread), group started."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    dp = DataParallel.from_environment()
    assert dp is not None
    dp.start(torch.device("cpu"), timeout_s=60)
    return dp


def leave(dp: DataParallel) -> None:
    """Wait for every rank, then leave the group."""
    dist.barrier()
    dp.stop()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(fn: Callable[[int, int, int, str], None], out: Path, world: int = 2) -> list[Any]:
    """Spawn ``world`` ranks of ``fn``; what each saved to ``f"{out}.{rank}"``, in rank order."""
    mp.spawn(fn, args=(world, free_port(), str(out)), nprocs=world, join=True)
    return [torch.load(f"{out}.{r}", weights_only=False) for r in range(world)]


def leaves(state: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a (nested) state dict by its dotted path (tensors cloned)."""
    if isinstance(state, dict):
        return {k2: v2 for k, v in state.items() for k2, v2 in leaves(v, f"{prefix}{k}.").items()}
    if isinstance(state, (list, tuple)):
        return {k2: v2 for i, v in enumerate(state) for k2, v2 in leaves(v, f"{prefix}{i}.").items()}
    return {prefix.rstrip("."): state.clone() if isinstance(state, torch.Tensor) else state}
