"""A run that trains in a fitted twin (``twin.file``), and refits it while it trains (``twin.refit_every``).

:func:`twin_task` gives the run's task with the twin's parameters added to its ``task.randomize``;
:class:`TwinRefitter` watches the real robot's episode store and, every ``refit_every`` new episodes, fits the
twin again in a background thread (the first fit's parameters, bounds and budget, on every episode in the
store), writes ``<run>/twin/refit-N.json`` and moves the training envs to the new fit: each world takes the new
ranges at its next episode (:meth:`~robot_rl.sims.randomize.RandomizedVecEnv.retarget`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any

from robot_rl.config_io import from_dict, parse_override
from robot_rl.core.config import TASKS, ConfigError, TaskConfig
from robot_rl.core.env import VecEnv, VecEnvWrapper
from robot_rl.sims.base import RandomizeConfig, SimTaskConfig
from robot_rl.sims.mujoco.tasks import MujocoTaskConfig
from robot_rl.sims.randomize import RandomizedVecEnv
from robot_rl.twin.calibrate import TwinFitConfig, calibrate
from robot_rl.twin.fit import FitConfig
from robot_rl.twin.rollout import control_hz
from robot_rl.twin.run_config import TwinRunConfig
from robot_rl.twin.twin_config import TwinReport, load_twin, randomize_section, write_twin

log = logging.getLogger(__name__)


def twin_task(task: TaskConfig, cfg: TwinRunConfig, report: TwinReport | None = None) -> TaskConfig:
    """``task`` with the twin's parameters in its ``randomize`` section (``report``: the twin, else ``cfg.file``).

    Refused with what to change: a twin of another task, task settings that differ from the ones the twin was
    fitted with (``frame_skip``, ``action_scale`` …), a parameter the run already randomises.
    """
    report = report or load_twin(_file(cfg))
    check_task(task, report)
    assert isinstance(task, SimTaskConfig)
    return dataclasses.replace(task, randomize=merged_randomize(task.randomize, report, cfg))


def check_task(task: TaskConfig, report: TwinReport) -> None:
    """The run's task must be the one the twin was fitted in, with the same settings."""
    fitted_cls, implied = TASKS.resolve(report.task)
    if type(task) is not fitted_cls or not isinstance(task, SimTaskConfig):
        raise ConfigError(f"the twin was fitted in {report.task!r} but this run's task is "
                          f"{TASKS.name_of(type(task))!r}: train with --task {report.task}, or fit a twin of this task")
    expected = dict(implied)
    expected.update(parse_override(o) for o in report.fit.get("task_overrides", []))
    wrong = [f"{k.removeprefix('task.')}={getattr(task, k.removeprefix('task.'), None)!r} (the twin: {v!r})"
             for k, v in expected.items() if getattr(task, k.removeprefix("task."), v) != v]
    if isinstance(task, MujocoTaskConfig) and abs(control_hz(task) - report.control_hz) > 1e-6 * report.control_hz:
        wrong.append(f"control rate {control_hz(task):g} Hz (the twin: {report.control_hz:g} Hz; frame_skip, timestep)")
    if wrong:
        raise ConfigError("the twin was fitted with other task settings than this run's: " + "; ".join(wrong)
                          + ". Set them as the twin had them (task.KEY=VALUE), or fit the twin again")


def merged_randomize(base: RandomizeConfig | None, report: TwinReport, cfg: TwinRunConfig) -> RandomizeConfig:
    """The run's own randomisation plus the twin's parameters (and action delay); overlaps are refused."""
    section = randomize_section(report, cfg.use, cfg.k)
    data: dict[str, Any] = dataclasses.asdict(base) if base is not None else {}
    params = dict(data.get("params", {}))
    clash = sorted(set(params) & set(section["params"]))
    if "action_delay" in section and tuple(data.get("action_delay", (0, 0))) != (0, 0):
        clash.append("action_delay")
    if clash:
        raise ConfigError(f"task.randomize already sets {', '.join(clash)}, which the twin fits: leave "
                          f"{'them' if len(clash) > 1 else 'it'} to the twin (drop it from task.randomize)")
    params.update(section["params"])
    data["params"] = params
    if "action_delay" in section:
        data["action_delay"] = section["action_delay"]
    return from_dict(RandomizeConfig, data, where="task.randomize with the twin")


def _file(cfg: TwinRunConfig) -> Path:
    if cfg.file is None:
        raise ConfigError("twin.file is not set")
    return Path(cfg.file)


def randomized(env: VecEnv) -> RandomizedVecEnv | None:
    """The :class:`RandomizedVecEnv` inside ``env``'s wrappers, if any."""
    while True:
        if isinstance(env, RandomizedVecEnv):
            return env
        if not isinstance(env, VecEnvWrapper):
            return None
        env = env.env


class TwinRefitter:
    """Refit the twin from the real robot's episode store every ``cfg.refit_every`` new episodes (background)."""

    def __init__(self, cfg: TwinRunConfig, task: TaskConfig, envs: list[VecEnv], run_dir: Path) -> None:
        self.cfg, self.task, self.run_dir = cfg, task, Path(run_dir)
        self.report = load_twin(_file(cfg))
        self.store = Path(cfg.real_episodes or self.report.episodes_path)
        self.targets = [r for r in map(randomized, envs) if r is not None]
        if not self.targets:
            raise ConfigError("twin.refit_every needs the training envs in this process (no actor processes): "
                              "with `robot-rl learner`/`actor`, restart the actors with the new twin file instead")
        # Episodes the current fit has seen: the twin's own logs, or none of another store's.
        same = self.store.resolve() == Path(self.report.episodes_path).resolve()
        self.fitted_on = self.report.num_episodes + len(self.report.fit.get("skipped_episodes") or []) if same else 0
        self.refits = 0
        self._next_poll = 0.0
        self._thread: threading.Thread | None = None
        self._result: TwinReport | BaseException | None = None

    def _count(self) -> int:
        from robot_rl.data.store import EpisodeStore

        try:
            return len(EpisodeStore(self.store)) if self.store.exists() else 0
        except (OSError, ValueError) as e:  # a store being written: try again at the next poll
            log.debug("twin: cannot read %s yet: %s", self.store, e)
            return self.fitted_on

    def poll(self) -> dict[str, float]:
        """Start a refit when enough new episodes arrived; apply a finished one. Scalars for the run log."""
        out: dict[str, float] = {}
        if self._thread is not None and not self._thread.is_alive():
            self._thread, result, self._result = None, self._result, None
            if isinstance(result, TwinReport):
                out = self._apply(result)
            else:
                log.warning("twin: the refit failed (%s); training goes on in the previous twin", result)
        now = time.monotonic()
        if self._thread is None and now >= self._next_poll:
            self._next_poll = now + self.cfg.poll_s
            count = self._count()
            if count >= self.fitted_on + self.cfg.refit_every:
                self._start(count)
        return out

    def _start(self, count: int) -> None:
        fit = self.report.fit
        fit_cfg = FitConfig(**{f.name: fit[f.name] for f in dataclasses.fields(FitConfig) if f.name in fit})
        cfg = TwinFitConfig(episodes=self.store, task=self.report.task,
                            task_overrides=tuple(fit.get("task_overrides", ())), params=str(fit["params"]),
                            scale_range=tuple(fit.get("scale_range", (0.2, 5.0))),  # type: ignore[arg-type]
                            max_delay=int(fit.get("max_delay", 3)), fit=fit_cfg, k=self.cfg.k,
                            max_steps=fit.get("max_steps"), num_threads=1, out=None)
        log.info("twin: %d episodes in %s (%d new): refitting in the background", count, self.store,
                 count - self.fitted_on)
        self.fitted_on = count

        def work() -> None:
            try:
                self._result = calibrate(cfg)[0]
            except BaseException as e:  # reported by poll(); training never stops for a failed refit
                self._result = e

        self._thread = threading.Thread(target=work, name="twin-refit", daemon=True)
        self._thread.start()

    def _apply(self, report: TwinReport) -> dict[str, float]:
        self.refits += 1
        self.report = report
        out = self.run_dir / "twin" / f"refit-{self.refits}.json"
        write_twin(report, out, self.cfg.k)
        new = merged_randomize(_without_twin(self.targets[0].cfg, report), report, self.cfg)
        for env in self.targets:
            env.retarget(new)
        fitted = ", ".join(f"{p.key} {p.value:.3g}" + (f"±{p.std:.2g}" if p.std is not None else "")
                           for p in report.params)
        log.info("twin: refit %d on %d episodes (loss %.4g -> %.4g): %s; written to %s", self.refits,
                 report.num_episodes, report.loss_before, report.loss_after, fitted, out)
        scalars = {f"{p.key}/value": p.value for p in report.params}
        scalars.update({f"{p.key}/std": p.std for p in report.params if p.std is not None})
        scalars.update({"loss_after": report.loss_after, "episodes": float(report.num_episodes),
                        "refits": float(self.refits)})
        return scalars

    def close(self, timeout_s: float = 0.0) -> None:
        """Forget a refit in progress (its thread is a daemon; the run's files are already written)."""
        if self._thread is not None:
            self._thread.join(timeout_s)


def _without_twin(current: RandomizeConfig, report: TwinReport) -> RandomizeConfig:
    """``current`` less the parameters (and delay) the twin sets: the run's own randomisation."""
    names = {p.name for p in report.params}
    data = dataclasses.asdict(current)
    data["params"] = {k: v for k, v in data["params"].items() if k not in names}
    if "action_delay" in randomize_section(report, "preset"):
        data["action_delay"] = (0, 0)
    return from_dict(RandomizeConfig, data, where="task.randomize")
