"""Record teleoperated demos with rewind-and-correct labels, then load them weighted for fine-tuning.

Runs here without hardware: an xArm driver over the fake SDK (robot_rl.testing.fake_xarm), and a scripted
"operator" who starts an episode, pushes the arm, overshoots, marks a *rewind* back to a familiar pose, then a
*correction*, labels success, and does it again. Everything goes through the same code as
`robot-rl record` (`run_record`), the safety layer included. With `--sim` it uses the MuJoCo SimulatedArm.

    python examples/record_demos.py [--out /tmp/demos] [--format lerobot] [--sim]
"""

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

from robot_rl.cli.record import RecordArgs, run_record
from robot_rl.data.demos import RaCWeights, load_demos, read_episodes
from robot_rl.data.episode import SEGMENT_NAMES
from robot_rl.hardware.xarm import XArmRobot, XArmRobotConfig
from robot_rl.human_loop.devices.base import TeleopReading
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.testing.fake_xarm import FakeXArmAPI

EPISODE = 60  # control steps per scripted demo


def operator(i: int) -> TeleopReading:
    """Push +x, overshoot, rewind (-x), correct (+z and a gentler +x), success; then the next episode."""
    t = i % (EPISODE + 5)
    events: tuple[str, ...] = ()
    delta = [0.0] * 6
    if t == 0:
        events = ("reset",)  # start an episode
    elif t < 20:
        delta = [0.8, 0, 0, 0, 0, 0]
    elif t == 20:
        events = ("rewind",)
    elif t < 32:
        delta = [-0.8, 0, 0, 0, 0, 0]  # back to a familiar state
    elif t == 32:
        events = ("correct",)
    elif t < 50:
        delta = [0.4, 0, 0.3, 0, 0, 0]  # the recovery
    elif t == 50:
        events = ("correct",)  # end of the correction segment
    elif t == 55:
        events = ("success",)  # labelled at this step; ends the episode
    return TeleopReading(0.0, delta=delta, gripper=1.0, engage=any(delta), events=events)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="output directory (default: a temporary one)")
    p.add_argument("--format", choices=("episodes", "lerobot"), default="episodes")
    p.add_argument("--sim", action="store_true", help="record from the MuJoCo SimulatedArm (needs mujoco)")
    a = p.parse_args()
    tmp = None
    if a.out is None:
        tmp = Path(tempfile.mkdtemp(prefix="robot_rl_demos_"))
        a.out = tmp / "demos"
    overrides = ("safety.workspace_low=[0.1,-0.5,0.0]", "safety.workspace_high=[0.8,0.5,0.7]")
    args = RecordArgs(robot="sim_arm" if a.sim else "xarm", teleop="scripted", out=a.out, format=a.format,
                      episodes=2, hz=20.0, task="push the block", overrides=overrides, status=False, min_free_mb=10)
    robot = None if a.sim else XArmRobot(XArmRobotConfig(), sdk=FakeXArmAPI)
    try:
        code = run_record(args, robot=robot, device=ScriptedDevice(operator))
        if code != 0:
            raise SystemExit(code)
        episodes, spec, kind = read_episodes(a.out)
        for n, ep in enumerate(episodes):
            labels = {SEGMENT_NAMES[int(k)]: int(v) for k, v in zip(*np.unique(ep.segment, return_counts=True))}
            first = int(np.argmax(ep.success)) if ep.success.any() else None
            print(f"episode {n}: {len(ep)} steps, success labelled at step {first}, segments {labels}, "
                  f"human steps {int(ep.intervened.sum())}")
        plain = load_demos(a.out, spec)
        weighted = load_demos(a.out, spec, rac=RaCWeights(correction_weight=3, rewind_weight=0))
        print(f"{kind}: {len(plain)} demo transitions; with RaC weights (correction x3, rewind x0): "
              f"{len(weighted)} ({len(weighted) / len(plain):.2f}x)")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
