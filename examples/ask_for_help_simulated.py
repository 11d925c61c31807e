"""The robot asks for help, in one script: HIL-SERL on the SimulatedArm where the person helps only when asked.

    MUJOCO_GL=osmesa .venv/bin/python examples/ask_for_help_simulated.py --minutes 3

1. Record scripted demonstrations of the pick task.
2. Start the HIL learner with ``help.enabled``: it publishes the critics with the actor weights.
3. Run the deploy loop in learn mode with a budget of 10 % of the steps: the robot scores every step (critic
   disagreement, low value, near-violations), asks when a score stands out, and holds until the scripted person
   (``pick_helper``: it helps only when asked) takes over. The status line says when the robot asks and why.
4. Print what the person was asked for, evaluate the final policy alone, and draw the request timeline
   (``help_timeline.png`` in the run directory).

Needs ``pip install 'robot-rl[mujoco,viz]'`` (and libosmesa6 headless). The same split across processes is
docs/ask-for-help.md's workflow (``robot-rl deploy --role learner`` + ``--mode learn --teleop pick_helper``).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.sim_arm import PickIntervener, SimulatedArmConfig
from robot_rl.human_loop.deploy import DeployConfig, Deployer, load_run_policy
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.help_gate import HelpGateConfig
from robot_rl.human_loop.help_timeline import plot_timeline
from robot_rl.human_loop.hil_learner import HILLearner
from robot_rl.human_loop.scripted_runs import record_device_demos, run_policy_alone
from robot_rl.human_loop.status import StatusLine
from robot_rl.transport.config import ZmqTransportConfig
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings


def main() -> None:
    """Run the workflow for ``--minutes`` of wall clock."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=3.0, help="wall-clock minutes of online learning")
    p.add_argument("--budget", type=float, default=0.1, help="fraction of steps the robot may ask for help")
    p.add_argument("--run-dir", type=Path, default=None, help="where the learner writes (default: a temp dir)")
    p.add_argument("--no-status", action="store_true", help="plain logs instead of the live status line")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO if a.no_status else logging.ERROR, format="%(levelname)s %(message)s")
    run_dir = a.run_dir or Path(tempfile.mkdtemp()) / "ask_for_help"
    # The defaults of `robot-rl deploy` (the HIL-SERL recipe) on the simulated arm, with the help gate on.
    robot = SimulatedArmConfig(cameras={})
    cfg = DeployConfig(robot=robot, safety=SafetyConfig(control_hz=10.0),
                       transport=ZmqTransportConfig(address="tcp://127.0.0.1:*"), mode="learn", episodes=0,
                       status=not a.no_status, help=HelpGateConfig(enabled=True, budget=a.budget))

    arm = robot.make()  # 1. demonstrations by the scripted expert
    with SafetyLayer(arm, cfg.safety) as safety:
        dev = ScriptedDevice(PickIntervener(arm, patience=0, takeover_steps=10**6))
        dev.connect()
        demos, _ = record_device_demos(safety, cfg, dev, 10, seed=cfg.seed)
    learner = HILLearner(cfg, run_dir, demos=demos)  # 2. the learner (publishes the critics too)

    arm = robot.make()  # 3. the actor: the scripted person helps only when asked
    with learner.serving(), SafetyLayer(arm, cfg.safety) as safety:
        endpoint = ZmqActorEndpoint(learner.address, 0, arm.features, ZmqSettings.from_config(cfg.transport))
        dev = ScriptedDevice(PickIntervener(arm, takeover_steps=10, only_when_asked=True))
        dev.connect()
        deployer = Deployer(cfg, safety, dev, cfg.algo.build(arm.features, "cpu", 0).make_policy(),
                            endpoint=endpoint, stop=threading.Event(), status=StatusLine(cfg.status),
                            help_log=run_dir / "help_scores.jsonl")
        timer = threading.Timer(a.minutes * 60, deployer.stop.set)
        timer.start()
        report = deployer.run()
        timer.cancel()
        endpoint.close()
    eps = report.episodes
    steps = sum(e.steps for e in eps)
    print(f"learning: {len(eps)} episodes, {steps} steps; the robot asked {sum(e.help_requests for e in eps)} "
          f"times, the person attended {sum(e.attention_steps for e in eps) / max(steps, 1):.0%} of the steps "
          f"(budget {a.budget:.0%}) and acted in {sum(e.intervened_steps for e in eps)}")

    arm = robot.make()  # 4. the final policy alone, nobody asked or helping
    policy, version = load_run_policy(run_dir, arm.features)
    with SafetyLayer(arm, cfg.safety) as safety:
        result = run_policy_alone(safety, replace(cfg, help=HelpGateConfig()), policy, version, 10, seed=cfg.seed)
    print(f"final policy v{version} alone: success {result.success_rate:.0%} over 10 episodes")
    print(f"request timeline: {plot_timeline(run_dir / 'help_scores.jsonl', run_dir / 'help_timeline.png')}")


if __name__ == "__main__":
    main()
