"""CPU ranks over gloo in spawned processes, for the data-parallel equivalence tests (PPO, SAC, IQL, flow, Hi-ORS).

A test's rank function ``fn(rank, world, port, out)`` (module level, so that ``spawn`` can pickle it) calls
:func:`join` first, saves what it measured to ``f"{out}.{rank}"`` and calls :func:`leave`. A test module names it
``GLOO_RANKS = fn`` and its tests take the ``two_ranks`` fixture (tests/conftest.py, :func:`shared_ranks`): one
pair of spawned processes runs the rank functions of every such module the session collected, one after the other
(starting the processes, which import torch and the package, is most of each test's time).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from robot_rl.core.data_parallel import DataParallel
from robot_rl.core.transition import TransitionBatch


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


def _run_all(rank: int, world: int, jobs: list[tuple[Callable[[int, int, int, str], None], int, str]]) -> None:
    for fn, port, out in jobs:
        fn(rank, world, port, out)


#: What each module's rank function saved, by module name, once the shared spawn ran it.
_SAVED: dict[str, list[Any]] = {}


def shared_ranks(request: pytest.FixtureRequest, world: int = 2) -> list[Any]:
    """What the requesting module's ``GLOO_RANKS`` function saved on each rank, in rank order.

    The first request spawns ``world`` processes that run the function of every collected module that has one and
    has not run yet; later requests read what they saved.
    """
    name = request.module.__name__
    if name not in _SAVED:
        modules = {item.module.__name__: item.module for item in request.session.items
                   if hasattr(getattr(item, "module", None), "GLOO_RANKS")}
        modules[name] = request.module
        todo = [m for n, m in sorted(modules.items()) if n not in _SAVED]
        base = request.getfixturevalue("tmp_path_factory").mktemp("gloo_ranks")
        ports: list[int] = []
        while len(ports) < len(todo):  # a port per group: a group's store is not reused by the next one
            port = free_port()
            if port not in ports:
                ports.append(port)
        jobs = [(m.GLOO_RANKS, port, str(base / m.__name__)) for m, port in zip(todo, ports)]
        mp.spawn(_run_all, args=(world, jobs), nprocs=world, join=True)
        for m, (_, _, out) in zip(todo, jobs):
            _SAVED[m.__name__] = [torch.load(f"{out}.{r}", weights_only=False) for r in range(world)]
    return _SAVED[name]


def leaves(state: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a (nested) state dict by its dotted path (tensors cloned)."""
    if isinstance(state, dict):
        return {k2: v2 for k, v in state.items() for k2, v2 in leaves(v, f"{prefix}{k}.").items()}
    if isinstance(state, (list, tuple)):
        return {k2: v2 for i, v in enumerate(state) for k2, v2 in leaves(v, f"{prefix}{i}.").items()}
    return {prefix.rstrip("."): state.clone() if isinstance(state, torch.Tensor) else state}


def assert_bit_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two ranks' leaves (:func:`leaves`) are the same keys, tensors bit for bit and other values equal."""
    assert a.keys() == b.keys()
    for k, v in a.items():
        assert torch.equal(v, b[k]) if isinstance(v, torch.Tensor) else v == b[k], k


def assert_close_floats(ddp: dict[str, Any], ref: dict[str, Any], atol: float = 1e-6) -> None:
    """Every floating tensor of ``ref`` (one process) equals the rank's within ``rtol=1e-5`` and ``atol``."""
    for k, v in ref.items():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            torch.testing.assert_close(ddp[k], v, rtol=1e-5, atol=atol, msg=lambda m, k=k: f"{k}: {m}")


def state_batch(update: int, rows: slice | torch.Tensor, n: int) -> TransitionBatch:
    """Update ``update``'s batch of ``n`` rows of a 3-float state, 2-float action task, cut to ``rows``.

    Rank r of a test holds its rows of the same batch; one process takes them all.
    """
    g = torch.Generator().manual_seed(100 + update)
    full = TransitionBatch(obs={"state": torch.randn(n, 3, generator=g) * 3 + 1},
                           action=torch.rand(n, 2, generator=g) * 2 - 1, reward=torch.randn(n, generator=g),
                           terminated=torch.rand(n, generator=g) < 0.2, truncated=torch.zeros(n, dtype=torch.bool),
                           next_obs={"state": torch.randn(n, 3, generator=g) * 3 + 1},
                           intervened=torch.zeros(n, dtype=torch.bool), policy_version=torch.zeros(n, dtype=torch.long),
                           env_index=torch.arange(n))
    return full.index(torch.arange(n)[rows])
