"""LeRobotDataset v3 export: the native writer vs LeRobot's own, same episodes, same machine, same run.

Synthetic episodes (a moving gradient on one camera, so the video encoder sees something like a scene, plus
noise state/action), written with ``LeRobotWriter(backend="native")`` (robot_rl/data/lerobot_v3.py) and
``backend="lerobot"`` (``LeRobotDataset.create`` / ``add_frame`` / ``save_episode`` / ``finalize``), as
PNG ``image`` features and as AV1 ``video`` features. Reports the best wall time of ``--repeats`` runs
of each (after an untimed warm-up), the ratio LeRobot / native, and the dataset's size on disk. Needs
lerobot (.venv-lerobot):

    HF_HUB_OFFLINE=1 .venv-lerobot/bin/python benchmarks/lerobot_export_bench.py \\
        --json benchmarks/results/lerobot_export.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.data.episode import Episode
from robot_rl.data.lerobot_io import write_lerobot


def make_episodes(n_episodes: int, length: int, size: int, seed: int = 0) -> tuple[list[Episode], EnvSpec]:
    """``n_episodes`` episodes of ``length`` steps with a ``size``×``size`` RGB camera and a 6-D state."""
    rng = np.random.default_rng(seed)
    spec = EnvSpec(observation={"state": ArraySpec((6,), "float32"),
                                "image.front": ArraySpec((size, size, 3), "uint8", low=0, high=255)},
                   action=ArraySpec((6,), "float32", low=-1, high=1))
    yy, xx = np.mgrid[0:size, 0:size]
    episodes = []
    for e in range(n_episodes):
        t = np.arange(length)[:, None, None]
        base = (xx[None] * 2 + yy[None] + 3 * t + 17 * e) % 256
        img = np.stack([base, (base + 85) % 256, (255 - base)], -1).astype(np.uint8)
        img = np.clip(img.astype(int) + rng.integers(-4, 5, img.shape), 0, 255).astype(np.uint8)
        done = np.zeros(length, bool)
        done[-1] = True
        episodes.append(Episode(
            obs={"state": rng.standard_normal((length, 6)).astype(np.float32), "image.front": img},
            action=rng.uniform(-1, 1, (length, 6)).astype(np.float32),
            reward=rng.standard_normal(length).astype(np.float32), terminated=done,
            truncated=np.zeros(length, bool), intervened=np.zeros(length, bool), success=done.copy(),
            final_obs=None, task="bench"))
    return episodes, spec


def time_write(episodes: list[Episode], spec: EnvSpec, backend: str, video: bool, repeats: int,
               work: Path) -> dict[str, Any]:
    """Best-of-``repeats`` wall time of writing ``episodes`` with ``backend``; size of the result."""
    times = []
    size = 0
    # An untimed one-episode write first, so that imports and encoder start-up are not timed.
    write_lerobot(episodes[:1], spec, work / f"warmup_{backend}_{video}", 20, use_videos=video, backend=backend)
    for r in range(repeats):
        root = work / f"{backend}_{'video' if video else 'image'}_{r}"
        t0 = time.perf_counter()
        write_lerobot(episodes, spec, root, 20, repo_id="bench/export", robot_type="bench_arm", use_videos=video,
                      backend=backend)
        times.append(time.perf_counter() - t0)
        size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
        shutil.rmtree(root)
    return {"best_s": min(times), "times_s": times, "bytes": size}


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or "unknown CPU"
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "unknown CPU")


def main() -> None:
    """Run the comparison and print a table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--length", type=int, default=100)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = p.parse_args()
    try:
        from datasets.utils.logging import disable_progress_bar

        disable_progress_bar()
    except ImportError:
        pass
    episodes, spec = make_episodes(args.episodes, args.length, args.size)
    results: dict[str, Any] = {"episodes": args.episodes, "length": args.length, "camera": args.size,
                               "machine": f"{_cpu_model()}, {os.cpu_count()} CPUs, {platform.machine()}",
                               "date": time.strftime("%Y-%m-%d")}
    with tempfile.TemporaryDirectory() as tmp:
        for video in (False, True):
            mode = "video" if video else "image"
            for backend in ("native", "lerobot"):
                results[f"{mode}/{backend}"] = time_write(episodes, spec, backend, video, args.repeats, Path(tmp))
            native, lerobot = results[f"{mode}/native"], results[f"{mode}/lerobot"]
            results[f"{mode}/ratio"] = lerobot["best_s"] / native["best_s"]
            print(f"{mode:5s}  native {native['best_s']:6.2f} s ({native['bytes'] / 2**20:5.1f} MiB)   "
                  f"lerobot {lerobot['best_s']:6.2f} s ({lerobot['bytes'] / 2**20:5.1f} MiB)   "
                  f"lerobot/native {results[f'{mode}/ratio']:.1f}x", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))



def table(records: list[dict[str, Any]]) -> str:
    """RESULTS_datasets.md's table: best-of wall time of each writer per camera encoding, their ratio, the size."""
    r = records[0]["results"]
    lines = ["| cameras as | native s | LeRobot s | LeRobot / native | size on disk (both) |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for key, label in (("image", "PNG `image` features"), ("video", "AV1 `video` features")):
        native, lerobot = r[f"{key}/native"], r[f"{key}/lerobot"]
        lines.append(f"| {label} | {native['best_s']:.2f} | {lerobot['best_s']:.2f} | {r[f'{key}/ratio']:.1f}x | "
                     f"{native['bytes'] / 2**20:.1f} MiB |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
