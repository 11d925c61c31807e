"""The ``viz`` section: whether and where a loop streams its live view (Rerun)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass
class VizConfig:
    """Live view of a running loop in Rerun: cameras, actions by who acted, reward, success, interventions.

    `robot-rl train|deploy|record --viz rerun` sets ``viz.sink=rerun`` (docs/visualisation.md).
    """

    sink: Literal["none", "rerun"] = "none"
    """``rerun``: stream the steps to a Rerun viewer, or save them to an ``.rrd`` file (the ``viz`` extra;
    docs/visualisation.md); ``none``: no live view."""
    file: Path | None = None
    """The ``.rrd`` file; default ``<run>/viz.rrd`` (train), ``<run-dir or .>/deploy-<time>.rrd`` (deploy),
    ``<out>.rrd`` (record). Written when no viewer is reached, and always when set. Open it with `rerun FILE`."""
    connect: str = "auto"
    """``auto``: stream to a Rerun viewer listening on 127.0.0.1:9876 (started with `rerun`) if there is
    one, else save to ``file``; ``off``: only save; or a viewer's URL (``rerun+http://HOST:9876/proxy``)."""
    spawn: bool = False
    """Start a Rerun viewer (needs a display) and stream to it."""
    every: int = 1
    """Log every this many steps (train: vectorised actor steps, sub-env 0 of actor 0)."""
    camera_every: int = 1
    """Of the logged steps, include the camera images of every this many (images dominate the file size)."""
    flush_s: float = 0.25
    """Send the buffered steps to the viewer/file at least this often (and every 256 steps)."""

    def __post_init__(self) -> None:
        if str(self.connect).lower() in ("off", "false", "no", "none", "0"):  # YAML reads a bare `off` as false
            self.connect = "off"
        if self.sink not in ("none", "rerun"):
            raise ValueError(f"viz.sink {self.sink!r}; valid: none, rerun")
        if self.every < 1 or self.camera_every < 1:
            raise ValueError("viz.every and viz.camera_every must be >= 1")
        if self.flush_s <= 0:
            raise ValueError("viz.flush_s must be > 0")

    @property
    def enabled(self) -> bool:
        """Whether a live view is asked for."""
        return self.sink != "none"
