"""Replay benchmarks: sampling throughput, memory per image transition, checkpoint time, persistence cost.

    .venv/bin/python benchmarks/replay_bench.py [--quick]

Peers in the same run: a naive list-of-dicts buffer (obs and next_obs stored per row, numpy stacked
per batch) and Stable-Baselines3's ReplayBuffer/DictReplayBuffer (if installed), sampled in interleaved rounds
(the best round of each). Prints ratios and writes one
result file (``--out``; default ``benchmarks/results/replay_bench/<UTC time>.json``); :func:`table` renders it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.checkpoint import save_checkpoint
from robot_rl.core.config import ALGOS, ensure_registered
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.replay.segments import open_buffer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

NAME = "replay_bench"
BATCH = 256
ROUNDS = 3  # sampling: interleaved rounds per sampler


def make_spec(images: bool) -> EnvSpec:
    obs = {"state": ArraySpec((17,))}
    if images:
        obs.update({f"image.cam{i}": ArraySpec((128, 128, 3), "uint8") for i in range(2)})
    return EnvSpec(observation=obs, action=ArraySpec((6,), "float32", -1.0, 1.0))


def episode_batches(spec: EnvSpec, num_envs: int, steps: int, ep_len: int = 100):
    """Vectorised steps of ``num_envs`` streams with episodes of ``ep_len`` (obs of t+1 = next_obs of t)."""
    gen = torch.Generator().manual_seed(0)

    def obs() -> dict[str, torch.Tensor]:
        return {k: (torch.randint(0, 255, (num_envs, *s.shape), generator=gen, dtype=torch.uint8)
                    if s.dtype == "uint8" else torch.randn(num_envs, *s.shape, generator=gen))
                for k, s in spec.observation.items()}

    cur = obs()
    for t in range(steps):
        nxt = obs()
        done = torch.full((num_envs,), (t + 1) % ep_len == 0)
        yield TransitionBatch(obs=cur, action=torch.rand(num_envs, 6) * 2 - 1, reward=torch.randn(num_envs),
                              terminated=done, truncated=torch.zeros(num_envs, dtype=torch.bool), next_obs=nxt,
                              intervened=torch.zeros(num_envs, dtype=torch.bool),
                              policy_version=torch.zeros(num_envs, dtype=torch.int64),
                              env_index=torch.arange(num_envs))
        cur = obs() if bool(done[0]) else nxt


class NaiveBuffer:
    """A list of per-transition dicts of numpy arrays (obs and next_obs each stored), stacked per sample."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.items, self.pos = capacity, [], 0

    def add(self, b: TransitionBatch) -> None:
        for i in range(len(b)):
            row = {"obs": {k: v[i].numpy().copy() for k, v in b.obs.items()},
                   "next_obs": {k: v[i].numpy().copy() for k, v in b.next_obs.items()},
                   "action": b.action[i].numpy().copy(), "reward": float(b.reward[i]), "done": bool(b.terminated[i])}
            if len(self.items) < self.capacity:
                self.items.append(row)
            else:
                self.items[self.pos] = row
            self.pos = (self.pos + 1) % self.capacity

    def sample(self, n: int) -> dict[str, object]:
        rows = [self.items[j] for j in np.random.randint(0, len(self.items), n)]
        keys = rows[0]["obs"].keys()
        return {"obs": {k: torch.from_numpy(np.stack([r["obs"][k] for r in rows])) for k in keys},
                "next_obs": {k: torch.from_numpy(np.stack([r["next_obs"][k] for r in rows])) for k in keys},
                "action": torch.from_numpy(np.stack([r["action"] for r in rows])),
                "reward": torch.tensor([r["reward"] for r in rows])}


def sb3_buffer(spec: EnvSpec, capacity: int, num_envs: int):
    try:
        from gymnasium import spaces
        from stable_baselines3.common.buffers import DictReplayBuffer
        from stable_baselines3.common.buffers import ReplayBuffer as SB3Replay
    except ImportError:
        return None
    act = spaces.Box(-1, 1, (6,), np.float32)
    if len(spec.observation) == 1:
        return SB3Replay(capacity // num_envs, spaces.Box(-np.inf, np.inf, (17,), np.float32), act, "cpu",
                         n_envs=num_envs, optimize_memory_usage=True, handle_timeout_termination=False)
    space = spaces.Dict({k: spaces.Box(0, 255, s.shape, np.uint8) if s.dtype == "uint8"
                         else spaces.Box(-np.inf, np.inf, s.shape, np.float32) for k, s in spec.observation.items()})
    return DictReplayBuffer(capacity // num_envs, space, act, "cpu", n_envs=num_envs)


def sb3_add(buf, b: TransitionBatch) -> None:
    def np_(d):
        return d["state"].numpy() if len(d) == 1 else {k: v.numpy() for k, v in d.items()}
    buf.add(np_(b.obs), np_(b.next_obs), b.action.numpy(), b.reward.numpy(), b.terminated.numpy(),
            [{} for _ in range(len(b))])


def rate(fn, seconds: float) -> float:
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        n += 1
    return n / (time.perf_counter() - t0)


def sampling(images: bool, capacity: int, seconds: float, device: str) -> dict[str, float]:
    spec, num_envs = make_spec(images), 16
    steps = capacity // num_envs
    ours, naive, sb3 = ReplayBuffer(spec, capacity, device), NaiveBuffer(capacity), sb3_buffer(spec, capacity, num_envs)
    for b in episode_batches(spec, num_envs, steps):
        ours.add(b)
        naive.add(b)
        if sb3 is not None:
            sb3_add(sb3, b)
    def ours_sample() -> None:
        s = ours.sample(BATCH)
        if s.reward.is_cuda:
            torch.cuda.synchronize()

    samplers = {"ours": ours_sample, "naive": lambda: naive.sample(BATCH)}
    if sb3 is not None:
        samplers["sb3"] = lambda: sb3.sample(BATCH)
    # Interleaved rounds, best of each: load from other jobs comes and goes, and each sampler gets the same chances.
    out: dict[str, float] = {}
    for _ in range(ROUNDS):
        for name, fn in samplers.items():
            out[name] = max(out.get(name, 0.0), rate(fn, seconds / ROUNDS))
    if images:
        raw = sum(v.numel() for v in ours._obs.values()) / (ours.obs_capacity + 1)  # bytes of one observation
        img = 2 * 128 * 128 * 3
        out["slots_per_row"] = ours.slots_written / ours.transitions_written
        out["bytes_per_row_vs_raw_obs"] = out["slots_per_row"] * raw / raw
        out["allocated_vs_raw_obs"] = (ours.obs_capacity + 1) / ours.capacity
        out["image_bytes_per_row_naive_vs_raw"] = 2 * img / img
    return out


def checkpoint_cost(rows: int, tmp: Path) -> dict[str, float]:
    spec = make_spec(False)
    buf = ReplayBuffer(spec, rows)
    t0 = time.perf_counter()
    open_buffer(buf, tmp / "replay", segment_transitions=2000, delete_evicted=False)
    for b in episode_batches(spec, 1000, rows // 1000):
        buf.add(b)
    buf.flush()
    persist_all = time.perf_counter() - t0
    ensure_registered()
    algo = ALGOS.get("sac")().build(spec, "cpu", 0)
    buf.add(next(episode_batches(spec, 1000, 1)))  # some pending rows, as at any real checkpoint
    t0 = time.perf_counter()
    buf.flush()
    save_checkpoint(tmp, 1, {"algo": algo.state_dict()}, {})
    ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    save_checkpoint(tmp / "whole", 1, {"algo": algo.state_dict(), "replay": buf.state_dict()}, {})
    whole = time.perf_counter() - t0
    return {"rows": rows, "ours_s": ours, "with_buffer_in_checkpoint_s": whole,
            "persist_all_rows_as_segments_s": persist_all,
            "disk_mb": sum(p.stat().st_size for p in (tmp / "replay").glob("*.rrs")) / 2**20}


def persistence_overhead(tmp: Path, images: bool, rows: int, updates: int, device: str) -> dict[str, float]:
    """Persistence cost per transition (add + segment commits with fsync) vs the learner's time per transition.

    The learner does one SAC update of batch 256 per transition received (UTD 1), so the cost in % of
    learner throughput is ``(add time with segments - add time without) / (update time + add time)``.
    """
    ensure_registered()
    spec = make_spec(images)
    add_s = {}
    for persist in (False, True, False, True):
        buf = ReplayBuffer(spec, rows + 100, device)
        if persist:
            # Image segments of 500 rows, at most a quarter of the buffer (--quick's is small).
            segment = 2000 if not images else min(500, rows // 4)
            open_buffer(buf, tmp / f"p{random.random()}", segment_transitions=segment)
        batches = list(episode_batches(spec, 16, rows // 16))
        t0 = time.perf_counter()
        for b in batches:
            buf.add(b.to(device))
        buf.flush()
        if device != "cpu":
            torch.cuda.synchronize()
        key = "on" if persist else "off"
        add_s[key] = min(add_s.get(key, 1e9), (time.perf_counter() - t0) / rows)  # best of two
    algo = ALGOS.get("sac")(batch_size=BATCH).build(spec, device, 0)
    algo.update(buf.sample(BATCH))
    t0 = time.perf_counter()
    for _ in range(updates):
        algo.update(buf.sample(BATCH))  # returns statistics with .tolist(): synchronised
    update_s = (time.perf_counter() - t0) / updates
    extra = add_s["on"] - add_s["off"]
    return {"add_off_us": 1e6 * add_s["off"], "add_on_us": 1e6 * add_s["on"], "update_ms": 1e3 * update_s,
            "cost_pct": 100 * extra / (update_s + add_s["off"])}


def measure(quick: bool, device: str) -> dict[str, Any]:
    """Every measurement of the page, with the ratios to the peers in this run."""
    secs = 1.0 if quick else 3.0
    out: dict[str, Any] = {"device": device, "quick": quick, "batch": BATCH, "sampling": {}, "persistence": {}}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print(f"device {device}; peers (naive, SB3) sample on the CPU")
        for images, cap in ((False, 200_000 if not quick else 20_000), (True, 3_000 if not quick else 800)):
            r = sampling(images, cap, secs, device)
            r["capacity"] = cap
            r["ours_over_naive"] = r["ours"] / r["naive"]
            if "sb3" in r:
                r["ours_over_sb3"] = r["ours"] / r["sb3"]
            out["sampling"]["images" if images else "state"] = r
            line = ", ".join(f"{k} {v:.1f} batches/s" if k in ("ours", "naive", "sb3") else f"{k} {v:.3f}"
                             for k, v in r.items())
            print(f"sampling {'2x128x128 image' if images else 'state'} (capacity {cap}): {line}")
        c = checkpoint_cost(1_000_000 if not quick else 100_000, tmp)
        c["buffer_in_checkpoint_over_ours"] = c["with_buffer_in_checkpoint_s"] / c["ours_s"]
        out["checkpoint"] = c
        print(f"checkpoint with a {c['rows']:,}-row state buffer: {c['ours_s']:.3f}s (pending segment + networks); "
              f"buffer inside the checkpoint instead: {c['with_buffer_in_checkpoint_s']:.2f}s "
              f"({c['buffer_in_checkpoint_over_ours']:.0f}x); writing all rows as segments took "
              f"{c['persist_all_rows_as_segments_s']:.1f}s, {c['disk_mb']:.0f} MB")
        for images in (False, True):
            rows = (20_000 if not images else 2_000) // (4 if quick else 1)
            o = persistence_overhead(tmp, images, rows, 50 if not images or device != "cpu" else 5, device)
            o["rows"] = rows
            out["persistence"]["images" if images else "state"] = o
            print(f"persistence cost, {'2-camera image' if images else 'state'} SAC (UTD 1, batch 256): add "
                  f"{o['add_off_us']:.0f} -> {o['add_on_us']:.0f} us/transition with segments, update "
                  f"{o['update_ms']:.1f} ms -> {o['cost_pct']:.2f}% of learner throughput (target <= 5%)")
    return out


def _us(x: float) -> str:
    """Microseconds, as ms from 1,000 on."""
    return f"{x:.0f} µs" if x < 1000 else f"{x / 1000:.2f} ms"


def _ms(x: float) -> str:
    """Milliseconds, as seconds from 1,000 on."""
    return f"{x:.1f} ms" if x < 1000 else f"{x / 1000:.1f} s"


def table(runs: list[dict[str, Any]]) -> str:
    """The page's table per run: sampling, bytes per image transition, checkpoint and persistence cost, ratios."""
    return "\n\n".join(_table(run["results"]) for run in runs)


def _table(res: dict[str, Any]) -> str:
    st, im = res["sampling"]["state"], res["sampling"]["images"]
    sb3 = "sb3" in st

    def row(label: str, ours: str, naive: str, sb3_cell: str, ratio: str) -> list[str]:
        return [label, ours, naive, *([sb3_cell] if sb3 else []), ratio]

    def sampling_row(label: str, r: dict[str, float], digits: int) -> list[str]:
        ratio = f"{r['ours_over_naive']:.1f}× naive" + (f", {r['ours_over_sb3']:.2f}× SB3" if sb3 else "")
        return row(label, f"{r['ours']:,.{digits}f}", f"{r['naive']:,.{digits}f}",
                   f"{r['sb3']:,.{digits}f}" if sb3 else "", ratio)

    def persistence_row(label: str, p: dict[str, float], ratio: str) -> list[str]:
        return row(label, f"add {_us(p['add_off_us'])} → {_us(p['add_on_us'])}/transition; update "
                   f"{_ms(p['update_ms'])}", "", "", ratio)

    c, ps, pi = res["checkpoint"], res["persistence"]["state"], res["persistence"]["images"]
    met = "✔" if im["slots_per_row"] <= 1.05 else "✘ (not met)"  # the bytes stored; the preallocation is shown
    rows = [
        sampling_row(f"sampling, state buffer ({st['capacity'] / 1000:g}k rows), batches/s", st, 0),
        sampling_row(f"sampling, 2-camera 128×128 images ({im['capacity'] / 1000:g}k rows), batches/s", im, 1),
        row("image bytes stored per transition / one observation's bytes",
            f"{im['slots_per_row']:.3f} (slots used), {im['allocated_vs_raw_obs']:.3f} (preallocated)",
            f"{im['image_bytes_per_row_naive_vs_raw']:.1f}", "2.0 (Dict buffer keeps next_obs)",
            f"target ≤ 1.05 {met}"),
        row(f"checkpoint with a {c['rows'] / 1e6:g}M-row state buffer (flush pending rows + networks + fsync)",
            f"{c['ours_s']:.3f} s", "—", "—", f"{c['buffer_in_checkpoint_over_ours']:.0f}× faster than putting "
            f"the buffer in the checkpoint ({c['with_buffer_in_checkpoint_s']:.2f} s)"),
        row(f"writing all {c['rows'] / 1e6:g}M rows as segments (once, spread over the run)",
            f"{c['persist_all_rows_as_segments_s']:.1f} s, {c['disk_mb']:.0f} MB", "", "", ""),
        persistence_row("persistence cost, state SAC learner (UTD 1)", ps,
                        f"**{ps['cost_pct']:.2f} %** of learner throughput (target ≤ 5 %)"),
        persistence_row("persistence cost, image SAC learner (UTD 1)", pi, f"**{pi['cost_pct']:.2f} %**"),
    ]
    return markdown_table(["measurement", "ours", "naive", *(["SB3"] if sb3 else []), "ratio"], rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--device", default="cpu", help="where our buffers and the SAC learner live (cpu, cuda)")
    add_out_argument(p, NAME)
    args = p.parse_args()
    # One intra-op thread: the peers are single-threaded numpy, and on a shared VM extra threads only contend.
    torch.set_num_threads(1)
    started = dt.datetime.now(dt.UTC)
    results = measure(args.quick, args.device)
    print(table([{"results": results}]))
    print(f"result file: {write_result(args.out or default_path(NAME, started), NAME, args, results, started)}")


if __name__ == "__main__":
    main()
