"""RL-Co on the "real robot" stand-in: real + sim demos, SFT warm start, SAC in sim anchored to real data.

    MUJOCO_GL=osmesa python examples/cotrain_shifted_reach.py     # needs pip install 'robot-rl[mujoco]'

1. Records "real" demonstrations in ``mujoco/reach_shifted`` (the stand-in for a real arm: other
   dynamics, light, colours, camera pose) and simulated ones in ``mujoco/reach`` with a scripted teleoperator.
2. Trains with exactly the command line a user types, through ``robot-rl train``::

       robot-rl train --task mujoco/reach --algo sac --cotrain.real-dataset REAL --cotrain.weight 0.1 \\
           --cotrain.sim-dataset SIM --cotrain.sft-steps 500 ...

3. Scores the result on the "real" env. On hardware that last step is ``robot-rl deploy`` on the arm.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from robot_rl.checkpoint import load_latest
from robot_rl.cli import main as robot_rl
from robot_rl.core.config import TASKS, ensure_registered
from robot_rl.loop.evaluate import evaluate
from robot_rl.loop.runner import load_run_config
from robot_rl.sims.mujoco.shifted import ScriptedReachDemonstrator, record_demos


def main() -> None:
    """Record demos, co-train, evaluate on the shifted ("real") env."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--real-demos", type=int, default=10)
    p.add_argument("--sim-demos", type=int, default=100)
    p.add_argument("--env-steps", type=int, default=4000)
    p.add_argument("--weight", type=float, default=0.1)
    p.add_argument("--dir", type=Path, default=None, help="where demos and the run go (default: a temp dir)")
    args = p.parse_args()
    ensure_registered()
    root = args.dir or Path(tempfile.mkdtemp(prefix="cotrain-"))
    real_task = TASKS.get("mujoco/reach_shifted")(max_episode_steps=30)
    sim_task = TASKS.get("mujoco/reach")(max_episode_steps=30)
    teleop = {"gain": 0.25, "noise": 0.3}  # a slow, noisy operator: RL in sim can do better than the demos
    ok = record_demos(real_task.make("cpu", 1, num_envs=10), root / "real", args.real_demos,
                      ScriptedReachDemonstrator(seed=1, **teleop), seed=1)
    print(f"recorded {args.real_demos} 'real' demos ({ok} successful) in {root / 'real'}")
    record_demos(sim_task.make("cpu", 2, num_envs=25), root / "sim", args.sim_demos,
                 ScriptedReachDemonstrator(seed=2, **teleop), seed=2)
    robot_rl(["train", "--task", "mujoco/reach", "--algo", "sac",
              "--cotrain.real-dataset", str(root / "real"), "--cotrain.weight", str(args.weight),
              "--cotrain.sim-dataset", str(root / "sim"), "--cotrain.sft-steps", "500",
              "task.max_episode_steps=30", "algo.learning_starts=1000", "loop.success_threshold=null",
              f"loop.total_env_steps={args.env_steps}", "loop.eval_every_env_steps=1000",
              "loop.eval_episodes=20", "replay.persist=false", f"run.root={root / 'runs'}", "run.name=rlco"])
    run = root / "runs" / "rlco"
    state, _, _ = load_latest(run)
    real_env = real_task.make("cpu", 4242, num_envs=50)
    algo = load_run_config(run).algo.build(real_env.spec, "cpu", 0)
    algo.load_state_dict(state["algo"])
    policy = algo.make_policy()
    result = evaluate(policy, real_env, 50, seed=4242)
    print(f"RL-Co policy on the 'real' env: {result.success_rate:.0%} success over 50 episodes "
          f"(held-out real loss during RL: {run / 'cotrain.csv'})")


if __name__ == "__main__":
    main()
