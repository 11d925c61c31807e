"""The tables of RESULTS_so101.md, rebuilt from their files: ``sim_so101_loop.py``'s loop timings,
``lerobot_side_by_side.py``'s comparisons with LeRobot, and ``hil_bench.py --robot sim_so101``'s
camera-only runs (``hil_learning_sim_so101_s*.json`` and ``hil_so101_compare.py``'s ``with_without.json``).

Those scripts import MuJoCo, torch or gym_hil at module level; ``report.py`` imports this module instead (the
standard library and the sibling table modules only).
"""

from __future__ import annotations

import math
from typing import Any

from result_file import markdown_table, pct

Record = dict[str, Any]


def _n(x: float) -> str:
    return f"{math.floor(x + 0.5):,}"


def _rows(records: list[Record]) -> list[dict[str, Any]]:
    """The loop runs of ``sim_so101_loop.py`` files (a file holds one run, or a list of runs)."""
    out: list[dict[str, Any]] = []
    for rec in records:
        r = rec["results"]
        out += r if isinstance(r, list) else [r]
    return out


def _loop_cells(r: dict[str, Any]) -> dict[str, str]:
    period_ms = 1000 / r["hz"]
    return {"period p50": f"{r['p50_ms']:.1f} ms", "period p99": f"{r['p99_ms']:.1f} ms ({r['p99_ratio']:.3f} ×)",
            "period max": f"{r['max_ms']:.1f} ms",
            "lost steps (ticks more than 10 % late)": f"{r['lost_steps']} of {r['ticks']}"
            + (f" ({100 * r['lost_steps'] / r['ticks']:.0f} %)" if r["lost_steps"] else ""),
            "physics catch-ups": f"{r['sim_lag_skips']:.0f}",
            "tick body p50 / p99": f"{r['body_p50_ms']:.1f} / {r['body_p99_ms']:.1f} ms",
            "picks in the minute" if r["seconds"] == 60 else "picks": str(r["picks"]),
            "_target_p50": f"{period_ms:.1f} ms"}


def _loop_table(head: list[str], runs: list[dict[str, Any]]) -> str:
    cells = [_loop_cells(r) for r in runs]
    target = {"period p50": cells[0]["_target_p50"], "period p99": "≤ 1.10 ×",
              "lost steps (ticks more than 10 % late)": "0"}
    names = [k for k in cells[0] if not k.startswith("_")]
    return markdown_table(head, [[name, *(c[name] for c in cells), target.get(name, "")] for name in names])


def loop_rt_table(records: list[Record]) -> str:
    """The loop under load on the normal scheduler and with ``safety.realtime_priority`` (one file, both runs)."""
    runs = _rows(records)
    cams = runs[0]["cameras"]["front"]
    head = [f"{cams[0]}×{cams[1]} cameras, {runs[0]['load_processes']} extra busy processes",
            *("normal scheduling" if r["realtime_priority"] == 0
              else f"`safety.realtime_priority={r['realtime_priority']}`" for r in runs), "target"]
    return _loop_table(head, runs)


def loop_table(records: list[Record]) -> str:
    """The loop on the quiet machine, one column per camera size (one file each)."""
    runs = _rows(records)
    head = ["", *(f"{r['cameras']['front'][0]}×{r['cameras']['front'][1]} cameras" for r in runs), "target"]
    return _loop_table(head, runs)


# ---- LeRobot side by side (lerobot_side_by_side.py) -------------------------------------------------------------


def _held_from(curve: list[dict[str, Any]], level: float = 0.8) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The checkpoint from which every later one is ≥ ``level``, and the dips below it after the first one ≥ it."""
    held = None
    for i, c in enumerate(curve):
        if all(x["success"] >= level for x in curve[i:]):
            held = c
            break
    first = next((i for i, c in enumerate(curve) if c["success"] >= level), None)
    dips = [] if first is None or held is None else [c for c in curve[first:curve.index(held)] if c["success"] < level]
    return held, dips


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}"


def side_by_side_table(records: list[Record]) -> str:
    """The 30,000-step comparison (``--merge``'s file): when each side first and for good reached 80 % alone, the
    budget's wall time, updates, memory and the kill."""
    r = records[0]["results"]
    lr, rr = r["lerobot"], r["robot_rl"]
    row: list[list[str]] = []
    f_lr, f_rr = lr["to_80"], rr["to_80"]
    s_lr = next(c["success"] for c in lr["curve"] if c["env_steps_taken"] == f_lr["env_steps_taken"])
    s_rr = next(c["success"] for c in rr["curve"] if c["env_steps_taken"] == f_rr["env_steps_taken"])
    row.append(["policy alone (10 stochastic episodes a checkpoint), first checkpoint at ≥ 80 %",
                f"{pct(s_lr)} at {_n(f_lr['env_steps_taken'])} env steps, {_n(f_lr['wall_s'])} s",
                f"{pct(s_rr)} at {_n(f_rr['env_steps_taken'])} env steps, {_n(f_rr['wall_s'])} s",
                f"env steps {_ratio(f_rr['env_steps_taken'], f_lr['env_steps_taken'])}, wall time "
                f"{_ratio(f_rr['wall_s'], f_lr['wall_s'])}"])
    held = []
    for side in (lr, rr):
        h, dips = _held_from(side["curve"])
        assert h is not None
        dip = "; ".join(f"{pct(d['success'])} at {_n(d['env_steps_taken'])}" for d in dips)
        cell = f"{_n(h['env_steps_taken'])} env steps, {_n(h['wall_s'])} s"
        held.append((h, cell + (f" (dips: {dip})" if dip else "")))
    row.append(["from then on, every checkpoint ≥ 80 % from", held[0][1], held[1][1],
                f"{_ratio(held[1][0]['env_steps_taken'], held[0][0]['env_steps_taken'])}, "
                f"{_ratio(held[1][0]['wall_s'], held[0][0]['wall_s'])}"])
    kill = rr["kill"]
    row.append(["final checkpoint", f"{pct(lr['final']['success'])} ({_n(lr['final']['env_steps_taken'])} env steps)",
                f"{pct(rr['final']['success'])} ({_n(rr['final']['env_steps_taken'])} env steps taken, "
                f"{_n(kill['transitions_lost'])} redone after the kill)", ""])
    row.append(["wall time for the budget",
                f"{_n(lr['wall_s'])} s (paced at {lr['fps']} Hz: {_n(r['budget'] / lr['fps'])} s is the pace)",
                f"{_n(rr['wall_s'])} s, including the kill and a {kill['learner_back_after_s']:.1f} s restart",
                _ratio(rr["wall_s"], lr["wall_s"])])
    row.append(["gradient updates", _n(lr["optimization_steps"]),
                f"{_n(rr['updates'])} ({_n(kill['updates_lost'])} lost to the kill and redone)",
                _ratio(rr["updates"], lr["optimization_steps"])])
    mem = lr["peak_rss_mb"]
    row.append(["peak RSS (sum of each stack's processes)",
                f"{_n(mem['total'])} MB (learner {_n(mem['learner'])} + actor {_n(mem['actor'])})",
                f"{_n(rr['peak_rss_mb']['total'])} MB (one process)",
                _ratio(rr["peak_rss_mb"]["total"], mem["total"])])
    row.append(["kill -9 of the learner", "not in this run" if lr["kill"].get("skipped") else "see below",
                f"lost {_n(kill['transitions_lost'])} transitions and {_n(kill['updates_lost'])} updates, back in "
                f"{kill['learner_back_after_s']:.1f} s", ""])
    return markdown_table(["", "LeRobot 0.4.4 `rl`", "robot-rl `train`", "robot-rl / LeRobot"], row)


def short_run_table(records: list[Record]) -> str:
    """The 6,000-step comparison: every checkpoint's policy alone, the steps, updates, wall time and memory."""
    r = records[0]["results"]
    lr, rr = r["lerobot"], r["robot_rl"]
    kill = rr["kill"]

    def alone(side: dict[str, Any]) -> str:
        best = max(c["success"] for c in side["curve"])
        last = side["curve"][-1]["env_steps_taken"]
        return f"{pct(best)} at best ({len(side['curve'])} checkpoints, to {last} steps)"

    def to_80(side: dict[str, Any]) -> str:
        t = side["to_80"]
        return "not reached" if t is None else f"{_n(t['env_steps_taken'])} env steps, {_n(t['wall_s'])} s"

    mem = lr["peak_rss_mb"]
    redone = rr["env_steps_taken"] - rr["summary"]["env_steps"]
    lr_steps = str(lr["env_steps_taken"]) + (" (no kill in this run)" if lr["kill"].get("skipped") else "")
    rows = [["policy-alone success, every checkpoint (10 stochastic + 1 deterministic episodes)", alone(lr), alone(rr),
             "—"],
            ["env steps / wall time to 80 %", to_80(lr), to_80(rr), "—"],
            ["env steps taken (including those lost to the kill)",
             lr_steps, f"{rr['env_steps_taken']} ({rr['summary']['env_steps']} + {redone} redone after the kill)", ""],
            ["gradient updates (critic steps)", str(lr["optimization_steps"]),
             f"{rr['summary']['gradient_updates']} (+{kill['updates_lost']} lost and redone)", ""],
            ["wall time, start to budget",
             f"{_n(lr['wall_s'])} s (paced at {lr['fps']} Hz: {_n(lr['env_steps_taken'] / lr['fps'])} s is the pace)",
             f"{_n(rr['wall_s'])} s (including the kill and a {kill['learner_back_after_s']:.1f} s restart)",
             _ratio(rr["wall_s"], lr["wall_s"])],
            ["checkpoints", f"{len(lr['snapshots'])}; each rewrites the replay buffer as a LeRobotDataset",
             f"{len(rr['snapshots'])}; atomic, the replay appended in segments", ""],
            ["peak RSS (sum of each stack's processes)",
             f"{_n(mem['total'])} MB (learner {_n(mem['learner'])} + actor {_n(mem['actor'])})",
             f"{_n(rr['peak_rss_mb']['total'])} MB (one process)", _ratio(rr["peak_rss_mb"]["total"], mem["total"])]]
    return markdown_table(["", "LeRobot 0.4.4 `rl`", "robot-rl `train`", "robot-rl / LeRobot"], rows)


def kill_table(records: list[Record]) -> str:
    """``kill -9`` of robot-rl's learner halfway through the 6,000-step run (its file). LeRobot's kill is not here: its
    figures were assembled by hand from the logs of a run that never wrote its file, and were withdrawn."""
    kill = records[0]["results"]["robot_rl"]["kill"]
    restored = kill["restored"]
    rows = [["killed at", f"env step {kill['env_steps_taken']}, update {kill['updates']}"],
            ["resume mechanism", "`robot-rl train --resume RUN` (same overrides)"],
            ["learner back after", f"{kill['learner_back_after_s']:.1f} s"],
            ["restored", f"checkpoint at {restored['checkpoint_env_steps']} env steps and {restored['updates']} "
                         f"updates; the replay at {restored['replay_transitions']} transitions"],
            ["lost", f"{kill['transitions_lost']} transitions (since the last committed segment), "
                     f"{kill['updates_lost']} updates (since the last checkpoint), both redone"],
            ["the running actor", "in the same process, so it is restarted with the learner"]]
    return markdown_table(["", "robot-rl"], rows)


# ---- camera-only HIL-SERL (hil_bench.py --robot sim_so101) --------------------------------------------------------


def _only_run(record: Record) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(arm, run, final policy alone) of a one-run learning file."""
    res = record["results"]
    (name, run), = res["runs"].items()
    return name, run, res.get("final_policy_alone", {}).get(name, {})


def camera_evals_table(records: list[Record]) -> str:
    """One run's evaluations of the policy alone: training minutes, env steps, updates, successes of 10."""
    _, run, _ = _only_run(records[0])
    n = records[0]["results"]["config"]["eval_episodes"]
    rows = [[f"{e['train_wall_s'] / 60:.1f} min" if e["env_steps"] else "0", _n(e["env_steps"]), _n(e["updates"]),
             f"{round(e['success'] * n)}/{n}"] for e in run["evals"]]
    return markdown_table(["training time", "env steps", "updates", "policy alone"], rows, "rrrr")


def _after(success: list[float], minutes: list[float], i: int) -> str:
    """The evaluations after the first at the goal: their range, the dips below the goal, how many at 100 %."""
    rest = success[i + 1:]
    if not rest:
        return "–"
    if min(rest) == 1.0:
        return f"10/10 at every evaluation ({len(rest)})"
    dips = ", ".join(f"{pct(s)} at {m:.1f} min" for s, m in zip(rest, minutes[i + 1:], strict=True) if s < 0.9)
    full = sum(s == 1.0 for s in rest)
    return (f"{round(10 * min(rest))}–{round(10 * max(rest))}/10" + (f" ({dips}; " if dips else " (")
            + f"100 % at {full} of {len(rest)})")


def seeds_table(records: list[Record]) -> str:
    """The runs with the person, per seed, from ``hil_so101_compare.py``'s curves (parsed from each run's log: seed
    12's JSON was lost, not its log)."""
    res = records[0]["results"]
    rows = []
    for r in res["runs"]:
        if r["arm"] != "with intervener":
            continue
        i = next((k for k, s in enumerate(r["success"]) if s >= res["goal"]), None)
        first = "–" if i is None else f"{r['minutes'][i]:.1f} min, {_n(r['env_steps'][i])} env steps"
        rate = r["updates"][-1] / (60 * r["minutes"][-1])
        rows.append([str(r["seed"]), first, "–" if i is None else _after(r["success"], r["minutes"], i),
                     f"{_n(r['updates'][-1])} ({rate:.1f})"])
    return markdown_table(["seed", f"first policy-alone ≥ {pct(res['goal'])}", "then", "updates (per s)"], rows, "lllr")


def with_without_table(records: list[Record]) -> str:
    """Camera-only runs with and without the person, one column per run file."""
    cols, head = [], [""]
    for rec in records:
        name, run, final = _only_run(rec)
        cfg = rec["results"]["config"]
        minutes = cfg["minutes"] if name == "with intervener" else cfg["without_minutes"]
        head.append(f"{'with the person' if name == 'with intervener' else 'without'} (seed {cfg['seed']}, "
                    f"{minutes:.0f} min)")
        ev = run["evals"]
        mins = [e["train_wall_s"] / 60 for e in ev]
        i = next((k for k, e in enumerate(ev) if e["success"] >= 0.9), None)
        eps, wall = run["episodes"], run["train_wall_s"]
        first10 = [e for e in eps if e["wall_s"] < 600]
        last10 = [e for e in eps if e["wall_s"] >= wall - 600]
        det, sto = final["deterministic"], final["stochastic"]
        rate = run["rate"]
        cols.append(["–" if i is None else f"{mins[i]:.1f} min, {_n(ev[i]['env_steps'])} env steps",
                     "–" if i is None else _after([e["success"] for e in ev], mins, i),
                     f"{round(10 * det['success'])}/10 deterministic, {round(10 * sto['success'])}/10 sampling",
                     f"{pct(sum(e['success'] for e in first10) / len(first10))} / "
                     f"{pct(sum(e['success'] for e in last10) / len(last10))}",
                     pct(run["learner"]["intervened_received"] / run["env_steps"]),
                     f"{_n(run['learner']['updates'])} in {wall / 60:.0f} min ({run['learner']['updates'] / wall:.1f})",
                     f"{rate['p99_s'] / rate['target_period_s']:.2f}× ({rate['overruns']} of {_n(rate['ticks'])})"])
    names = ["first policy-alone ≥ 90 %", "policy alone after that", "final policy alone (10 episodes)",
             "training episodes that succeeded, first 10 min / last 10 min", "steps the person took",
             "updates (per s)", "10 Hz loop p99 (late ticks)"]
    return markdown_table(head, [[n, *(c[k] for c in cols)] for k, n in enumerate(names)])
