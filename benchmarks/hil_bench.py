"""HIL deployment benchmarks on the SimulatedArm (a separate MuJoCo process at real-time pace).

    .venv/bin/python benchmarks/hil_bench.py                       # everything (~15 min)
    .venv/bin/python benchmarks/hil_bench.py --only loop --seconds 20
    .venv/bin/python benchmarks/hil_bench.py --only learn --learn-minutes 5

1. ``loop``: the deploy control loop at 10, 20 and 50 Hz, in learn mode: a SAC policy with a CNN over two
   64×64 cameras (front, wrist) acting every tick (stochastic, as when learning), the simulated cameras
   rendering every tick, every step sent to a learner over ZeroMQ (the learner ingests but does not
   update, so it does not compete for the cores with the loop being measured). Period p50/p99/max from
   :class:`~robot_rl.hardware.rate.RateLoop`; the limit is p99 within 10 % of the period (ratio ≤ 1.10).
2. ``watchdog``: a control loop commanding the arm through the SafetyLayer stops (a hung policy); the time
   from the last valid command to the hold command reaching the simulator, against the limit of 2
   control periods (watchdog timeout 1.5 periods), 15 trials per rate.
3. ``learn``: the pick task from the same 10 scripted demonstrations, two runs of equal wall-clock: with
   the scripted intervener (takes over when the policy stalls for 8 steps) and without it. Success rate
   against wall-clock and episodes (training episodes, assisted ones included, as HIL-SERL reports them),
   the intervention rate, and each final policy alone (deterministic, no human) on the same 10 seeded
   episodes, success and mean (dense) return, against the untrained initial policy on the same episodes.
   Plot: benchmarks/hil_learning.png.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.config import ZmqTransportConfig
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.sim_arm import PickIntervener, SimulatedArm, SimulatedArmConfig
from robot_rl.human_loop.deploy import DeployConfig, Deployer, load_run_policy, rows_to_batch
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.hil_learner import HILLearner
from robot_rl.policies.sac import SACConfig
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

OUT = Path(__file__).parent


def _learner_thread(learner: HILLearner) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    t = threading.Thread(target=learner.serve, args=(stop,), daemon=True)
    t.start()
    return stop, t


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
            stop, thread = _learner_thread(learner)
            arm = robot.make()
            with SafetyLayer(arm, cfg.safety) as safety:
                ep = ZmqActorEndpoint(learner.address, 0, arm.features, ZmqSettings.from_config(cfg.transport))
                dev = ScriptedDevice()
                dev.connect()
                d = Deployer(cfg, safety, dev, cfg.algo.build(arm.features, "cpu", 0).make_policy(), endpoint=ep)
                rep = d.run()
                body = tick_costs(d, safety, 100)
                time.sleep(0.5)
                ep.close()
            stop.set()
            thread.join()
            received = learner.stats.transitions
            learner.close()
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


# ---- 3. learning with and without the intervener ----------------------------------------------------

def learn_config(address: str = "tcp://127.0.0.1:*") -> DeployConfig:
    """The pick-task HIL config both runs share."""
    robot = SimulatedArmConfig(cameras={}, reward="dense", max_step_m=0.02, seed=7)
    return DeployConfig(robot=robot, safety=SafetyConfig(control_hz=10.0, watchdog_timeout_s=0.5),
                        algo=SACConfig(demo_ratio=0.5, learning_starts=200, batch_size=128, utd_ratio=2.0,
                                       gamma=0.95, n_step=3, critic_layer_norm=True, buffer_size=100_000),
                        transport=ZmqTransportConfig(address=address), mode="learn", episodes=0,
                        max_episode_steps=40, status=False, seed=11)


def record_demos(cfg: DeployConfig, episodes: int) -> Any:
    """Scripted demonstrations (the intervener always in control), as one TransitionBatch."""
    demo_cfg = DeployConfig(**{**cfg.__dict__, "mode": "eval", "episodes": episodes, "seed": 999})
    arm = cfg.robot.make()
    with SafetyLayer(arm, cfg.safety) as safety:
        dev = ScriptedDevice(PickIntervener(arm, patience=0, takeover_steps=10**6))
        dev.connect()
        d = Deployer(demo_cfg, safety, dev, cfg.algo.build(arm.features, "cpu", 0).make_policy())
        d.collected = []
        rep = d.run()
    print(f"demos: {len(d.collected)} transitions from {episodes} episodes, "
          f"{sum(e.success for e in rep.episodes)} successful", flush=True)
    return rows_to_batch(d.collected)


def run_learning(cfg: DeployConfig, demos: Any, intervene: bool, minutes: float, run_dir: Path) -> dict[str, Any]:
    """One HIL run of ``minutes`` wall-clock; returns the per-episode log and the learner's counters."""
    torch.manual_seed(cfg.seed)
    learner = HILLearner(cfg, run_dir, demos=demos, publish_every=20)
    stop, thread = _learner_thread(learner)
    arm: SimulatedArm = cfg.robot.make()
    t_start = time.monotonic()
    log: list[dict[str, Any]] = []
    with SafetyLayer(arm, cfg.safety) as safety:
        ep = ZmqActorEndpoint(learner.address, 0, arm.features, ZmqSettings.from_config(cfg.transport))
        human = PickIntervener(arm, patience=8, takeover_steps=30, press_success=False, intervene=intervene)
        dev = ScriptedDevice(human)
        dev.connect()
        d = Deployer(cfg, safety, dev, cfg.algo.build(arm.features, "cpu", 0).make_policy(), endpoint=ep)
        d.wait_first_weights()
        i = 0
        while time.monotonic() - t_start < minutes * 60:
            e = d.run_episode(i)
            log.append({"episode": i, "wall_s": time.monotonic() - t_start, "success": e.success,
                        "intervention_rate": e.intervention_rate, "steps": e.steps, "version": e.policy_version})
            i += 1
        d.safety.watchdog.disarm()  # type: ignore[union-attr]
        ep.close()
    stop.set()
    thread.join()
    stats = learner.stats
    learner.close()
    print(f"learn ({'with' if intervene else 'without'} intervener): {len(log)} episodes in {minutes:.1f} min, "
          f"{stats.updates} updates, v{stats.version}, {stats.intervened_received} intervened steps received, "
          f"{stats.intervened_sampled}/{stats.rows_sampled} sampled rows intervened", flush=True)
    return {"episodes": log, "learner": stats.__dict__}


def evaluate_policy(cfg: DeployConfig, policy: Any, version: int, episodes: int) -> dict[str, float]:
    """A policy alone (deterministic, nobody intervening) on ``episodes`` seeded episodes: success and return."""
    eval_cfg = DeployConfig(**{**cfg.__dict__, "mode": "eval", "episodes": episodes, "seed": 4242})
    arm = cfg.robot.make()
    with SafetyLayer(arm, cfg.safety) as safety:
        dev = ScriptedDevice()
        dev.connect()
        rep = Deployer(eval_cfg, safety, dev, policy, policy_version=version).run()
    return {"success": rep.success_rate, "mean_return": float(np.mean([e.ret for e in rep.episodes])),
            "version": version}


def rolling(x: list[float], k: int = 10) -> np.ndarray:
    """Trailing mean over the last ``k`` values."""
    a = np.asarray(x, dtype=float)
    return np.array([a[max(0, i - k + 1):i + 1].mean() for i in range(len(a))])


def plot(runs: dict[str, dict[str, Any]], path: Path) -> None:
    """Success (rolling 10) and intervention rate vs wall-clock and episodes, both runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, run in runs.items():
        eps = run["episodes"]
        succ = rolling([e["success"] for e in eps])
        wall = [e["wall_s"] / 60 for e in eps]
        idx = [e["episode"] + 1 for e in eps]
        axes[0].plot(wall, succ, label=f"success, {name}")
        axes[1].plot(idx, succ, label=f"success, {name}")
        if any(e["intervention_rate"] for e in eps):
            ir = rolling([e["intervention_rate"] for e in eps])
            axes[0].plot(wall, ir, "--", label=f"intervention rate, {name}")
            axes[1].plot(idx, ir, "--", label=f"intervention rate, {name}")
    axes[0].set_xlabel("wall-clock (min)")
    axes[1].set_xlabel("episode")
    for ax in axes:
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("rate (rolling 10 episodes)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("SimulatedArm pick, HIL-SERL from 10 demos: with vs without the scripted intervener")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def bench_learn(minutes: float, eval_episodes: int) -> dict[str, Any]:
    """Both learning runs from the same demos, their final policies evaluated alone, and the plot."""
    cfg = learn_config()
    demos = record_demos(cfg, 10)
    runs, finals = {}, {}
    spec = cfg.robot.make().features
    torch.manual_seed(cfg.seed)
    finals["initial (untrained)"] = evaluate_policy(cfg, cfg.algo.build(spec, "cpu", cfg.seed).make_policy(), 0,
                                                    eval_episodes)
    print(f"policy alone, initial: {finals['initial (untrained)']}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, intervene in (("with intervener", True), ("without", False)):
            run_dir = Path(tmp) / name.replace(" ", "_")
            runs[name] = run_learning(cfg, demos, intervene, minutes, run_dir)
            finals[name] = evaluate_policy(cfg, *load_run_policy(run_dir, spec), eval_episodes)
            print(f"final policy alone ({name}): {finals[name]}", flush=True)
    plot(runs, OUT / "hil_learning.png")
    (OUT / "hil_learning.json").write_text(json.dumps({"runs": runs, "final_policy_success": finals}, indent=1))
    return {"runs": runs, "finals": finals}


def main() -> None:
    """Parse options, run the chosen parts, print the summary."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=("loop", "watchdog", "learn"), action="append")
    p.add_argument("--seconds", type=float, default=20.0, help="loop: seconds per rate")
    p.add_argument("--trials", type=int, default=15, help="watchdog: trials per rate")
    p.add_argument("--learn-minutes", type=float, default=5.0, help="learn: wall-clock minutes per run")
    p.add_argument("--eval-episodes", type=int, default=10)
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
        out["learn"] = bench_learn(a.learn_minutes, a.eval_episodes)["finals"]
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
