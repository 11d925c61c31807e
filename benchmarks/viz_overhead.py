"""What the Rerun live view costs per step: the train actor with ``viz.sink=rerun`` vs without, and the sink's own
cost per deploy/record step (a 7-d action, the state, two 64x64 RGB cameras), writing an .rrd file.

    python benchmarks/viz_overhead.py            # writes benchmarks/results/viz_overhead.json

Blocks with and without the sink alternate (so load from other processes hits both); medians and minima over blocks
are reported (on a shared machine the minimum is the closest to the cost itself).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.config import ALGOS, TASKS
from robot_rl.loop.actor import Actor
from robot_rl.viz import VizConfig
from robot_rl.viz.rerun_sink import RerunSink


class _Endpoint:
    actor_id = 0

    def send(self, batch, timeout_s):
        return True

    def poll_weights(self, newer_than):
        return None


def actor_overhead(task: str, num_envs: int, steps: int, blocks: int, out: Path, **viz: object) -> dict:
    """Actor.step with and without the sink, in alternating blocks: wall and process-CPU time per step (CPU time
    counts Rerun's own encoder/writer threads), and the time spent inside the actor's hook. Medians over blocks,
    and minima (the least disturbed block: on a shared machine the best estimate of the cost itself)."""
    env = TASKS.get(task)(num_envs=num_envs).make("cpu", 0)
    policy = ALGOS.get("sac")().build(env.spec, "cpu", 0).make_policy()
    actor = Actor(env, policy, _Endpoint())
    path = out / f"{task}-{viz.get('every', 1)}.rrd"
    sink = RerunSink(VizConfig(sink="rerun", connect="off", **viz), path, task)  # type: ignore[arg-type]
    hook, in_hook = actor._viz_step, [0.0]

    def timed_hook(*a, **k):
        t = time.perf_counter()
        hook(*a, **k)
        in_hook[0] += time.perf_counter() - t

    actor._viz_step = timed_hook  # type: ignore[method-assign]
    per: dict[str, list[float]] = {k: [] for k in ("wall_off", "wall_on", "cpu_off", "cpu_on", "hook")}
    for _ in range(steps):  # warm up
        actor.step()
    for b in range(2 * blocks):
        mode = "on" if b % 2 else "off"
        actor.viz = sink if mode == "on" else None
        in_hook[0] = 0.0
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            actor.step()
        if mode == "on":
            sink.flush()  # what this block kept is sent inside the block
            per["hook"].append(in_hook[0] / steps * 1e6)
        per[f"wall_{mode}"].append((time.perf_counter() - t0) / steps * 1e6)
        per[f"cpu_{mode}"].append((time.process_time() - c0) / steps * 1e6)
    sink.close()
    env.close()
    med = {k: statistics.median(v) for k, v in per.items()}
    low = {k: min(v) for k, v in per.items()}
    return {"task": task, "num_envs": num_envs, "every": viz.get("every", 1), "steps": steps * blocks,
            "median": {"wall_us_off": round(med["wall_off"], 1), "wall_us_on": round(med["wall_on"], 1),
                       "cpu_us_off": round(med["cpu_off"], 1), "cpu_us_on": round(med["cpu_on"], 1),
                       "hook_us": round(med["hook"], 1)},
            "min": {"wall_us_off": round(low["wall_off"], 1), "wall_us_on": round(low["wall_on"], 1),
                    "cpu_us_off": round(low["cpu_off"], 1), "cpu_us_on": round(low["cpu_on"], 1),
                    "hook_us": round(low["hook"], 1)},
            "rrd_mb": round(path.stat().st_size / 1e6, 2)}


def sink_cost(steps: int, cameras: bool, out: Path, repeats: int = 5) -> dict:
    """RerunSink.step alone, as the deploy and record loops call it, including sending and closing the file."""
    rng = np.random.default_rng(0)
    obs = {"state": rng.random(17).astype(np.float32)}
    if cameras:
        obs.update({f"image.{c}": rng.integers(0, 255, (64, 64, 3), dtype=np.uint8) for c in ("front", "wrist")})
    name = "deploy_cameras" if cameras else "deploy_state"
    action = rng.random(7).astype(np.float32)
    times = []
    for r in range(repeats):
        sink = RerunSink(VizConfig(sink="rerun", connect="off"), out / f"{name}{r}.rrd", name)
        t0 = time.perf_counter()
        for i in range(steps):
            sink.step(i, action, source="human" if i % 5 == 0 else "policy", reward=0.0, success=False, obs=obs)
        sink.close()  # the rest is sent and written: part of the cost
        times.append((time.perf_counter() - t0) / steps * 1e6)
    return {"loop": name, "steps": steps, "us_per_step_median": round(statistics.median(times), 1),
            "us_per_step_min": round(min(times), 1), "rrd_mb": round((out / f"{name}0.rrd").stat().st_size / 1e6, 2)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200, help="actor steps per block")
    p.add_argument("--blocks", type=int, default=10, help="blocks with and (alternating) without the sink")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "viz_overhead.json")
    args = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        results = {
            "actor": [actor_overhead("reach", 16, args.steps, args.blocks, d),
                      actor_overhead("reach", 16, args.steps, args.blocks, d, every=10),
                      actor_overhead("reach_pixels", 4, args.steps // 2, args.blocks, d)],
            "sink": [sink_cost(1000, False, d), sink_cost(1000, True, d)],
        }
    print(json.dumps(results, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


def docs_table(records: list[dict[str, Any]]) -> str:
    """docs/visualisation.md's table: per step, the loop's median time without and with the sink, and the time
    inside the actor's hook from the least disturbed block to the median."""
    r = records[0]["results"]
    lines = ["| loop | without | with `--viz rerun` | where |", "| --- | --- | --- | --- |"]
    for a in r["actor"]:
        med, low = a["median"], a["min"]
        off, on = med["wall_us_off"], med["wall_us_on"]
        camera = " (one 64x64 camera)" if a["task"] == "reach_pixels" else ""
        lines.append(f"| train actor, `{a['task']}`{camera}, {a['num_envs']} sub-envs, `viz.every={a['every']}` | "
                     f"{off:.0f} µs per vectorised step | "
                     f"{on:.0f} µs ({on - off:+.0f} µs, {100 * (on - off) / off:+.1f} %); "
                     f"{low['hook_us']:.0f}–{med['hook_us']:.0f} µs of it in the actor's thread | "
                     "actor hook + Rerun's thread |")
    cameras = {"deploy_state": "state only", "deploy_cameras": "two 64x64 RGB cameras"}
    for k in r["sink"]:
        lines.append(f"| deploy / record step, {cameras[k['loop']]} | – | {k['us_per_step_min']:.0f}–"
                     f"{k['us_per_step_median']:.0f} µs per step, sending and writing included | the sink alone |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
