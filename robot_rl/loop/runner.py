"""The runner behind `robot-rl train` (actor threads + learner in one process) and `robot-rl learner`.

It wires the parts together and owns the stop rule; each concern lives in its own module:
:class:`~robot_rl.loop.run_context.RunContext` (directory, ``train.log``, config and spec files, cleanup),
the transport's :class:`~robot_rl.core.transport.LearnerLink` (built by the config's ``open_learner``),
:class:`~robot_rl.loop.learner.Learner` (validate, store, update, publish), an update strategy
(:mod:`robot_rl.loop.updates`: off-policy actor threads or on-policy rollouts),
:class:`~robot_rl.loop.evaluator.Evaluator`, checkpoints and resume (:mod:`robot_rl.loop.learner_state`),
the run's extensions (:mod:`robot_rl.loop.extensions`: the demonstrations, co-training …; the runner names none),
and its run strategy (:mod:`robot_rl.loop.run_strategy`: one process, or data-parallel ranks; it names no layout).
"""

from __future__ import annotations

import logging
import threading
import time
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.checkpoint import list_checkpoints
from robot_rl.config_io import to_dict
from robot_rl.core.algorithm import Algorithm
from robot_rl.core.config import ConfigError
from robot_rl.core.data_parallel import DataParallel
from robot_rl.core.env import VecEnv
from robot_rl.core.transport import FinishingEndpoint
from robot_rl.durable import DiskFullError
from robot_rl.loop.actor import Actor
from robot_rl.loop.async_updates import async_rollout
from robot_rl.loop.config import TrainConfig
from robot_rl.loop.evaluate import EvalResult
from robot_rl.loop.evaluator import Evaluator
from robot_rl.loop.extensions import RunExtensions
from robot_rl.loop.learner_driver import LearnerDriver
from robot_rl.loop.learner_state import check_resumable
from robot_rl.loop.progress import RecentEpisodes, TrainProgress, actor_totals, short_metrics, transport_summary
from robot_rl.loop.run_context import (
    RunContext,
    load_run_config,
    resolve_device,
    run_title,
    seed_everything,
    set_torch_threads,
)
from robot_rl.loop.run_strategy import OneProcess, RunStrategy, run_strategy_for
from robot_rl.loop.updates import UpdateStrategy
from robot_rl.replay.async_rollout import AsyncRolloutStorage
from robot_rl.runlog import RunLog
from robot_rl.sims.randomize import pop_summaries

__all__ = ["InProcessRunner", "TrainResult", "load_run_config", "resolve_device", "seed_everything", "train"]

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What a finished (or stopped) run reports."""

    run_dir: Path
    env_steps: int
    updates: int
    policy_version: int
    wall_s: float
    reached_threshold: bool
    last_eval: EvalResult | None
    stop_reason: str


class InProcessRunner:
    """Owns one run: envs, algorithm, actors, learner, logs and checkpoints.

    ``remote_actors=False`` (`robot-rl train`): actor threads in this process over an in-process transport.
    ``remote_actors=True`` (`robot-rl learner`): the transport listens and actor processes connect.
    ``strategy``: where this process sits in the run (default: alone; :func:`train` picks data-parallel ranks).
    """

    def __init__(self, cfg: TrainConfig, run_dir: Path | None = None, resume: bool = False,
                 remote_actors: bool = False, strategy: RunStrategy | None = None) -> None:
        if remote_actors == cfg.transport.in_process:
            raise ConfigError("robot-rl train runs in one process (transport.type=inproc); with "
                              "transport.type=zmq start `robot-rl learner` and `robot-rl actor`")
        self.cfg = cfg
        self.remote = remote_actors
        self.resumed = resume
        self.strategy: RunStrategy = strategy or OneProcess()
        self.device = resolve_device(cfg.run.device)
        set_torch_threads(cfg, self.device)
        seed_everything(self.strategy.env_seed(cfg.run.seed))  # ranks explore and sample their replay apart
        if resume and self.is_main:  # before the run directory is touched (a rank > 0's own directory may be new)
            check_resumable(Path(run_dir) if run_dir is not None else RunContext.default_dir(cfg))
        self.context = RunContext(cfg, run_dir, resume)
        self.run_dir = self.context.run_dir
        try:
            self._build(resume)
        except BaseException:
            self.context.close()
            raise

    def _build(self, resume: bool) -> None:
        cfg, seed, context = self.cfg, self.cfg.run.seed, self.context
        self.extensions = RunExtensions(cfg)
        self._notes: list[str] = []
        ext = self.extensions
        first = self.strategy.env_seed(seed)  # this process's envs and actors (ranks collect apart)
        if self.remote:  # one small env, only for the spec; actors run theirs elsewhere
            self.envs: list[VecEnv] = [cfg.make_env(self.device, seed, num_envs=1)]
        else:
            self.envs = [cfg.make_env(self.device, first + 1000 * i) for i in range(max(cfg.loop.actor_threads, 1))]
        for env in self.envs:
            context.on_close(env.close)
        self.spec = self.envs[0].spec
        context.write_spec(self.spec)
        self.eval_env = cfg.make_env(self.device, seed + 999_983, num_envs=min(cfg.loop.eval_episodes, 256),
                                     role="eval")
        context.on_close(self.eval_env.close)
        self.algo: Algorithm = cfg.algo.build(self.spec, self.device, seed)
        num_envs_total = (cfg.loop.remote_actors * cfg.task.num_envs if self.remote
                          else sum(e.num_envs for e in self.envs))
        envs_per_actor = cfg.task.num_envs if self.remote else self.envs[0].num_envs
        rollout = async_rollout(cfg.loop, self.algo, self.spec, self.device, num_envs_total, envs_per_actor)
        self.strategy.check(self.algo, cfg.loop, rollout)
        self.link = cfg.transport.open_learner(self.spec)
        context.on_close(self.link.close)
        self.driver = LearnerDriver(self.algo, self.spec, self.link, self.device, num_envs_total, self.run_dir,
                                    cfg.replay, resume, f"robot-rl train --resume {self.run_dir}", rollout)
        self.learner = self.driver.learner
        self.wall_offset = 0.0
        self._ext_state: dict[str, Any] | None = None
        self.evaluator = Evaluator(self.algo, self.eval_env, cfg.loop, seed=seed + 7)
        if resume:
            self._restore()
        self.strategy.attach(self.algo, self.learner, resume)
        self.learner.publish()
        self._stop = threading.Event()
        self.actors = [] if self.remote else [
            Actor(env, self.algo.make_policy(), self.link.local_actor(i), seed=first + i,
                  send_timeout_s=cfg.loop.max_wait_s, stop=self._stop, on_backlog=cfg.loop.on_backlog)
            for i, env in enumerate(self.envs)]
        for a in self.actors:
            a.sync_weights()
        self.updates: UpdateStrategy = self.strategy.updates(self.learner, self.algo, self.actors, cfg.loop,
                                                             self._stop, self.remote)
        self.runlog = RunLog(self.run_dir, [sink for e in ext for sink in e.scalar_sinks(self)])
        context.on_close(self.runlog.close)
        ext.attach(self, self.actors, context.on_close, self._ext_state)

    def close(self) -> None:
        """Release the envs, the transport and ``train.log`` of a runner that is not trained (``train`` does it)."""
        self.updates.stop(self.cfg.loop.max_wait_s)
        self.context.close()

    # ---- what extensions see (core.extension.RunHandle) --------------------------------------

    @property
    def title(self) -> str:
        """``<task> / <algo>``."""
        return run_title(self.cfg)

    def config_dict(self) -> dict[str, Any]:
        """The run config as plain data."""
        return typing.cast(dict[str, Any], to_dict(self.cfg))

    def env_steps(self) -> int:
        """Transitions the learner stored so far."""
        return self.learner.transitions

    @property
    def data_parallel(self) -> DataParallel | None:
        """The data-parallel group of this rank, or None."""
        return self.strategy.data_parallel

    @property
    def is_main(self) -> bool:
        """Whether this process writes the run (rank 0, or the only one)."""
        return self.strategy.is_main

    def log_scalars(self, metrics: Mapping[str, float], step: int, prefix: str = "") -> None:
        """Scalars to the run log."""
        self.runlog.scalars(dict(metrics), step, prefix=prefix)

    def publish(self) -> None:
        """Publish the learner's weights; the in-process actors load them."""
        self.learner.publish()
        for actor in self.actors:
            actor.sync_weights()

    def note(self, text: str) -> None:
        """A line printed under the run directory when training starts."""
        self._notes.append(text)

    @property
    def address(self) -> str | None:
        """Where actor processes connect (`robot-rl learner`); ``None`` in one process."""
        return self.link.address

    # ---- checkpoints, resume ---------------------------------------------------------

    def _restore(self) -> None:
        meta = self.strategy.restore(self.driver)  # a rank > 0: its replay shard only
        if meta is None:
            return
        self._ext_state = meta
        self.wall_offset = float(meta.get("wall_s", 0.0))
        self.evaluator.resume_at(self.learner.transitions, float(meta.get("best_success", 0.0)))

    def checkpoint(self, wall_s: float) -> Path:
        """Commit the replay's pending rows, then a checkpoint of everything a resume needs.

        Raises :class:`DiskFullError` when the disk is full (the previous checkpoint stays intact).
        """
        meta: dict[str, Any] = {"wall_s": wall_s, "best_success": self.evaluator.best_success}
        meta.update(self.extensions.state())  # under each extension's name
        return self.driver.checkpoint(meta)

    # ---- evaluation -------------------------------------------------------------------------

    @property
    def last_eval(self) -> EvalResult | None:
        """The most recent evaluation."""
        return self.evaluator.last

    def run_eval(self, wall_s: float) -> EvalResult:
        """Evaluate the learner's current actor weights on the evaluation env."""
        learner = self.learner
        result = self.evaluator.run(self.runlog, learner.transitions, learner.updates, learner.version, wall_s)
        for e in self.extensions:
            e.evaluated(learner.transitions, result.success_rate, result.mean_return)
        return result

    # ---- main loop --------------------------------------------------------------------------

    def train(self) -> TrainResult:
        """Run until the success threshold, the step budget, or Ctrl-C; always checkpoint at the end."""
        t0 = time.monotonic() - self.wall_offset
        reached, reason = False, "budget"
        disk_full: DiskFullError | None = None
        progress = TrainProgress(self.cfg.loop.total_env_steps, self.learner.transitions,
                                 enabled=self.cfg.run.progress)
        try:
            with progress:
                reached, reason = self._run(progress, t0)
        except KeyboardInterrupt:
            reason = "interrupted"
            log.warning("interrupted; saving a checkpoint")
        except DiskFullError as e:
            disk_full = e
            log.error("disk full: %s; actors stopped (holding), no more data is collected", e)
        finally:
            self.updates.stop(self.cfg.loop.max_wait_s)  # actors hold: nothing is collected that could not be stored
        wall = time.monotonic() - t0
        if disk_full is not None:
            self._stop_on_disk_full(disk_full, wall)
        return self._finish(wall, reached, reason)

    def _run(self, progress: TrainProgress, t0: float) -> tuple[bool, str]:
        cfg, learner, evaluator = self.cfg, self.learner, self.evaluator
        progress.print(f"run directory: {self.run_dir}")
        for note in self._notes:
            progress.print(note)
        if learner.transitions == 0 and self.is_main:
            # A baseline before any learning, so the curve starts where the policy started.
            ev = self.run_eval(0.0)
            state = "after the offline phase" if cfg.offline.data is not None else "untrained"
            progress.print(f"eval @ 0 steps ({state}): success {ev.success_rate:.0%}, return {ev.mean_return:.2f}")
        self.extensions.start(self)  # work the actors wait for (the HIL schedule's offline phase)
        self.updates.start()
        episodes = RecentEpisodes()
        last_log = last_ckpt = time.monotonic()
        while learner.transitions < cfg.loop.total_env_steps:
            self.updates.iteration()
            for a in self.actors:
                episodes.add(a.pop_episode_stats())
            now = time.monotonic()
            wall = now - t0
            reached = False
            if self.is_main and evaluator.due(learner.transitions):
                ev = self.run_eval(wall)
                progress.print(f"eval @ {learner.transitions:,} steps ({wall:.0f}s): success "
                               f"{ev.success_rate:.0%}, return {ev.mean_return:.2f}")
                reached = evaluator.reached(ev)
            if self.strategy.agree_stop(reached, self.device):  # rank 0 evaluates; every rank stops with it
                return True, "threshold"
            if not self.is_main:
                continue
            if now - last_log >= cfg.loop.log_every_s:
                last_log = now
                self._log_metrics(progress, episodes, wall)
            if now - last_ckpt >= cfg.loop.checkpoint_every_s:
                last_ckpt = now
                self.checkpoint(wall)
        return False, "budget"

    def _log_metrics(self, progress: TrainProgress, episodes: RecentEpisodes, wall: float) -> None:
        step = self.learner.transitions
        metrics = self._metrics(episodes.returns, episodes.successes)
        net = self.link.metrics()
        if net:
            metrics.update({f"transport/{k}": v for k, v in net.items()})
            log.info("transport: %s", transport_summary(net))
        self.runlog.scalars(metrics, step, prefix="train/")
        self.runlog.scalars(pop_summaries(self.envs), step, prefix="randomize/")
        self.runlog.scalars(self.extensions.metrics(), step)
        self.runlog.train_row({"env_steps": step, "wall_s": round(wall, 2), "updates": self.learner.updates,
                               "return": metrics.get("return", ""), "success": metrics.get("success", "")})
        progress.update(step, short_metrics(metrics))

    def _finish(self, wall: float, reached: bool, reason: str) -> TrainResult:
        if self.strategy.keep_shard(self.driver):  # rank 0 writes the run; this rank committed its replay shard
            self.context.close()
            return TrainResult(self.run_dir, self.learner.transitions, self.learner.updates, self.learner.version,
                               wall, reached, None, reason)
        self.checkpoint(wall)
        self.learner.confirm_due(force=True)  # the rows are on disk now: acknowledge the last chunks
        if reason in ("budget", "threshold") and isinstance(self.link.endpoint, FinishingEndpoint):
            self.link.endpoint.finish(reason)  # actor processes stop now; after Ctrl-C they wait for a resume
        if self.evaluator.last is None or reason != "threshold":
            self.run_eval(wall)
        title = run_title(self.cfg)
        curve = self.runlog.plot_learning_curve(title)
        last = self.evaluator.last
        assert last is not None
        learner = self.learner
        result = TrainResult(self.run_dir, learner.transitions, learner.updates, learner.version, wall, reached,
                             last, reason)
        self.runlog.write_summary({
            "title": title, "stop_reason": reason, "reached_success_threshold": reached,
            "success_threshold": self.cfg.loop.success_threshold, "env_steps": result.env_steps,
            "gradient_updates": result.updates, "policy_version": result.policy_version,
            "wall_clock_s": round(wall, 1), "final_eval": last.as_dict(),
            "best_success_rate": self.evaluator.best_success,
            "nonfinite_rows_dropped": sum(a.nonfinite_rows for a in self.actors),
            "discarded_rollouts": self.updates.discarded_rollouts, "cut_actor_sessions": learner.cut_sessions,
            "stale_rows_dropped": (learner.storage.dropped_rows if isinstance(learner.storage, AsyncRolloutStorage)
                                   else 0),
            "rejected_batches": dict(learner.endpoint.stats.rejected),
            "actors": self._actor_totals(),
            "learning_curve": str(curve) if curve else None,
        })
        self.context.close()
        return result

    def _actor_totals(self) -> dict[str, dict[str, int]]:
        """Per actor: transitions the learner accepted (actor processes) and those it dropped (on_backlog=drop)."""
        totals = actor_totals(self.link.metrics())
        for a in self.actors:  # threads of this process
            totals.setdefault(str(a.endpoint.actor_id), {})["dropped"] = a.dropped_transitions
        return totals

    def _stop_on_disk_full(self, error: DiskFullError, wall: float) -> None:
        """Try one last checkpoint, release everything, and raise a clear error naming the good checkpoint."""
        try:
            where = f"saved a final checkpoint {self.checkpoint(wall)}"
        except OSError as e:
            good = list_checkpoints(self.run_dir)
            where = (f"the last good checkpoint is {good[-1]}" if good else "no checkpoint was committed") + \
                f" (final save failed: {e})"
        self.context.close()
        raise DiskFullError(error.errno, f"training stopped: the disk is full ({error}). Actors were stopped "
                                         f"and hold; {where}. Free space, then `robot-rl train --resume "
                                         f"{self.run_dir}`.") from error

    def _metrics(self, ep_returns: list[float], ep_success: list[bool]) -> dict[str, float]:
        m: dict[str, float] = {"updates": float(self.learner.updates), "version": float(self.learner.version),
                               "queue": float(self.learner.endpoint.pending())}
        if ep_returns:
            m["return"] = float(np.mean(ep_returns))
            m["success"] = float(np.mean(ep_success))
        m.update({k: float(v) for k, v in self.learner.last_stats.items()})
        return m


def train(cfg: TrainConfig | None = None, resume_dir: Path | None = None) -> TrainResult:
    """Train ``cfg`` (default: SAC on ``reach``), or continue the run in ``resume_dir``.

    Started as one of several torchrun ranks (or with ``run.distributed=ddp``), this process trains as its rank.
    """
    if resume_dir is not None:
        check_resumable(resume_dir)  # every rank, before any joins the process group
        cfg = cfg or load_run_config(resume_dir)
    cfg = cfg or TrainConfig()
    strategy = run_strategy_for(cfg)
    try:
        cfg, run_dir = strategy.prepare(cfg, resume_dir)
        return InProcessRunner(cfg, run_dir=run_dir, resume=resume_dir is not None, strategy=strategy).train()
    finally:
        strategy.close()
