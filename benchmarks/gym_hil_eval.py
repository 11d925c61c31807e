"""Helpers of the gym_hil side-by-side: memory sampling, checkpoint snapshots, and one evaluation for both stacks.

Evaluation: each saved policy acts alone (no human, no demos) in a fresh ``gym_hil/PandaPickCube-v0`` with the
benchmark's env settings. The env is deterministic (the cube always starts at the same place, the arm at home),
so a deterministic policy scores 0 or 1; the success rate is therefore taken over ``episodes`` episodes of
each stack's *stochastic* policy (what its actor runs), torch seeded per episode, and the deterministic
episode is reported beside it. LeRobot's policy acts as its actor computes actions (continuous x, y, z from the
tanh-Gaussian actor, the gripper from the discrete critic's argmax); robot-rl's acts through robot-rl's own
gymnasium adapter (which maps its [-1, 1] gripper onto gym_hil's [0, 2]).
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import psutil


class MemoryMonitor(threading.Thread):
    """Samples the RSS of process trees every ``period_s``; keeps the peak per role and of their sum."""

    def __init__(self, period_s: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.period_s = period_s
        self.roots: dict[str, int] = {}
        self.peak: dict[str, float] = {}
        self.peak_total = 0.0
        self.load: list[tuple[float, float]] = []  # (time, 1-min load average): the machine is shared
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def watch(self, role: str, pid: int) -> None:
        with self._lock:
            self.roots[role] = pid

    def forget(self, role: str) -> None:
        with self._lock:
            self.roots.pop(role, None)

    @staticmethod
    def tree_rss_mb(pid: int) -> float:
        try:
            proc = psutil.Process(pid)
            procs = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            return 0.0
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total / 2**20

    def run(self) -> None:
        while not self._stop.wait(self.period_s):
            with self._lock:
                roots = dict(self.roots)
            now = {role: self.tree_rss_mb(pid) for role, pid in roots.items()}
            for role, mb in now.items():
                self.peak[role] = max(self.peak.get(role, 0.0), mb)
            self.peak_total = max(self.peak_total, sum(now.values()))
            self.load.append((time.time(), psutil.getloadavg()[0]))

    def mean_load(self, since: float, until: float) -> float | None:
        vals = [v for t, v in self.load if since <= t <= until]
        return sum(vals) / len(vals) if vals else None

    def stop(self) -> None:
        self._stop.set()


class Snapshotter(threading.Thread):
    """Copies every new checkpoint of a run as it appears (the stacks keep only the newest few, or one)."""

    def __init__(self, kind: str, run_dir: Path, dest: Path, t0: float, env_steps: Any) -> None:
        super().__init__(daemon=True)
        self.kind, self.run_dir, self.dest, self.t0, self.env_steps = kind, run_dir, dest, t0, env_steps
        self.rows: list[dict[str, Any]] = []
        self._seen: set[str] = set()
        self._stop = threading.Event()

    def _new(self) -> list[Path]:
        root = self.run_dir / "checkpoints"
        if not root.is_dir():
            return []
        pattern = "step_*" if self.kind == "robot_rl" else "[0-9]*"
        return sorted(p for p in root.glob(pattern) if p.is_dir() and p.name not in self._seen)

    def poll(self) -> None:
        for ckpt in self._new():
            done = ckpt / ("meta.json" if self.kind == "robot_rl" else "training_state/training_step.json")
            if not done.is_file():
                continue  # still being written
            time.sleep(0.5)
            self._seen.add(ckpt.name)
            out = self.dest / ckpt.name
            try:
                if self.kind == "robot_rl":
                    shutil.copytree(ckpt, out / "checkpoints" / ckpt.name)
                    for f in ("config.yaml", "spec.yaml"):
                        shutil.copy2(self.run_dir / f, out / f)
                else:
                    shutil.copytree(ckpt / "pretrained_model", out / "pretrained_model")
                    shutil.copytree(ckpt / "training_state", out / "training_state")
            except (OSError, shutil.Error) as e:  # pruned while copying
                print(f"[snapshot] {ckpt}: {e}")
                continue
            self.rows.append({"name": ckpt.name, "path": str(out), "wall_s": time.time() - self.t0,
                              "env_steps_taken": int(self.env_steps())})

    def run(self) -> None:
        while not self._stop.wait(1.0):
            self.poll()

    def stop(self) -> None:
        self._stop.set()
        self.poll()


def _episode(env: Any, policy_fn: Any, seed: int) -> tuple[bool, int]:
    obs, _ = env.reset(seed=seed)
    for t in range(200):
        obs, _, terminated, truncated, info = env.step(policy_fn(obs))
        if terminated or truncated:
            return bool(info.get("succeed", False)), t + 1
    return False, 200


def evaluate_lerobot(pretrained_model: Path, episodes: int) -> dict[str, Any]:
    """LeRobot's saved SAC policy in the benchmark env."""
    import torch
    from gym_hil_demos import make_env
    from gym_hil_lerobot import act, load_policy

    policy = load_policy(pretrained_model)
    env = make_env()
    try:
        ok, lengths = [], []
        for i in range(episodes):
            torch.manual_seed(i)
            s, n = _episode(env, lambda o: act(policy, o, False), seed=1000 + i)
            ok.append(s)
            lengths.append(n)
        det, _ = _episode(env, lambda o: act(policy, o, True), seed=999)
    finally:
        env.close()
    return {"success": sum(ok) / episodes, "deterministic_success": det, "mean_length": sum(lengths) / episodes}


def evaluate_robot_rl(run_like_dir: Path, episodes: int) -> dict[str, Any]:
    """robot-rl's saved policy (``robot_rl.policy_io.load_policy``) through robot-rl's gymnasium adapter."""
    import torch
    from gym_hil_demos import ENV_ID, ENV_KWARGS

    from robot_rl.policy_io import load_policy
    from robot_rl.sims.gymnasium import GymnasiumTaskConfig

    loaded = load_policy(run_like_dir)
    env = GymnasiumTaskConfig(env_id=ENV_ID, env_kwargs=dict(ENV_KWARGS)).make("cpu", seed=0)

    def run(deterministic: bool, seed: int) -> tuple[bool, int]:
        obs = env.reset(seed=seed)
        for t in range(200):
            with torch.no_grad():
                action, _ = loaded.policy.act(obs, deterministic=deterministic)
            res = env.step(action)
            obs = res.obs
            if bool(res.terminated[0] or res.truncated[0]):
                return bool(res.info["success"][0]), t + 1
        return False, 200

    try:
        ok, lengths = [], []
        for i in range(episodes):
            torch.manual_seed(i)
            s, n = run(False, 1000 + i)
            ok.append(s)
            lengths.append(n)
        det, _ = run(True, 999)
    finally:
        env.close()
    return {"success": sum(ok) / episodes, "deterministic_success": det, "mean_length": sum(lengths) / episodes}
