"""Fit a camera to logged frames on a stand-in: a "real" camera mounted elsewhere than the simulator's.

    python examples/twin_camera.py        # needs pip install 'robot-rl[mujoco,twin]' and a MuJoCo renderer

1. The "real robot" is ``mujoco/reach_shifted``: its front camera sits 3 cm, −4 cm and 2 cm away from the
   simulator's, in a scene with other colours and a darker light. A noisy scripted teleoperator logs 8 episodes
   with the camera's frames and the state beside them (``task.obs=state_pixels``), as `robot-rl record` would.
2. The camera is fitted as ``robot-rl twin camera`` fits it (here the position alone: the lens is known)::

       robot-rl twin camera --episodes DIR/real --task mujoco/reach --free dx,dy,dz --out DIR/camera.json

3. Prints the fit next to the truth and the ``task.camera_adjust`` override that trains from that camera.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from robot_rl.core.config import TASKS
from robot_rl.sims.mujoco.shifted import ScriptedReachDemonstrator, ShiftConfig, record_demos
from robot_rl.twin.camera import CameraFitConfig, describe, fit_camera


def main() -> None:
    """Log, fit, compare."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--dir", type=Path, default=None, help="where the logs and the fit go (default: a temp dir)")
    args = p.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="twin-camera-"))
    real = TASKS.get("mujoco/reach_shifted")(obs="state_pixels", num_envs=args.episodes, max_episode_steps=15,
                                            terminate_on_success=False)
    env = real.make("cpu", 1)
    try:
        record_demos(env, root / "real", args.episodes, ScriptedReachDemonstrator(gain=0.3, noise=0.5, seed=3),
                     seed=1, fps=25.0)
    finally:
        env.close()
    print(f"logged {args.episodes} episodes of the 'real' camera into {root / 'real'}")
    cfg = CameraFitConfig(free=("dx", "dy", "dz"), frames=16, iterations=30, restarts=2)
    fit = fit_camera(TASKS.get("mujoco/reach")(), root / "real", cfg)
    print(describe(fit))
    print(f"true shift: {list(ShiftConfig().camera_offset)} m")
    fit.write(root / "camera.json")
    print(f"\ntrain from the fitted camera:\n  robot-rl train --task mujoco/reach task.obs=pixels "
          f"'task.camera_adjust={json.dumps(fit.adjust())}'")


if __name__ == "__main__":
    main()
