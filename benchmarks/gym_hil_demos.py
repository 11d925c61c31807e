"""Scripted demonstrations of gym_hil's Panda pick, written with LeRobot's own ``LeRobotDataset`` writer.

The expert reads the state (the cube's position sensor, ``environment_state``, and the pinch point in
``agent_pos``), moves the gripper to the cube in 2.5 cm steps, closes it, waits for the fingers and lifts; the
env ends the episode on success (cube 10 cm up, in the hand). Only successful attempts are written (as a
person recording demos keeps the good ones); the success rate of all attempts is returned.

Two datasets hold the same episodes: ``<out>/lerobot`` in gym_hil's own action units (x, y, z in [-1, 1],
gripper 0 = open, 1 = stay, 2 = close: what LeRobot's ``gym_manipulator`` records and its SAC's discrete
gripper expects), and ``<out>/robot_rl`` with the gripper column in the [-1, 1] that robot-rl's gymnasium
adapter exposes for a Box whose bounds differ per dimension (``[0, 2]`` → ``[-1, 1]``, i.e. minus 1).

    MUJOCO_GL=osmesa .venv-gymhil/bin/python benchmarks/gym_hil_demos.py --out /tmp/gymhil_demos --episodes 20
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

#: The env both stacks train on: what LeRobot's make_robot_env builds for ``env.name=gym_hil`` (PandaPickCubeBase-v0
#: with gym_hil's gripper-penalty and 2.5 cm end-effector wrappers), with no camera renders (``image_obs``: LeRobot
#: forces True; two llvmpipe renders cost ~0.9 s a step here) and no 1 s sleep at each reset (``reset_delay_seconds``).
ENV_ID = "gym_hil/PandaPickCube-v0"
ENV_KWARGS: dict[str, Any] = {"image_obs": False, "use_gripper": True, "gripper_penalty": 0.0,
                              "reset_delay_seconds": 0.0}
FPS = 10  # gym_hil's control_dt is 0.1 s
STEP_M = 0.025  # gym_hil's EEActionWrapper step per unit action


def make_env() -> Any:
    import gym_hil  # noqa: F401  (registers the ids)
    import gymnasium as gym

    return gym.make(ENV_ID, **ENV_KWARGS)


class PickExpert:
    """Over the cube, down, close, wait, lift: native gym_hil actions ``[dx, dy, dz, gripper]``."""

    def __init__(self, rng: np.random.Generator, noise: float = 0.1) -> None:
        self.rng = rng
        self.noise = noise
        self.phase = "reach"
        self.wait = 0

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        cube = np.asarray(obs["environment_state"], np.float64)  # the cube's position sensor
        tcp = np.asarray(obs["agent_pos"][-3:], np.float64)
        gripper = 1.0
        if self.phase == "reach":
            target = cube + np.array([0.0, 0.0, 0.005])
            if np.linalg.norm(target - tcp) < 0.008:
                self.phase = "close"
        if self.phase == "close":
            target, gripper = cube + np.array([0.0, 0.0, 0.005]), 2.0
            self.wait += 1
            if self.wait >= 6:
                self.phase = "lift"
        if self.phase == "lift":
            target, gripper = tcp + np.array([0.0, 0.0, 0.05]), 2.0
        move = np.clip((target - tcp) / STEP_M, -1.0, 1.0)
        move = np.clip(move + self.rng.normal(0.0, self.noise, 3), -1.0, 1.0)
        return np.concatenate([move, [gripper]]).astype(np.float32)


def rollout(env: Any, seed: int) -> tuple[dict[str, list[Any]], bool]:
    """One expert episode: per-step state, action, reward, done; and whether it succeeded."""
    obs, _ = env.reset(seed=seed)
    expert = PickExpert(np.random.default_rng(seed))
    cols: dict[str, list[Any]] = {"observation.state": [], "observation.environment_state": [], "action": [],
                                  "next.reward": [], "next.done": []}
    success = False
    for _ in range(200):
        action = expert.act(obs)
        nxt, reward, terminated, truncated, info = env.step(action)
        cols["observation.state"].append(np.asarray(obs["agent_pos"], np.float32))
        cols["observation.environment_state"].append(np.asarray(obs["environment_state"], np.float32))
        cols["action"].append(action)
        cols["next.reward"].append(np.array([reward], np.float32))
        cols["next.done"].append(np.array([bool(terminated or truncated)]))
        obs = nxt
        success = bool(info.get("succeed", False))
        if terminated or truncated:
            break
    return cols, success


def write(root: Path, episodes: list[dict[str, list[Any]]], gripper_shift: float) -> None:
    """The episodes as a LeRobotDataset v3 at ``root`` (LeRobot's writer), the gripper column shifted."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    features = {
        "observation.state": {"dtype": "float32", "shape": (18,), "names": None},
        "observation.environment_state": {"dtype": "float32", "shape": (3,), "names": None},
        "action": {"dtype": "float32", "shape": (4,), "names": None},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
    }
    if root.exists():
        shutil.rmtree(root)
    ds = LeRobotDataset.create(repo_id="local/gym_hil_pick_demos", fps=FPS, root=root, features=features,
                               use_videos=False)
    for cols in episodes:
        for i in range(len(cols["action"])):
            action = cols["action"][i].copy()
            action[-1] += gripper_shift
            ds.add_frame({"observation.state": cols["observation.state"][i],
                          "observation.environment_state": cols["observation.environment_state"][i], "action": action,
                          "next.reward": cols["next.reward"][i], "next.done": cols["next.done"][i],
                          "task": "pick the cube"})
        ds.save_episode()
    ds.finalize()


def record(out: Path, episodes: int, max_attempts: int) -> dict[str, Any]:
    """Record ``episodes`` successful demos (at most ``max_attempts`` tries) into both datasets."""
    import lerobot.datasets.lerobot_dataset  # noqa: F401  (torch and its deps before OSMesa's LLVM: import order)

    env = make_env()
    kept: list[dict[str, list[Any]]] = []
    attempts = 0
    while len(kept) < episodes and attempts < max_attempts:
        cols, ok = rollout(env, seed=attempts)
        attempts += 1
        if ok:
            kept.append(cols)
    env.close()
    write(out / "lerobot", kept, 0.0)
    write(out / "robot_rl", kept, -1.0)
    lengths = [len(c["action"]) for c in kept]
    summary = {"attempts": attempts, "successes": len(kept), "success_rate": len(kept) / max(attempts, 1),
               "frames": int(sum(lengths)), "mean_length": float(np.mean(lengths)) if lengths else 0.0,
               "lerobot": str(out / "lerobot"), "robot_rl": str(out / "robot_rl")}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--max-attempts", type=int, default=40)
    args = p.parse_args()
    print(json.dumps(record(args.out, args.episodes, args.max_attempts), indent=2))


if __name__ == "__main__":
    main()
