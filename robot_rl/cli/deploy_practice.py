"""`robot-rl deploy --mode practice`: the task and reset policies take turns on the robot, each for its own learner.

Checks first, as every deploy actor does (:mod:`robot_rl.cli.deploy_actor`): the robot, the device, both policies
and both rewards are built before anything connects; then the robot and the device; the two learners last. The task
policy's learner is at ``transport.address`` (`robot-rl deploy --role learner --run-dir runs/task`), the reset
policy's at ``practice.reset_address`` (`--role learner --run-dir runs/reset --connect tcp://127.0.0.1:5556`).
Who puts the scene back when the robot asks: on a simulated cell with a scripted device, the simulated person
(``human_reset``, counted); otherwise the person at the cell, who answers with the *success* or *reset* key (on a
simulated cell the simulator then puts the scene back, counted as the person's reset).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from robot_rl.cli.base import sigterm_as_ctrl_c
from robot_rl.cli.deploy import device_settings
from robot_rl.hardware.intervention import check_device_mode
from robot_rl.hardware.robot import HumanResettable
from robot_rl.hardware.safety import SafetyLayer
from robot_rl.human_loop.deploy import Deployer, load_run_policy, set_deploy_threads
from robot_rl.human_loop.deploy_aids import load_deploy_aids
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.observation import policy_spec
from robot_rl.human_loop.operator import make_teleop
from robot_rl.human_loop.practice.loop import (
    KeyPerson,
    PracticeRunner,
    ResetPerson,
    SimulatedPerson,
    StartStatus,
    check_practice_robot,
    reset_config,
    task_config,
)
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings


def _person(device: Any, robot: Any, task_loop: Deployer, cfg: Any) -> ResetPerson:
    if isinstance(device, ScriptedDevice) and isinstance(robot, HumanResettable):
        return SimulatedPerson(robot, cfg.practice.person_seed)
    person = KeyPerson(device, task_loop.hold_tick, cfg.practice.wait_timeout_s)
    if not isinstance(robot, HumanResettable):
        return person
    sim = SimulatedPerson(robot, cfg.practice.person_seed)

    class KeyThenPlace:
        """The key says the person is done; the simulator puts the scene back (there are no hands in it)."""

        def put_back(self, reason: str) -> bool:
            return person.put_back(reason) and sim.put_back(reason)

    return KeyThenPlace()


def _policy(run_dir: Path | None, cfg: Any, spec: Any) -> Any:
    if run_dir is not None and any(run_dir.glob("checkpoints/*")):
        return load_run_policy(run_dir, spec)[0]
    return cfg.algo.build_policy(spec, "cpu", cfg.seed)


def run_practice(args: Any, cfg: Any) -> int:
    """Run practice for ``args.episodes`` attempts (0: until Ctrl-C) and print what the robot and the person did."""
    set_deploy_threads(cfg, "actor")
    configs = {"task": task_config(cfg), "reset": reset_config(cfg)}
    robot = cfg.robot.make()
    check_practice_robot(cfg, robot)
    device = make_teleop(args.teleop, robot, settings=device_settings(args))
    check_device_mode(device, robot.control_mode)
    spec = policy_spec(cfg, robot.features)
    reset_dir = Path(cfg.practice.reset_run_dir) if cfg.practice.reset_run_dir else None
    policies = {"task": _policy(args.run_dir, cfg, spec), "reset": _policy(reset_dir, cfg, spec)}
    aids = {name: load_deploy_aids(c, policies[name], robot, None) for name, c in configs.items()}
    endpoints: list[Any] = []
    log = Path(args.episode_log) if args.episode_log is not None else None

    def on_attempt(row: dict[str, Any]) -> None:
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")
                f.flush()
                os.fsync(f.fileno())

    with SafetyLayer(robot, cfg.safety) as safety, device:
        loops = {name: Deployer(c, safety, device, policies[name], aids=aids[name],
                                task_reader=StartStatus(robot) if name == "reset" and
                                cfg.practice.reset_reward == "robot" else None)
                 for name, c in configs.items()}
        runner = PracticeRunner(cfg, loops["task"], loops["reset"], _person(device, robot, loops["task"], cfg),
                                on_attempt=on_attempt)
        try:
            for name, d in loops.items():  # last: the learners hear from this actor once everything else stands
                d.endpoint = ZmqActorEndpoint(configs[name].transport.address, cfg.actor_id, spec,
                                              ZmqSettings.from_config(configs[name].transport))
                endpoints.append(d.endpoint)
            print(f"practice: task policy for {configs['task'].transport.address}, reset policy for "
                  f"{configs['reset'].transport.address}; {loops['task'].controller.mode_hint}", flush=True)
            with sigterm_as_ctrl_c():
                report = runner.run(attempts=args.episodes)
        finally:
            for endpoint in endpoints:
                endpoint.close()
    print(report.summary(), flush=True)
    return 0
