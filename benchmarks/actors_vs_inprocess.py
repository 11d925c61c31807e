"""Learning efficiency with actor processes (issue 52, item 3): env steps to the threshold, launch vs one process.

    .venv/bin/python benchmarks/actors_vs_inprocess.py                   # seeds 0 and 1: minutes each
    .venv/bin/python benchmarks/actors_vs_inprocess.py --seeds 0 --envs 16

Per seed, the same SAC run on ``reach`` with the same total envs, run the way a user types it, one after the other
(so under the same machine load, recorded at each start and end):

- ``in-process``: ``robot-rl train --task reach task.num_envs=2·E`` (one actor thread, the in-process transport);
- ``launch --actors 2``: ``robot-rl launch --backend local --actors 2 --task reach task.num_envs=E`` (a learner
  process and two actor processes over ZeroMQ, E envs each).

Both evaluate every ``--eval-every`` env steps (50 episodes) and stop at 90 % success or ``--budget`` env steps.
Reported per run, from its ``summary.json``, ``eval.csv`` and log: env steps to the threshold, gradient updates and
updates per env step (what the learner's UTD schedule delivered), the replay ratio (sampled rows per stored row:
updates · batch / env steps), and for ``launch`` the learner's largest weight lag (versions between the newest
published weights and those an actor acted with) and its largest inbox (chunks waiting: how far the actors ran
ahead of the learner). ``ratio`` is launch's env steps over in-process's for the same seed (target ≤ 1.5).

Writes one result file (``--out``; default ``benchmarks/results/actors_vs_inprocess/<UTC time>.json``);
:func:`efficiency_table` renders it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, runner_eval_curve, write_result
from scale_out import run as run_cli

NAME = "actors_vs_inprocess"
EXE = str(Path(sys.executable).with_name("robot-rl"))
BATCH = 256  # SAC's default batch size (the replay ratio's numerator)


def _common(seed: int, eval_every: int, budget: int) -> list[str]:
    return ["run.progress=false", f"run.seed={seed}", "loop.eval_episodes=50", "loop.eval_num_envs=50",
            f"loop.eval_every_env_steps={eval_every}", f"loop.total_env_steps={budget}", "loop.log_every_s=1"]


def _run(cmd: list[str], cwd: Path, timeout_s: float) -> tuple[str, float, list[float]]:
    """scale_out's run, with the load average before and after it."""
    load0 = os.getloadavg()[0]
    text, wall = run_cli(cmd, cwd, timeout_s)
    return text, wall, [round(load0, 2), round(os.getloadavg()[0], 2)]


def _record(config: str, seed: int, run_dir: Path, text: str, wall: float, load: list[float]) -> dict[str, Any]:
    summary = json.loads((run_dir / "summary.json").read_text())
    steps, updates = int(summary["env_steps"]), int(summary["gradient_updates"])
    lags = [int(x) for m in re.finditer(r"lag ((?:\d+:\d+,?)+)", text) for x in re.findall(r":(\d+)", m.group(1))]
    inbox = [int(m.group(1)) for m in re.finditer(r"\binbox (\d+)", text)]
    return {"config": config, "seed": seed, "reached": bool(summary["reached_success_threshold"]),
            "env_steps": steps, "updates": updates, "updates_per_env_step": updates / max(steps, 1),
            "replay_ratio": updates * BATCH / max(steps, 1), "wall_s": round(wall, 1), "load_1min": load,
            "weight_lag_max": max(lags, default=0), "inbox_max": max(inbox, default=0),
            "eval_curve": runner_eval_curve(run_dir)}


def run_pair(seed: int, envs: int, eval_every: int, budget: int, cwd: Path, timeout_s: float,
             launch_args: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The in-process run and the 2-actor launch of one seed (with ``launch_args`` overrides), in turn."""
    common = _common(seed, eval_every, budget)
    name = f"inproc-s{seed}"
    text, wall, load = _run([EXE, "train", "--task", "reach", "--name", name, f"task.num_envs={2 * envs}", *common],
                            cwd, timeout_s)
    rows = [_record("in-process", seed, cwd / "runs" / name, text, wall, load)]
    name = f"launch-s{seed}"
    text, wall, load = _run([EXE, "launch", "--backend", "local", "--actors", "2", "--task", "reach", "--name", name,
                             f"task.num_envs={envs}", *common, *launch_args], cwd, timeout_s)
    rows.append(_record("launch --actors 2", seed, cwd / "runs" / name, text, wall, load))
    rows[1]["ratio"] = rows[1]["env_steps"] / max(rows[0]["env_steps"], 1)
    rows[1]["launch_args"] = list(launch_args)
    print(efficiency_table([{"args": {"envs": envs}, "results": {"rows": rows}}]), flush=True)
    return rows


def efficiency_table(runs: list[dict[str, Any]]) -> str:
    """| seed | configuration | reached | env steps | ratio | updates / env step | replay ratio | lag | inbox | …|."""
    rows = []
    for run in runs:
        envs = run["args"]["envs"]
        for r in run["results"]["rows"]:
            config = (f"in-process, {2 * envs} envs" if r["config"] == "in-process"
                      else " ".join([f"launch --actors 2, {envs} envs each", *r.get("launch_args", [])]))
            rows.append([str(r["seed"]), config, "yes" if r["reached"] else "no", f"{r['env_steps']:,}",
                         f"{r['ratio']:.2f}" if "ratio" in r else "1.00", f"{r['updates_per_env_step']:.2f}",
                         f"{r['replay_ratio']:.0f}", str(r["weight_lag_max"]) if "ratio" in r else "",
                         str(r["inbox_max"]) if "ratio" in r else "", f"{r['wall_s']:.0f}",
                         "–".join(f"{x:.1f}" for x in r["load_1min"])])
    return markdown_table(["seed", "configuration", "reached 90 %", "env steps", "ratio", "updates / env step",
                           "replay ratio", "weight lag (max)", "inbox (max)", "wall s", "load"], rows)


def main() -> None:
    """Run each seed's pair, write the result file, print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1])
    ap.add_argument("--envs", type=int, default=16, help="envs per actor process (in-process: twice as many)")
    ap.add_argument("--eval-every", type=int, default=1000, help="env steps between evaluations")
    ap.add_argument("--budget", type=int, default=40_000, help="env steps at most per run")
    ap.add_argument("--timeout-s", type=float, default=1800.0, help="per run")
    ap.add_argument("--launch-args", nargs="*", default=[], help="overrides for the launch only (transport.…)")
    add_out_argument(ap, NAME)
    args = ap.parse_args()
    started = dt.datetime.now(dt.UTC)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            rows += run_pair(seed, args.envs, args.eval_every, args.budget, Path(tmp), args.timeout_s,
                             tuple(args.launch_args))
    print(f"result file: {write_result(args.out or default_path(NAME, started), NAME, args, {'rows': rows}, started)}")


if __name__ == "__main__":
    main()
