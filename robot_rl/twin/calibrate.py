"""One call from logs to a twin file: load and check the logs, fit, write ``twin.json`` and its configs.

:func:`calibrate` is what `robot-rl twin fit` runs; tests and scripts build a :class:`TwinFitConfig` and call
it without touching the command line. Only the MuJoCo arm tasks (``mujoco/*``, CPU backend) can be
replayed: their start state can be rebuilt from a logged observation (:mod:`robot_rl.twin.start`).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from robot_rl.config_io import apply_overrides, parse_override
from robot_rl.core.config import TASKS, ConfigError
from robot_rl.sims.mujoco.tasks import MujocoTaskConfig
from robot_rl.twin.fit import FitConfig, FitResult, ProgressFn, fit
from robot_rl.twin.logs import Logs, load_logs
from robot_rl.twin.params import parse_params
from robot_rl.twin.rollout import Replayer, control_hz
from robot_rl.twin.start import supported
from robot_rl.twin.twin_config import TwinReport, report_from_fit, write_twin

log = logging.getLogger(__name__)

DEFAULT_PARAMS = "actuator_gain,dof_damping,body_mass,action_delay"


@dataclass
class TwinFitConfig:
    """What `robot-rl twin fit` fits, to which logs, and where the twin goes."""

    episodes: Path
    """The logs: an episode store or a LeRobotDataset v3 recorded on the robot (or the "real" sim)."""
    task: str = "mujoco/reach"
    """The simulated task the logs are replayed in (a ``mujoco/*`` arm task)."""
    task_overrides: tuple[str, ...] = ()
    """``key=value`` task settings (``frame_skip=8``, ``action_scale=0.03``), as `robot-rl train`'s ``task.*``."""
    params: str = DEFAULT_PARAMS
    """Comma-separated parameters: ``NAME`` or ``NAME:label+label`` (see robot_rl/twin/params.py)."""
    scale_range: tuple[float, float] = (0.2, 5.0)
    """Bounds of every factor on a nominal value (searched on a log scale)."""
    max_delay: int = 3
    """Largest action delay (steps) searched."""
    fit: FitConfig = field(default_factory=FitConfig)
    """CMA-ES budget and uncertainty estimation."""
    k: float = 2.0
    """Domain-randomisation ranges are value ± k·std."""
    fps: float | None = None
    """The logs' true control rate, when their recorded fps is wrong."""
    skip_bad: bool = False
    """Leave out episodes with dropped frames instead of refusing the logs."""
    max_steps: int | None = None
    """Replay at most this many steps of each episode (long episodes cost time and add little)."""
    num_threads: int = 0
    """Worker threads stepping the replay's worlds (0: one per core)."""
    max_worlds: int = 2048
    """Most MuJoCo worlds alive at once (candidates × episodes); larger batches are replayed in chunks."""
    out: Path | None = Path("twin.json")
    """Where to write the twin (and ``<stem>_preset.json``, ``<stem>_dr.json`` beside it); None: nowhere."""


def task_from_name(name: str, overrides: tuple[str, ...] = ()) -> MujocoTaskConfig:
    """The task config ``name`` with ``key=value`` overrides (a ``task.`` prefix is allowed)."""
    cls, implied = TASKS.resolve(name)
    cfg = cls(**implied)
    if not isinstance(cfg, MujocoTaskConfig) or not supported(cfg):
        raise ConfigError(f"robot-rl twin replays the MuJoCo arm tasks (mujoco/reach, push, pick_cube, peg_insert "
                          f"and their variants); {name!r} is not one")
    if overrides:
        parsed = dict(parse_override(o) for o in overrides)
        cfg = apply_overrides(cfg, {k.removeprefix("task."): v for k, v in parsed.items()})
    return cfg


def prepare(cfg: TwinFitConfig) -> tuple[MujocoTaskConfig, Logs, Replayer]:
    """The task, the checked logs and a replayer for ``cfg.params`` (raises on unusable logs)."""
    task = task_from_name(cfg.task, cfg.task_overrides)
    probe = task.make("cpu", 0, num_envs=1)
    try:
        params = parse_params(cfg.params, probe.param_names(), probe.param_labels, cfg.scale_range, cfg.max_delay)
        spec = probe.spec
    finally:
        probe.close()
    logs = load_logs(cfg.episodes, spec, control_hz(task), cfg.task, fps=cfg.fps, skip_bad=cfg.skip_bad,
                     max_steps=cfg.max_steps)
    batch = cfg.fit.population * max(cfg.fit.restarts, cfg.fit.bootstrap)
    batch = max(1, min(batch, cfg.max_worlds // logs.num_episodes))
    return task, logs, Replayer(task, logs, params, batch_candidates=batch, num_threads=cfg.num_threads)


def calibrate(cfg: TwinFitConfig, progress: ProgressFn | None = None) -> tuple[TwinReport, FitResult]:
    """Fit the twin of ``cfg`` and write it to ``cfg.out`` (when set); the report and the raw result."""
    task, logs, rep = prepare(cfg)
    try:
        result = fit(rep, cfg.fit, progress)
    finally:
        rep.close()
    settings: dict[str, Any] = {**asdict(cfg.fit), "params": cfg.params, "scale_range": list(cfg.scale_range),
                                "max_delay": cfg.max_delay, "k": cfg.k, "task_overrides": list(cfg.task_overrides),
                                "max_steps": cfg.max_steps,
                                "replayed_steps": int(logs.lengths.sum()), "skipped_episodes": logs.skipped}
    report = report_from_fit(result, cfg.task, str(cfg.episodes), control_hz(task), logs.episode_ids, settings)
    if cfg.out is not None:
        paths = write_twin(report, cfg.out, cfg.k)
        log.info("wrote %s", ", ".join(map(str, paths)))
    return report, result
