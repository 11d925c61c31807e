"""Env steps/s of the MuJoCo arm tasks against MuJoCo's own stepping loop with no wrapper, in one run.

    .venv/bin/python benchmarks/mujoco_steps.py --task mujoco/pick_cube --num-envs 1 8 64 512 --obs state
    .venv/bin/python benchmarks/mujoco_steps.py --num-envs 1 8 --obs pixels --image-size 64

For each observation kind and ``num_envs`` N:

- ``ours``: ``MujocoVecEnv.step`` on one thread (``num_threads=1``) with random actions, so the
  controller (IK), rewards, auto-resets and observations are all included;
- ``raw``: the limit, the loop a user writes with no wrapper, also on one thread: for each world
  copy its ``ctrl`` and call ``mj_step`` ``frame_skip`` times (+ ``update_scene``/``render`` for
  pixels, with our env's own ``mujoco.Renderer``, so both sides draw in the same OpenGL context).
  It replays the very controls our env computed (recorded in an untimed run with the same seed
  and actions) from the same start state, and puts ended worlds
  into the start states ours drew, when ours did: both sides simulate and draw the very same
  trajectories (our physics is bit-identical to ``mj_step``; rendering cost depends on the pose).
  It reads nothing back, so the observation readout counts as overhead;
- ``overhead`` = raw steps/s / ours steps/s − 1 (issue 5's target: <= 10 %), the median over
  ``--rounds`` rounds in which ours and raw alternate (the machine is shared: only ratios within
  one round mean something); ``ovh cpu``: the same ratio in CPU time of this process
  (``time.process_time``), which time spent waiting for a core under load does not inflate;
- ``ours auto``: our default threading (a pool only from ``MIN_WORLDS_PER_THREAD`` worlds per
  thread), and ``rollout``: ``mujoco.rollout`` stepping the same controls with one thread per core
  and nothing read back (state only): the multithreaded limit.

``--parts`` also prints where a step of ours goes, in CPU microseconds (profiled separately), and
``--threads`` where a 2-thread pool starts to beat one thread (``MIN_WORLDS_PER_THREAD``).

Writes one result file (``--out``; default ``benchmarks/results/mujoco_steps/<UTC time>.json``); :func:`table`,
:func:`pixels_table` and :func:`parts_table` render it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.sims.mujoco.render import choose_gl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

NAME = "mujoco_steps"
# MuJoCo is imported by main (after MUJOCO_GL is set), so that importing this file for its tables needs no MuJoCo.
mujoco: Any = None


def _import_mujoco() -> None:
    global mujoco
    choose_gl("cpu")
    import mujoco as mj

    import robot_rl.sims.mujoco  # noqa: F401 - registers the tasks

    mujoco = mj


def make(task: str, n: int, obs: str, threads: int, size: int):
    """Our env, seed 0."""
    from robot_rl.core.config import TASKS

    return TASKS.get(task)(num_envs=n, obs=obs, num_threads=threads, image_size=size).make("cpu", 0)


def actions_for(env, count: int) -> list[torch.Tensor]:
    """Uniform random actions in [-1, 1] (seeded)."""
    g = torch.Generator().manual_seed(0)
    return [torch.rand(env.num_envs, *env.spec.action.shape, generator=g) * 2 - 1 for _ in range(count)]


def record(task: str, n: int, size: int, actions: list[torch.Tensor]) -> tuple[np.ndarray, list[dict[int, np.ndarray]]]:
    """What our env does for ``actions`` (untimed, same seed as the timed env): ``ctrl [T, N, nu]``
    and, per step, the state each auto-reset world was put in (``{world: mjSTATE_INTEGRATION}``)."""
    env = make(task, n, "state", 1, size)  # the physics does not depend on the observation kind
    ctrl: list[np.ndarray] = []
    resets: list[dict[int, np.ndarray]] = []
    step = env.backend.step

    def spy(c) -> None:
        ctrl.append(np.array(torch.as_tensor(c).double().numpy()))  # numpy (CPU backend) or torch
        step(c)

    env.backend.step = spy
    for a in actions:
        res = env.step(a)
        ended = (res.terminated | res.truncated).nonzero().flatten().tolist()
        states = env.get_state().numpy() if ended else None
        resets.append({i: states[i].copy() for i in ended} if ended else {})
    env.close()
    return np.stack(ctrl), resets


class Raw:
    """The user's own loop over ``MjData`` (one thread), replaying recorded controls."""

    def __init__(self, env, ctrl: np.ndarray, resets: list[dict[int, np.ndarray]], pixels: bool, size: int,
                 camera: str) -> None:
        self.model, self.fs, self.ctrl, self.resets = env.model, env.cfg.frame_skip, ctrl, resets
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        self.datas = [mujoco.MjData(self.model) for _ in range(env.num_envs)]
        for d, s in zip(self.datas, env.get_state().numpy()):
            mujoco.mj_setState(self.model, d, s, spec)
            mujoco.mj_forward(self.model, d)
        # The env's own mujoco.Renderer: one OpenGL context for both sides (osmesa contexts of the
        # same size differ by 10-20 % in speed on this machine, more than the wrapper costs).
        self.renderer = env._cameras[f"image.{camera}"].renderer if pixels else None
        self.image = np.empty((size, size, 3), np.uint8)
        self.camera = camera
        self.t = 0

    def step(self) -> None:
        """One control step of every world."""
        model, step, fs, ctrl = self.model, mujoco.mj_step, self.fs, self.ctrl[self.t]
        r = self.renderer
        for i, d in enumerate(self.datas):
            d.ctrl[:] = ctrl[i]
            for _ in range(fs):
                step(model, d)
            if r is not None:
                r.update_scene(d, camera=self.camera)
                r.render(out=self.image)
        # Episodes end where ours ended, in the same start states: both sides then simulate (and
        # draw) the very same trajectories.
        for i, state in self.resets[self.t].items():
            mujoco.mj_setState(self.model, self.datas[i], state, mujoco.mjtState.mjSTATE_INTEGRATION)
        self.t += 1


class Rollout:
    """``mujoco.rollout`` with a persistent pool (one thread per core), replaying recorded controls."""

    def __init__(self, env, ctrl: np.ndarray) -> None:
        self.model, self.fs = env.model, env.cfg.frame_skip
        threads = os.cpu_count() or 1
        self.datas = [mujoco.MjData(self.model) for _ in range(threads)]
        src = mujoco.MjData(self.model)
        full = mujoco.mjtState.mjSTATE_FULLPHYSICS
        self.state = np.zeros((env.num_envs, mujoco.mj_stateSize(self.model, full)))
        for i, s in enumerate(env.get_state().numpy()):
            mujoco.mj_setState(self.model, src, s, mujoco.mjtState.mjSTATE_INTEGRATION)
            mujoco.mj_getState(self.model, src, self.state[i], full)
        self.ctrl = np.repeat(ctrl[:, :, None], self.fs, axis=2)  # [T, N, frame_skip, nu]
        from mujoco import rollout

        self.pool = rollout.Rollout(nthread=threads)
        self.t = 0

    def step(self) -> None:
        """One control step of every world."""
        s, _ = self.pool.rollout(self.model, self.datas, self.state, self.ctrl[self.t], nstep=self.fs)
        self.state = s[:, -1]
        self.t += 1

    def close(self) -> None:
        """Stop the pool."""
        self.pool.close()


def timed(fn, steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds of this process for ``steps`` calls of ``fn``."""
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        fn()
    return time.perf_counter() - t0, time.process_time() - c0


def measure(task: str, n: int, obs: str, rounds: int, steps: int, size: int) -> dict[str, float]:
    """Medians over rounds: steps/s (wall) of each column, and ours/raw − 1 in wall and CPU time."""
    total = (rounds + 1) * steps
    ours1 = make(task, n, obs, 1, size)
    acts = actions_for(ours1, total)
    ctrl, resets = record(task, n, size, acts)
    raw = Raw(ours1, ctrl, resets, obs == "pixels", size, ours1.cfg.camera)
    auto = make(task, n, obs, 0, size)
    roll = Rollout(ours1, ctrl) if obs == "state" else None
    k = {"ours": 0, "auto": 0}

    def step_ours() -> None:
        ours1.step(acts[k["ours"]])
        k["ours"] += 1

    def step_auto() -> None:
        auto.step(acts[k["auto"]])
        k["auto"] += 1

    res: dict[str, list[float]] = {"ours": [], "raw": [], "auto": [], "rollout": [], "overhead": [],
                                   "overhead_cpu": []}
    for fn in (step_ours, raw.step, step_auto) + ((roll.step,) if roll else ()):  # warm-up round
        timed(fn, steps)
    for r in range(rounds):
        # Alternate the order, so a change of load between the two halves does not favour one side.
        if r % 2 == 0:
            t_o, t_r = timed(step_ours, steps), timed(raw.step, steps)
        else:
            t_r, t_o = timed(raw.step, steps), timed(step_ours, steps)
        res["ours"].append(n * steps / t_o[0])
        res["raw"].append(n * steps / t_r[0])
        res["overhead"].append(t_o[0] / t_r[0] - 1)
        res["overhead_cpu"].append(t_o[1] / t_r[1] - 1)
        res["auto"].append(n * steps / timed(step_auto, steps)[0])
        if roll is not None:
            res["rollout"].append(n * steps / timed(roll.step, steps)[0])
    for e in (ours1, auto):
        e.close()
    if roll is not None:
        roll.close()
    return {key: statistics.median(v) if v else float("nan") for key, v in res.items()}


def parts(task: str, n: int, steps: int) -> dict[str, float]:
    """CPU microseconds per step spent in each part of ``MujocoVecEnv.step`` (state obs, one thread)."""
    env = make(task, n, "state", 1, 64)
    acts = actions_for(env, 64)
    spent: dict[str, float] = {}

    def wrap(obj, name: str, label: str) -> None:
        fn = getattr(obj, name)

        def inner(*a, **kw):
            t0 = time.process_time()
            out = fn(*a, **kw)
            spent[label] = spent.get(label, 0.0) + time.process_time() - t0
            return out

        setattr(obj, name, inner)

    backend = env.backend
    wrap(backend, "_step_chunk", "physics")
    wrap(backend, "step", "backend.step")
    math = "numpy" if getattr(env.backend, "host_arrays", False) else "torch"  # older code: torch
    wrap(env, "controller", f"controller (IK, {math})")
    wrap(env.cfg, "evaluate", f"reward + success ({math})")
    wrap(env, "_observe", f"observation ({math})")
    wrap(env.cfg, "sample_start", "start states of ended worlds (torch)")
    wrap(backend, "set_start", "reset of ended worlds (mj_resetData, mj_step1, readout)")
    for i in range(16):
        env.step(acts[i % 64])
    spent.clear()
    t0 = time.process_time()
    for i in range(steps):
        env.step(acts[i % 64])
    total = time.process_time() - t0
    us = {k: v / steps * 1e6 for k, v in spent.items()}
    out = {"physics (mj_step2, 7 × mj_step, mj_step1), mj_jacSite, readout rows": us.pop("physics", 0.0)}
    out["backend.step around it (ctrl copy)"] = us.pop("backend.step", 0.0) - out[next(iter(out))]
    out.update(us)
    out["rest (action check, bookkeeping, to torch, StepResult)"] = total / steps * 1e6 - sum(out.values())
    out["total"] = total / steps * 1e6
    env.close()
    return out


def thread_sweep(task: str, sizes: list[int], rounds: int) -> list[dict[str, float]]:
    """Backend step (physics + readout) with 1 thread against a 2-thread pool: where the pool pays."""
    print("\nthread pool threshold (backend.step incl. controller, wall µs per step, medians):")
    out = []
    for n in sizes:
        envs = {t: make(task, n, "state", t, 64) for t in (1, 2)}
        a = actions_for(envs[1], 1)[0].double().numpy()  # the CPU backend's controller works in numpy
        steps = max(10, 2048 // n)
        res: dict[int, list[float]] = {1: [], 2: []}
        for r in range(rounds):
            for t in (1, 2) if r % 2 == 0 else (2, 1):
                e = envs[t]
                t0 = time.perf_counter()
                for _ in range(steps):
                    e.backend.step(e.controller(a, e.backend.task_readout()))
                res[t].append((time.perf_counter() - t0) / steps)
        m1, m2 = statistics.median(res[1]), statistics.median(res[2])
        print(f"  N={n:<4} 1 thread {m1 * 1e6:8.0f}   2 threads {m2 * 1e6:8.0f}   speed-up {m1 / m2:5.2f}", flush=True)
        out.append({"n": n, "one_thread_us": m1 * 1e6, "two_threads_us": m2 * 1e6, "speedup": m1 / m2})
        for e in envs.values():
            e.close()
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None or x != x else (f"{100 * x:.0f} %" if abs(x) >= 1 else f"{100 * x:.1f} %")


def _rate(x: float | None) -> str:
    return "–" if x is None or x != x else f"{x:,.0f}"


def table(runs: list[dict[str, Any]]) -> str:
    """State observations: | N | ours | raw | overhead (wall) | ovh cpu | ours auto | rollout | (steps/s over
    worlds; overhead = ours time / raw time − 1, medians over the alternating rounds)."""
    rows = [[str(r["n"]), _rate(r["ours"]), _rate(r["raw"]), _pct(r["overhead"]), _pct(r["overhead_cpu"]),
             _rate(r["auto"]), _rate(r["rollout"])]
            for run in runs for r in run["results"]["rows"] if r["obs"] == "state"]
    return markdown_table(["N", "ours", "raw", "overhead (wall)", "ovh cpu", "ours auto", "rollout"], rows, "rrrrrrr")


def pixels_table(runs: list[dict[str, Any]]) -> str:
    """Pixel observations: | N | ours | raw | overhead | ovh cpu |."""
    rows = [[str(r["n"]), _rate(r["ours"]), _rate(r["raw"]), _pct(r["overhead"]), _pct(r["overhead_cpu"])]
            for run in runs for r in run["results"]["rows"] if r["obs"] == "pixels"]
    return markdown_table(["N", "ours", "raw", "overhead", "ovh cpu"], rows, "rrrrr")


def parts_table(runs: list[dict[str, Any]]) -> str:
    """``--parts``: CPU µs per step by part (rows) and number of worlds (columns)."""
    parts = [p for run in runs for p in run["results"].get("parts", [])]
    names = list(dict.fromkeys(k for p in parts for k in p["us"]))
    rows = [[name, *(f"{p['us'][name]:,.0f}" if name in p["us"] else "—" for p in parts)] for name in names]
    return markdown_table(["part", *(f"N = {p['n']}" for p in parts)], rows, "l" + "r" * len(parts))


def main() -> None:
    """Measure, write the result file, print steps/s and ratios."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="mujoco/pick_cube")
    ap.add_argument("--num-envs", type=int, nargs="+", default=[1, 8, 64, 512])
    ap.add_argument("--obs", nargs="+", default=["state"], choices=["state", "pixels"])
    ap.add_argument("--image-size", type=int, default=64, help="pixels: camera height and width")
    ap.add_argument("--rounds", type=int, default=5, help="alternating ours/raw rounds (medians are printed)")
    ap.add_argument("--world-steps", type=int, default=2048, help="world steps per measurement (state)")
    ap.add_argument("--parts", action="store_true", help="also print microseconds per part of a step")
    ap.add_argument("--threads", action="store_true", help="also measure where a 2-thread pool starts to pay")
    add_out_argument(ap, NAME)
    args = ap.parse_args()
    _import_mujoco()
    from robot_rl.sims.mujoco.cpu_backend import MIN_WORLDS_PER_THREAD

    torch.set_num_threads(1)
    started = dt.datetime.now(dt.UTC)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, mujoco "
          f"{mujoco.__version__}, torch {torch.__version__}, task {args.task}, "
          f"MIN_WORLDS_PER_THREAD {MIN_WORLDS_PER_THREAD}")
    print(f"{'obs':<7} {'N':>5} {'ours':>9} {'raw':>9} {'overhead':>9} {'ovh cpu':>9} {'ours auto':>10} "
          f"{'rollout':>9}")
    results: dict[str, Any] = {"task": args.task, "mujoco": mujoco.__version__,
                               "min_worlds_per_thread": MIN_WORLDS_PER_THREAD, "rows": []}
    for obs in args.obs:
        for n in args.num_envs:
            budget = args.world_steps if obs == "state" else args.world_steps // 16
            steps = max(4, budget // n)
            m = measure(args.task, n, obs, args.rounds, steps, args.image_size)
            results["rows"].append({"obs": obs, "n": n, "steps": steps, **m})
            print(f"{obs:<7} {n:>5} {m['ours']:9.0f} {m['raw']:9.0f} {m['overhead']:9.1%} "
                  f"{m['overhead_cpu']:9.1%} {m['auto']:10.0f} {m['rollout']:9.0f}", flush=True)
    if args.threads:
        results["threads"] = thread_sweep(args.task, [2, 4, 8, 16, 32, 64], args.rounds)
    if args.parts:
        results["parts"] = []
        for n in args.num_envs:
            p = parts(args.task, n, max(8, args.world_steps // n))
            results["parts"].append({"n": n, "us": p})
            print(f"\nwhere a step goes, N={n} (state, one thread), CPU µs per step:")
            for k, v in p.items():
                print(f"  {k:<60} {v:9.1f}")
    print(f"result file: {write_result(args.out or default_path(NAME, started), NAME, args, results, started)}")


if __name__ == "__main__":
    main()
