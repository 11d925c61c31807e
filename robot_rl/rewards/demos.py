"""Scripted pixel demos of the built-in ``reach`` arm, rendered with render2d (fast, no simulator).

Each episode moves the end-effector along a straight line from its start towards the goal in
``travel`` steps (joint angles from inverse kinematics), stopping ``stop_short`` before it (default
``2r``, ``r`` the success radius), then hovers near the goal for ``hover`` steps: half of the hover
frames lie well inside the success radius (< r/2), half well outside (2r to 3r), so labels are
unambiguous at a few pixels per success radius. ``success[t]`` is the task's criterion on the state
after step ``t`` (the episode contract), so it labels ``obs[t+1]`` / ``final_obs``.

Used by the tests, the benchmark and the example; real data comes from ``robot-rl data record`` or
a LeRobotDataset.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from robot_rl.data.episode import Episode
from robot_rl.sims.reach import inverse_kinematics
from robot_rl.sims.reach_pixels import ReachPixelsConfig
from robot_rl.sims.render2d import Capsule, Disc, rasterize

#: The language goal of these demos.
REACH_INSTRUCTION = "reach the green target"


def reach_pixel_demos(episodes: int, image_size: int = 32, seed: int = 0, travel: int = 16, hover: int = 8,
                      success_radius: float = 0.1, wrist_size: int = 0,
                      top_extent: float = 0.4, stop_short: float | None = None) -> list[Episode]:
    """``episodes`` scripted demos with ``image.top`` ``[S, S, 3]`` (and ``image.wrist`` if ``wrist_size``).

    ``image.top`` looks at the goal region (``2 · top_extent`` m across); ``image.wrist`` is a second, wider camera
    (1.6 m across) so multi-camera code paths see cameras of different sizes.
    """
    cfg = ReachPixelsConfig(image_size=image_size, success_radius=success_radius)
    task = cfg.make("cpu", seed, num_envs=episodes)
    gen = torch.Generator().manual_seed(seed)
    n, length = episodes, travel + hover
    task.reset(seed=seed)
    l1, l2 = cfg.link1, cfg.link2
    start = task.end_effector().clone()
    dist0 = torch.linalg.vector_norm(task.goal - start, dim=-1)
    goal = task.goal.clone()
    frames: list[np.ndarray] = []
    wrist: list[np.ndarray] = []
    success: list[np.ndarray] = []
    path = []
    for t in range(length + 1):
        if t <= travel:
            # Travel stops 2r short of the goal (by default) so every frame is clearly in or out.
            gap = torch.linalg.vector_norm(goal - start, dim=-1, keepdim=True).clamp_min(1e-6)
            short = 2 * success_radius if stop_short is None else stop_short
            stop = goal + (start - goal) / gap * torch.clamp(gap, max=short)
            ee = start + (stop - start) * (t / travel)
        else:
            ang = torch.rand(n, generator=gen) * 2 * math.pi
            inside = torch.rand(n, generator=gen) < 0.5
            rad = torch.where(inside, 0.5 * torch.rand(n, generator=gen), 2.0 + torch.rand(n, generator=gen))
            rad = rad * success_radius
            ee = goal + rad[:, None] * torch.stack([torch.cos(ang), torch.sin(ang)], -1)
        path.append(ee)
    for ee in path:
        norm = torch.linalg.vector_norm(ee, dim=-1, keepdim=True).clamp(0.12, 0.98)
        target = ee / torch.linalg.vector_norm(ee, dim=-1, keepdim=True).clamp_min(1e-6) * norm
        task.q = inverse_kinematics(target, l1, l2)
        # The task draws the goal last (it is the only place pixel policies see it), which hides the
        # end-effector once inside it; these demos draw a larger gripper marker on top so that
        # success is visible in the image, as it is to a real camera looking at a gripper.
        scene = [*task._scene(slice(0, n)), Disc(task.end_effector(), 0.06, (220, 70, 60))]
        # The camera looks at the goal region (0.8 m across), like a camera fixed over the target.
        local = _shift(scene, goal)
        frames.append(rasterize(local, image_size, top_extent).numpy())
        if wrist_size:
            wrist.append(rasterize(local, wrist_size, 0.8).numpy())
        dist = torch.linalg.vector_norm(task.end_effector() - goal, dim=-1)
        success.append((dist < cfg.success_radius).numpy())
    top = np.stack(frames, 1)  # [n, T+1, S, S, 3]
    ok = np.stack(success, 1)  # [n, T+1]: criterion on frame t
    cams = {"image.top": top}
    if wrist_size:
        cams["image.wrist"] = np.stack(wrist, 1)
    out = []
    for i in range(n):
        obs = {k: np.ascontiguousarray(v[i, :length]) for k, v in cams.items()}
        final = {k: np.ascontiguousarray(v[i, length]) for k, v in cams.items()}
        succ = ok[i, 1:].copy()
        out.append(Episode(obs=obs, final_obs=final, action=np.zeros((length, 2), np.float32),
                           reward=np.where(succ, 0.0, -1.0).astype(np.float32),
                           terminated=np.zeros(length, bool), truncated=np.eye(1, length, length - 1, dtype=bool)[0],
                           intervened=np.zeros(length, bool), success=succ, task=REACH_INSTRUCTION,
                           meta={"start_goal_distance": round(float(dist0[i]), 4)}))
    return out



def _shift(scene: list[Disc | Capsule], origin: torch.Tensor) -> list[Disc | Capsule]:
    """The scene in each sub-env's frame centred on ``origin`` ``[N, 2]`` (one batched render, any centres)."""
    return [Disc(sh.center - origin, sh.radius, sh.color) if isinstance(sh, Disc) else
            Capsule(sh.start - origin, sh.end - origin, sh.radius, sh.color) for sh in scene]
