"""`robot-rl deploy`: run a policy on a robot with a human ready to take over (eval, or HIL-SERL actor/learner).

The operator's side (teleop device, e-stop guard) is built by :mod:`robot_rl.human_loop.operator`; this
module turns the flags into a :class:`~robot_rl.human_loop.deploy.DeployConfig` and runs the chosen role.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from robot_rl.cli.base import Command, sigterm_as_ctrl_c, viz_overrides
from robot_rl.cli.vocabulary import VIZ_SINKS, overrides_help, robot_help, sections_of, teleop_help
from robot_rl.config_io import apply_overrides, from_dict, load_yaml, parse_override
from robot_rl.core.config import ConfigError
from robot_rl.human_loop.deploy_report import learned_reward_check
from robot_rl.human_loop.operator import split_device_settings


@dataclass
class DeployArgs(Command):
    """Run a policy on a robot with a human ready to take over; evaluate it or learn online (HIL-SERL).

    `--role actor` (default) drives the robot: `--mode eval --run-dir runs/X` scores the run's newest
    checkpoint for `--episodes`; `--mode learn` acts for a learner and sends every step (with who acted)
    to it. `--role learner` is that learner: it listens on transport.address, mixes interventions and
    demos 50/50 with the online data, and writes checkpoints to `--run-dir`. Config keys are set as
    `section.key=value` (or `--section.key VALUE`), e.g. `--robot sim_arm robot.latency_s=0.02
    safety.control_hz=20 intervention.mode=toggle`; the device section is the teleop device's settings.
    """

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(
        metavar="SECTION.KEY=VALUE", help=overrides_help(deploy_sections(), "`--safety.control-hz 20`"))]] = ()
    robot: Annotated[str | None, tyro.conf.arg(
        metavar="NAME", help=robot_help() + " The same as robot.type=NAME.",
        help_behavior_hint="(default: the config's robot.type, or sim_arm)")] = None
    role: Literal["actor", "learner"] = "actor"
    """actor: drive the robot; learner: train on what actors send."""
    mode: Literal["eval", "learn", "practice"] = "eval"
    """Actor: eval (score the checkpoint), learn (act for a learner over ZeroMQ) or practice (a task and a reset
    policy take turns, each for its own learner; the person is asked only when the robot is stuck: docs/practice.md;
    --episodes counts attempts)."""
    config: Path | None = None
    """A YAML file with any of the sections; command-line overrides win."""
    run_dir: Path | None = None
    """eval: the run to deploy; learn: optional starting weights; learner: where checkpoints go."""
    teleop: Annotated[str, tyro.conf.arg(metavar="NAME", help=teleop_help(
        "The intervention device (scripted: nobody; pick_intervener: a scripted person for the simulated pick who "
        "takes over when the policy stalls; pick_helper: one who helps only when the robot asks, with "
        "help.enabled=true)"))] = "keyboard"
    episodes: int = 10
    """Episodes to run (0: until Ctrl-C)."""
    max_episode_steps: int = 40
    """Steps before an episode is cut."""
    connect: str | None = None
    """The learner's address (actor, mode learn) or the address to bind (learner); default transport.address."""
    demos: Path | None = None
    """Learner: demonstrations to preload into the demo buffer: an episode store or LeRobotDataset v3 (what
    `robot-rl record` writes), recorded on a robot with this config's features."""
    log_file: Path | None = None
    """While the status line is drawn, warnings go here instead of the terminal (errors still show); default
    <run-dir>/deploy.log, or ./deploy.log without --run-dir."""
    episode_log: Path | None = None
    """Actor: append one JSON line per episode (success, steps, intervention rate and lengths) here."""
    help_log: Path | None = None
    """Actor, with help.enabled=true: every step's help scores, urgency, threshold, request and who acted, as JSON
    lines (default <run-dir>/help_scores.jsonl, or ./help_scores.jsonl without --run-dir); draw it with
    `python -m robot_rl.human_loop.help_timeline`."""
    max_s: float | None = None
    """Learner: stop after this many seconds (default: until Ctrl-C)."""
    resume: bool = False
    """Learner: continue the run in --run-dir: reload its replay from disk and its newest checkpoint (an error when
    it holds neither)."""
    status: bool = True
    """Draw the live status line (--no-status: plain log lines)."""
    estop_guard: bool = False
    """Actor: run the e-stop guard process (holds the robot through its own connection when the e-stop key
    is pressed, when this process stops beating for --estop-heartbeat-s, or when --estop-file appears); needs
    a robot with an emergency-stop command (sim_arm, xarm)."""
    estop_heartbeat_s: float = 0.3
    """Actor, with --estop-guard: stop the robot when the control loop has not beaten for this long (s); keep
    it several control periods long (0.3 s is 3 periods at 10 Hz), 0 = do not watch the heartbeat."""
    estop_file: Path | None = None
    """Actor, with --estop-guard: `touch` this file from any shell to stop the robot."""
    estop_tty: str = "auto"
    """Actor, with --estop-guard: the terminal whose e-stop key (space) the guard process reads, so the key
    stops the robot even while this process hangs; the keyboard teleop then gets its other keys from the
    guard. auto: /dev/tty when stdin is a terminal; off: the guard reads no key (the keyboard device reads
    the terminal, and its space bar latches in this process only); or a terminal's path."""
    viz: Annotated[Literal["none", "rerun"] | None, tyro.conf.arg(metavar=VIZ_SINKS)] = None
    """Actor: live view of every step (cameras, the action by who acted, the policy's own action during a takeover,
    reward, success, interventions): `rerun` streams to a Rerun viewer on 127.0.0.1:9876 if one is running, else
    saves <run-dir>/deploy-<time>.rrd (./deploy-<time>.rrd without --run-dir) for `rerun FILE`. Sets viz.sink;
    needs `pip install 'robot-rl[viz]'`."""
    fleet: str | None = None
    """Several robots, one operator: a fleet YAML file (each robot's name and `section.key=value` overrides) or a
    number of copies of the configured robot (`--fleet 3`). Each robot runs in its own process; with
    help.enabled=true their requests queue for the one operator, risk first (docs/ask-for-help.md)."""
    viz_file: Path | None = None
    """Actor, with --viz rerun: save the recording here (also while streaming to a viewer)."""

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """The deploy config's sections, and device (the teleop device's settings)."""
        return deploy_sections()

    def run(self) -> int:
        """Run the role: the learner, the fleet, or the actor that drives the robot (eval or learn); print a summary."""
        cfg = self.resolved_config()
        if self.role == "learner":
            return self._run_learner(cfg)
        if self.fleet is not None:
            from robot_rl.cli.deploy_fleet import run_fleet

            if cfg.mode == "practice":
                raise ConfigError("--fleet runs --mode eval or learn; practice runs one arm per command (a fleet "
                                  "sharing one person for resets is not built yet: docs/practice.md)")

            return run_fleet(self, cfg)
        if cfg.mode == "practice":
            from robot_rl.cli.deploy_practice import run_practice

            return run_practice(self, cfg)
        outcome = self.run_actor(cfg)
        print(actor_summary(cfg, *outcome), flush=True)
        return 0

    def run_actor(self, cfg: Any, link: Any = None, name: str = "") -> tuple[Any, Any, bool]:
        """Drive the robot with ``cfg``: returns the report, the safety layer and whether a signal stopped it.

        Every flag and file is checked before the robot connects, and the learner (learn mode) connects last
        (:mod:`robot_rl.cli.deploy_actor`). ``link``/``name``: a fleet member's way to the shared operator
        (:class:`~robot_rl.human_loop.fleet.PipeLink`).
        """
        from robot_rl.cli.deploy_actor import prepare_actor, run_prepared_actor

        actor = prepare_actor(self, cfg, link, name)
        return run_prepared_actor(self, cfg, actor, link, name)

    def resolved_config(self) -> Any:
        """The :class:`~robot_rl.human_loop.deploy.DeployConfig` both roles run with."""
        return resolve_deploy_config(self)

    def _run_learner(self, cfg: Any) -> int:
        """`--role learner`: serve the actors and train until Ctrl-C or --max-s."""
        from robot_rl.data.demos import RaCWeights
        from robot_rl.human_loop.deploy import set_deploy_threads
        from robot_rl.human_loop.hil_learner import HILLearner
        from robot_rl.human_loop.observation import learner_demos

        if self.run_dir is None:
            raise ConfigError("--role learner needs --run-dir (where checkpoints go)")
        rac = None
        if (cfg.demos_correction_weight, cfg.demos_rewind_weight) != (1, 1):
            rac = RaCWeights(correction_weight=cfg.demos_correction_weight, rewind_weight=cfg.demos_rewind_weight)
        demos = learner_demos(cfg, self.demos, rac=rac) if self.demos is not None else None
        set_deploy_threads(cfg, "learner")
        learner = HILLearner(cfg, self.run_dir, demos=demos, address=self.connect, resume=self.resume)
        print(learner.start_line(), flush=True)
        stop = threading.Event()
        try:
            with sigterm_as_ctrl_c():
                stats = learner.serve(stop, max_s=self.max_s)
        except KeyboardInterrupt:
            stats = learner.stats
        finally:
            learner.close()
        print(learner_summary(stats), flush=True)
        return 0


def learner_summary(stats: Any) -> str:
    """The line printed when the learner stops: what it received, its updates, and what its batches held."""
    return (f"stopped after {stats.transitions} transitions ({stats.intervened_received} intervened), "
            f"{stats.updates} updates, weights v{stats.version}; {stats.intervened_sampled}/{stats.rows_sampled} "
            f"sampled rows were interventions, {stats.demos_sampled} demos")


def _episode_sinks(path: Path | None, link: Any) -> Any:
    """Where each finished episode goes: the ``--episode-log`` file and, in a fleet, the supervisor."""
    sinks = ([EpisodeLog(path).append] if path is not None else []) + ([link.episode] if link is not None else [])
    if not sinks:
        return None

    def to_all(record: Any) -> None:
        for sink in sinks:
            sink(record)

    return to_all


def actor_summary(cfg: Any, report: Any, safety: Any, interrupted: bool) -> str:
    """The line printed when an actor stops: success, interventions, rate, safety, help and losses."""
    from robot_rl.hardware.safety import counts_text

    rates = [e.intervention_rate for e in report.episodes]
    estop = f"; E-STOP: {safety.estop_reason}" if safety.estop_reason else ""
    if cfg.help.enabled:
        estop += "; " + help_summary(report)
    if cfg.audit.enabled:
        asked, no = sum(e.audit_asked for e in report.episodes), sum(e.audit_rejected for e in report.episodes)
        estop += f"; reward audit: {asked} questions of {cfg.audit.budget}, {no} answered 'not a success'"
    if report.unacked_chunks or report.dropped_chunks:
        estop += (f"; LOST: {report.unacked_chunks} chunks the learner never acknowledged, "
                  f"{report.dropped_chunks} never sent (the learner stopped answering)")
    stopped = " (stopped by a signal; the running episode dropped)" if interrupted else ""
    return (f"{len(report.episodes)} episodes{stopped}: success {report.success_rate:.0%} ({report.split()}), "
            f"mean intervention rate {(sum(rates) / len(rates) if rates else 0.0):.0%}, policy "
            f"v{report.policy_version}; {report.rate.summary()}; safety events {counts_text(report.safety_counts)}"
            f"{estop}" + (f"; {check}" if (check := learned_reward_check(report.episodes)) else ""))


def help_summary(report: Any) -> str:
    """``help: 5 requests (1 timed out), 2 unasked takeovers, attention 9% of 400 steps``."""
    eps = report.episodes
    requests, timeouts = sum(e.help_requests for e in eps), sum(e.help_timeouts for e in eps)
    steps = sum(e.steps for e in eps)
    attention = sum(e.attention_steps for e in eps) / steps if steps else 0.0
    return (f"help: {requests} requests ({timeouts} timed out), {sum(e.unasked_takeovers for e in eps)} unasked "
            f"takeovers, attention {attention:.0%} of {steps} steps")


def deploy_sections() -> tuple[str, ...]:
    """The deploy config's sections (the extensions' that run in deploy too among them), and device (the teleop's)."""
    from robot_rl.core.extension import extension_sections
    from robot_rl.human_loop.deploy import DeployConfig

    return (*sections_of(DeployConfig), *extension_sections("", "deploy"), "device")


def resolve_deploy_config(args: DeployArgs) -> Any:
    """The :class:`~robot_rl.human_loop.deploy.DeployConfig` of ``args`` (YAML file, then overrides)."""
    import robot_rl.hardware.xarm  # noqa: F401 - registers robot.type=xarm
    from robot_rl.human_loop.deploy import DeployConfig

    data = load_yaml(args.config) if args.config is not None else {}
    data.pop("device", None)  # the teleop device's section: device_settings
    top = {"mode": args.mode, "episodes": args.episodes, "max_episode_steps": args.max_episode_steps,
           "status": args.status}
    cfg = from_dict(DeployConfig, {**top, **data}, where="deploy config")
    rest, _ = split_device_settings(args.overrides)
    overrides = dict(parse_override(o) for o in (*rest, *viz_overrides(args)))
    if args.robot is not None:  # --robot NAME is robot.type=NAME, the spelling record and robot find-limits use
        named = overrides.setdefault("robot.type", args.robot)
        if named != args.robot:
            raise ConfigError(f"--robot {args.robot} and robot.type={named} name two robots: give one")
    if args.connect:
        overrides["transport.address"] = args.connect
    return apply_overrides(cfg, overrides)


def device_settings(args: DeployArgs) -> dict[str, Any]:
    """The teleop device's settings: the ``device:`` section of ``--config``, then ``device.*`` overrides."""
    data = load_yaml(args.config) if args.config is not None else {}
    settings = dict(data.get("device") or {})
    settings.update(split_device_settings(args.overrides)[1])
    return settings


def open_deploy_viz(cfg: Any, run_dir: Path | None) -> Any:
    """The actor's live view (``cfg.viz``), or None; the default file is ``<run_dir|.>/deploy-<time>.rrd``."""
    from datetime import datetime

    from robot_rl.viz import open_viz

    stamp = f"deploy-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    viz = open_viz(cfg.viz, (run_dir or Path(".")) / f"{stamp}.rrd", stamp, f"robot-rl deploy ({cfg.mode})")
    if viz is not None:
        print(f"live view: {viz.where}", flush=True)
    return viz


def resolve_estop_tty(args: DeployArgs, stdin_is_tty: bool | None = None) -> str | None:
    """The terminal the e-stop guard reads its key from (None: none), checked; a ConfigError says what to do.

    ``stdin_is_tty`` overrides ``sys.stdin.isatty()`` for ``--estop-tty auto``.
    """
    from robot_rl.hardware.estop import open_terminal

    value = args.estop_tty
    if value == "off" or (value == "auto" and not args.estop_guard):
        return None
    if not args.estop_guard:
        raise ConfigError(f"--estop-tty {value} is read by the e-stop guard process: add --estop-guard")
    if value == "auto":
        if not (sys.stdin.isatty() if stdin_is_tty is None else stdin_is_tty):
            return None  # no operator at a terminal (a service, a test): the key has nowhere to come from
        value = "/dev/tty"
    fix = ("give the terminal the operator types in (run `tty` there to see its path), or --estop-tty off "
           "to leave the key to the keyboard device (then it cannot stop the robot while this process hangs)")
    try:
        os.close(open_terminal(value))
    except ValueError:
        raise ConfigError(f"--estop-tty {value} is not a terminal: {fix}") from None
    except OSError as e:
        raise ConfigError(f"--estop-tty {value} cannot be opened ({e.strerror or e}): {fix}") from None
    return value


class EpisodeLog:
    """`--episode-log`: one JSON line per finished episode, appended and synced to disk as it finishes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, episode: Any) -> None:
        """Append ``episode`` (an EpisodeRecord); on disk when this returns, so a kill loses no finished one."""
        with self.path.open("a") as f:
            f.write(json.dumps({**asdict(episode), "intervention_rate": episode.intervention_rate}) + "\n")
            f.flush()
            os.fsync(f.fileno())
