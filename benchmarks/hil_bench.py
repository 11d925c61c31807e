"""HIL deployment benchmarks on the SimulatedArm (a separate MuJoCo process at real-time pace).

    .venv/bin/python benchmarks/hil_bench.py                       # everything (~15 min)
    .venv/bin/python benchmarks/hil_bench.py --only loop --seconds 20
    .venv/bin/python benchmarks/hil_bench.py --only learn --learn-minutes 5 --without-minutes 3

1. ``loop``: the deploy control loop at 10, 20 and 50 Hz, in learn mode: a SAC policy with a CNN over two
   64×64 cameras (front, wrist) acting every tick (stochastic, as when learning), the simulated cameras
   rendering every tick, every step sent to a learner over ZeroMQ (the learner ingests but does not
   update, so it does not compete for the cores with the loop being measured). Period p50/p99/max from
   :class:`~robot_rl.hardware.rate.RateLoop`; the limit is p99 within 10 % of the period (ratio ≤ 1.10).
2. ``watchdog``: a control loop commanding the arm through the SafetyLayer stops (a hung policy); the time
   from the last valid command to the hold command reaching the simulator, against the limit of 2
   control periods (watchdog timeout 1.5 periods), 15 trials per rate.
3. ``learn``: the pick task from the same 10 scripted demonstrations, with the scripted intervener (takes
   over when the policy stalls) and without it; every ``--eval-every-steps`` the policy alone
   (deterministic, nobody intervening) on the same seeded episodes, against env steps and training
   wall-clock; the training success and intervention rates; each final policy alone, deterministic and
   stochastic. ``--time-scale`` runs the simulator faster than real time (a benchmark option). Code in
   ``hil_learn.py``; plot benchmarks/results/hil_learning.png, data benchmarks/results/hil_learning.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hil_learn import LearnBenchConfig, bench_learn
from result_file import default_path, write_result

from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.sim_arm import SimulatedArmConfig
from robot_rl.human_loop.deploy import DeployConfig, Deployer
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.hil_learner import HILLearner
from robot_rl.policies.sac import SACConfig
from robot_rl.transport.config import ZmqTransportConfig
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

OUT = Path(__file__).parent / "results"


# ---- 1. loop period ------------------------------------------------------------------------------

def bench_loop(seconds: float) -> list[dict[str, Any]]:
    """Period statistics of the deploy loop at 10/20/50 Hz with inference, two cameras and the transport."""
    rows = []
    for hz in (10.0, 20.0, 50.0):
        robot = SimulatedArmConfig(cameras={"front": (64, 64), "wrist": (64, 64)}, max_step_m=0.2 / hz)
        cfg = DeployConfig(robot=robot, safety=SafetyConfig(control_hz=hz, watchdog_timeout_s=0.5),
                           algo=SACConfig(demo_ratio=0.5, learning_starts=10**9),
                           transport=ZmqTransportConfig(address="tcp://127.0.0.1:*"), mode="learn",
                           episodes=1, max_episode_steps=int(seconds * hz), status=False)
        with tempfile.TemporaryDirectory() as tmp:
            learner = HILLearner(cfg, Path(tmp))
            arm = robot.make()
            with learner.serving(), SafetyLayer(arm, cfg.safety) as safety:
                ep = ZmqActorEndpoint(learner.address, 0, arm.features, ZmqSettings.from_config(cfg.transport))
                dev = ScriptedDevice()
                dev.connect()
                d = Deployer(cfg, safety, dev, cfg.algo.build(arm.features, "cpu", 0).make_policy(), endpoint=ep)
                rep = d.run()
                body = tick_costs(d, safety, 100)
                time.sleep(0.5)
                ep.close()
            received = learner.stats.transitions
        s = rep.rate
        period = 1.0 / hz
        row = {"hz": hz, "ticks": s.ticks, "p50_ms": s.p50_s * 1e3, "p99_ms": s.p99_s * 1e3, "max_ms": s.max_s * 1e3,
               "overruns": s.overruns, "p99_ratio": s.p99_s / period, "sent": rep.steps, "received": received,
               "meets_target": s.p99_s <= 1.1 * period, **body}
        print(f"loop {hz:.0f} Hz: p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms "
              f"(x{row['p99_ratio']:.2f} of the period; target <= 1.10), max {row['max_ms']:.1f} ms, "
              f"{s.overruns} overruns in {s.ticks} ticks; {received}/{rep.steps} steps at the learner; tick body "
              f"p50 {body['body_p50_ms']:.1f} ms p99 {body['body_p99_ms']:.1f} ms (observe+render "
              f"{body['observe_p50_ms']:.1f}, policy {body['act_p50_ms']:.1f}, safety+command "
              f"{body['step_p50_ms']:.1f} ms p50)", flush=True)
        rows.append(row)
    return rows


def tick_costs(d: Deployer, safety: SafetyLayer, n: int) -> dict[str, float]:
    """The work of one tick without the rate loop's sleep: observe (2 renders), the policy, safety + command."""
    parts: dict[str, list[float]] = {"observe": [], "act": [], "step": [], "body": []}
    for _ in range(n):
        t0 = time.perf_counter()
        obs = safety.observe()
        t1 = time.perf_counter()
        action, _ = d._act(obs)
        t2 = time.perf_counter()
        safety.step(action)
        t3 = time.perf_counter()
        for k, v in (("observe", t1 - t0), ("act", t2 - t1), ("step", t3 - t2), ("body", t3 - t0)):
            parts[k].append(v)
    out = {f"{k}_p50_ms": float(np.median(v) * 1e3) for k, v in parts.items()}
    out["body_p99_ms"] = float(np.percentile(parts["body"], 99) * 1e3)
    return out


# ---- 2. watchdog -----------------------------------------------------------------------------------

def bench_watchdog(trials: int) -> list[dict[str, Any]]:
    """Last valid command → hold command delivered, against 2 control periods."""
    rows = []
    arm = SimulatedArmConfig(cameras={}).make()
    arm.connect()
    hold_done: list[float] = []
    real_hold = arm.hold

    def timed_hold() -> None:
        real_hold()
        hold_done.append(time.perf_counter())

    arm.hold = timed_hold  # type: ignore[method-assign]
    try:
        for hz in (10.0, 20.0, 50.0):
            period = 1.0 / hz
            safety = SafetyLayer(arm, SafetyConfig(control_hz=hz, watchdog_timeout_s=1.5 * period))
            delays = []
            for _ in range(trials):
                safety.rearm()
                hold_done.clear()
                last = 0.0
                for _ in range(5):  # a few good steps at the rate, then the policy "hangs"
                    safety.step(np.array([0, 0, 0, 0, 0, 0, 1.0], np.float32))
                    last = time.perf_counter()
                    time.sleep(period * 0.9)
                t0 = time.perf_counter()
                while not hold_done and time.perf_counter() - t0 < 10 * period:
                    time.sleep(0.001)
                delays.append(hold_done[0] - last if hold_done else float("inf"))
            safety.watchdog.close()  # type: ignore[union-attr]
            d = np.array(delays)
            row = {"hz": hz, "trials": trials, "p50_ms": float(np.median(d) * 1e3), "max_ms": float(d.max() * 1e3),
                   "max_periods": float(d.max() / period), "meets_target": bool(d.max() <= 2 * period)}
            print(f"watchdog {hz:.0f} Hz (timeout 1.5 periods): last command -> hold delivered p50 "
                  f"{row['p50_ms']:.1f} ms, max {row['max_ms']:.1f} ms = {row['max_periods']:.2f} periods "
                  f"(target <= 2)", flush=True)
            rows.append(row)
    finally:
        arm.disconnect()
    return rows


# ---- 3. learning: see hil_learn.py -----------------------------------------------------------------


def main() -> None:
    """Parse options, run the chosen parts, print the summary."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=("loop", "watchdog", "learn"), action="append")
    p.add_argument("--seconds", type=float, default=20.0, help="loop: seconds per rate")
    p.add_argument("--trials", type=int, default=15, help="watchdog: trials per rate")
    p.add_argument("--learn-minutes", type=float, default=5.0,
                   help="learn: training wall-clock minutes of the run with the intervener")
    p.add_argument("--without-minutes", type=float, default=None,
                   help="learn: minutes of the run without it (default: --learn-minutes; 0 skips it)")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="learn: simulated seconds per wall-clock second (1 = real time, as on hardware)")
    p.add_argument("--utd", type=float, default=4.0, help="learn: learner updates per env step")
    p.add_argument("--patience", type=int, default=8, help="learn: intervener's steps without progress")
    p.add_argument("--takeover-steps", type=int, default=10, help="learn: length of one intervention (steps)")
    p.add_argument("--eval-every-steps", type=int, default=1000,
                   help="learn: training env steps between evaluations of the policy alone")
    p.add_argument("--eval-episodes", type=int, default=10, help="learn: episodes per evaluation")
    p.add_argument("--normalize-obs", action=argparse.BooleanOptionalAction, default=True,
                   help="learn: SAC's running state normalisation")
    p.add_argument("--init-temperature", type=float, default=0.01, help="learn: SAC's initial entropy temperature")
    p.add_argument("--out-dir", type=Path, default=OUT, help="learn: where hil_learning.json/.png go")
    p.add_argument("--robot", choices=("sim_arm", "sim_so101"), default="sim_arm",
                   help="learn: the SimulatedArm (state) or the simulated SO-101 (front + wrist cameras)")
    p.add_argument("--camera-size", type=int, default=64, help="learn, sim_so101: camera height and width")
    p.add_argument("--conv-stride", type=int, default=1,
                   help="learn, sim_so101: the CNN's stride after its first layer (2: ~4x cheaper updates on a CPU)")
    p.add_argument("--image-channels", type=int, default=32, help="learn, sim_so101: the CNN's channels per layer")
    p.add_argument("--episode-steps", type=int, default=40, help="learn: steps before an episode is cut")
    p.add_argument("--demos", type=int, default=10, help="learn: scripted demonstrations at the start")
    p.add_argument("--seed", type=int, default=11, help="learn: seed of the policy and the training episodes")
    a = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("robot_rl.hardware.safety").setLevel(logging.CRITICAL)  # the watchdog trips on purpose
    torch.set_num_threads(1)
    parts = a.only or ["loop", "watchdog", "learn"]
    cpu = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    print(f"machine: {platform.processor() or platform.machine()}, {cpu} cores; python {sys.version.split()[0]}, "
          f"torch {torch.__version__}", flush=True)
    out: dict[str, Any] = {}
    if "loop" in parts:
        out["loop"] = bench_loop(a.seconds)
    if "watchdog" in parts:
        out["watchdog"] = bench_watchdog(a.trials)
    if "learn" in parts:
        b = LearnBenchConfig(minutes=a.learn_minutes, without_minutes=a.without_minutes, time_scale=a.time_scale,
                             utd_ratio=a.utd, patience=a.patience, takeover_steps=a.takeover_steps,
                             eval_every_steps=a.eval_every_steps, eval_episodes=a.eval_episodes,
                             normalize_obs=a.normalize_obs, init_temperature=a.init_temperature, robot=a.robot,
                             camera_size=a.camera_size, conv_stride=a.conv_stride,
                             image_channels=a.image_channels, episode_steps=a.episode_steps, demos=a.demos, seed=a.seed)
        a.out_dir.mkdir(parents=True, exist_ok=True)
        out["learn"] = bench_learn(b, a.out_dir)["finals"]
    print(json.dumps(out, indent=1, default=str))
    timing = {k: out[k] for k in ("loop", "watchdog") if k in out}
    if timing:  # the learn part writes its own hil_learning*.json
        print(f"wrote {write_result(default_path('hil_bench'), 'hil_bench', a, timing)}")


if __name__ == "__main__":
    main()
