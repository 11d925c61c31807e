"""Logging and live-view sinks next to TensorBoard: Weights & Biases (scalars) and Rerun (steps, cameras).

The package imports nothing else from ``robot_rl`` (the loops call it; it never calls them), and imports ``wandb``
and ``rerun`` only when a sink is opened, so neither is needed unless asked for (``pip install 'robot-rl[wandb]'``,
``'robot-rl[viz]'``). docs/visualisation.md shows what each one shows.
"""

from __future__ import annotations

from pathlib import Path

from robot_rl.viz.base import SOURCES, StepViz
from robot_rl.viz.config import VizConfig

__all__ = ["SOURCES", "StepViz", "VizConfig", "open_viz"]


def open_viz(cfg: VizConfig, default_file: Path, recording_id: str, name: str = "") -> StepViz | None:
    """The live view ``cfg`` asks for (None for ``viz.sink=none``); see :class:`~robot_rl.viz.rerun_sink.RerunSink`."""
    if not cfg.enabled:
        return None
    from robot_rl.viz.rerun_sink import RerunSink

    return RerunSink(cfg, default_file, recording_id, name)
