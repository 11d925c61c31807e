"""The camera fit against a known truth: logs of the shifted world's camera, fitted by `robot-rl twin camera`.

The "real" camera is ``mujoco/reach_shifted``'s: moved by ``ShiftConfig.camera_offset`` (3, −4, 2 cm) in a scene
with other colours and light. Logs 20 episodes × 20 steps of 64×64 frames with the state beside them, then runs
the CLI as a user types it, once with every adjustment free and once with the position alone (intrinsics known),
and prints each fit's error against the truth, its image error and its wall time.

    MUJOCO_GL=osmesa python benchmarks/twin_camera.py

Writes ``--out``/twin_camera.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.config import TASKS
from robot_rl.sims.mujoco.shifted import ScriptedReachDemonstrator, ShiftConfig, record_demos

RUNS = {"all seven free": "dx,dy,dz,roll,pitch,yaw,fovy_scale", "position only": "dx,dy,dz"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--work", type=Path, default=Path("benchmarks/out/twin_camera"))
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = p.parse_args()
    logs = args.work / "real"
    if not logs.exists():
        real = TASKS.get("mujoco/reach_shifted")(obs="state_pixels", num_envs=10, terminate_on_success=False,
                                                max_episode_steps=args.steps)
        env = real.make("cpu", 1)
        try:
            record_demos(env, logs, args.episodes, ScriptedReachDemonstrator(gain=0.3, noise=0.5, seed=3), seed=1,
                         fps=25.0)
        finally:
            env.close()
    truth = np.array([*ShiftConfig().camera_offset, 0.0, 0.0, 0.0, 1.0])
    exe = str(Path(sys.executable).with_name("robot-rl"))
    rows = []
    for label, free in RUNS.items():
        out = args.work / f"camera_{free.count(',') + 1}.json"
        t0 = time.perf_counter()
        done = subprocess.run([exe, "twin", "camera", "--episodes", str(logs), "--free", free, "--out", str(out)],
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"robot-rl twin camera failed:\n{done.stdout}{done.stderr}")
        print(f"--- {label} ({wall:.0f} s)\n{done.stdout}")
        fit = json.loads(out.read_text())
        err = np.asarray(fit["values"]) - truth
        rows.append({"run": label, "free": free, "values": fit["values"], "std": fit["std"], "wall_s": round(wall, 1),
                     "position_error_m": float(np.abs(err[:3]).max()), "turn_error_deg": float(np.abs(err[3:6]).max()),
                     "fovy_error": float(abs(err[6])), "image_error_before": fit["error_before"],
                     "image_error_after": fit["error_after"]})
    for r in rows:
        ratio = r["image_error_after"] / r["image_error_before"]
        print(f"{r['run']:>15}: position off by ≤ {100 * r['position_error_m']:.2f} cm, turns ≤ "
              f"{r['turn_error_deg']:.2f}°, fovy × off by {r['fovy_error']:.3f}; image error "
              f"{r['image_error_before']:.4f} → {r['image_error_after']:.4f} ({ratio:.3f}×); {r['wall_s']:.0f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "twin_camera.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                                           "truth": truth.tolist(), "runs": rows}, indent=1))


def docs_table(records: list[dict[str, Any]]) -> str:
    """docs/real2sim.md's table: each run's largest error on the position, the turns and the field of view against
    the truth, with the restarts' spread of the position; its image error before and after; its wall time."""
    r = records[0]["results"]
    lines = ["| `--free` | position error (max over x, y, z) | turn error (max) | field-of-view factor | image error | "
             "time |", "| --- | ---: | ---: | ---: | --- | ---: |"]
    for run in r["runs"]:
        free = run["free"].split(",")
        std = run["std"][:3]
        unit, scale = ("cm", 100) if run["position_error_m"] >= 1e-3 else ("mm", 1000)
        position = (f"{scale * run['position_error_m']:.3g} {unit} "
                    f"(std {' / '.join(f'{scale * s:.2g}' for s in std)} {unit})")
        turned = any(a in free for a in ("roll", "pitch", "yaw"))
        turn = f"{run['turn_error_deg']:.2g}°" if turned else "–"
        fov = f"{run['values'][6]:.4f} (true {r['truth'][6]:g})" if "fovy_scale" in free else "–"
        label = "all seven" if len(free) == 7 else f"`{run['free']}`"
        lines.append(f"| {label} | {position} | {turn} | {fov} | "
                     f"{run['image_error_before']:.3f} → {run['image_error_after']:.2g} | {run['wall_s']:.0f} s |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
