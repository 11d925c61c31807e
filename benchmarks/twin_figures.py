"""Figures of docs/real2sim.md: fitted parameters with error bars, and one episode replayed before/after the fit.

    python benchmarks/twin_figures.py [--out docs/figures]

Logs 20 episodes (20 steps each) of ``mujoco/reach`` with hidden parameters (as examples/twin_fit.py does),
fits actuator_gain, dof_damping, body_mass, geom_friction and the action delay with 4 CMA-ES restarts (population
8, 40 iterations, then 12 Levenberg–Marquardt steps) and 8 bootstrap refits, prints the numbers, writes them to a
result file (``--result``; default ``benchmarks/results/twin_figures/<UTC time>.json``), from which
docs/real2sim.md's table is built (``docs_table``), and writes ``twin_params.png`` and ``twin_trajectory.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.config import TASKS
from robot_rl.sims.base import ParamRange, RandomizeConfig
from robot_rl.sims.mujoco.shifted import ScriptedReachDemonstrator, record_demos
from robot_rl.twin.calibrate import TwinFitConfig, calibrate, prepare
from robot_rl.twin.fit import FitConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, write_result

HIDDEN = {"actuator_gain": 0.6, "dof_damping": 2.0, "body_mass": 1.3}
HIDDEN_DELAY = 1
PARAMS = "actuator_gain,dof_damping,body_mass,geom_friction,action_delay"
NAME = "twin_figures"


def record(out: Path, episodes: int = 20, steps: int = 20) -> Path:
    """The hidden-parameter "real" reach arm, logged by a noisy scripted teleoperator at 25 Hz."""
    hidden = RandomizeConfig(params={k: ParamRange(v, v) for k, v in HIDDEN.items()},
                             action_delay=(HIDDEN_DELAY, HIDDEN_DELAY))
    env = TASKS.get("mujoco/reach")(num_envs=10, max_episode_steps=steps, terminate_on_success=False,
                                    randomize=hidden).make("cpu", 1)
    try:
        record_demos(env, out, episodes, ScriptedReachDemonstrator(noise=0.5, seed=3), fps=25.0)
    finally:
        env.close()
    return out


def plot_params(report, path: Path) -> None:
    """Fitted factors (±2 std) against the hidden truth, on a log axis with the search bounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    truth = {**HIDDEN, "action_delay": HIDDEN_DELAY}
    fig, (ax, ax_d) = plt.subplots(1, 2, figsize=(8.5, 3.4), gridspec_kw={"width_ratios": [4, 1]})
    scales = [p for p in report.params if p.name != "action_delay"]
    for i, prm in enumerate(scales):
        lo, hi = prm.interval(2.0)
        ax.errorbar([i], [prm.value], yerr=[[prm.value - lo], [hi - prm.value]], fmt="o", color="C0", capsize=5,
                    label="fit ± 2 std (clipped to the bounds)" if i == 0 else None)
        if prm.key in truth:
            ax.plot([i], [truth[prm.key]], "x", color="C3", ms=10, mew=2, label="hidden truth" if i == 0 else None)
    ax.axhspan(scales[0].low, scales[0].high, color="0.93", zorder=0)
    ax.axhline(1.0, color="0.5", lw=0.8, ls=":")
    ax.set_yscale("log")
    ax.set_yticks([0.2, 0.5, 1, 2, 5], ["0.2", "0.5", "1", "2", "5"])
    ax.minorticks_off()
    ax.set_xticks(range(len(scales)), [p.key for p in scales], fontsize=8)
    ax.set_ylabel("factor on the simulator's nominal value")
    ax.legend(fontsize=8, loc="upper left")
    delay = report.param("action_delay")
    ax_d.errorbar([0], [delay.value], yerr=[[2 * (delay.std or 0)], [2 * (delay.std or 0)]], fmt="o", color="C0",
                  capsize=5)
    ax_d.plot([0], [truth["action_delay"]], "x", color="C3", ms=10, mew=2)
    ax_d.set_xticks([0], ["action_delay"], fontsize=8)
    ax_d.set_ylim(-0.5, delay.high + 0.5)
    ax_d.set_ylabel("steps")
    fig.suptitle("Twin fit of 20 logged episodes (geom_friction: the logs cannot inform it)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_trajectory(cfg: TwinFitConfig, report, path: Path, episode: int = 0) -> None:
    """Joint angles j2, j3 and the grip height of one episode: logged, uncalibrated replay, fitted replay."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, logs, rep = prepare(cfg)
    try:
        neutral = [p.neutral for p in rep.params]
        fitted = [report.param(p.key).value for p in rep.params]
        pred = rep.predict(np.array([neutral, fitted]))[:, episode]
    finally:
        rep.close()
    n = int(logs.lengths[episode]) + 1
    t = np.arange(n) / report.control_hz
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.0))
    for ax, (col, name) in zip(axes, ((1, "joint j2 (rad)"), (2, "joint j3 (rad)"), (15, "grip height (m)"))):
        ax.plot(t, logs.states[episode, :n, col], "k-", lw=2.5, alpha=0.35, label="logged ('real')")
        ax.plot(t, pred[0, :n, col], "C1--", label="sim, uncalibrated")
        ax.plot(t, pred[1, :n, col], "C0:", lw=2, label="twin (fitted)")
        ax.set_xlabel("time (s)")
        ax.set_title(name, fontsize=9)
    axes[0].legend(fontsize=8)
    fig.suptitle("Open-loop replay of the logged actions, episode 0", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    """Record, fit, print, write the result file, plot."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("docs/figures"), help="where the two figures go")
    add_out_argument(p, NAME, flag="--result")
    args = p.parse_args()
    started = dt.datetime.now(dt.UTC)
    root = Path(tempfile.mkdtemp(prefix="twin-fig-"))
    logs = record(root / "real")
    fit = FitConfig(population=8, iterations=40, restarts=4, bootstrap=8)
    cfg = TwinFitConfig(episodes=logs, params=PARAMS, fit=fit, out=root / "twin.json")
    t0 = time.perf_counter()
    report, result = calibrate(cfg)
    wall = time.perf_counter() - t0
    results = {"wall_s": round(wall, 1), "evaluations": result.evaluations,
               "hidden": {**HIDDEN, "action_delay": HIDDEN_DELAY},
               "fit": dataclasses.asdict(fit),
               "params": {q.key: {"value": q.value, "std": q.std, "std_restarts": q.std_restarts,
                                  "std_bootstrap": q.std_bootstrap, "std_local": q.std_local,
                                  "restarts": q.restarts} for q in report.params},
               "restart_losses": report.fit["restart_losses"],
               "converged_restarts": report.fit["converged_restarts"],
               "loss_before": report.loss_before, "loss_after": report.loss_after,
               "rms_before_mean": float(np.mean(report.errors_before)),
               "rms_after_mean": float(np.mean(report.errors_after))}
    print(json.dumps(results, indent=2))
    path = write_result(args.result or default_path(NAME, started), NAME, args, results, started)
    args.out.mkdir(parents=True, exist_ok=True)
    plot_params(report, args.out / "twin_params.png")
    plot_trajectory(cfg, report, args.out / "twin_trajectory.png")
    print(f"wrote {path}, {args.out / 'twin_params.png'} and {args.out / 'twin_trajectory.png'}")


def _num(x: float | None) -> str:
    """A spread as the page prints it: ``5.0e-5``, ``0.715``, ``0``."""
    if x is None:
        return "–"
    if abs(x) < 1e-12:  # a spread of identical refits, up to rounding
        return "0"
    if abs(x) >= 0.01:
        return f"{x:#.3g}"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def docs_table(records: list[dict[str, Any]]) -> str:
    """docs/real2sim.md's table: each parameter's hidden value, fit and spread (the fit to the spread's second
    significant digit, at least three decimals), the spread split into its three terms."""
    r = records[0]["results"]
    lines = ["| parameter | hidden | fit | std | restarts / bootstrap / local |", "| --- | --- | --- | --- | --- |"]
    for key, q in r["params"].items():
        hidden = r["hidden"].get(key)
        if key == "action_delay":
            fit = f"{q['value']:g}"
        else:
            decimals = 3 if not q["std"] else max(3, 1 - math.floor(math.log10(q["std"])))
            fit = f"{q['value']:.{decimals}f}"
        terms = " / ".join(_num(q[t]) for t in ("std_restarts", "std_bootstrap", "std_local"))
        shown = "— (never acts)" if hidden is None else f"{hidden:g}" if key == "action_delay" else repr(float(hidden))
        lines.append(f"| `{key}` | {shown} | {fit} | "
                     f"{_num(q['std'])} | {terms} |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
