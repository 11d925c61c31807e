"""HIL-SERL on the SimulatedArm, in one script: demos, a learner, an actor with a scripted human, an evaluation.

    .venv/bin/python examples/hil_serl_simulated.py --minutes 3

1. Record scripted demonstrations of the pick task (the "human" in control all the time).
2. Start the HIL learner (ZeroMQ on 127.0.0.1, demos preloaded, interventions sampled 50/50).
3. Run the deploy loop in learn mode on the SimulatedArm (its own MuJoCo process, real time, 10 Hz)
   with the scripted intervener: it takes over when the policy stalls, and presses success when it sees the
   cube lifted. The status line shows who acts, the weight version, the period and the success rate.
4. Evaluate the final checkpoint alone (`robot-rl deploy --mode eval` does the same from the shell).

Needs ``pip install 'robot-rl[mujoco]'`` (and libosmesa6 on a headless machine). The same split across
processes is ``robot-rl deploy --role learner`` + ``robot-rl deploy --mode learn`` (see docs/deploy.md).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
from pathlib import Path

from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.sim_arm import PickIntervener, SimulatedArmConfig
from robot_rl.human_loop.deploy import DeployConfig, Deployer, load_run_policy
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.hil_learner import HILLearner
from robot_rl.human_loop.scripted_runs import record_device_demos, run_policy_alone
from robot_rl.human_loop.status import StatusLine
from robot_rl.policies.sac import SACConfig
from robot_rl.transport.config import ZmqTransportConfig
from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings


def main() -> None:
    """Run the workflow for ``--minutes`` of robot time."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=3.0, help="wall-clock minutes of online learning")
    p.add_argument("--run-dir", type=Path, default=None, help="where the learner writes (default: a temp dir)")
    p.add_argument("--no-status", action="store_true", help="plain logs instead of the live status line")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO if a.no_status else logging.ERROR, format="%(levelname)s %(message)s")
    run_dir = a.run_dir or Path(tempfile.mkdtemp()) / "hil_pick"
    cfg = DeployConfig(
        robot=SimulatedArmConfig(cameras={}, reward="dense", max_step_m=0.02),
        safety=SafetyConfig(control_hz=10.0),
        # The recipe of benchmarks/RESULTS_hil.md: normalised state and α starting at 0.01.
        algo=SACConfig(demo_ratio=0.5, learning_starts=200, batch_size=128, utd_ratio=4.0, gamma=0.95, n_step=3,
                       critic_layer_norm=True, buffer_size=100_000, normalize_obs=True, init_temperature=0.01),
        transport=ZmqTransportConfig(address="tcp://127.0.0.1:*"), mode="learn", episodes=0,
        max_episode_steps=40, status=not a.no_status)

    # 1. demonstrations
    arm = cfg.robot.make()
    with SafetyLayer(arm, cfg.safety) as safety:
        dev = ScriptedDevice(PickIntervener(arm, patience=0, takeover_steps=10**6))
        dev.connect()
        demos, _ = record_device_demos(safety, cfg, dev, 10, seed=cfg.seed)
    print(f"recorded {len(demos)} demo transitions")

    # 2. the learner
    learner = HILLearner(cfg, run_dir, demos=demos)

    # 3. the actor with a scripted human
    arm = cfg.robot.make()
    with learner.serving(), SafetyLayer(arm, cfg.safety) as safety:
        endpoint = ZmqActorEndpoint(learner.address, 0, arm.features, ZmqSettings.from_config(cfg.transport))
        dev = ScriptedDevice(PickIntervener(arm, patience=8, takeover_steps=10))
        dev.connect()
        deployer = Deployer(cfg, safety, dev, cfg.algo.build(arm.features, "cpu", 0).make_policy(),
                            endpoint=endpoint, stop=threading.Event(), status=StatusLine(cfg.status))
        timer = threading.Timer(a.minutes * 60, deployer.stop.set)
        timer.start()
        report = deployer.run()
        timer.cancel()
        time.sleep(1.0)  # let the last chunks be acknowledged
        endpoint.close()
    rates = [e.intervention_rate for e in report.episodes]
    print(f"learning: {len(report.episodes)} episodes, success {report.success_rate:.0%}, intervention rate "
          f"first 10 {sum(rates[:10]) / max(len(rates[:10]), 1):.0%} -> last 10 "
          f"{sum(rates[-10:]) / max(len(rates[-10:]), 1):.0%}, policy v{report.policy_version}; "
          f"learner: {learner.stats.intervened_sampled}/{learner.stats.rows_sampled} sampled rows intervened, "
          f"{learner.stats.demos_sampled} demos")

    # 4. the final policy alone
    arm = cfg.robot.make()
    policy, version = load_run_policy(run_dir, arm.features)
    with SafetyLayer(arm, cfg.safety) as safety:
        result = run_policy_alone(safety, cfg, policy, version, 10, seed=cfg.seed)
    print(f"final policy v{version} alone: success {result.success_rate:.0%} over 10 episodes; run in {run_dir}")


if __name__ == "__main__":
    main()
