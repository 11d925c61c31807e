"""Weights & Biases: the scalars TensorBoard gets, at the same env step, plus the config and the learning curve.

Every scalar goes to ``wandb.log`` with ``env_steps`` as its x-axis (``define_metric("*", step_metric=
"env_steps")``), not wandb's own step counter, so a resumed run continues the same curves. The run id is the run
directory's name (``resume="allow"``): `robot-rl train --resume runs/X` appends to the same wandb run. wandb's
own environment variables apply (``WANDB_MODE``, ``WANDB_PROJECT``, ``WANDB_ENTITY``, ``WANDB_DIR``,
``WANDB_API_KEY``); ``run.wandb_*`` keys win over them. Without ``WANDB_DIR`` the files go to ``<run>/wandb/``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

DEFAULT_PROJECT = "robot-rl"


def import_wandb() -> Any:
    """``wandb``, or an ImportError that says which package to install."""
    try:
        import wandb
    except ImportError as e:
        raise ImportError(f"run.wandb=true needs wandb: pip install 'robot-rl[wandb]' ({e})") from None
    return wandb


def wandb_run_id(run_dir: Path) -> str:
    """The wandb run id of a run directory: its name, with characters wandb refuses in an id replaced by ``-``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", Path(run_dir).resolve().name)[:128]


class WandbSink:
    """One wandb run mirroring a :class:`~robot_rl.runlog.RunLog` (scalars, images); ``close`` finishes it."""

    def __init__(self, run_dir: Path, config: dict[str, Any], project: str | None = None,
                 entity: str | None = None, mode: str | None = None) -> None:
        self.wandb = wandb = import_wandb()
        run_dir = Path(run_dir)
        kwargs: dict[str, Any] = {
            "project": project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            "id": wandb_run_id(run_dir), "name": run_dir.resolve().name, "config": config, "resume": "allow",
        }
        if entity:
            kwargs["entity"] = entity
        if mode:
            kwargs["mode"] = mode
        if not os.environ.get("WANDB_DIR"):
            kwargs["dir"] = str(run_dir)
        try:
            self.run = wandb.init(**kwargs)
        except Exception as e:  # wandb raises its own errors (no API key, no network) with their reasons
            raise RuntimeError(f"wandb.init failed ({e}); log in with `wandb login`, or set run.wandb_mode=offline "
                               "(then `wandb sync` uploads later), or run.wandb=false") from e
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")

    def scalars(self, values: dict[str, float], step: int) -> None:
        """Log ``values`` at env step ``step``."""
        self.run.log({"env_steps": step, **{k: float(v) for k, v in values.items()}})

    def image(self, key: str, path: Path, step: int) -> None:
        """Log the image file ``path`` (a PNG) under ``key`` at env step ``step``."""
        self.run.log({"env_steps": step, key: self.wandb.Image(str(path))})

    def close(self) -> None:
        """Finish the run (in offline mode: the run's files are complete; `wandb sync DIR` uploads them)."""
        self.run.finish()
