"""SAC on the MuJoCo arm tasks (state observations): wall-clock and env steps to 90 % success.

    .venv/bin/python benchmarks/mujoco_train.py --tasks mujoco/reach mujoco/pick_cube --budget 200000

Each task runs ``robot-rl train --task T`` with the task's SAC preset (through
``resolve_train_config`` + ``train``, exactly what the CLI does), stopping at >= 90 % success over
the evaluation episodes or at ``--budget`` env steps. The peer in the same run is the built-in
planar ``reach`` task with its defaults, the toolkit's reference for "trains fast"; the ratio printed
is each task's wall-clock over that reference's. Writes one result file (``--out``; default
``benchmarks/results/mujoco_train/<UTC time>.json``) with each task's end point and evaluation curve;
:func:`table` renders it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, pct, runner_eval_curve, write_result

NAME = "mujoco_train"


def run(task: str, seed: int, budget: int, root: str) -> dict[str, Any]:
    """Train one task: reached, wall s, env steps, updates, last eval success, worlds and the eval curve."""
    from robot_rl.loop.config import resolve_train_config
    from robot_rl.loop.runner import train

    cfg = resolve_train_config(task=task, overrides=[
        f"run.seed={seed}", f"run.root={root}", f"run.name={task.replace('/', '_')}-s{seed}", "run.progress=false",
        f"loop.total_env_steps={budget}"])
    t0 = time.monotonic()
    result = train(cfg)
    wall = time.monotonic() - t0
    ev = result.last_eval
    return {"task": task, "num_envs": cfg.task.num_envs, "reached": result.reached_threshold, "wall_s": wall,
            "env_steps": result.env_steps, "updates": result.updates,
            "eval_success": ev.success_rate if ev else None, "stop": result.stop_reason,
            "curve": runner_eval_curve(result.run_dir)}


def table(runs: list[dict[str, Any]]) -> str:
    """Per task: reached 90 %, env steps, updates, wall-clock, last eval success, wall / the reference's."""
    rows = []
    for run_ in runs:
        res = run_["results"]
        for r in res["tasks"]:
            label = f"`{r['task']}` ({r['num_envs']} worlds{', reference' if r['task'] == res['reference'] else ''})"
            ratio = r.get("wall_over_reference")
            rows.append([label, "yes" if r["reached"] else "no", f"{r['env_steps']:,}", f"{r['updates']:,}",
                         f"{r['wall_s']:.0f} s", pct(r["eval_success"]), "–" if ratio is None else f"{ratio:.2f}"])
    return markdown_table(["task", "reached 90 %", "env steps", "updates", "wall-clock", "eval success",
                           "wall / ref"], rows, "llrrrrr")


def main() -> None:
    """Run the tasks and the reference, write the result file, print the table with ratios."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["mujoco/reach", "mujoco/pick_cube"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=200_000, help="env steps per task at most")
    ap.add_argument("--reference", default="reach", help="peer task run in the same process ('' to skip)")
    add_out_argument(ap, NAME)
    args = ap.parse_args()
    started = dt.datetime.now(dt.UTC)
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for task in ([args.reference] if args.reference else []) + args.tasks:
            rows.append(run(task, args.seed, args.budget, root))
    ref = rows[0]["wall_s"] if args.reference else None
    for r in rows:
        r["wall_over_reference"] = r["wall_s"] / ref if ref else None
    results = {"reference": args.reference or None, "seed": args.seed, "budget": args.budget, "tasks": rows}
    path = write_result(args.out or default_path(NAME, started), NAME, args, results, started)
    print(table([{"results": results}]))
    print(f"result file: {path}")


if __name__ == "__main__":
    main()
