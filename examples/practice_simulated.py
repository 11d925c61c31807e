"""Autonomous practice on the SimulatedArm, in one script: the robot resets its own scene (docs/practice.md).

    .venv/bin/python examples/practice_simulated.py --minutes 3

1. Record scripted demonstrations of the pick task (each from a scene the simulator placed).
2. Start two learners in this process: the task policy's (demos preloaded) and the reset policy's.
3. Practise on an arm whose simulator never places the scene (``resets="physical"``): the task and the reset
   policy take turns; every step goes to both learners, each with its own policy's reward; a simulated person
   puts the scene back only when the robot is stuck (and is counted).
4. Score the task policy alone from where the demos start.

Needs ``pip install 'robot-rl[mujoco]'``. The same split across processes is two ``robot-rl deploy --role
learner`` and ``robot-rl deploy --mode practice`` (docs/practice.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import tempfile
from pathlib import Path

from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.sim_arm import PickIntervener, SimulatedArmConfig
from robot_rl.human_loop.deploy import DeployConfig, Deployer
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.hil_learner import HILLearner
from robot_rl.human_loop.practice import PracticeConfig
from robot_rl.human_loop.practice.loop import PracticeRunner, SimulatedPerson, StartStatus, reset_config, task_config
from robot_rl.human_loop.scripted_runs import record_device_demos
from robot_rl.transport.config import ZmqTransportConfig
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings


def main() -> None:
    """Run the workflow for ``--minutes`` of practice."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=3.0, help="wall-clock minutes of practice")
    p.add_argument("--run-dir", type=Path, default=None, help="where the learners write (default: a temp dir)")
    a = p.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(message)s")
    run_dir = a.run_dir or Path(tempfile.mkdtemp()) / "practice"
    cfg = DeployConfig(robot=SimulatedArmConfig(cameras={}), safety=SafetyConfig(control_hz=10.0),
                       transport=ZmqTransportConfig(address="tcp://127.0.0.1:*"), mode="practice",
                       max_episode_steps=40, status=False,
                       practice=PracticeConfig(reset_address="tcp://127.0.0.1:*", reset_max_steps=40))

    # 1. demonstrations, each from a placed scene (the simulator's default, resets="teleport")
    arm = cfg.robot.make()
    with SafetyLayer(arm, cfg.safety) as safety:
        dev = ScriptedDevice(PickIntervener(arm, patience=0, takeover_steps=10**6))
        dev.connect()
        demos, _ = record_device_demos(safety, cfg, dev, 10, seed=cfg.seed)
    print(f"recorded {len(demos)} demo transitions")

    # 2. the two learners: each its own replay, critics and checkpoints
    learners = {"task": HILLearner(task_config(cfg), run_dir / "task", demos=demos),
                "reset": HILLearner(reset_config(cfg), run_dir / "reset")}

    # 3. practice: nothing places the scene between attempts but the robot
    cfg = dataclasses.replace(cfg, robot=dataclasses.replace(cfg.robot, resets="physical"))
    arm = cfg.robot.make()
    with learners["task"].serving(), learners["reset"].serving(), SafetyLayer(arm, cfg.safety) as safety:
        nobody = ScriptedDevice()  # nobody takes over: the person only puts the scene back when asked
        nobody.connect()
        loops = {}
        for name, loop_cfg in (("task", task_config(cfg)), ("reset", reset_config(cfg))):
            endpoint = ZmqActorEndpoint(learners[name].address, 0, arm.features,
                                        ZmqSettings.from_config(loop_cfg.transport))
            loops[name] = Deployer(loop_cfg, safety, nobody, loop_cfg.algo.build(arm.features, "cpu", 0).make_policy(),
                                   endpoint=endpoint, task_reader=StartStatus(arm) if name == "reset" else None)
        runner = PracticeRunner(cfg, loops["task"], loops["reset"], SimulatedPerson(arm))
        report = runner.run(max_s=a.minutes * 60)
        print(report.summary())

        # 4. the task policy alone, from five starts the demos could have had (placed by us, not the person)
        scorer = Deployer(dataclasses.replace(cfg, mode="eval", deterministic=True), safety, nobody,
                          loops["task"].policy, policy_version=loops["task"].version)
        wins = 0
        for i in range(5):
            arm.human_reset(10_000 + i)
            wins += scorer.run_episode(i).success
        print(f"task policy alone: {wins}/5 from the demos' starts (v{loops['task'].version})")
        for d in loops.values():
            assert d.endpoint is not None
            d.endpoint.close()
    print(f"checkpoints: {run_dir / 'task'}, {run_dir / 'reset'}")


if __name__ == "__main__":
    main()
