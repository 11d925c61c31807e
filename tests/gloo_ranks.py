"""CPU ranks over gloo in spawned processes, for the data-parallel equivalence tests (PPO, SAC, IQL, flow, Hi-ORS).

A test's rank function ``fn(rank, world, port, out)`` (module level, so that ``spawn`` can pickle it) calls
:func:`join` first, saves what it measured to ``f"{out}.{rank}"`` and calls :func:`leave`. A test module names it
``GLOO_RANKS = fn`` and its tests take the ``two_ranks`` fixture (tests/conftest.py, :func:`shared_ranks`): one
pair of spawned processes (:class:`RankPair`) runs the rank function of each such module when its first test asks,
one after the other (starting the processes, which import torch and the package, is most of each test's time).
"""

from __future__ import annotations

import os
import queue
import socket
import time
import traceback
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


class RankPair:
    """``world`` spawned processes that run rank functions on request, one job after another, until closed.

    Spawned at the first :meth:`run` (each imports torch and the package: most of a data-parallel test's time), so
    a session, or each pytest-xdist worker, pays for one spawn however many modules it runs. A job that fails on a
    rank, or a rank that dies, stops the pair and fails the test with what the rank said; the next job spawns a new
    pair.
    """

    def __init__(self, world: int = 2, timeout_s: float = 240.0) -> None:
        self.world, self.timeout_s = world, timeout_s
        self._procs: list[Any] = []
        self._inboxes: list[Any] = []
        self._done: Any = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        self._inboxes = [ctx.SimpleQueue() for _ in range(self.world)]
        self._done = ctx.Queue()
        self._procs = [ctx.Process(target=_serve, args=(r, self.world, self._inboxes[r], self._done), daemon=True,
                                   name=f"gloo-rank-{r}") for r in range(self.world)]
        for proc in self._procs:
            proc.start()

    def run(self, fn: Callable[[int, int, int, str], None], out: str) -> list[Any]:
        """Run ``fn(rank, world, port, out)`` on every rank (a fresh port); what each saved to ``f"{out}.{rank}"``."""
        if not self._procs:
            self._start()
        port = free_port()
        for inbox in self._inboxes:
            inbox.put((fn, port, out))
        finished: set[int] = set()
        deadline = time.monotonic() + self.timeout_s
        while len(finished) < self.world:
            try:
                rank, error = self._done.get(timeout=1.0)
            except queue.Empty:
                dead = [p.name for p in self._procs if not p.is_alive()]
                if dead or time.monotonic() > deadline:
                    self.close()
                    pytest.fail(f"gloo ranks: {', '.join(dead)} died" if dead else
                                f"gloo ranks: {fn.__module__}.{fn.__name__} not done after {self.timeout_s:.0f} s")
                continue
            if error is not None:
                self.close()
                pytest.fail(f"gloo rank {rank} failed in {fn.__module__}.{fn.__name__}:\n{error}")
            finished.add(rank)
        return [torch.load(f"{out}.{r}", weights_only=False) for r in range(self.world)]

    def close(self) -> None:
        """Stop the ranks (a rank stuck in a collective is killed)."""
        for inbox in self._inboxes:
            inbox.put(None)
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self._procs, self._inboxes, self._done = [], [], None


def _serve(rank: int, world: int, inbox: Any, done: Any) -> None:
    """A rank's loop: run each job from ``inbox`` and say so on ``done`` (with the traceback if it raised)."""
    while (job := inbox.get()) is not None:
        fn, port, out = job
        try:
            fn(rank, world, port, out)
        except BaseException:  # the test that asked reports it
            done.put((rank, traceback.format_exc()))
            break
        done.put((rank, None))
    # Out without the interpreter's finalisation, which takes seconds with torch loaded (the pair's close waited
    # 9 s for two ranks here); the answers are flushed first.
    done.close()
    done.join_thread()
    os._exit(0)


#: What each module's rank function saved, by module name, once the pair ran it.
_SAVED: dict[str, list[Any]] = {}


def shared_ranks(request: pytest.FixtureRequest) -> list[Any]:
    """What the requesting module's ``GLOO_RANKS`` function saved on each rank, in rank order.

    The session's rank pair (the ``gloo_rank_pair`` fixture, tests/conftest.py) runs it at the module's first
    request; later requests read what it saved.
    """
    name = request.module.__name__
    if name not in _SAVED:
        pair: RankPair = request.getfixturevalue("gloo_rank_pair")
        base = request.getfixturevalue("tmp_path_factory").mktemp("gloo_ranks")
        _SAVED[name] = pair.run(request.module.GLOO_RANKS, str(base / name))
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
