"""Where `robot-rl record` writes: checks on the output, and the sink that commits each episode twice.

``--format lerobot`` writes each episode twice: into an episode store ``<out>.episodes`` (committed, with
fsync, as each episode ends) and into the LeRobotDataset at ``<out>`` (its parquet footers and metadata are
written only when the dataset is finalised at the end). If the session dies before that, nothing is
lost: ``robot-rl data export <out>.episodes NEW_DIR`` rebuilds the dataset.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robot_rl.durable import DiskFullError, is_disk_full

if TYPE_CHECKING:  # torch comes with these; `robot-rl --help` should not wait for it
    from robot_rl.data.episode import Episode
    from robot_rl.data.recorder import EpisodeSink, StoreSink


def check_output(out: Path, fmt: str, min_free_mb: float, append: bool = False) -> None:
    """Refuse an output that exists and is not empty (an episode store with ``append`` is fine), or a small disk.

    Less than ``min_free_mb`` free is refused: better before the session than mid-episode.
    """
    targets = [out] + ([staging_path(out)] if fmt == "lerobot" else [])
    for p in targets:
        if p.exists() and (not p.is_dir() or any(p.iterdir())):
            if append and fmt == "episodes":
                from robot_rl.data.store import is_store

                if is_store(p):
                    continue
                raise FileExistsError(f"{p} exists but is not an episode store: --append adds to one")
            if append:
                raise FileExistsError(f"{p} already exists, and a LeRobotDataset is written once: --append adds to "
                                      "an episode store (--format episodes; `robot-rl data export` converts it)")
            raise FileExistsError(f"{p} already exists: record into a new --out, or add episodes to it with "
                                  "--append --format episodes (recordings are never overwritten)")
    probe = out.resolve()
    while not probe.exists():
        probe = probe.parent
    free_mb = shutil.disk_usage(probe).free / 2**20
    if free_mb < min_free_mb:
        raise DiskFullError(f"only {free_mb:.0f} MB free on the disk of {out} (need {min_free_mb:.0f} MB, "
                            "--min-free-mb); free some space first")


def staging_path(out: Path) -> Path:
    """Where ``--format lerobot`` keeps its committed-per-episode copy."""
    return out.with_name(out.name + ".episodes")


class TeeSink:
    """Commit each episode to an episode store, then hand it to a second sink (the LeRobot writer)."""

    def __init__(self, first: StoreSink, second: EpisodeSink | None) -> None:
        self.first = first
        self.second = second

    def write(self, ep: Episode) -> None:
        """Write to both; a full disk raises DiskFullError (committed episodes stay)."""
        self.first.write(ep)
        if self.second is not None:
            try:
                self.second.write(ep)
            except OSError as e:
                if is_disk_full(e):
                    raise DiskFullError(f"disk full while writing the LeRobot dataset: {e}; every saved "
                                        f"episode is committed in {self.first.store.path}") from e
                raise

    def close(self) -> None:
        """Finalise the second sink."""
        self.first.close()
        if self.second is not None:
            self.second.close()


def open_sink(out: Path, fmt: str, spec: Any, hz: float, task: str, source: dict[str, Any], video: bool = False,
              repo_id: str = "local/robot_rl_demos", robot_type: str | None = None, append: bool = False) -> TeeSink:
    """The sink for ``fmt``: an episode store at ``out``, or the store ``<out>.episodes`` plus LeRobot at ``out``.

    ``append``: add to the episode store already at ``out`` (its spec must match the robot's).
    """
    from robot_rl.data.recorder import StoreSink
    from robot_rl.data.store import EpisodeStore

    if robot_type:  # so that `robot-rl data export` of the store records it too
        source = {**source, "robot_type": robot_type}
    if fmt == "episodes":
        return TeeSink(StoreSink(EpisodeStore.create(out, spec, fps=hz, task=task, source=source,
                                                     exist_ok=append)), None)
    from robot_rl.data.lerobot_io import LeRobotWriter

    # The LeRobot writer first: if pyarrow (the datasets extra) is missing we fail before creating anything.
    writer = LeRobotWriter(out, spec, hz, repo_id=repo_id, task=task, use_videos=video, robot_type=robot_type,
                           rac_segments=True)
    store = EpisodeStore.create(staging_path(out), spec, fps=hz, task=task, source=source)
    return TeeSink(StoreSink(store), writer)
