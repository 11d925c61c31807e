"""Record scripted demonstrations on `reach`, export them as a LeRobotDataset v3, and read them back.

    python examples/export_lerobot.py --out /tmp/reach_demos

Writes <out>/episodes (the toolkit's append-only store) and <out>/lerobot (LeRobotDataset v3, written
natively: needs only `pip install 'robot-rl[datasets]'`; LeRobot's own loader reads it back where lerobot
is installed, see docs/datasets.md). Then train with the demos mixed into every batch:

    robot-rl train loop.demos_path=<out>/episodes algo.demo_ratio=0.5

The scripted expert moves the end-effector straight at the goal: the state holds goal − ee (scaled
by the arm's reach), and an `ee` action of 1 moves `action_scale` metres.
"""

import argparse
from pathlib import Path

import torch

from robot_rl.data.recorder import EpisodeRecorder, StoreSink
from robot_rl.data.store import EpisodeStore
from robot_rl.data.tools import export_lerobot, inspect_path, verify_path
from robot_rl.sims.reach import ReachConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("reach_demos"))
    parser.add_argument("--episodes", type=int, default=20)
    args = parser.parse_args()

    cfg = ReachConfig()
    env = cfg.make("cpu", seed=0, num_envs=8)
    store = EpisodeStore.create(args.out / "episodes", env.spec, fps=20, task="reach",
                                source={"expert": "scripted straight-line"})
    recorder = EpisodeRecorder(StoreSink(store), env.num_envs, task="reach", max_episodes=args.episodes)
    obs = env.reset(seed=0)
    recorder.reset(obs)
    while not recorder.full:
        offset = obs["state"][:, 8:10] * (cfg.link1 + cfg.link2)  # goal − ee in metres
        action = (offset / cfg.action_scale).clamp(-1.0, 1.0)
        result = env.step(action)
        recorder.step(action, result)
        obs = result.obs
    recorder.close()
    print(f"expert success: {recorder.successes}/{recorder.episodes_written}")
    print(inspect_path(args.out / "episodes"))

    try:
        episodes, frames = export_lerobot(args.out / "episodes", args.out / "lerobot", repo_id="local/reach_demos",
                                          robot_type="reach")  # a simulated arm: the task names it
    except ImportError as e:
        print(f"skipping the LeRobot export: {e}")
        return
    print(f"\nexported {episodes} episodes ({frames} frames) to {args.out / 'lerobot'}")
    for report in verify_path(args.out / "lerobot"):
        print(report.text())

    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError:
        print("lerobot is not installed: skipping the check with LeRobot's own loader")
        return
    ds = LeRobotDataset("local/reach_demos", root=args.out / "lerobot")
    first = ds[0]
    print(f"LeRobot's loader: {len(ds)} frames, {ds.num_episodes} episodes; frame 0 action "
          f"{first['action'].tolist()}, reward {float(first['next.reward']):.3f}")
    assert torch.equal(first["action"], torch.from_numpy(store.read(0).action[0]))


if __name__ == "__main__":
    main()
