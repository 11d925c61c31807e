"""`robot-rl deploy --fleet`: every robot in its own process, one operator's queue in this one.

The fleet is checked whole before any robot moves (:func:`~robot_rl.human_loop.fleet.check_fleet`). Each robot
process runs the same actor as `robot-rl deploy` (its own control loop, safety layer, teleop device, e-stop guard
and logs, named after the robot) and ignores Ctrl-C: the supervisor turns Ctrl-C or SIGTERM into one SIGTERM per
robot, so each ends its episode, holds its arm, hands its data to the learner and reports. A second Ctrl-C stops
waiting for them.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from robot_rl.core.config import ConfigError
from robot_rl.human_loop.fleet import FleetRobot, PipeLink, check_fleet, load_fleet, member_configs
from robot_rl.human_loop.operator import split_device_settings

FLEET_TELEOPS_REFUSED = ("keyboard",)
"""The keyboard reads one terminal, which several robot processes cannot share."""


def _suffixed(path: Path | None, name: str) -> Path | None:
    return None if path is None else path.with_name(f"{path.stem}-{name}{path.suffix}")


def member_args(args: Any, robot: FleetRobot, run_dir_default: Path) -> Any:
    """The deploy flags one robot's process runs with: its teleop, its own log files, no status line or e-stop key."""
    rest = split_device_settings(robot.set)[0]
    device = tuple(o for o in robot.set if o not in rest)  # the robot's own teleop settings
    return replace(args, fleet=None, teleop=robot.teleop or args.teleop, status=False, estop_tty="off",
                   overrides=(*args.overrides, *device),
                   episode_log=_suffixed(args.episode_log, robot.name),
                   help_log=_suffixed(args.help_log or run_dir_default / "help_scores.jsonl", robot.name),
                   log_file=_suffixed(args.log_file or run_dir_default / "deploy.log", robot.name))


def member_main(args: Any, cfg: Any, name: str, conn: Any) -> None:
    """A robot's process: run the actor with a link to the operator, send the report (or the error)."""
    from robot_rl.cli.deploy import actor_summary

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when the fleet stops
    logging.basicConfig(level=logging.WARNING, format=f"[{name}] %(levelname)s %(name)s: %(message)s")
    link = PipeLink(conn, name)
    try:
        report, safety, interrupted = args.run_actor(cfg, link=link, name=name)
        link.send(("report", {"summary": actor_summary(cfg, report, safety, interrupted),
                              "interrupted": interrupted}))
    except Exception as e:  # the supervisor shows it; the traceback goes to this robot's stderr
        logging.getLogger(__name__).exception("fleet robot %s failed", name)
        link.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def _check_flags(args: Any, robots: list[FleetRobot]) -> None:
    if args.viz not in (None, "none"):
        raise ConfigError("--viz with --fleet: a live view follows one robot; run that robot alone to view it")
    refused = [r.name for r in robots if (r.teleop or args.teleop) in FLEET_TELEOPS_REFUSED]
    if refused:
        raise ConfigError(f"fleet robot(s) {', '.join(refused)} would use the keyboard teleop, which reads one "
                          "terminal that several robot processes cannot share: give each robot its own device "
                          "(`teleop:` in the fleet file: a leader arm, gamepad, spacemouse) or --teleop pick_helper "
                          "in simulation")
    if args.estop_guard and args.estop_tty not in ("auto", "off"):
        raise ConfigError("--estop-tty with --fleet: several guards cannot read one terminal; use --estop-file (one "
                          "file stops every robot) or each robot's own e-stop")


def run_fleet(args: Any, cfg: Any) -> int:
    """Check the fleet, start its robots, serve the operator's queue until they stop; print the fleet's summary."""
    from robot_rl.cli.deploy import device_settings
    from robot_rl.human_loop.fleet_supervisor import FleetSupervisor

    robots = load_fleet(args.fleet)
    _check_flags(args, robots)
    configs = member_configs(cfg, robots)
    if cfg.mode == "eval" and args.run_dir is None:
        raise ConfigError("--mode eval needs --run-dir (the run whose checkpoint to deploy)")
    out_dir = args.run_dir or Path(".")
    members = [member_args(args, robot, out_dir) for robot in robots]
    check_fleet(robots, configs, learn=cfg.mode == "learn",
                devices=[device_settings(m) if m.teleop == "leader_arm" else {} for m in members])
    ctx = mp.get_context("spawn")  # a fresh interpreter per robot: no inherited sockets, threads or GL contexts
    conns, procs = {}, {}
    for robot, member, member_cfg in zip(robots, members, configs):
        here, there = ctx.Pipe()
        proc = ctx.Process(target=member_main, name=f"robot-rl-fleet-{robot.name}",
                           args=(member, replace(member_cfg, status=False), robot.name, there))
        proc.start()
        there.close()
        conns[robot.name], procs[robot.name] = here, proc
    print(f"fleet: {len(robots)} robots ({', '.join(r.name for r in robots)}), one operator; "
          f"help {'on, budget ' + str(cfg.help.budget) if cfg.help.enabled else 'off'}", flush=True)
    supervisor = FleetSupervisor(conns, bell=cfg.help.bell, event_log=out_dir / "fleet_operator.jsonl")
    try:
        _serve(supervisor, procs, cfg)
    finally:
        supervisor.close()
    return _print_summary(supervisor, robots, procs, out_dir)


def _serve(supervisor: Any, procs: dict[str, Any], cfg: Any) -> None:
    """Serve until every robot has reported; on Ctrl-C/SIGTERM stop them and wait (a second one: stop waiting).

    The signals only set flags here: an exception raised between receiving a robot's message and handling it
    would lose the message (an episode, a report).
    """
    signals: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: signals.append(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        supervisor.run(until=lambda: bool(signals))
        if signals:
            print("fleet: stopping every robot (each ends its episode and holds)", flush=True)
            for proc in procs.values():
                if proc.is_alive() and proc.pid is not None:
                    os.kill(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + cfg.drain_s + 30.0
            supervisor.run(until=lambda: len(signals) > 1 or time.monotonic() > deadline)
            if supervisor.conns:
                print("fleet: stopped waiting for the robots", flush=True)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    for name, proc in procs.items():
        proc.join(timeout=5.0)
        if proc.is_alive():
            print(f"fleet: {name} did not stop; killing it (its arm is held by its watchdog or e-stop)", flush=True)
            proc.kill()
            proc.join(timeout=5.0)


def _print_summary(supervisor: Any, robots: list[FleetRobot], procs: dict[str, Any], out_dir: Path) -> int:
    import json

    ok = True
    for robot in robots:
        report = supervisor.reports.get(robot.name)
        if report is not None:
            print(f"{robot.name}: {report['summary']}", flush=True)
        else:
            ok = False
            why = supervisor.errors.get(robot.name, f"no report (exit code {procs[robot.name].exitcode})")
            print(f"{robot.name}: FAILED: {why}", flush=True)
    s = supervisor.summary()
    per_min = s["successes_per_attention_min"]
    rate = f"{per_min:.1f} successes per attention minute" if per_min is not None else "no attention used"
    print(f"fleet: {s['episodes']} episodes, {s['successes']} successes in {s['wall_s'] / 60:.1f} min; operator "
          f"attention {s['attention_min']:.2f} min ({s['requests_served']} requests served, "
          f"{s['requests_withdrawn']} withdrawn, longest wait {s['longest_wait_s']:.1f}s, "
          f"{s['unasked_takeovers']} unasked takeovers); "
          f"{rate}", flush=True)
    (out_dir / "fleet_summary.json").write_text(json.dumps(s, indent=1))
    return 0 if ok else 1
