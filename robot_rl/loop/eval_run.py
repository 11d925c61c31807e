"""Evaluate a run directory's latest checkpoint, optionally recording an mp4."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from robot_rl.loop.evaluate import EvalResult, evaluate
from robot_rl.loop.run_context import load_run_config, resolve_device
from robot_rl.policy_io import load_policy


def evaluate_run(run_dir: Path, episodes: int = 100, seed: int = 12345, device: str = "cpu",
                 video: Path | None = None, video_episodes: int = 3, fps: int = 20) -> EvalResult:
    """Score the newest verifiable checkpoint of ``run_dir``; write ``video`` if given."""
    if video is not None:
        video_writer()  # missing, it fails now rather than after the evaluation episodes
    cfg = load_run_config(run_dir)
    dev = resolve_device(device)
    env = cfg.make_env(dev, seed, num_envs=min(episodes, 256), role="eval")
    try:
        policy = load_policy(run_dir, env.spec, dev).policy
        result = evaluate(policy, env, episodes, seed=seed)
    finally:
        env.close()
    if video is not None:
        write_video(cfg.make_env(dev, seed, num_envs=1, role="eval"), policy, Path(video), video_episodes, fps)
    return result


def video_writer() -> Any:
    """The ``imageio.v2`` module, with the FFmpeg plugin its mp4 writer needs; or an ImportError naming the extra."""
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401  (get_writer's libx264 backend)
    except ImportError as e:
        raise ImportError(f"saving a video needs imageio and imageio-ffmpeg ({e.name} is not installed): "
                          "pip install 'robot-rl[video]'") from None
    return imageio


def write_video(env: object, policy: object, path: Path, episodes: int, fps: int) -> None:
    """Record ``episodes`` episodes of a one-env instance to an mp4."""
    from robot_rl.core.algorithm import Policy
    from robot_rl.core.env import VecEnv

    assert isinstance(env, VecEnv) and isinstance(policy, Policy)
    imageio = video_writer()
    frames: list[torch.Tensor] = []
    evaluate(policy, env, episodes, frames=frames)
    if not frames:
        raise RuntimeError(f"{type(env).__name__} cannot render frames, so no video can be made")
    path.parent.mkdir(parents=True, exist_ok=True)
    with imageio.get_writer(path, fps=fps, codec="libx264", macro_block_size=1) as writer:
        for frame in frames:
            writer.append_data(frame.numpy())  # type: ignore[attr-defined]
    env.close()
