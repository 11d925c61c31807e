"""What keeping Cal-QL's conservative term online costs per update (issue 24): SAC vs CQL vs Cal-QL, same run.

``offline.conservative_online=true`` keeps ``algo.cql_alpha`` (and ``algo.calql``) after the offline phase, as the
Cal-QL paper fine-tunes. Each update then also evaluates the critics on ``algo.cql_samples`` policy actions and as
many uniform actions per row, with their backward pass. This times one update of the task's SAC preset on a
random batch of the task's shapes, for plain SAC, CQL, Cal-QL and Cal-QL with fewer samples, and counts each
update's matmul FLOPs (``torch.utils.flop_counter``): when the time ratio follows the FLOP ratio, the cost is the
term's own arithmetic, not overhead.

    .venv/bin/python benchmarks/calql_update_cost.py --task mujoco/pick_cube
    .venv/bin/python benchmarks/calql_update_cost.py --task reach --threads 2

Results: ``benchmarks/results/calql_update_cost_<task>.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.loop.config import resolve_train_config

OUT = Path(__file__).parent / "results"
VARIANTS: dict[str, list[str]] = {
    "sac": [],
    "cql": ["algo.cql_alpha=1.0"],
    "calql": ["algo.cql_alpha=1.0", "algo.calql=true"],
    "calql-4-samples": ["algo.cql_alpha=1.0", "algo.calql=true", "algo.cql_samples=4"],
}


def random_batch(spec: EnvSpec, n: int, g: torch.Generator) -> TransitionBatch:
    """``n`` rows of the task's shapes (state only: the arm tasks' SAC learns from ``state``)."""
    def obs() -> dict[str, torch.Tensor]:
        return {k: torch.randn(n, *v.shape, generator=g) for k, v in spec.observation.items() if k == "state"}

    act = spec.action
    return TransitionBatch(obs=obs(), action=torch.rand(n, *act.shape, generator=g) * 2 - 1,
                           reward=torch.randn(n, generator=g), terminated=torch.zeros(n, dtype=torch.bool),
                           truncated=torch.zeros(n, dtype=torch.bool), next_obs=obs(),
                           intervened=torch.zeros(n, dtype=torch.bool), policy_version=torch.zeros(n, dtype=torch.long),
                           env_index=torch.arange(n), extras={"mc_return": torch.randn(n, generator=g) * 10})


def build(task: str, overrides: list[str]) -> tuple[Any, TransitionBatch, dict[str, Any]]:
    """One variant's learner (warmed up), its batch, and its matmul GFLOP per update."""
    cfg = resolve_train_config(task, "sac", overrides=[*overrides, "algo.normalize_obs=false"])
    env = cfg.make_env("cpu", 0, num_envs=1)
    spec = EnvSpec({"state": env.spec.observation["state"]}, env.spec.action)
    env.close()
    algo = cfg.algo.build(spec, "cpu", 0)
    batch = random_batch(spec, cfg.algo.batch_size, torch.Generator().manual_seed(0))
    for _ in range(5):  # warm-up: allocator, autograd graph caches
        algo.update(batch)
    with FlopCounterMode(display=False) as flops:
        algo.update(batch)
    return algo, batch, {"gflop": flops.get_total_flops() / 1e9, "batch": cfg.algo.batch_size,
                         "cql_samples": cfg.algo.cql_samples}  # type: ignore[attr-defined]


def main() -> None:
    """Time every variant, print each against SAC's, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="mujoco/pick_cube")
    p.add_argument("--updates", type=int, default=40)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    built = {name: build(a.task, overrides) for name, overrides in VARIANTS.items()}
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(a.updates):  # round-robin: a shared machine's load drifts alike over every variant
        for name, (algo, batch, _) in built.items():
            t0 = time.perf_counter()
            algo.update(batch)
            times[name].append(time.perf_counter() - t0)
    rows = {name: {"ms": 1e3 * statistics.median(times[name]), **info} for name, (_, _, info) in built.items()}
    ref = rows["sac"]
    for name, r in rows.items():
        r["time_x_sac"], r["flops_x_sac"] = r["ms"] / ref["ms"], r["gflop"] / ref["gflop"]
        print(f"{name:>16}: {r['ms']:7.1f} ms/update ({r['time_x_sac']:.2f}x SAC), {r['gflop']:.3f} GFLOP "
              f"({r['flops_x_sac']:.2f}x SAC), {r['gflop'] / r['ms'] * 1e3:.1f} GFLOP/s")
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"calql_update_cost_{a.task.replace('/', '_')}.json"
    path.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}",
                                "threads": a.threads, "task": a.task, "rows": rows}, indent=1))
    print(f"written {path}")


if __name__ == "__main__":
    main()
