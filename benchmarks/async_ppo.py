"""Asynchronous on-policy PPO (issue 52, item 4): 2 actor processes, synchronous against asynchronous, and k.

Each configuration is the command a user types, `robot-rl launch --backend local --actors 2 --task reach --algo
ppo` (a learner and 2 actor processes over ZeroMQ), timed from outside (start-up, evaluations and shutdown
included):

- ``sync``: the default, ``loop.on_policy_sync=true``: every actor waits for the new weights after each rollout
  and the learner for every actor's rows;
- ``async k=K``: ``loop.on_policy_sync=false loop.max_staleness=K transport.outbox_size=--outbox``: nobody waits;
  the learner takes whichever actors' complete blocks come first, drops those more than K versions old (counted)
  and corrects the rest (decoupled PPO, robot_rl/policies/decoupled_ppo.py). The actor's outbox is one block
  (``--outbox`` = rollout_length chunks), so rows do not age in the queue (docs/distributed.md).

Part 1 runs ``sync``, ``async k=--k`` and the same with the transport's default outbox (256 chunks) to the success
threshold (or ``--budget``): wall time and env steps to the threshold. Part 2 runs ``async k`` for each of ``--ks``
on the same fixed budget (``--sweep-budget``, no threshold stop) beside ``sync`` on that budget: the final success
rate against k. Env steps count every transition the actors collected, the dropped ones too.

    python benchmarks/async_ppo.py                      # both parts, seed 0 (~20 min on a 2-core machine)
    python benchmarks/async_ppo.py --only threshold     # part 1
    python benchmarks/async_ppo.py --only sweep --ks 0 2

Results: ``benchmarks/results/async_ppo/<UTC date-time>.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from result_file import add_out_argument, default_path, markdown_table, pct, runner_eval_curve, write_result

NAME = "async_ppo"
EXE = str(Path(sys.executable).with_name("robot-rl"))


def launch(name: str, cwd: Path, args: argparse.Namespace, overrides: list[str], budget: int,
           threshold: float | None) -> dict[str, Any]:
    """One `robot-rl launch` run, shown as ``name``; its summary, evaluation curve and wall time."""
    run_name = f"{name.replace(' ', '-').replace('=', '')}-{budget}"
    cmd = [EXE, "launch", "--backend", "local", "--actors", "2", "--task", "reach", "--algo", "ppo", "--name", run_name,
           "run.progress=false", f"run.seed={args.seed}", f"task.num_envs={args.num_envs}",
           f"algo.rollout_length={args.rollout_length}", "loop.eval_episodes=50", "loop.eval_num_envs=50",
           f"loop.eval_every_env_steps={args.eval_every}", f"loop.total_env_steps={budget}",
           f"loop.success_threshold={'null' if threshold is None else threshold}", *overrides]
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=args.timeout_s,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.monotonic() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{(out.stdout + out.stderr)[-3000:]}")
    run_dir = cwd / "runs" / run_name
    summary = json.loads((run_dir / "summary.json").read_text())
    row = {"name": name, "overrides": overrides, "budget": budget, "threshold": threshold, "wall_s": wall,
           "loop_s": float(summary["wall_clock_s"]), "env_steps": int(summary["env_steps"]),
           "reached": bool(summary["reached_success_threshold"]), "updates": int(summary["gradient_updates"]),
           "final_success": float(summary["final_eval"]["success_rate"]),
           "stale_rows_dropped": int(summary.get("stale_rows_dropped", 0)), "curve": runner_eval_curve(run_dir),
           "load_average": list(os.getloadavg())}
    print(f"{name:>10}: {wall:6.1f} s, {row['env_steps']:,} env steps, {row['updates']} updates, "
          f"{'reached' if row['reached'] else 'budget'}, final success {row['final_success']:.0%}, "
          f"{row['stale_rows_dropped']:,} stale rows dropped; load {os.getloadavg()[0]:.1f}", flush=True)
    return row


def asynchronous(k: int, outbox: int | None) -> list[str]:
    """The overrides of an asynchronous run with bound ``k`` (and a small actor outbox, see the docs)."""
    out = ["loop.on_policy_sync=false", f"loop.max_staleness={k}"]
    return out + ([f"transport.outbox_size={outbox}"] if outbox else [])


def threshold_table(runs: list[dict[str, Any]]) -> str:
    """| configuration | wall s | env steps | reached | updates | stale rows dropped | time vs sync |."""
    rows = []
    for run in runs:
        part = run["results"].get("threshold", [])
        base = next((r for r in part if r["name"] == "sync"), None)
        for r in part:
            ratio = f"{base['wall_s'] / r['wall_s']:.2f}" if base else "–"
            rows.append([r["name"], f"{r['wall_s']:.1f}", f"{r['env_steps']:,}",
                         f"yes ({pct(r['final_success'])})" if r["reached"] else f"no ({pct(r['final_success'])})",
                         str(r["updates"]), f"{r['stale_rows_dropped']:,}", ratio])
    return markdown_table(["configuration", "wall s", "env steps", "reached 90 %", "updates", "stale rows dropped",
                           "speed-up vs sync"], rows)


def sweep_table(runs: list[dict[str, Any]]) -> str:
    """| configuration | final success | wall s | updates | stale rows dropped (share) |, on the fixed budget."""
    rows = []
    for run in runs:
        for r in run["results"].get("sweep", []):
            share = r["stale_rows_dropped"] / max(r["env_steps"], 1)
            rows.append([r["name"], pct(r["final_success"]), f"{r['wall_s']:.1f}", str(r["updates"]),
                         f"{r['stale_rows_dropped']:,} ({pct(share)})"])
    return markdown_table(["configuration", "final success", "wall s", "updates", "stale rows dropped"], rows)


def main() -> None:
    """Run the parts, write the result file, print the tables."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["threshold", "sweep"], default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-envs", type=int, default=128, help="sub-envs per actor process")
    ap.add_argument("--rollout-length", type=int, default=24)
    ap.add_argument("--eval-every", type=int, default=24_576)
    ap.add_argument("--budget", type=int, default=600_000, help="env-step budget of part 1 (threshold stop)")
    ap.add_argument("--k", type=int, default=2, help="max_staleness of part 1's asynchronous run")
    ap.add_argument("--ks", type=int, nargs="*", default=[0, 1, 2, 4, 8])
    ap.add_argument("--sweep-budget", type=int, default=196_608, help="env-step budget of every part 2 run")
    ap.add_argument("--outbox", type=int, default=24,
                    help="transport.outbox_size of the asynchronous runs (chunks; 0: the transport's default)")
    ap.add_argument("--timeout-s", type=float, default=1800)
    add_out_argument(ap, NAME)
    args = ap.parse_args()
    started = dt.datetime.now(dt.UTC)
    results: dict[str, Any] = {"load_average_start": list(os.getloadavg())}
    out = args.out or default_path(NAME, started)
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        if args.only in (None, "threshold"):
            results["threshold"] = [launch("sync", cwd, args, [], args.budget, 0.9),
                                    launch(f"async k={args.k}", cwd, args, asynchronous(args.k, args.outbox),
                                           args.budget, 0.9),
                                    launch(f"async k={args.k} outbox 256", cwd, args, asynchronous(args.k, None),
                                           args.budget, 0.9)]
            print(threshold_table([{"results": results}]), flush=True)
            write_result(out, NAME, args, results, started)
        if args.only in (None, "sweep"):
            results["sweep"] = [launch("sync", cwd, args, [], args.sweep_budget, None)]
            for k in args.ks:
                results["sweep"].append(launch(f"async k={k}", cwd, args, asynchronous(k, args.outbox),
                                               args.sweep_budget, None))
                write_result(out, NAME, args, results, started)
            print(sweep_table([{"results": results}]), flush=True)
    results["load_average_end"] = list(os.getloadavg())
    print(f"result file: {write_result(out, NAME, args, results, started)}")


if __name__ == "__main__":
    main()
