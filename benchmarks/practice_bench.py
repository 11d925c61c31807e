"""Autonomous practice against HIL-SERL on the simulated pick: the person's actions per hour, time to 90 % alone.

    python benchmarks/practice_bench.py --quick                     # one seed, sim_arm, a few minutes per mode
    python benchmarks/practice_bench.py --robot sim_arm --seeds 1 2 3 --minutes 20 --time-scale 1

Both modes start from the same scripted demonstrations (in the task learner's demo buffer), SAC + RLPD with the
deploy defaults (``hil_learn.learn_config``), on the same seeded arm:

- ``baseline``, HIL-SERL as `robot-rl deploy --mode learn` runs it: every episode starts from a scene the simulator
  placed (``robot.resets=teleport``), counted as **one human action per reset**, and the scripted person
  (:class:`~robot_rl.hardware.sim_pick.PickIntervener`, always watching) takes over when the policy stalls, **one
  action per takeover**;
- ``practice``, `robot-rl deploy --mode practice`: ``robot.resets=physical`` (nothing placed between attempts), the
  task and the reset policy take turns, each with its own learner, both learning from every step; the simulated
  person is asked to put the scene back only when the robot is stuck (``practice.*``), **one action per reset**;
  nobody takes over;
- ``practice_placed`` (``--modes``), an ablation, not a workflow: practice where the benchmark places the scene
  before every task attempt (not counted), so the task policy's starts are the baseline's: what is left of the gap
  to the baseline is the second learner and the shared stream, not where the attempts start;
- ``practice_takeovers`` (``--modes``): practice where the scripted person also takes over the task policy's next
  attempt when the robot asks for it (the scene at its start and the task still failing: ``--teleop
  pick_helper``), **one action per takeover** too.

Every ``--eval-every-steps`` training steps the task policy runs alone (deterministic, nobody at the device) on
``--eval-episodes`` seeded episodes from the demos' start distribution (for practice each of those starts is
placed by the benchmark, not counted as the person's: it is the measurement, not the training). Time is robot time
(wall-clock × ``--time-scale``), evaluations not counted. Writes one result file (``--out``; default
``benchmarks/results/practice_bench/<UTC time>.json``) and a plot beside it; :func:`table` renders it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hil_learn import EVAL_SEED, LearnBenchConfig, learn_config, learner_endpoint, record_demos, run_learning
from result_file import add_out_argument, default_path, markdown_table, pct, write_result

NAME = "practice_bench"
MODES = ("baseline", "practice", "practice_takeovers", "practice_placed")
"""HIL-SERL; practice with the person's resets only; practice where the person also takes over when asked; the
ablation where every task attempt starts from a scene the benchmark places (not counted as the person's)."""


def _eval_alone(safety: Any, cfg: Any, policy: Any, version: int, episodes: int) -> dict[str, Any]:
    """The task policy alone on ``episodes`` starts the benchmark places (``human_reset`` with the eval seeds)."""
    from robot_rl.human_loop.deploy import Deployer
    from robot_rl.human_loop.devices.scripted import ScriptedDevice

    device = ScriptedDevice()
    device.connect()
    eval_cfg = dataclasses.replace(cfg, mode="eval", deterministic=True, status=False)
    d = Deployer(eval_cfg, safety, device, policy, policy_version=version)
    wins, ends = [], []
    for i in range(episodes):
        safety.robot.human_reset(EVAL_SEED * 1000 + i)
        record = d.run_episode(i)
        wins.append(record.success)
        ends.append(record.end)
    safety.robot.hold()
    return {"success": float(np.mean(wins)), "version": version, "ends": {e: ends.count(e) for e in set(ends)}}


def run_practice(cfg: Any, b: LearnBenchConfig, demos: Any, minutes: float, run_dir: Path,
                 practice: dict[str, Any], takeovers: bool = False, placed: bool = False,
                 mirror: bool = True) -> dict[str, Any]:
    """One practice run of ``minutes`` training wall-clock (evaluations paused out), as `deploy --mode practice`.

    ``takeovers``: the scripted person also takes over the task policy's next attempt when the robot asks for it
    (``--teleop pick_helper``), as well as putting the scene back. ``placed``: the benchmark places the scene
    before every task attempt (the ablation ``practice_placed``; not counted as the person's). ``mirror``
    False (``--no-mirror``, an ablation): each learner gets its own policy's attempts only.
    """
    from robot_rl.hardware.safety import SafetyLayer
    from robot_rl.human_loop.deploy import Deployer
    from robot_rl.human_loop.devices.scripted import ScriptedDevice
    from robot_rl.human_loop.hil_learner import HILLearner
    from robot_rl.human_loop.practice.config import PracticeConfig
    from robot_rl.human_loop.practice.loop import (
        PracticeRunner,
        SimulatedPerson,
        StartStatus,
        reset_config,
        task_config,
    )

    cfg = dataclasses.replace(cfg, robot=dataclasses.replace(cfg.robot, resets="physical"), mode="practice",
                              practice=PracticeConfig(reset_address="tcp://127.0.0.1:*", **practice))
    torch.manual_seed(cfg.seed)
    learners = {"task": HILLearner(task_config(cfg), run_dir / "task", demos=demos, publish_every=20),
                "reset": HILLearner(reset_config(cfg), run_dir / "reset", publish_every=20)}
    arm = cfg.robot.make()
    evals: list[dict[str, Any]] = []
    with learners["task"].serving(), learners["reset"].serving(), SafetyLayer(arm, cfg.safety) as safety:
        from robot_rl.hardware.sim_pick import PickIntervener

        device = (ScriptedDevice(PickIntervener(arm, takeover_steps=b.takeover_steps, press_success=False,
                                                only_when_asked=True)) if takeovers else ScriptedDevice())
        device.connect()
        loops = {}
        for name, loop_cfg in (("task", task_config(cfg)), ("reset", reset_config(cfg))):
            loops[name] = Deployer(loop_cfg, safety, device, loop_cfg.algo.build(arm.features, "cpu", 0).make_policy(),
                                   endpoint=learner_endpoint(learners[name], arm, loop_cfg),
                                   task_reader=StartStatus(arm) if name == "reset" else None)
        # The practice clock is robot time: the budget and the stuck time limit are per robot hour and second.
        runner = PracticeRunner(cfg, loops["task"], loops["reset"], SimulatedPerson(arm, seed=cfg.seed),
                                clock=lambda: time.monotonic() * b.time_scale)
        if not mirror:  # the ablation: each learner learns from its own policy's attempts only
            loops["task"].on_row = loops["reset"].on_row = None
        for d in loops.values():
            d.wait_first_weights()
        t_start, paused = time.monotonic(), 0.0

        def train_wall() -> float:
            return time.monotonic() - t_start - paused

        def steps() -> int:
            return loops["task"].steps + loops["reset"].steps

        def waited() -> float:  # the robot held between attempts for the learners' updates (max_unlearned_chunks)
            return loops["task"].kept.paused_s + loops["reset"].kept.paused_s

        def evaluate() -> None:
            nonlocal paused
            t0 = time.monotonic()
            task = loops["task"]
            if b.max_unlearned_chunks:  # learners idle and the newest weights in: the policy scored, not the load
                for d in loops.values():
                    d.drain()
                task.sync_weights()
            r = _eval_alone(safety, cfg, task.policy, task.version, b.eval_episodes)
            paused += time.monotonic() - t0
            c = runner.controller.counts
            evals.append({"env_steps": steps(), "train_wall_s": train_wall(), "wait_s": waited(),
                          "updates": learners["task"].stats.updates, "reset_updates": learners["reset"].stats.updates,
                          "human_actions": c.human_actions, **r})
            print(f"  [practice] {steps()} env steps, {train_wall() / 60:.1f} min, v{task.version}: policy alone "
                  f"{100 * r['success']:.0f}%; the person so far: {c.human_resets} resets", flush=True)

        evaluate()
        next_eval = b.eval_every_steps
        while train_wall() < minutes * 60 and not (b.max_steps and steps() >= b.max_steps):
            if steps() >= next_eval:
                evaluate()
                next_eval += b.eval_every_steps
            if placed and runner.controller.next_policy() == "task":
                arm.human_reset(cfg.seed * 7919 + len(runner.report.attempts))
            runner.attempt()
            runner.report.attempts[-1].update(train_wall_s=train_wall(), wait_s=waited())
        evaluate()
        sim = arm.sim_stats()
        for d in loops.values():
            d.drain()
            assert d.endpoint is not None
            d.endpoint.close()
    counts = runner.controller.counts
    print(f"practice: {counts.as_dict()}", flush=True)
    return {"attempts": runner.report.attempts, "evals": evals, "counts": counts.as_dict(),
            "train_wall_s": train_wall(), "wait_s": waited(), "env_steps": steps(),
            "mirrored_rows": {name: m.rows for name, m in runner.mirrors.items()},
            "learners": {name: learner.stats.__dict__ for name, learner in learners.items()},
            "sim_human_resets": sim["human_resets"], "eval_resets": b.eval_episodes * len(evals)}


def _baseline_actions(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Per episode of a HIL-SERL run: its time and the person's actions so far (one per reset, one per takeover)."""
    total, out = 0, []
    for e in run["episodes"]:
        total += 1 + int(e["interventions"])
        out.append({"train_wall_s": e["wall_s"], "wait_s": e.get("wait_s", 0.0), "human_actions": total})
    return out


def summarise(run: dict[str, Any], mode: str, time_scale: float) -> dict[str, Any]:
    """The figures of one run: human actions per robot hour, and the first evaluation at >= 90 % alone."""
    def robot_s(row: dict[str, Any]) -> float:  # training wall-clock less the waits for the learners, as robot time
        return (row["train_wall_s"] - row.get("wait_s", 0.0)) * time_scale

    robot_h = robot_s(run) / 3600.0
    if mode == "baseline":
        curve = _baseline_actions(run)
        actions = curve[-1]["human_actions"] if curve else 0
        resets, takeovers = len(run["episodes"]), sum(int(e["interventions"]) for e in run["episodes"])
    else:
        curve = [{"train_wall_s": a.get("train_wall_s", a["time_s"]), "wait_s": a.get("wait_s", 0.0),
                  "human_actions": a["human_actions"]} for a in run["attempts"]]
        actions, resets, takeovers = (run["counts"]["human_actions"], run["counts"]["human_resets"],
                                      run["counts"]["takeovers"])
    hit = next((e for e in run["evals"] if e["success"] >= 0.9), None)
    before = [c["human_actions"] for c in curve if hit is not None and c["train_wall_s"] <= hit["train_wall_s"]]
    return {"robot_minutes": robot_h * 60, "human_actions": actions, "resets": resets, "takeovers": takeovers,
            "env_steps": run["env_steps"], "learner_wait_minutes": run.get("wait_s", 0.0) / 60,
            "actions_per_hour": actions / robot_h if robot_h else None,
            "minutes_to_90": robot_s(hit) / 60 if hit else None,
            "steps_to_90": hit["env_steps"] if hit else None,
            "actions_to_90": (before[-1] if before else 0) if hit else None,
            "final_alone": run["evals"][-1]["success"] if run["evals"] else None,
            "curve": [[robot_s(c) / 60, c["human_actions"]] for c in curve],
            "alone_curve": [[robot_s(e) / 60, e["success"]] for e in run["evals"]]}


def measure(args: argparse.Namespace, save: Any = None) -> dict[str, Any]:
    """Each seed: the same demos, then each mode; the figures per seed and mode.

    ``save(results)`` is called after every mode, so a run cut short keeps the modes it measured.
    """
    seeds: dict[str, Any] = {}
    for seed in args.seeds:
        b = LearnBenchConfig(minutes=args.minutes, time_scale=args.time_scale, demos=args.demos, robot=args.robot,
                             eval_every_steps=args.eval_every_steps, eval_episodes=args.eval_episodes,
                             episode_steps=args.episode_steps, seed=seed, max_steps=args.steps,
                             watchdog_timeout_s=args.watchdog_s,
                             max_unlearned_chunks=args.max_unlearned_chunks)
        cfg = learn_config(b)
        demos = record_demos(cfg, b.demos)
        per: dict[str, Any] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for mode in args.modes:
                t0 = time.monotonic()
                if mode == "baseline":
                    run = run_learning(cfg, b, demos, True, args.minutes, Path(tmp) / "baseline")
                else:
                    run = run_practice(cfg, b, demos, args.minutes, Path(tmp) / mode,
                                       {"stuck_after_attempts": args.stuck_after, "reset_max_steps": args.episode_steps,
                                        "max_requests_per_hour": args.max_requests_per_hour, "person_seed": seed,
                                        "reset_tries": args.reset_tries},
                                       takeovers=mode == "practice_takeovers", placed=mode == "practice_placed",
                                       mirror=not args.no_mirror)
                per[mode] = {"summary": summarise(run, mode, args.time_scale), "wall_s": time.monotonic() - t0,
                             "run": {k: v for k, v in run.items() if k not in ("episodes", "attempts")}}
                seeds[str(seed)] = per
                if save is not None:
                    save({"robot": args.robot, "time_scale": args.time_scale, "minutes": args.minutes,
                          "seeds": seeds})
                s = per[mode]["summary"]
                print(f"seed {seed} {mode}: {s['human_actions']} human actions in {s['robot_minutes']:.1f} robot min "
                      f"({s['actions_per_hour']:.0f}/h); 90 % alone at {s['minutes_to_90']} min; final alone "
                      f"{s['final_alone']}", flush=True)
        seeds[str(seed)] = per
    return {"robot": args.robot, "time_scale": args.time_scale, "minutes": args.minutes, "seeds": seeds}


def _ratio(s: dict[str, Any], base: dict[str, Any] | None) -> float | None:
    """The person's actions per robot hour against the baseline's of the same seed and run."""
    if base is None or not base["actions_per_hour"] or s["actions_per_hour"] is None:
        return None
    return float(s["actions_per_hour"] / base["actions_per_hour"])


def _baselines(runs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The baseline's summary per robot and seed, from any of the files (a file may hold one mode only)."""
    return {(run["results"]["robot"], seed): per["baseline"]["summary"]
            for run in runs for seed, per in run["results"]["seeds"].items() if "baseline" in per}


def table(runs: list[dict[str, Any]]) -> str:
    """Per seed and mode: robot time, the person's actions (resets, takeovers, per hour), time to 90 % alone.

    ``vs baseline``: against the baseline of the same seed, in the same file or another of the table's files.
    """
    rows = []
    baselines = _baselines(runs)
    for run in runs:
        res = run["results"]
        load = run.get("machine", {}).get("load_average", ["?"])[0]
        for seed, per in res["seeds"].items():
            base = per.get("baseline", {}).get("summary") or baselines.get((res["robot"], seed))
            for mode, r in per.items():
                s = r["summary"]
                ratio = "100 %" if mode == "baseline" else pct(_ratio(s, base), 1)
                steps = f", {s['steps_to_90']} steps" if s.get("steps_to_90") is not None and "env_steps" in s else ""
                to90 = (f"{s['minutes_to_90']:.1f} min{steps} ({s['actions_to_90']} actions)"
                        if s["minutes_to_90"] is not None else "not reached")
                best = max((y for _, y in s["alone_curve"]), default=None)
                held = r["run"].get("counts", {}).get("held_for_budget_s")  # practice clock: robot seconds
                ends = r["run"]["evals"][-1].get("ends") if r["run"]["evals"] else None
                cut = "?" if ends is None else f"{ends.get('safety', 0)} of {sum(ends.values())}"
                rows.append([res["robot"], seed, mode, f"{s['robot_minutes']:.1f}", str(s.get("env_steps", "?")),
                             "–" if mode == "baseline" else "?" if held is None else f"{held / 60:.1f}",
                             f"{s['resets']}", f"{s['takeovers']}", f"{s['actions_per_hour']:.0f}", ratio, to90,
                             pct(best), pct(s["final_alone"]), cut, f"{res['time_scale']:g}×, load {load}"])
    return markdown_table(["robot", "seed", "mode", "robot min", "env steps", "of which held for the budget",
                           "resets", "takeovers", "actions / robot h", "vs baseline", "to ≥ 90 % alone",
                           "best alone", "alone at end", "at end: cut by the safety latch", "sim speed, load"],
                          rows, "lllrrrrrrrlrrrl")


def ablation_table(runs: list[dict[str, Any]]) -> str:
    """Per file, seed and mode: the options, the policy alone at every evaluation, and what each policy did."""
    rows = []
    for run in runs:
        res, args = run["results"], run.get("args", {})
        opts = [f"reset_tries={args['reset_tries']}" for _ in [0] if args.get("reset_tries", 1) != 1]
        opts += ["no mirror"] if args.get("no_mirror") else []
        load = run.get("machine", {}).get("load_average", ["?"])[0]
        for seed, per in res["seeds"].items():
            for mode, r in per.items():
                s, inner = r["summary"], r["run"]
                curve = "/".join(f"{100 * e['success']:.0f}"
                                 + (f" ({e['ends'].get('safety', 0)})" if "ends" in e else "")
                                 for e in inner["evals"])
                c = inner.get("counts")
                tried = (f"{c['task_successes']} of {c['task_attempts']}" if c else "–",
                         f"{c['reset_successes'] + c['reset_not_needed']} of {c['reset_attempts']}" if c else "–")
                updates = inner.get("learners", {}).get("task", inner.get("learner", {})).get("updates")
                rows.append([run.get("commit", "?"), seed, " ".join([mode, *opts]), curve,
                             pct(max((y for _, y in s["alone_curve"]), default=None)), pct(s["final_alone"]),
                             *tried, f"{updates / inner['env_steps']:.1f}" if updates else "?",
                             f"{s['robot_minutes']:.1f}", f"{load}"])
    return markdown_table(["commit", "seed", "mode, options", ("policy alone at each evaluation, % "
                            "(episodes cut by the safety latch)"), "best",
                           "end", "task attempts succeeded", "reset attempts at the start", "task updates / step",
                           "robot min", "load"], rows, "llllrrrrrrr")


def seeds_table(runs: list[dict[str, Any]]) -> str:
    """Per robot and mode, over every seed of the files: how many reached 90 % alone, when, and the person's actions.

    Medians over the seeds that reached it; ``vs baseline`` is the median of each seed's ratio to the baseline of the
    same seed (its own file's, else another file's).
    """
    groups: dict[tuple[str, str], list[tuple[dict[str, Any], float | None]]] = {}
    baselines = _baselines(runs)
    for run in runs:
        res = run["results"]
        for seed, per in res["seeds"].items():
            base = per.get("baseline", {}).get("summary") or baselines.get((res["robot"], seed))
            for mode, r in per.items():
                groups.setdefault((res["robot"], mode), []).append((r["summary"], _ratio(r["summary"], base)))

    def med(xs: list[float]) -> float | None:
        return float(np.median(xs)) if xs else None

    rows = []
    for (robot, mode), got in groups.items():
        hit = [s for s, _ in got if s["minutes_to_90"] is not None]
        minutes, steps = med([s["minutes_to_90"] for s in hit]), med([s["steps_to_90"] for s in hit])
        actions = med([s["actions_to_90"] for s in hit])
        ratios = [r for _, r in got if r is not None]
        rows.append([robot, mode, f"{len(hit)} of {len(got)}",
                     "–" if minutes is None else f"{minutes:.1f}", "–" if steps is None else f"{steps:.0f}",
                     "–" if actions is None else f"{actions:.0f}",
                     f"{med([s['actions_per_hour'] for s, _ in got]):.0f}",
                     "100 %" if mode == "baseline" else pct(med(ratios), 1),
                     pct(med([max((y for _, y in s["alone_curve"]), default=0.0) for s, _ in got])),
                     pct(med([s["final_alone"] for s, _ in got]))])
    return markdown_table(["robot", "mode", "seeds at ≥ 90 % alone", "robot min to 90 % (median)",
                           "env steps to 90 %", "the person's actions to 90 %", "actions / robot h",
                           "vs baseline", "best alone (median)", "alone at end (median)"], rows, "llrrrrrrrr")


def plot(results: dict[str, Any], path: Path) -> None:
    """The person's actions against robot time, and the policy alone, per seed and mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for seed, per in results["seeds"].items():
        for mode, r in per.items():
            s, style = r["summary"], "--" if mode == "baseline" else "-"
            if s["curve"]:
                x, y = zip(*s["curve"])
                axes[0].plot(x, y, style, label=f"{mode}, seed {seed}")
            if s["alone_curve"]:
                x, y = zip(*s["alone_curve"])
                axes[1].plot(x, y, style + "o", label=f"{mode}, seed {seed}")
    axes[0].set(xlabel="robot time (min)", ylabel="the person's actions (resets + takeovers)")
    axes[1].set(xlabel="robot time (min)", ylabel="task policy alone, success", ylim=(-0.02, 1.02))
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{results['robot']} pick: autonomous practice vs HIL-SERL (every episode reset)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="one seed, 5 minutes per mode at 2x real time")
    p.add_argument("--robot", default="sim_arm", choices=["sim_arm", "sim_so101_state"])
    p.add_argument("--seeds", type=int, nargs="+", default=[11, 12, 13])
    p.add_argument("--modes", nargs="+", default=list(MODES[:2]), choices=MODES)
    p.add_argument("--minutes", type=float, default=20.0, help="training wall-clock per mode (evaluations apart)")
    p.add_argument("--steps", type=int, default=0, help="env steps per mode (0: --minutes alone bounds a run)")
    p.add_argument("--max-unlearned-chunks", type=int, default=8,
                   help="the deploy setting: the robot waits for its learners' updates, so the updates per step do "
                        "not depend on the machine's load (0: the robot never waits)")
    p.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per wall-clock second")
    p.add_argument("--demos", type=int, default=10)
    p.add_argument("--episode-steps", type=int, default=40)
    p.add_argument("--eval-every-steps", type=int, default=1000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--stuck-after", type=int, default=6, help="practice.stuck_after_attempts")
    p.add_argument("--watchdog-s", type=float, default=0.5,
                   help="safety.watchdog_timeout_s (wall-clock): raise it on a loaded machine, whose stalls latch the "
                        "safety layer and end episodes, evaluations included (the tables count them)")
    p.add_argument("--no-mirror", action="store_true",
                   help="ablation: each learner learns from its own policy's attempts only (no relabelled stream)")
    p.add_argument("--reset-tries", type=int, default=1, help="practice.reset_tries")
    p.add_argument("--max-requests-per-hour", type=float, default=6.0, help="practice.max_requests_per_hour")
    add_out_argument(p, NAME)
    args = p.parse_args()
    if args.quick:
        args.seeds, args.minutes, args.time_scale, args.eval_every_steps = args.seeds[:1], 5.0, 2.0, 600
    started = dt.datetime.now(dt.UTC)
    out = args.out or default_path(NAME, started)
    results = measure(args, save=lambda partial: write_result(out, NAME, args, partial, started))
    path = write_result(out, NAME, args, results, started)
    plot(results, path.with_suffix(".png"))
    print(table([{"results": results}]))
    print(f"result file: {path}")


if __name__ == "__main__":
    main()
