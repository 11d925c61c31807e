"""`robot-rl data inspect|verify|import|export|record`: the options of each sub-verb and what it runs."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Union

import tyro

from robot_rl.cli.base import Command


@dataclass
class DataInspectArgs(Command):
    """Print the features, episodes, frames and fps of an episode store, a LeRobotDataset v3 or a run directory."""

    path: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="PATH")]]
    """The dataset or run directory."""

    def run(self) -> int:
        """Print the summary."""
        from robot_rl.data import tools

        print(tools.inspect_path(self.path))
        return 0


@dataclass
class DataVerifyArgs(Command):
    """Check every episode: checksums, frame counts against the metadata, shapes, NaN/inf. Exit 1 on a problem."""

    path: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="PATH")]]
    """The dataset or run directory (a run's checkpoints and the datasets inside it are checked too)."""

    def run(self) -> int:
        """Print one report per dataset; 1 when any has a problem."""
        from robot_rl.data import tools

        reports = tools.verify_path(self.path)
        for rep in reports:
            print(rep.text())
        return 0 if all(r.ok for r in reports) else 1


@dataclass
class DataImportArgs(Command):
    """Convert a local LeRobotDataset v3 into an episode store, for `demos.path` (needs the datasets extra)."""

    src: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="LEROBOT_DIR")]]
    """The LeRobotDataset v3 directory (meta/info.json, data/, videos/)."""
    out: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="OUT")]]
    """The episode store to create (a new or empty directory)."""

    def run(self) -> int:
        """Convert and say how to train on the result."""
        from robot_rl.data import tools

        store = tools.import_lerobot(self.src, self.out)
        print(f"imported {len(store)} episodes ({store.total_frames} frames) into {self.out}; train with "
              f"demos.path={self.out} algo.demo_ratio=0.5")
        return 0


@dataclass
class DataExportArgs(Command):
    """Write recorded episodes (an episode store, or the one inside a run directory) as a LeRobotDataset v3.

    Written natively (pyarrow, Pillow, PyAV: `pip install 'robot-rl[datasets]'`); LeRobot itself is not needed.
    """

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
    LeRobot's own loader decodes them with torchcodec, see docs/datasets.md)."""
    fps: float | None = None
    """Frames per second (default: the store's)."""
    robot_type: str | None = None
    """LeRobot's robot_type field (default: the one the store records: the robot's type for `robot-rl record`,
    the task for `data record`)."""

    def run(self) -> int:
        """Write the dataset."""
        from robot_rl.data import tools

        _quiet_progress_bars()
        episodes, frames = tools.export_lerobot(self.src, self.out, repo_id=self.repo_id, task=self.task,
                                                use_videos=self.video, fps=self.fps, robot_type=self.robot_type)
        robot_type = json.loads((self.out / "meta" / "info.json").read_text()).get("robot_type")
        print(f"wrote a LeRobotDataset v3 with {episodes} episodes ({frames} frames) to {self.out}; robot_type "
              + (repr(robot_type) if robot_type else "unknown (the store does not record it; pass --robot-type)"))
        return 0


@dataclass
class DataRecordArgs(Command):
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

    def run(self) -> int:
        """Roll out and record."""
        from robot_rl.loop.record_run import record_run

        if self.format == "lerobot":
            _quiet_progress_bars()
        result = record_run(self.run_dir, self.out, episodes=self.episodes, fmt=self.format, seed=self.seed,
                            device=self.device, num_envs=self.num_envs, fps=self.fps,
                            deterministic=not self.stochastic, use_videos=self.video)
        print(f"recorded {result.episodes} episodes ({result.frames} frames, {result.successes} successes) "
              f"into {result.out}")
        return 0


DataVerb = Union[
    Annotated[DataInspectArgs, tyro.conf.subcommand("inspect")],
    Annotated[DataVerifyArgs, tyro.conf.subcommand("verify")],
    Annotated[DataImportArgs, tyro.conf.subcommand("import")],
    Annotated[DataExportArgs, tyro.conf.subcommand("export")],
    Annotated[DataRecordArgs, tyro.conf.subcommand("record")],
]


@dataclass
class DataArgs(Command):
    """Datasets: inspect, verify, import (LeRobot v3 → demos), export (→ LeRobot v3), record (a run's policy).

    Demos for training: `robot-rl data import LEROBOT_DIR demos/` then
    `robot-rl train demos.path=demos/ algo.demo_ratio=0.5`. See docs/datasets.md.
    """

    action: tyro.conf.OmitSubcommandPrefixes[DataVerb]  # type: ignore[valid-type]
    """What to do."""

    def run(self) -> int:
        """Run the sub-verb; 0 on success, 1 when verification finds problems, 2 on a bad store or path."""
        from robot_rl.data.store import StoreError

        try:
            result: int = self.action.run()
        except (StoreError, ImportError, FileExistsError) as e:
            print(f"robot-rl data: error: {e}", file=sys.stderr)
            return 2
        return result


def _quiet_progress_bars() -> None:
    # LeRobot's own writer (backend="lerobot") drives `datasets` maps whose progress bars drown the CLI's output.
    try:
        from datasets.utils.logging import disable_progress_bar
    except ImportError:
        return  # `datasets` is not installed: nothing to quiet
    disable_progress_bar()

