"""How much of the CPU's matmul throughput one SAC update reaches, and what takes the rest (issue 25, part 2).

SAC at the ``sac_vs_sb3.py`` settings (``Pendulum-v1`` shapes: 3 observations, 1 action; (256, 256) networks,
2 critics, batch 256). In one process:

1. **FLOPs per update**: ``torch.utils.flop_counter.FlopCounterMode`` over one ``update`` (forward and backward
   of the critics, the actor and the temperature; optimiser steps and the Polyak update are not matmuls).
2. **The GEMM bound**: every ``mm`` / ``addmm`` / ``bmm`` the update dispatches, recorded with its shapes and
   dtype, then replayed alone back to back on random tensors. That is the time the update's own matmuls need
   when nothing else runs, so ``FLOPs / that time`` is the best these shapes can do on this CPU.
3. **Peak**: one large square fp32 GEMM (the machine's matmul ceiling).
4. **Per variant** (fp32, bf16 autocast, ``torch.compile``; each at 1 and 2 threads): the median wall time per
   update over ``--updates`` timed updates after a warm-up, in ``--rounds`` rounds that interleave the variants
   (the median round is reported, and each variant's speed against fp32 in the same rounds).
   ``compile_autotune`` (inductor's autotuned CPU GEMM templates), ``optim_compiled`` (the Adam steps compiled)
   and ``flush_denormal`` are what the field tries next to remove the non-matmul remainder.

Printed per variant: achieved GFLOP/s, **the fraction of the GEMM bound** and of the peak. ``--profile`` adds a
``torch.profiler`` table of where one variant's update time goes (matmuls, element-wise kernels, optimiser,
Python), which says what stands between the update and the bound.

    .venv/bin/python benchmarks/sac_compute_fraction.py
    .venv/bin/python benchmarks/sac_compute_fraction.py --variants fp32 --threads 1 --profile

Results: ``benchmarks/results/sac_compute_fraction.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.sac import SACConfig

OUT = Path(__file__).parent / "results" / "sac_compute_fraction.json"
MATMULS = ("mm", "addmm", "bmm", "baddbmm")
#: Config options per variant. ``compile_autotune`` adds inductor's CPU GEMM templates (autotuned per shape);
#: ``optim_compiled`` is fp32 with its Adam steps compiled (``build``); ``flush_denormal`` is fp32 timed with
#: denormals flushed to zero (``measure``, ``profile``).
VARIANTS: dict[str, dict[str, Any]] = {
    "fp32": {}, "bf16": {"amp_bf16": True}, "compile": {"compile": True},
    "compile_autotune": {"compile": True, "compile_mode": "max-autotune-no-cudagraphs"},
    "optim_compiled": {}, "flush_denormal": {}}


@dataclass
class MatmulRecorder(TorchDispatchMode):
    """Records every matmul an operation dispatches: ``(op name, argument shapes, dtype)``."""

    calls: list[tuple[str, list[Any], torch.dtype]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._overloadpacket.__name__
        if name in MATMULS:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            self.calls.append((name, [tuple(t.shape) for t in tensors], tensors[-1].dtype))
        return func(*args, **(kwargs or {}))


def pendulum_spec() -> EnvSpec:
    """``Pendulum-v1``'s shapes: 3 observations, 1 action in [-1, 1] (our adapter's normalised bounds)."""
    return EnvSpec(observation={"state": ArraySpec((3,), "float32")}, action=ArraySpec((1,), "float32", -1.0, 1.0))


def random_batch(spec: EnvSpec, n: int, gen: torch.Generator) -> TransitionBatch:
    """``n`` transitions of random numbers in the spec's shapes (the update's cost does not depend on values)."""
    dim = spec.observation["state"].shape[0]
    return TransitionBatch(
        obs={"state": torch.randn(n, dim, generator=gen)}, action=torch.rand(n, 1, generator=gen) * 2 - 1,
        reward=torch.randn(n, generator=gen), terminated=torch.zeros(n, dtype=torch.bool),
        truncated=torch.zeros(n, dtype=torch.bool), next_obs={"state": torch.randn(n, dim, generator=gen)},
        intervened=torch.zeros(n, dtype=torch.bool), policy_version=torch.zeros(n, dtype=torch.int64),
        env_index=torch.zeros(n, dtype=torch.int64))


def build(variant: str, batch_size: int) -> Any:
    """SAC as ``sac_vs_sb3.py`` configures it, plus the variant's option."""
    cfg = SACConfig(actor_hidden=(256, 256), critic_hidden=(256, 256), batch_size=batch_size, learning_starts=0,
                    **VARIANTS[variant])
    algo = cfg.build(pendulum_spec(), "cpu", seed=0)
    if variant == "optim_compiled":  # both Adam steps as one compiled C++ kernel each (inductor's fused optimiser)
        algo.critic_optim.step = torch.compile(algo.critic_optim.step)
        algo.actor_optim.step = torch.compile(algo.actor_optim.step)
    return algo


def time_updates(algo: Any, batches: list[TransitionBatch], warmup: int, updates: int) -> float:
    """Median seconds per update over ``updates`` timed updates after ``warmup`` (compilation included there)."""
    for i in range(warmup):
        algo.update(batches[i % len(batches)])
    times = []
    for i in range(updates):
        t0 = time.perf_counter()
        algo.update(batches[i % len(batches)])
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gemm_bound(calls: list[tuple[str, list[Any], torch.dtype]], repeats: int) -> float:
    """Median seconds to run the recorded matmuls once, alone, back to back on random tensors."""
    ops = {"mm": torch.mm, "addmm": torch.addmm, "bmm": torch.bmm, "baddbmm": torch.baddbmm}
    work = [(ops[name], [torch.randn(s, dtype=dtype) for s in shapes]) for name, shapes, dtype in calls]
    for fn, args in work:  # warm the allocator and the kernels' code paths
        fn(*args)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for fn, args in work:
            fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_gflops(n: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of one large square fp32 GEMM (the machine's matmul ceiling at the current thread count)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(variants: list[str], threads: int, a: argparse.Namespace) -> list[dict[str, Any]]:
    """Every variant at one thread count: FLOPs, GEMM bound, wall per update, fractions.

    The variants' timings are interleaved over ``--rounds`` rounds (each round times every variant, then the GEMM
    bound and the peak, starting each round at the next variant), and each figure is the median over rounds: on a
    shared machine, load that comes and goes then falls on every variant alike instead of on whichever ran then.
    """
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    batches = [random_batch(pendulum_spec(), a.batch_size, gen) for _ in range(8)]
    algos, flops, calls = {}, {}, {}
    for v in variants:
        algos[v] = algo = build(v, a.batch_size)
        algo.update(batches[0])  # lazily built state (optimisers, compiled graphs) exists before counting
        counter = FlopCounterMode(display=False)
        with counter:
            algo.update(batches[1])
        flops[v] = counter.get_total_flops()
        recorder = MatmulRecorder()
        with recorder:
            algo.update(batches[2])
        calls[v] = recorder.calls
        time_updates(algo, batches, a.warmup, 1)
    walls: dict[str, list[float]] = {v: [] for v in variants}
    bounds: dict[str, list[float]] = {v: [] for v in variants}
    peaks = []
    for r in range(a.rounds):
        for v in variants[r % len(variants):] + variants[: r % len(variants)]:  # each round starts elsewhere
            # Denormal floats take a slow path on x86; flushing them to zero is a common CPU setting.
            torch.set_flush_denormal(v == "flush_denormal")
            walls[v].append(time_updates(algos[v], batches, 3, a.updates))
        torch.set_flush_denormal(False)
        for v in variants:
            bounds[v].append(gemm_bound(calls[v], a.updates))
        peaks.append(peak_gflops())
    peak = statistics.median(peaks)
    rows = []
    for v in variants:
        wall, bound = statistics.median(walls[v]), statistics.median(bounds[v])
        out = {"variant": v, "threads": threads, "flops_per_update": flops[v], "matmuls_per_update": len(calls[v]),
               "wall_ms": wall * 1e3, "wall_ms_rounds": [w * 1e3 for w in walls[v]], "gemm_bound_ms": bound * 1e3,
               "achieved_gflops": flops[v] / wall / 1e9, "bound_gflops": flops[v] / bound / 1e9, "peak_gflops": peak,
               "fraction_of_bound": bound / wall, "fraction_of_peak": flops[v] / wall / 1e9 / peak,
               "speed_vs_fp32": statistics.median(walls["fp32"]) / wall if "fp32" in walls else None}
        print(f"{v:>16} {threads} thr: {wall * 1e3:6.2f} ms/update ({out['achieved_gflops']:5.1f} GFLOP/s"
              + (f", {out['speed_vs_fp32']:.2f}x fp32" if out["speed_vs_fp32"] else "")
              + f"); its {len(calls[v])} matmuls alone {bound * 1e3:5.2f} ms: {out['fraction_of_bound']:.0%} of the "
              f"GEMM bound, {out['fraction_of_peak']:.1%} of the {peak:.0f} GFLOP/s peak", flush=True)
        rows.append(out)
    return rows


def profile(variant: str, threads: int, a: argparse.Namespace) -> str:
    """``torch.profiler``'s table of one variant's updates, by self CPU time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    batches = [random_batch(pendulum_spec(), a.batch_size, gen) for _ in range(8)]
    algo = build(variant, a.batch_size)
    time_updates(algo, batches, a.warmup, 5)
    torch.set_flush_denormal(variant == "flush_denormal")
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(50):
            algo.update(batches[i % len(batches)])
    return str(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main() -> None:
    """Measure every variant and thread count; write the JSON."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--warmup", type=int, default=50, help="updates before timing (compilation happens here)")
    p.add_argument("--updates", type=int, default=60, help="timed updates per variant and round")
    p.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (the median is reported)")
    p.add_argument("--profile", action="store_true", help="also print where the first variant's time goes")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args()
    rows = [row for t in a.threads for row in measure(a.variants, t, a)]
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}",
                              "args": vars(a) | {"out": str(a.out)}, "rows": rows}
    if a.profile:
        report["profile"] = profile(a.variants[0], a.threads[0], a)
        print(report["profile"])
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
