"""`robot-rl train` and `robot-rl eval`: run the training loop in one process, score a run."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from robot_rl.cli.base import Command, missing_extra, sigterm_as_ctrl_c, viz_overrides
from robot_rl.cli.vocabulary import (
    ALGO_DEFAULT,
    TASK_DEFAULT,
    VIZ_SINKS,
    algo_help,
    overrides_help,
    sections_of,
    task_help,
)
from robot_rl.core.config import ConfigError
from robot_rl.loop.config import TrainConfig, resolve_train_config


def train_sections() -> tuple[str, ...]:
    """The sections of a run's config: TrainConfig's own and each top-level extension's (viz, twin, jsrl, …).

    An extension's section inside a fixed one (``loop.hil``) is set through that one (``--loop.hil.device X``).
    """
    from robot_rl.core.extension import extension_sections

    return (*(s for s in sections_of(TrainConfig) if s != "extensions"), *extension_sections())


@dataclass
class TrainArgs(Command):
    """Train a policy.

    With no options: SAC on the built-in `reach` task, until ≥90% success over 100
    evaluation episodes. Writes runs/<name>/ (TensorBoard logs, checkpoints, config.yaml,
    learning_curve.png, summary.md). Set any config key as `section.key=value` after the options, e.g.
    `robot-rl train --algo ppo task.num_envs=2048 loop.total_env_steps=5e6`; list every key with
    `robot-rl config --task T --algo A`.
    """

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(
        metavar="SECTION.KEY=VALUE",
        help=overrides_help(train_sections(), "`--cotrain.real-dataset PATH --cotrain.weight 0.1`"))]] = ()
    # --task, --algo: their help lists what the registries hold when it is shown.
    task: Annotated[str | None, tyro.conf.arg(metavar="NAME", help=task_help(), help_behavior_hint=TASK_DEFAULT)] = None
    algo: Annotated[str | None, tyro.conf.arg(metavar="NAME", help=algo_help(), help_behavior_hint=ALGO_DEFAULT)] = None
    config: Path | None = None
    """A YAML file with any of the sections; overrides on the command line win over it."""
    resume: Path | None = None
    """Continue the run in this directory from its last checkpoint (overrides still apply)."""
    name: str | None = None
    """Run name (directory under run.root); default <task>-<algo>-<timestamp>."""
    viz: Annotated[Literal["none", "rerun"] | None, tyro.conf.arg(metavar=VIZ_SINKS)] = None
    """Live view of sub-env 0 (cameras, actions, reward, success): `rerun` streams to a Rerun viewer on
    127.0.0.1:9876 if one is running, else saves <run>/viz.rrd (`rerun <run>/viz.rrd` opens it); sets viz.sink,
    other viz.* keys in docs/visualisation.md. Needs `pip install 'robot-rl[viz]'`."""
    viz_file: Path | None = None
    """With --viz rerun: save the recording here (also while streaming to a viewer)."""
    offline: Path | None = None
    """Pre-train on this recorded data first (an episode store or LeRobotDataset v3 of this task), then learn
    online in the same run; `offline.updates`, `algo.cql_alpha`, `algo.calql` … in docs/offline-to-online.md."""

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """The run config's sections."""
        return train_sections()

    def run(self) -> int:
        """Train until a stop rule fires; print how it ended and where the run is."""
        from robot_rl.loop.data_parallel_run import check_combinations, started_by_torchrun, torchrun_argv
        from robot_rl.loop.runner import train

        cfg = self.resolved_config()
        if cfg.run.distributed == "ddp" and not started_by_torchrun():
            # The ranks of one machine, started by torchrun (the same command, once per rank).
            import subprocess

            if self.argv is None:
                raise ConfigError("run.distributed=ddp from Python: start the ranks with torchrun")
            check_combinations(cfg)  # before starting ranks that would each fail the same way
            return subprocess.call(torchrun_argv(self.argv, cfg.run.nproc_per_node))
        with sigterm_as_ctrl_c():  # an engine's SIGTERM checkpoints and exits 0, like Ctrl-C
            result = train(cfg, resume_dir=self.resume)
        if result.last_eval is None and cfg.run.distributed != "none":
            return 0  # a rank > 0 of a data-parallel run: rank 0 reports
        ev = result.last_eval
        status = "reached the success threshold" if result.reached_threshold else f"stopped ({result.stop_reason})"
        # Two lines, each within 80 columns.
        print(f"{status} after {result.env_steps:,} env steps, {result.updates:,} updates, {result.wall_s:.0f}s")
        if ev is not None:
            print(f"last eval: success {ev.success_rate:.0%}, return {ev.mean_return:.2f}")
        print(f"run written to {result.run_dir}")
        return 0

    def resolved_config(self) -> Any:
        """The run's TrainConfig: the resumed run's own (with the overrides), or task/algo presets, file, overrides."""
        overrides = [*self.overrides, *([f"run.name={self.name}"] if self.name else []), *viz_overrides(self),
                     *([f"offline.data={self.offline}"] if self.offline is not None else [])]
        if self.resume is not None:
            from robot_rl.config_io import parse_override
            from robot_rl.loop.runner import load_run_config

            return load_run_config(self.resume, dict(parse_override(o) for o in overrides))
        return resolve_train_config(self.task, self.algo, self.config, overrides)


@dataclass
class EvalArgs(Command):
    """Evaluate a run's latest checkpoint with deterministic actions; optionally save an mp4."""

    run_dir: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="RUN_DIR")]]
    """The run directory (runs/<name>)."""
    episodes: int = 100
    """Number of evaluation episodes."""
    video: Path | None = None
    """Write an mp4 of sub-env 0 to this path (needs `pip install 'robot-rl[video]'`)."""
    video_episodes: int = 3
    """Episodes of sub-env 0 to record in the video."""
    seed: int = 12345
    """Seed of the evaluation env."""
    device: str = "cpu"
    """Device to evaluate on."""

    def run(self) -> int:
        """Evaluate and print success, return and length; 2 when a package it needs is missing."""
        from robot_rl.loop.eval_run import evaluate_run

        try:
            result = evaluate_run(self.run_dir, episodes=self.episodes, seed=self.seed, device=self.device,
                                  video=self.video, video_episodes=self.video_episodes)
        except ImportError as e:  # an extra that is not installed (the video writer's, the task's simulator)
            if not missing_extra(e):
                raise  # our own import broke: a bug keeps its traceback
            print(f"robot-rl eval: error: {e}", file=sys.stderr)
            return 2
        print(f"{self.episodes} episodes: success {result.success_rate:.1%}, return {result.mean_return:.3f}, "
              f"length {result.mean_length:.1f}")
        if self.video:
            print(f"video written to {self.video}")
        return 0
