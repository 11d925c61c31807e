"""IK on the LeRobot follower arms: error, iterations and time from a random start to a random reachable pose.

    python benchmarks/ik_bench.py     # a few seconds per arm; writes benchmarks/results/ik_bench/<UTC time>.json

Per arm (``ArmKinematics``, mink), the round trip of tests/test_kinematics.py: a pose is the forward kinematics of
random joints within the limits whose tool frame lies in the workspace box; IK starts from other random joints within
the limits and is asked for the pose's position. First the test's 50 poses (pose seed 0, start seed 1), then
``--more`` others (seeds 2 and 3). Records each solve's error (|FK(q) − target|), iterations, wall time and process
CPU time (the table gives the CPU time: on a shared machine the wall time measures the other jobs), and the versions
of mink, daqp and MuJoCo. docs/kinematics.md's table is built from the file (``docs_table``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

NAME = "ik_bench"
ARMS = {"so100": "SO-100", "so101": "SO-101", "koch": "Koch"}


def round_trips(arm: str, n: int, pose_seed: int, start_seed: int) -> list[dict[str, float]]:
    """``n`` IK solves of ``arm``: each one's error (m), iterations, wall and CPU time (s)."""
    import numpy as np

    from robot_rl.hardware.kinematics import ArmKinematics

    kin = ArmKinematics(arm)
    low, high = kin.joint_limits()
    box_low, box_high = kin.workspace
    rng = np.random.default_rng(pose_seed)
    targets = []
    while len(targets) < n:  # the forward kinematics of random joints, kept when the tool is in the box
        pos, _ = kin.fk(rng.uniform(low, high))
        if np.all(pos >= box_low) and np.all(pos <= box_high):
            targets.append(pos)
    starts = np.random.default_rng(start_seed).uniform(low, high, size=(n, len(low)))
    solves = []
    for target, start in zip(targets, starts):
        t0, c0 = time.perf_counter(), time.process_time()
        result = kin.solve(start, target)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        reached, _ = kin.fk(result.q)
        solves.append({"error_m": float(np.linalg.norm(reached - target)), "iterations": int(result.iterations),
                       "wall_s": wall, "cpu_s": cpu})
    return solves


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def docs_table(records: list[dict[str, Any]]) -> str:
    """docs/kinematics.md's table: per arm, the error over the test's 50 poses and over the others, the iterations
    and the CPU time per solve and per iteration over all of them."""
    rows = []
    for arm, r in records[0]["results"]["arms"].items():
        first, more = r["test_poses"], r["more_poses"]
        every = first + more
        mm = [1000 * s["error_m"] for s in first]
        over = sum(1000 * s["error_m"] > 1.0 for s in more)
        iters = [s["iterations"] for s in every]
        cpu = sum(s["cpu_s"] for s in every)
        rows.append([ARMS.get(arm, arm), f"{max(mm):.3f} mm", f"{statistics.median(mm):.3f} mm",
                     f"{1000 * max(s['error_m'] for s in more):.3f} mm ({over or 'none'} over 1 mm)",
                     f"{statistics.median(iters):g} / {max(iters)}", f"{1000 * cpu / len(every):.1f} ms",
                     f"{1000 * cpu / sum(iters):.2f} ms"])
    n_first = len(next(iter(records[0]["results"]["arms"].values()))["test_poses"])
    n_more = len(next(iter(records[0]["results"]["arms"].values()))["more_poses"])
    return markdown_table(["arm", f"worst error, {n_first} poses", "median error",
                           f"worst error, {n_more:,} more poses", "iterations (median / max)",
                           "CPU time per solve", "per iteration"], rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--poses", type=int, default=50, help="the test's poses (pose seed 0, start seed 1)")
    p.add_argument("--more", type=int, default=500, help="other poses (pose seed 2, start seed 3)")
    add_out_argument(p, NAME)
    args = p.parse_args()
    started = dt.datetime.now(dt.UTC)
    arms = {}
    for arm in args.arms:
        arms[arm] = {"test_poses": round_trips(arm, args.poses, 0, 1), "more_poses": round_trips(arm, args.more, 2, 3)}
        every = arms[arm]["test_poses"] + arms[arm]["more_poses"]
        print(f"{arm}: worst {1000 * max(s['error_m'] for s in every):.3f} mm, "
              f"{1000 * statistics.mean(s['cpu_s'] for s in every):.1f} ms of CPU per solve", flush=True)
    versions = {p: _version(p) for p in ("mink", "daqp", "mujoco")}
    path = write_result(args.out or default_path(NAME, started), NAME, args, {"versions": versions, "arms": arms},
                        started)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
