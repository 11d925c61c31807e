"""One operator, three simulated arms that ask for help, one learner: docs/ask-for-help.md's fleet in one script.

    MUJOCO_GL=osmesa .venv/bin/python examples/ask_for_help_fleet.py --episodes 30

1. Record scripted demonstrations of the pick task.
2. Start the HIL learner with ``help.enabled`` in this process (it publishes the critics with the weights).
3. Run `robot-rl deploy --fleet 3 --mode learn --teleop pick_helper help.enabled=true` through the CLI's own
   code: each arm in its own process, every request queued for the one (scripted) operator, risk first.
   Each arm runs ``--episodes`` episodes; the terminal shows which arm asks and where the operator goes.
4. Print the fleet's totals (``fleet_summary.json``): successes, the operator's attention in minutes, and
   successes per attention minute.

Needs ``pip install 'robot-rl[mujoco]'`` (and libosmesa6 headless).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
from pathlib import Path

from robot_rl.cli.deploy import DeployArgs
from robot_rl.cli.deploy_fleet import run_fleet
from robot_rl.hardware.safety import SafetyLayer
from robot_rl.hardware.sim_arm import PickIntervener
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.hil_learner import HILLearner
from robot_rl.human_loop.scripted_runs import record_device_demos


def main() -> None:
    """Run the fleet for ``--episodes`` episodes per arm."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=30, help="episodes per arm")
    p.add_argument("--robots", type=int, default=3, help="arms in the fleet")
    p.add_argument("--budget", type=float, default=0.1, help="fraction of each arm's steps it may ask for help")
    p.add_argument("--run-dir", type=Path, default=None, help="where the files go (default: a temp dir)")
    a = p.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    run_dir = a.run_dir or Path(tempfile.mkdtemp()) / "fleet"
    run_dir.mkdir(parents=True, exist_ok=True)
    os.chdir(run_dir)  # the fleet's files (summary, operator events, per-arm logs) go to the working directory
    # The learner binds a free port; the arms are told where with transport.address.
    args = DeployArgs(fleet=str(a.robots), mode="learn", teleop="pick_helper", episodes=a.episodes, status=False,
                      overrides=("robot.type=sim_arm", "robot.cameras={}", "help.enabled=true",
                                 f"help.budget={a.budget}", "transport.address=tcp://127.0.0.1:*"))
    cfg = args.resolved_config()

    arm = cfg.robot.make()  # 1. demonstrations by the scripted expert
    with SafetyLayer(arm, cfg.safety) as safety:
        dev = ScriptedDevice(PickIntervener(arm, patience=0, takeover_steps=10**6))
        dev.connect()
        demos, _ = record_device_demos(safety, cfg, dev, 10, seed=cfg.seed)
    learner = HILLearner(cfg, run_dir / "learner", demos=demos)  # 2. one learner for every arm

    with learner.serving():  # 3. the fleet, as `robot-rl deploy --fleet` runs it
        args.overrides = (*args.overrides[:-1], f"transport.address={learner.address}")
        code = run_fleet(args, args.resolved_config())
    summary = json.loads((run_dir / "fleet_summary.json").read_text())  # 4. the totals
    per_min = summary["successes_per_attention_min"]
    print(f"fleet of {a.robots}: {summary['successes']} successes in {summary['episodes']} episodes; the operator "
          f"attended {summary['attention_min']:.2f} of {summary['wall_s'] / 60:.1f} minutes "
          f"({per_min if per_min is None else round(per_min, 1)} successes per attention minute); files in {run_dir}")
    raise SystemExit(code)


if __name__ == "__main__":
    main()
