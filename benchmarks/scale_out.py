"""Scale-out on one machine (issue 26): 1 vs 2 local actors, 1 vs 2 gloo ranks, and the transport's capacity model.

Each configuration runs the real command a user types, in a fresh process tree, to the success threshold on
``reach`` (or a step budget: 16,000 for SAC, 1.5 M for PPO), and is timed from outside:

- ``actors=1`` / ``actors=2``: ``robot-rl launch --backend local --actors N --task reach`` (SAC, a learner and N
  actor processes over ZeroMQ);
- ``ranks=1`` / ``ranks=2``: ``robot-rl train --task reach --algo ppo`` alone and with ``run.distributed=ddp
  run.nproc_per_node=2`` (torchrun, gloo);
- ``sac-ranks=1`` / ``sac-ranks=2``: ``robot-rl train --task reach --algo sac`` alone (32 envs, actor thread) and
  on 2 gloo ranks in lockstep (16 envs each), a fixed budget of 10,000 env steps (no threshold stop): throughput,
  env steps/s and gradient updates/s over the training loop's own wall clock (``summary.json``), not time to a
  threshold. A data-parallel update trains on both ranks' batches (2 × ``batch_size``), and each rank owes
  ``utd_ratio`` updates per env step of its own, so the 2-rank run makes half the updates of twice the batch.

Printed per configuration: wall time to the threshold, env steps, env steps/s, and against its 1-process
sibling the speed-up and the efficiency (speed-up / processes that do the work). From the 2-actor run's transport
lines: bytes per transition on the wire, the learner's intake rate and duplicates dropped, which give the
number of actors one learner can serve (``capacity``).

    python benchmarks/scale_out.py                 # all six, seed 0
    python benchmarks/scale_out.py --only ranks --seed 1
    python benchmarks/scale_out.py --only sac-ranks

Results: benchmarks/results/scale_out.json (``scale_out_<only>.json`` with ``--only``, so a partial run keeps the
whole one's file).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "results"
EXE = str(Path(sys.executable).with_name("robot-rl"))
EVAL = ["loop.eval_episodes=50", "loop.eval_num_envs=50"]


def run(cmd: list[str], cwd: Path, timeout_s: float) -> tuple[str, float]:
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.monotonic() - t0
    text = out.stdout + out.stderr
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{text[-3000:]}")
    return text, wall


def env_steps(text: str) -> int:
    m = re.findall(r"after ([\d,]+) env steps", text)
    return int(m[-1].replace(",", "")) if m else 0


def transport_lines(text: str) -> list[dict[str, float]]:
    """The learner's `transport:` lines (after the first actor connected): rate, MB/s, duplicates."""
    rows = []
    for m in re.finditer(r"transport: ([\d,]+) tr/s\s+([\d.]+) MB/s.*?(?:duplicate=(\d+))?\s*$", text, re.M):
        rate, mb = float(m.group(1).replace(",", "")), float(m.group(2))
        rows.append({"tr_s": rate, "mb_s": mb, "duplicates": float(m.group(3) or 0)})
    return rows


def actors_config(n: int, seed: int, cwd: Path, timeout_s: float) -> dict[str, Any]:
    text, wall = run([EXE, "launch", "--backend", "local", "--actors", str(n), "--task", "reach",
                      "--name", f"actors{n}", "run.progress=false", f"run.seed={seed}", *EVAL,
                      "loop.eval_every_env_steps=4000", "loop.total_env_steps=16000"], cwd, timeout_s)
    steps = env_steps(text)
    updates = re.findall(r"env steps, ([\d,]+) updates", text)
    flows = [r for r in transport_lines(text) if r["tr_s"] > 0]
    bytes_per_tr = (sum(r["mb_s"] for r in flows) * 1e6 / max(sum(r["tr_s"] for r in flows), 1.0)) if flows else 0.0
    return {"name": f"actors={n}", "processes": n, "wall_s": wall, "env_steps": steps,
            "updates": int(updates[-1].replace(",", "")) if updates else 0,
            "reached": "stopped (threshold)" in text, "steps_per_s": steps / wall,
            "bytes_per_transition": bytes_per_tr, "peak_intake_tr_s": max((r["tr_s"] for r in flows), default=0.0),
            "duplicates_dropped": max((r["duplicates"] for r in transport_lines(text)), default=0.0)}


def ranks_config(n: int, seed: int, cwd: Path, timeout_s: float) -> dict[str, Any]:
    dist = ["run.distributed=ddp", f"run.nproc_per_node={n}"] if n > 1 else ["run.distributed=none"]
    # The same envs per update in both: 1,024 envs in one process, 512 per rank on two.
    text, wall = run([EXE, "train", "--task", "reach", "--algo", "ppo", "--name", f"ranks{n}", "run.progress=false",
                      f"run.seed={seed}", f"task.num_envs={1024 // n}", *EVAL, "loop.eval_every_env_steps=49152",
                      "loop.total_env_steps=1500000", *dist], cwd, timeout_s)
    steps = env_steps(text)
    return {"name": f"ranks={n}", "processes": n, "wall_s": wall, "env_steps": steps,
            "reached": "reached the success threshold" in text, "steps_per_s": steps / wall}


def sac_ranks_config(n: int, seed: int, cwd: Path, timeout_s: float) -> dict[str, Any]:
    dist = ["run.distributed=ddp", f"run.nproc_per_node={n}"] if n > 1 else ["run.distributed=none"]
    name = f"sac-ranks{n}"
    _, wall = run([EXE, "train", "--task", "reach", "--algo", "sac", "--name", name, "run.progress=false",
                   f"run.seed={seed}", f"task.num_envs={32 // n}", *EVAL, "loop.eval_every_env_steps=1000000000",
                   "loop.success_threshold=null", "loop.total_env_steps=10000", *dist], cwd, timeout_s)
    summary = json.loads((cwd / "runs" / name / "summary.json").read_text())
    loop_s = float(summary["wall_clock_s"])
    steps, updates = int(summary["env_steps"]), int(summary["gradient_updates"])
    return {"name": f"sac-ranks={n}", "processes": n, "wall_s": wall, "loop_s": loop_s, "env_steps": steps,
            "updates": updates, "samples_per_update": 256 * n, "reached": False, "steps_per_s": steps / loop_s,
            "updates_per_s": updates / loop_s, "final_success": summary["final_eval"]["success_rate"]}


def compare(rows: list[dict[str, Any]]) -> None:
    base = {r["name"].split("=")[0]: r for r in rows if r["processes"] == 1}
    for r in rows:
        b = base.get(r["name"].split("=")[0])
        if b is None:
            continue
        r["speedup_time"] = b["wall_s"] / r["wall_s"]
        r["speedup_steps_per_s"] = r["steps_per_s"] / b["steps_per_s"]
        r["efficiency"] = r["speedup_time"] / r["processes"]
        if "updates_per_s" in r:  # a fixed budget: throughput, not time to the threshold
            r["updates_per_s_ratio"] = r["updates_per_s"] / b["updates_per_s"]
            r["samples_per_s_ratio"] = r["updates_per_s_ratio"] * r["samples_per_update"] / b["samples_per_update"]
            print(f"{r['name']:>11}: {r['loop_s']:6.1f} s training loop ({r['wall_s']:.1f} s whole command) for "
                  f"{r['env_steps']:,} env steps: {r['steps_per_s']:,.0f} steps/s ({r['speedup_steps_per_s']:.2f}x), "
                  f"{r['updates_per_s']:.1f} updates/s of {r['samples_per_update']} samples "
                  f"({r['updates_per_s_ratio']:.2f}x updates/s, {r['samples_per_s_ratio']:.2f}x samples/s); "
                  f"final success {r['final_success']:.0%}")
            continue
        print(f"{r['name']:>9}: {r['wall_s']:6.1f} s to {'threshold' if r['reached'] else 'budget'} at "
              f"{r['env_steps']:,} env steps ({r['steps_per_s']:,.0f} steps/s); time speed-up "
              f"{r['speedup_time']:.2f}x, steps/s {r['speedup_steps_per_s']:.2f}x, efficiency {r['efficiency']:.2f}")


def capacity(rows: list[dict[str, Any]]) -> None:
    two = next((r for r in rows if r["name"] == "actors=2"), None)
    if two is None or not two["bytes_per_transition"]:
        return
    one = next((r for r in rows if r["name"] == "actors=1"), two)
    # An off-policy learner consumes updates/s ÷ UTD transitions per second (SAC's default UTD is 1); the actors it
    # serves are that over one actor's rate (the 1-actor run's, where the actor had the learner to itself).
    consume = two["updates"] / two["wall_s"]
    print(f"wire: {two['bytes_per_transition']:.0f} B/transition; learner intake peak {two['peak_intake_tr_s']:,.0f} "
          f"tr/s; duplicates dropped {two['duplicates_dropped']:.0f}; learner {consume:.0f} updates/s (whole run) "
          f"consumes ~{consume:.0f} tr/s at UTD 1: about {consume / max(one['steps_per_s'], 1e-9):.2f} actors "
          f"producing {one['steps_per_s']:,.0f} tr/s each")


_CONFIG = {"actors=1": "actors=1 (SAC, 1 learner + 1 actor process)", "actors=2": "actors=2 (SAC, 1 learner + 2 actor "
           "processes)", "ranks=1": "ranks=1 (PPO, 1,024 envs, one process)",
           "ranks=2": "ranks=2 (PPO, 2 gloo ranks × 512 envs)"}


def _speedups(r: dict[str, Any]) -> list[str]:
    return [f"{r['speedup_time']:.2f}", f"{r['speedup_steps_per_s']:.2f}", f"{r['efficiency']:.2f}"]


def ranks_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_scale.md's PPO on 1 and 2 gloo ranks, one result file per seed."""
    lines = ["| seed | configuration | wall s | env steps to threshold | env steps/s | time speed-up | "
             "steps/s speed-up | efficiency |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for rec in records:
        res = rec["results"]
        for r in res["rows"]:
            steps = f"{r['env_steps']:,}" if r["reached"] else f"not reached ({r['env_steps']:,})"
            lines.append(f"| {res['seed']} | {_CONFIG.get(r['name'], r['name'])} | {r['wall_s']:.1f} | {steps} | "
                         f"{r['steps_per_s']:,.0f} | {' | '.join(_speedups(r))} |")
    return "\n".join(lines)


def complete_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_scale.md's complete run: SAC with 1 and 2 actor processes, PPO on 1 and 2 ranks."""
    rows = sorted(records[0]["results"]["rows"], key=lambda r: r["name"])
    lines = ["| configuration | wall s | env steps | reached 90 % | env steps/s | time speed-up | steps/s speed-up | "
             "efficiency |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {_CONFIG.get(r['name'], r['name'])} | {r['wall_s']:.1f} | {r['env_steps']:,} | "
                     f"{'yes' if r['reached'] else 'no'} | {r['steps_per_s']:,.0f} | {' | '.join(_speedups(r))} |")
    return "\n".join(lines)


def sac_ranks_table(records: list[dict[str, Any]]) -> str:
    """RESULTS_scale.md's data-parallel SAC: one result file per run, 1 rank then 2 in each."""
    lines = ["| run | configuration | loop s | env steps/s | updates/s | samples/s | env steps/s ratio | "
             "updates/s ratio | samples/s ratio | final success |", "|" + " --- |" * 10]
    for i, rec in enumerate(records, 1):
        for r in rec["results"]["rows"]:
            samples = r["updates_per_s"] * r["samples_per_update"]
            lines.append(f"| {i} | {r['name'].removeprefix('sac-')} | {r['loop_s']:.1f} | {r['steps_per_s']:,.0f} | "
                         f"{r['updates_per_s']:.1f} × {r['samples_per_update']} | {samples:,.0f} | "
                         f"{r['speedup_steps_per_s']:.2f} | {r['updates_per_s_ratio']:.2f} | "
                         f"{r['samples_per_s_ratio']:.2f} | {100 * r['final_success']:.0f} % |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["actors", "ranks", "sac-ranks"], default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=1200)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        for n in (1, 2):
            if args.only in (None, "actors"):
                rows.append(actors_config(n, args.seed, cwd, args.timeout_s))
            if args.only in (None, "ranks"):
                rows.append(ranks_config(n, args.seed, cwd, args.timeout_s))
            if args.only in (None, "sac-ranks"):
                rows.append(sac_ranks_config(n, args.seed, cwd, args.timeout_s))
    compare(rows)
    capacity(rows)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / ("scale_out.json" if args.only is None else f"scale_out_{args.only.replace('-', '_')}.json")
    path.write_text(json.dumps({"seed": args.seed, "cpus": os.cpu_count(), "rows": rows}, indent=2))
    print(f"written {path}")


if __name__ == "__main__":
    main()
