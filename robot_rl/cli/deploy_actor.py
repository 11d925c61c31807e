"""`robot-rl deploy --role actor`: every check first, then the robot, the operator's device and, last, the learner.

The order is the point. A wrong flag, path or file stops the command before the robot is connected (powered, on a
real arm) and before the learner hears from the actor: a hello as actor N tells the learner that actor N restarted,
and the episode the running actor N had in flight is cut there. What can only be checked on the connected robot (a
leader arm's kinematics on an xArm) is checked as the deploy loop is built, still before the learner connects.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robot_rl.cli.base import sigterm_as_ctrl_c
from robot_rl.cli.deploy import _episode_sinks, device_settings, open_deploy_viz, resolve_estop_tty
from robot_rl.core.config import ConfigError
from robot_rl.hardware.intervention import check_device_mode
from robot_rl.hardware.safety import SafetyLayer
from robot_rl.human_loop.deploy import Deployer, load_run_policy, set_deploy_threads
from robot_rl.human_loop.deploy_aids import load_deploy_aids
from robot_rl.human_loop.deploy_policy import load_run_critics
from robot_rl.human_loop.observation import policy_spec
from robot_rl.human_loop.operator import guard_key_source, make_teleop, start_estop_guard
from robot_rl.human_loop.status import StatusLine
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings


@dataclass
class PreparedActor:
    """What :func:`prepare_actor` checked and loaded; nothing is connected yet."""

    robot: Any
    spec: Any
    policy: Any
    version: int
    device: Any
    """The teleop device (not connected); with keys forwarded by the e-stop guard it is built again then."""
    aids: Any
    """The deploy loop's success judge and help desk (:class:`~robot_rl.human_loop.deploy_aids.DeployAids`)."""
    estop_tty: str | None
    help_log: Path


def prepare_actor(args: Any, cfg: Any, link: Any = None, name: str = "") -> PreparedActor:
    """Check every flag and load every file the actor of ``args`` (DeployArgs) needs, connecting nothing.

    Raises ``ConfigError``, ``FileNotFoundError`` or ``ValueError`` (the CLI's exit 2) on the first problem.
    """
    if cfg.mode == "eval" and args.run_dir is None:
        raise ConfigError("--mode eval needs --run-dir (the run whose checkpoint to deploy)")
    estop_tty = resolve_estop_tty(args)
    set_deploy_threads(cfg, "actor")
    robot = cfg.robot.make()  # declares its features; connects later
    device = make_teleop(args.teleop, robot, settings=device_settings(args))  # a wrong device or setting stops here
    check_device_mode(device, robot.control_mode)
    spec = policy_spec(cfg, robot.features)
    if args.run_dir is not None:
        policy, version = load_run_policy(args.run_dir, spec)
    else:
        policy, version = cfg.algo.build_policy(spec, "cpu", cfg.seed), 0
    help_log = args.help_log or (args.run_dir or Path(".")) / "help_scores.jsonl"
    aids = load_deploy_aids(cfg, policy, robot, help_log, link, name)  # the classifier, the help desk's models
    if cfg.mode == "eval" and aids.help_desk is not None and args.run_dir is not None:
        critics = load_run_critics(args.run_dir, spec)  # learn mode: the learner sends them
        if critics is not None:
            aids.help_desk.load_critic(*critics)
    return PreparedActor(robot, spec, policy, version, device, aids, estop_tty, help_log)


def run_prepared_actor(args: Any, cfg: Any, actor: PreparedActor, link: Any = None,
                       name: str = "") -> tuple[Any, Any, bool]:
    """Connect the robot, the device and (learn mode) the learner, in that order, and run the deploy loop.

    Returns the report, the safety layer and whether a signal stopped it.
    """
    robot, device, endpoint, viz = actor.robot, actor.device, None, None
    # With a terminal, the guard is its only reader: the keyboard teleop takes the guard's forwarded keys.
    guard = (start_estop_guard(robot, args.estop_file, tty=actor.estop_tty, forward_keys=args.teleop == "keyboard",
                               heartbeat_timeout_s=args.estop_heartbeat_s)
             if args.estop_guard else None)
    try:
        viz = open_deploy_viz(cfg, args.run_dir)
        if guard is not None and guard.keys is not None:
            device = make_teleop(args.teleop, robot, keys=guard_key_source(guard), settings=device_settings(args))
        if actor.estop_tty is not None:
            print(f"e-stop: the guard process reads the space bar from {actor.estop_tty}", flush=True)
        with SafetyLayer(robot, cfg.safety, guard=guard) as safety, device:
            log_file = args.log_file or (args.run_dir or Path(".")) / "deploy.log"
            status = StatusLine(enabled=cfg.status, log_file=log_file)
            deployer = Deployer(cfg, safety, device, actor.policy, policy_version=actor.version if cfg.mode == "eval"
                                else 0, status=status, viz=viz, on_episode=_episode_sinks(args.episode_log, link),
                                operator_link=link, robot_name=name, aids=actor.aids)
            if cfg.mode == "learn":  # last: the learner hears from this actor only once everything else stands
                endpoint = deployer.endpoint = ZmqActorEndpoint(cfg.transport.address, cfg.actor_id, actor.spec,
                                                                ZmqSettings.from_config(cfg.transport))
            try:
                who = f"[{name}] " if name else ""
                print(f"{who}deploy ({cfg.mode}): {deployer.controller.mode_hint}", flush=True)
                with sigterm_as_ctrl_c():
                    report = deployer.run()
            finally:
                if endpoint is not None:
                    endpoint.close()
    finally:
        if guard is not None:
            guard.close()
        if viz is not None:
            viz.close()
            print(f"live view: {viz.where}", flush=True)
    return report, safety, deployer.interrupted
