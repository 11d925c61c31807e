"""Moved to :mod:`robot_rl.durable` (checkpoints use it too, and must not import the replay); names kept here."""

from robot_rl.durable import (
    DiskFullError,
    commit_file,
    crash_point,
    fsync_dir,
    is_disk_full,
    remove_temp_files,
    write_synced,
)

__all__ = ["DiskFullError", "commit_file", "crash_point", "fsync_dir", "is_disk_full", "remove_temp_files",
           "write_synced"]
