"""`robot-rl data inspect|verify|import|export|record`: the options of each sub-verb and what it runs."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Union

import tyro


@dataclass
class DataInspectArgs:
    """Print the features, episodes, frames and fps of an episode store, a LeRobotDataset v3 or a run directory."""

    path: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="PATH")]]
    """The dataset or run directory."""


@dataclass
class DataVerifyArgs:
    """Check every episode: checksums, frame counts against the metadata, shapes, NaN/inf. Exit 1 on a problem."""

    path: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="PATH")]]
    """The dataset or run directory (a run's checkpoints and the datasets inside it are checked too)."""


@dataclass
class DataImportArgs:
    """Convert a local LeRobotDataset v3 into an episode store, for `loop.demos_path` (needs the lerobot extra)."""

    src: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="LEROBOT_DIR")]]
    """The LeRobotDataset v3 directory (meta/info.json, data/, videos/)."""
    out: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="OUT")]]
    """The episode store to create (a new or empty directory)."""


@dataclass
class DataExportArgs:
    """Write recorded episodes (an episode store, or the one inside a run directory) as a LeRobotDataset v3."""

    src: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="SRC")]]
    """The episode store (from `robot-rl data record`, or a run directory holding exactly one)."""
    out: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="OUT")]]
    """The LeRobotDataset directory to create (must not exist or be empty)."""
    repo_id: str = "local/robot_rl"
    """The dataset's repo id, as LeRobot names it (nothing is uploaded)."""
    task: str = ""
    """Task text for every frame (default: the store's task name)."""
    video: bool = False
    """Store cameras as AV1 mp4 `video` features instead of PNG `image` features (lossy, much smaller;
    reading them back with LeRobot's loader needs torchcodec, see docs/datasets.md)."""
    fps: float | None = None
    """Frames per second (default: the store's)."""
    robot_type: str | None = None
    """LeRobot's robot_type field."""


@dataclass
class DataRecordArgs:
    """Roll out a run's newest checkpoint and record whole episodes (obs, action, reward, flags, success)."""

    run_dir: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="RUN_DIR")]]
    """The run directory (runs/<name>)."""
    out: Path
    """Where to write: a new episode store, or with --format lerobot a new LeRobotDataset v3."""
    episodes: int = 10
    """Number of whole episodes to record."""
    format: Literal["episodes", "lerobot"] = "episodes"
    """episodes (append-only, checksummed, no extra needed) or lerobot (LeRobotDataset v3)."""
    stochastic: bool = False
    """Sample actions from the policy instead of taking its deterministic action."""
    seed: int = 12345
    """Seed of the recording env."""
    num_envs: int = 8
    """Sub-envs stepped in parallel while recording."""
    fps: float = 20.0
    """Frames per second stored with the episodes (the task's control rate)."""
    video: bool = False
    """With --format lerobot: cameras as mp4 video features."""
    device: str = "cpu"
    """Device to run the policy and env on."""


DataVerb = Union[
    Annotated[DataInspectArgs, tyro.conf.subcommand("inspect")],
    Annotated[DataVerifyArgs, tyro.conf.subcommand("verify")],
    Annotated[DataImportArgs, tyro.conf.subcommand("import")],
    Annotated[DataExportArgs, tyro.conf.subcommand("export")],
    Annotated[DataRecordArgs, tyro.conf.subcommand("record")],
]


@dataclass
class DataArgs:
    """Datasets: inspect, verify, import (LeRobot v3 → demos), export (→ LeRobot v3), record (a run's policy).

    Demos for training: `robot-rl data import LEROBOT_DIR demos/` then
    `robot-rl train loop.demos_path=demos/ algo.demo_ratio=0.5`. See docs/datasets.md.
    """

    action: tyro.conf.OmitSubcommandPrefixes[DataVerb]  # type: ignore[valid-type]
    """What to do."""


def run_data(args: DataArgs) -> int:
    """The `data` verb: dispatch to the sub-verb; 0 on success, 1 when verification finds problems."""
    from robot_rl.data.store import StoreError

    try:
        return _run(args.action)
    except (StoreError, ImportError, FileExistsError) as e:
        print(f"robot-rl data: error: {e}", file=sys.stderr)
        return 2


def _run(a: object) -> int:
    from robot_rl.data import tools

    if isinstance(a, DataInspectArgs):
        print(tools.inspect_path(a.path))
        return 0
    if isinstance(a, DataVerifyArgs):
        reports = tools.verify_path(a.path)
        for rep in reports:
            print(rep.text())
        return 0 if all(r.ok for r in reports) else 1
    if isinstance(a, DataImportArgs):
        store = tools.import_lerobot(a.src, a.out)
        print(f"imported {len(store)} episodes ({store.total_frames} frames) into {a.out}; train with "
              f"loop.demos_path={a.out} algo.demo_ratio=0.5")
        return 0
    if isinstance(a, DataExportArgs):
        _quiet_progress_bars()
        episodes, frames = tools.export_lerobot(a.src, a.out, repo_id=a.repo_id, task=a.task, use_videos=a.video,
                                                fps=a.fps, robot_type=a.robot_type)
        print(f"wrote a LeRobotDataset v3 with {episodes} episodes ({frames} frames) to {a.out}")
        return 0
    from robot_rl.data.recorder import record_run

    if not isinstance(a, DataRecordArgs):
        raise TypeError(f"unknown data sub-verb {type(a).__name__}")
    if a.format == "lerobot":
        _quiet_progress_bars()
    result = record_run(a.run_dir, a.out, episodes=a.episodes, fmt=a.format, seed=a.seed, device=a.device,
                        num_envs=a.num_envs, fps=a.fps, deterministic=not a.stochastic, use_videos=a.video)
    print(f"recorded {result.episodes} episodes ({result.frames} frames, {result.successes} successes) "
          f"into {result.out}")
    return 0


def _quiet_progress_bars() -> None:
    # LeRobot's writer drives `datasets` maps whose per-episode progress bars drown the CLI's output.
    try:
        from datasets.utils.logging import disable_progress_bar
    except ImportError:
        return  # LeRobot is not installed; the writer will say how to install it
    disable_progress_bar()


__all__ = ["DataArgs", "run_data"]
