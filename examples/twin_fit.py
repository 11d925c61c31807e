"""Real2sim on a stand-in: log a "real" arm with hidden parameters, fit the twin, compare with the truth.

    python examples/twin_fit.py        # needs pip install 'robot-rl[mujoco,twin]'

1. The "real robot" is ``mujoco/reach`` with parameters it does not tell anyone: weaker servos, more joint
   damping, heavier links and one control step of action delay (a ``task.randomize`` section whose ranges
   have ``low == high``). A noisy scripted teleoperator logs 20 episodes of it into an episode store at the
   task's control rate, as `robot-rl record` logs a real arm.
2. The twin is fitted exactly as ``robot-rl twin fit`` fits it::

       robot-rl twin fit --episodes DIR/real --task mujoco/reach \\
           --params actuator_gain,dof_damping,body_mass,geom_friction,action_delay --out DIR/twin.json

   ``geom_friction`` is fitted too although the logs cannot say anything about it (reach has no objects, and
   the arm's links do not collide): its uncertainty comes out as wide as its bounds.
3. Prints the recovered factors next to the hidden ones, and the command that trains on the twin.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from robot_rl.core.config import TASKS
from robot_rl.sims.base import ParamRange, RandomizeConfig
from robot_rl.sims.mujoco.shifted import ScriptedReachDemonstrator, record_demos
from robot_rl.twin.calibrate import TwinFitConfig, calibrate
from robot_rl.twin.fit import FitConfig

#: What the "real" arm hides: factors on mujoco/reach's nominal values, and the delay in control steps.
HIDDEN = {"actuator_gain": 0.6, "dof_damping": 2.0, "body_mass": 1.3}
HIDDEN_DELAY = 1


def record_real(out: Path, episodes: int, steps: int, seed: int = 1) -> Path:
    """Log ``episodes`` episodes of the hidden-parameter "real" reach arm into an episode store at ``out``."""
    hidden = RandomizeConfig(params={k: ParamRange(v, v) for k, v in HIDDEN.items()},
                             action_delay=(HIDDEN_DELAY, HIDDEN_DELAY))
    real = TASKS.get("mujoco/reach")(num_envs=10, max_episode_steps=steps, terminate_on_success=False,
                                     randomize=hidden)
    env = real.make("cpu", seed)
    try:
        # fps = the task's control rate: 1 / (frame_skip 8 × timestep 5 ms) = 25 Hz.
        record_demos(env, out, episodes, ScriptedReachDemonstrator(noise=0.5, seed=seed + 2), fps=25.0)
    finally:
        env.close()
    return out


def main() -> None:
    """Record, fit, compare."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--steps", type=int, default=20, help="steps per logged episode")
    p.add_argument("--restarts", type=int, default=4)
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--dir", type=Path, default=None, help="where the logs and the twin go (default: a temp dir)")
    args = p.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="twin-"))
    logs = record_real(root / "real", args.episodes, args.steps)
    print(f"logged {args.episodes} episodes of the 'real' arm into {logs}")
    cfg = TwinFitConfig(episodes=logs, task="mujoco/reach",
                        params="actuator_gain,dof_damping,body_mass,geom_friction,action_delay",
                        fit=FitConfig(population=8, iterations=args.iterations, restarts=args.restarts),
                        out=root / "twin.json")
    t0 = time.perf_counter()
    report, result = calibrate(cfg)
    print(f"fitted in {time.perf_counter() - t0:.0f} s ({result.evaluations} candidate replays of every episode)\n")
    truth = {**HIDDEN, "geom_friction": None, "action_delay": HIDDEN_DELAY}
    print(f"{'parameter':<16} {'true':>7} {'fit':>9} {'± std':>9}")
    for prm in report.params:
        true = truth[prm.key]
        std = f"{prm.std:.3g}" if prm.std is not None else "unknown"
        print(f"{prm.key:<16} {'(none)' if true is None else f'{true:g}':>7} {prm.value:>9.4f} {std:>9}")
    before, after = report.errors_before, report.errors_after
    print(f"\nstate error per episode (RMS, normalised): {sum(before) / len(before):.4f} before, "
          f"{sum(after) / len(after):.2e} after the fit")
    print(f'\ntrain in the calibrated, randomised sim:\n  robot-rl train --task mujoco/reach '
          f'"task.randomize=$(cat {root / "twin_dr.json"})"')


if __name__ == "__main__":
    main()
