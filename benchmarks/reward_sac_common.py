"""What the reward-model SAC benchmarks share: one variant's capped training run, the table, the plot.

Used by ``reward_sac_bench.py`` (sparse ``mujoco/reach``) and ``reward_pick_bench.py`` (sparse
``mujoco/pick_cube`` with camera reward models). Each variant trains through the in-process runner
(what ``robot-rl train`` runs) and stops at the first evaluation ≥ 80 %, at its env-step budget, or
at its wall cap, whichever comes first. Each benchmark writes its own result file (``reward_sac_bench.py``: through
``result_file.write_result``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from robot_rl.loop.config import TrainConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import runner_eval_curve

TARGET = 0.8


def train_capped(cfg: TrainConfig, variant: str, max_wall: float) -> dict[str, Any]:
    """Train ``cfg`` (``loop.success_threshold`` = the target); returns the eval curve and a summary."""
    from robot_rl.loop.runner import InProcessRunner

    runner = InProcessRunner(cfg)
    deadline = time.monotonic() + max_wall
    orig = runner.updates.iteration

    def capped() -> None:  # the wall cap: stop collecting once max_wall has passed (the curve so far is kept)
        if time.monotonic() > deadline:
            raise KeyboardInterrupt
        orig()

    runner.updates.iteration = capped  # type: ignore[method-assign]
    t0 = time.monotonic()
    result = runner.train()
    wall = time.monotonic() - t0
    curve = runner_eval_curve(result.run_dir)
    rows = [(int(k), rate) for k, rate in zip(curve["env_steps"], curve["success"], strict=True)]
    reached = next((s for s, rate in rows if rate >= TARGET), None)
    return {"variant": variant, "curve": rows, "reached_at": reached, "env_steps": result.env_steps,
            "updates": result.updates, "wall_s": wall, "stop": result.stop_reason}


def print_table(results: list[dict[str, Any]]) -> None:
    """Env steps to the target per variant, and the ratio to the sparse reward's (a bound when it is capped)."""
    sparse = next((r for r in results if r["variant"] == "sparse"), None)
    ref = sparse["reached_at"] if sparse else None
    print(f"{'variant':<12} {'80% at env steps':>17} {'vs sparse':>10} {'best':>6} {'env steps':>10} "
          f"{'updates':>8} {'wall s':>7} stop")
    for r in results:
        best = max((rate for _, rate in r["curve"]), default=0.0)
        at = r["reached_at"]
        if at is not None and ref is not None:
            ratio = f"{at / ref:.2f}"
        elif at is not None and sparse is not None:
            ratio = f"<{at / sparse['env_steps']:.2f}"  # sparse capped: its cap bounds the ratio from above
        else:
            ratio = "n/a"
        print(f"{r['variant']:<12} {str(at) if at is not None else 'not reached':>17} {ratio:>10} {best:6.0%} "
              f"{r['env_steps']:10d} {r['updates']:8d} {r['wall_s']:7.0f} {r['stop']}")
        print(f"  curve: {r['curve']}")


def plot_curves(results: list[dict[str, Any]], path: Path, title: str) -> None:
    """Evaluation success against env steps, one line per variant, the target dashed."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        if r["curve"]:
            steps, rate = zip(*r["curve"], strict=True)
            ax.plot(steps, rate, marker="o", ms=3, label=r["variant"])
    ax.axhline(TARGET, color="grey", ls="--", lw=1)
    ax.set_xlabel("env steps")
    ax.set_ylabel("eval success (50 episodes)")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"curves: {path}")
