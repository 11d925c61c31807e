"""The control loop on ``sim_so101`` at 30 Hz (LeRobot's default fps) with the front and wrist cameras, real time.

Each tick is what ``robot-rl record`` with the scripted demonstrator does: observe (motors + two renders in the
simulator's process), the task status, the scripted pick (``ee_delta``), and the safety layer's step (checks, the
driver's mink IK step, the joint goals sent). A success starts the next episode (``reset_task``) inside the loop.
``--load N`` keeps N other processes busy (a pure-Python spin each) for the whole run; ``--realtime-priority P``
then runs the loop twice under that same load, on the normal scheduler and with ``safety.realtime_priority=P``
(SCHED_FIFO for the loop and the simulator's process), and prints the ratios. Reported: period p50/p99/max from
:class:`~robot_rl.hardware.rate.RateLoop`, p99 / period (target <= 1.10), lost steps (ticks more than 10 % of a
period late: the loop's overruns, each one a missed control slot), the simulator's own catch-ups (``lag_skips``:
physics that fell 0.25 s behind the clock) and the tick body's cost.

    MUJOCO_GL=osmesa python benchmarks/sim_so101_loop.py --seconds 60
    MUJOCO_GL=osmesa python benchmarks/sim_so101_loop.py --load 3 --realtime-priority 50   # busy cores, both ways
    MUJOCO_GL=osmesa python benchmarks/sim_so101_loop.py --picks 20 --time-scale 2   # the scripted pick's rate
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.hardware.rate import RateLoop
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.sim_pick import pick_expert
from robot_rl.hardware.sim_so101 import SimSo101Config, SimSo101Robot


def run(seconds: float, hz: float, cams: dict[str, tuple[int, int]], realtime_priority: int = 0) -> dict[str, Any]:
    """Run the loop for ``seconds`` and return its statistics."""
    cfg = SimSo101Config(control_mode="ee_delta", cameras=cams, seed=0)
    safety_cfg = SafetyConfig(control_hz=hz, watchdog_timeout_s=0.5, max_linear_speed=0.35, max_action_change=2.0,
                              realtime_priority=realtime_priority)
    body: list[float] = []
    successes = episodes = 0
    with SafetyLayer(cfg.make(), safety_cfg) as safety:
        robot = safety.robot
        assert isinstance(robot, SimSo101Robot)
        robot.reset_task(seed=0)
        loop = RateLoop(hz, max_ticks=int(seconds * hz))
        for _ in loop:
            t0 = time.perf_counter()
            obs = safety.observe()
            assert set(obs) == {"state", *(f"image.{c}" for c in cams)}
            if robot.task_status().success:
                successes += 1
                episodes += 1
                robot.reset_task(seed=episodes)
            else:
                view = robot.pick_view()
                assert view is not None
                safety.step(pick_expert(view))
            body.append(time.perf_counter() - t0)
        stats = loop.stats()
        sim = robot.sim_stats()
    period = 1.0 / hz
    return {"hz": hz, "seconds": seconds, "realtime_priority": realtime_priority,
            "cameras": {k: list(v) for k, v in cams.items()}, "ticks": stats.ticks,
            "p50_ms": stats.p50_s * 1e3, "p99_ms": stats.p99_s * 1e3, "max_ms": stats.max_s * 1e3,
            "p99_ratio": stats.p99_s / period, "lost_steps": stats.overruns, "sim_lag_skips": sim["lag_skips"],
            "body_p50_ms": float(np.median(body) * 1e3), "body_p99_ms": float(np.percentile(body, 99) * 1e3),
            "picks": successes, "meets_target": bool(stats.p99_s <= 1.1 * period and stats.overruns == 0)}


def pick_rate(seeds: int, time_scale: float, hz: float = 30.0, max_steps: int = 150) -> dict[str, Any]:
    """The scripted pick through the safety layer on ``seeds`` reset seeds: successes and steps to success."""
    cfg = SimSo101Config(control_mode="ee_delta", cameras={}, time_scale=time_scale, seed=0)
    rate = hz * time_scale
    limits = SafetyConfig(control_hz=rate, watchdog_timeout_s=0.0, max_linear_speed=0.35 * time_scale,
                          max_action_change=2.0)
    steps: list[int] = []
    with SafetyLayer(cfg.make(), limits) as safety:
        robot = safety.robot
        assert isinstance(robot, SimSo101Robot)
        for seed in range(seeds):
            robot.reset_task(seed=seed)
            for i in RateLoop(rate, max_ticks=max_steps):
                safety.observe()
                if robot.task_status().success:
                    steps.append(i)
                    break
                view = robot.pick_view()
                assert view is not None
                safety.step(pick_expert(view))
    return {"seeds": seeds, "time_scale": time_scale, "successes": len(steps), "max_steps": max_steps,
            "steps_p50": float(np.median(steps)) if steps else None}


def main() -> None:
    """Parse the flags, run, print and save ``benchmarks/results/sim_so101_loop.json``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--hz", type=float, default=30.0)
    p.add_argument("--size", type=int, nargs=2, default=(64, 64), metavar=("H", "W"), help="camera image size")
    p.add_argument("--picks", type=int, default=0, help="instead: the scripted pick's success over this many seeds")
    p.add_argument("--time-scale", type=float, default=1.0, help="with --picks: simulated seconds per second")
    p.add_argument("--load", type=int, default=0, help="other busy processes (a CPU spin each) during the run")
    p.add_argument("--realtime-priority", type=int, default=0,
                   help="1..99: also run with safety.realtime_priority at this SCHED_FIFO priority, same load")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "sim_so101_loop.json")
    a = p.parse_args()
    if a.picks:
        r = pick_rate(a.picks, a.time_scale, a.hz)
        print(f"scripted pick on sim_so101 through the safety layer: {r['successes']}/{r['seeds']} seeds "
              f"(time_scale {a.time_scale:g}, {a.hz:.0f} Hz of robot time, <= {r['max_steps']} steps; median "
              f"{r['steps_p50']} steps to success)", flush=True)
        return
    size = (int(a.size[0]), int(a.size[1]))
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.load)]
    try:
        rows = [run(a.seconds, a.hz, {"front": size, "wrist": size}, prio)
                for prio in ([0, a.realtime_priority] if a.realtime_priority else [0])]
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
    for row in rows:
        row.update(load_processes=a.load, machine=f"{platform.processor() or platform.machine()}, {platform.node()}",
                   date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        how = f"SCHED_FIFO {row['realtime_priority']}" if row["realtime_priority"] else "normal scheduling"
        print(f"sim_so101 {a.hz:.0f} Hz, front+wrist {size}, {how}, {a.load} busy processes: p50 "
              f"{row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms (x{row['p99_ratio']:.3f} of the period; target "
              f"<= 1.10), max {row['max_ms']:.1f} ms, {row['lost_steps']} lost steps in {row['ticks']} ticks, "
              f"{row['sim_lag_skips']:.0f} physics catch-ups; tick body p50 {row['body_p50_ms']:.1f} ms p99 "
              f"{row['body_p99_ms']:.1f} ms; {row['picks']} picks", flush=True)
    if len(rows) == 2:
        normal, fifo = rows
        print(f"SCHED_FIFO / normal: p99 period x{fifo['p99_ms'] / normal['p99_ms']:.2f}, max x"
              f"{fifo['max_ms'] / normal['max_ms']:.2f}, lost steps {fifo['lost_steps']} vs {normal['lost_steps']}",
              flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(rows[0] if len(rows) == 1 else rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
