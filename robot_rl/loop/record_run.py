"""Roll out a trained run's newest checkpoint and record its episodes (`robot-rl data record`).

It reads the run's config (its task with the reward and twin sections applied, as :func:`~robot_rl.loop.eval_run.
evaluate_run` does), so it sits in the loop beside the evaluation of a run, and the data package below stays free of
the loop: :func:`~robot_rl.data.recorder.record_episodes` is the recording itself.
"""

from __future__ import annotations

import logging
from pathlib import Path

from robot_rl.core.config import ConfigError
from robot_rl.data.provenance import task_settings
from robot_rl.data.recorder import EpisodeSink, RecordResult, StoreSink, record_episodes
from robot_rl.data.store import EpisodeStore
from robot_rl.loop.run_context import load_run_config, resolve_device
from robot_rl.policy_io import load_policy

__all__ = ["RecordResult", "record_run"]

log = logging.getLogger(__name__)


def record_run(run_dir: Path, out: Path, episodes: int = 10, fmt: str = "episodes", seed: int = 12345,
               device: str = "cpu", num_envs: int = 8, fps: float = 20.0, deterministic: bool = True,
               use_videos: bool = False) -> RecordResult:
    """Roll out the newest checkpoint of ``run_dir`` and record ``episodes`` episodes into ``out``.

    ``fmt="episodes"`` writes an :class:`EpisodeStore`; ``fmt="lerobot"`` a LeRobotDataset v3.
    """
    cfg = load_run_config(run_dir)
    dev = resolve_device(device)
    env = cfg.make_env(dev, seed, num_envs=max(1, min(num_envs, episodes)), role="eval")
    try:
        loaded = load_policy(run_dir, env.spec, dev)
    except BaseException:
        env.close()
        raise
    policy, ckpt = loaded.policy, loaded.checkpoint
    task = type(cfg.task).registry.name_of(cfg.task)
    # A simulated robot has no LeRobot robot type of its own: the task names it.
    source = {"run_dir": str(run_dir), "checkpoint": str(ckpt), "deterministic": deterministic, "seed": seed,
              "robot_type": task, "task_config": task_settings(cfg.task)}
    sink: EpisodeSink
    if fmt == "episodes":
        sink = StoreSink(EpisodeStore.create(out, env.spec, fps=fps, task=task, source=source))
    elif fmt == "lerobot":
        from robot_rl.data.lerobot_io import LeRobotWriter

        sink = LeRobotWriter(out, env.spec, fps, task=task, use_videos=use_videos, robot_type=task)
    else:
        raise ConfigError(f"unknown recording format {fmt!r}; valid: episodes, lerobot")
    try:
        result = record_episodes(env, policy, sink, episodes, seed=seed, deterministic=deterministic, task=task)
    finally:
        env.close()
    result.out = Path(out)
    log.info("recorded %d episodes (%d frames) of %s into %s", result.episodes, result.frames, run_dir, out)
    return result
