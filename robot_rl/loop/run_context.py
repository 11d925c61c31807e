"""The run directory of `robot-rl train` / `robot-rl learner`: where it is, what is written there first, cleanup.

:class:`RunContext` picks the directory (``run.root / run.name``, or ``<task>-<algo>-<timestamp>``), refuses to
overwrite an earlier run unless resuming, attaches ``train.log``, writes ``config.yaml`` and (once the env is
known) ``spec.yaml``, and on :meth:`close` detaches the log handler and closes what was registered with it.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import torch
import yaml

from robot_rl.config_io import apply_overrides, from_dict, load_yaml, save_yaml
from robot_rl.core.config import ConfigError, task_id
from robot_rl.core.specs import EnvSpec
from robot_rl.loop.config import TrainConfig

log = logging.getLogger(__name__)


def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA if available else CPU; anything else is passed to ``torch.device``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"run.device={name!r} but CUDA is not available; use run.device=cpu")
    return dev


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_torch_threads(cfg: TrainConfig, device: torch.device) -> None:
    """``run.torch_threads``, or on CPU the cores the actor threads leave (oversubscribing makes both crawl)."""
    if cfg.run.torch_threads > 0:
        torch.set_num_threads(cfg.run.torch_threads)
    elif device.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) - max(cfg.loop.actor_threads, 0)))


def algo_name(cfg: TrainConfig) -> str:
    """The registered name of the run's algorithm."""
    return type(cfg.algo).registry.name_of(cfg.algo)


def run_title(cfg: TrainConfig) -> str:
    """``<task id> / <algo>``: the learning curve's title."""
    return f"{task_id(cfg.task)} / {algo_name(cfg)}"


def load_run_config(run_dir: Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """The resolved config a run was started with (``<run>/config.yaml``), plus optional overrides."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml)")
    cfg = from_dict(TrainConfig, load_yaml(path), where=str(path))
    return apply_overrides(cfg, overrides) if overrides else cfg


class RunContext:
    """One run directory, its ``train.log`` handler, and the resources to release when the run ends."""

    def __init__(self, cfg: TrainConfig, run_dir: Path | None = None, resume: bool = False) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else self.default_dir(cfg)
        if not resume and (self.run_dir / "checkpoints").exists():
            raise ConfigError(f"{self.run_dir} already holds a run; continue it with "
                              f"`robot-rl train --resume {self.run_dir}` or pick another run.name")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_handler = logging.FileHandler(self.run_dir / "train.log")
        self.log_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("robot_rl").addHandler(self.log_handler)
        logging.getLogger("robot_rl").setLevel(logging.INFO)
        save_yaml(cfg, self.run_dir / "config.yaml")
        self._closers: list[Callable[[], None]] = []
        self._closed = False

    @staticmethod
    def default_dir(cfg: TrainConfig) -> Path:
        """``run.root/run.name``, or ``run.root/<task>-<algo>-<timestamp>`` without a name."""
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        return cfg.run.root / (cfg.run.name or f"{task_id(cfg.task).replace('/', '-')}-{algo_name(cfg)}-{stamp}")

    def write_spec(self, spec: EnvSpec) -> None:
        """``spec.yaml``: what the policy observes and emits (eval, export and deploy read it)."""
        (self.run_dir / "spec.yaml").write_text(yaml.safe_dump(spec.to_dict()))

    def on_close(self, close: Callable[[], None]) -> None:
        """Call ``close`` when the run ends (last registered, first called)."""
        self._closers.append(close)

    def close(self) -> None:
        """Release everything registered and detach ``train.log`` (idempotent; errors are logged, not raised)."""
        if self._closed:
            return
        self._closed = True
        for close in reversed(self._closers):
            try:
                close()
            except Exception:  # one failing close must not keep the others (or the log handler) open
                log.exception("closing %s failed", close)
        logging.getLogger("robot_rl").removeHandler(self.log_handler)
        self.log_handler.close()

    def __enter__(self) -> RunContext:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
