"""The in-process runner behind `robot-rl train`: actor thread(s) + learner in one process.

Off-policy (SAC): actor threads step their envs concurrently with the learner; a bounded queue and
the UTD ratio pace them. On-policy (PPO): collect ``rollout_length`` steps, update, publish, and
only then continue. Evaluation, logging, checkpoints and the stop rule are the same for both.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from robot_rl.checkpoint import list_checkpoints
from robot_rl.config_io import apply_overrides, from_dict, load_yaml, save_yaml
from robot_rl.core.algorithm import Algorithm, NamedBufferStorage, OnPolicyAlgorithm, OnPolicyStorage
from robot_rl.core.config import ConfigError, ensure_registered, task_id
from robot_rl.core.env import VecEnv
from robot_rl.loop.actor import Actor
from robot_rl.loop.config import TrainConfig
from robot_rl.loop.evaluate import EvalResult, evaluate
from robot_rl.loop.learner import Learner
from robot_rl.loop.learner_state import (
    attach_run_replay,
    restore_learner,
    restore_stored_chunks,
    save_learner_checkpoint,
)
from robot_rl.loop.progress import TrainProgress, transport_summary
from robot_rl.replay.durable import DiskFullError
from robot_rl.rewards.wrapper import pop_reward_terms
from robot_rl.runlog import RunLog
from robot_rl.sims.randomize import pop_summaries
from robot_rl.transport.config import InprocTransportConfig, ZmqTransportConfig
from robot_rl.transport.inproc import InprocTransport
from robot_rl.transport.zmq_transport import ZmqLearnerEndpoint, ZmqSettings

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


def _task_name(cfg: TrainConfig) -> str:
    return task_id(cfg.task)


def _algo_name(cfg: TrainConfig) -> str:
    return type(cfg.algo).registry.name_of(cfg.algo)


def load_run_config(run_dir: Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """The resolved config a run was started with (``<run>/config.yaml``), plus optional overrides."""
    ensure_registered()
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml)")
    cfg = from_dict(TrainConfig, load_yaml(path), where=str(path))
    return apply_overrides(cfg, overrides) if overrides else cfg


def _attach_file_log(run_dir: Path) -> logging.Handler:
    handler = logging.FileHandler(run_dir / "train.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("robot_rl").addHandler(handler)
    logging.getLogger("robot_rl").setLevel(logging.INFO)
    return handler


class InProcessRunner:
    """Owns one run: envs, algorithm, actors, learner, logs and checkpoints."""

    def __init__(self, cfg: TrainConfig, run_dir: Path | None = None, resume: bool = False,
                 remote_actors: bool = False) -> None:
        if remote_actors != isinstance(cfg.transport, ZmqTransportConfig):
            raise ConfigError("robot-rl train runs in one process (transport.type=inproc); with "
                              "transport.type=zmq start `robot-rl learner` and `robot-rl actor`")
        self.cfg = cfg
        self.device = resolve_device(cfg.run.device)
        if cfg.run.torch_threads > 0:
            torch.set_num_threads(cfg.run.torch_threads)
        elif self.device.type == "cpu":
            # Actor threads and the learner share the cores; oversubscribing them makes both crawl.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) - max(cfg.loop.actor_threads, 0)))
        seed_everything(cfg.run.seed)
        if run_dir is None:
            stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
            run_dir = cfg.run.root / (cfg.run.name or f"{_task_name(cfg).replace('/', '-')}-{_algo_name(cfg)}-{stamp}")
        self.run_dir = Path(run_dir)
        if not resume and (self.run_dir / "checkpoints").exists():
            raise ConfigError(f"{self.run_dir} already holds a run; continue it with "
                              f"`robot-rl train --resume {self.run_dir}` or pick another run.name")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._log_handler = _attach_file_log(self.run_dir)
        save_yaml(cfg, self.run_dir / "config.yaml")

        seed = cfg.run.seed
        n_actors = max(cfg.loop.actor_threads, 1)
        if remote_actors:  # one small env, only for the spec; actors run theirs elsewhere
            self.envs: list[VecEnv] = [cfg.make_env(self.device, seed, num_envs=1)]
        else:
            self.envs = [cfg.make_env(self.device, seed + 1000 * i) for i in range(n_actors)]
        self.spec = self.envs[0].spec
        (self.run_dir / "spec.yaml").write_text(yaml.safe_dump(self.spec.to_dict()))
        eval_envs = min(cfg.loop.eval_episodes, 256)
        self.eval_env = cfg.make_env(self.device, seed + 999_983, num_envs=eval_envs, role="eval")
        self.algo: Algorithm = cfg.algo.build(self.spec, self.device, seed)
        num_envs_total = (cfg.loop.remote_actors * cfg.task.num_envs if remote_actors
                          else sum(e.num_envs for e in self.envs))
        self.remote = remote_actors
        self.zmq_endpoint: ZmqLearnerEndpoint | None = None
        if isinstance(cfg.transport, ZmqTransportConfig):
            t = cfg.transport
            # Acknowledged only once the learner has stored a chunk (Learner.ingest confirms it).
            self.zmq_endpoint = ZmqLearnerEndpoint(t.address, self.spec,
                                                   ZmqSettings.from_config(t, ack_after="confirm"))
            endpoint: Any = self.zmq_endpoint
            self.transport: InprocTransport | None = None
        else:
            assert isinstance(cfg.transport, InprocTransportConfig)
            self.transport = InprocTransport(cfg.transport.max_queued_batches)
            endpoint = self.transport.learner_endpoint()
        self.learner = Learner(self.algo, self.spec, endpoint, self.device, num_envs_total)
        self._attach_replay(resume)
        self.cotrain: Any = None
        if cfg.cotrain.enabled:  # sim–real co-training: stage-1 SFT, then the aux-loss hook on the algorithm
            from robot_rl.cotrain.extension import CoTraining

            learner = self.learner
            self.cotrain = CoTraining(cfg.cotrain, self.algo, self.spec, self.device, seed,
                                      lambda: learner.updates, self.run_dir, resume)
        self.wall_offset = 0.0
        self.discarded_rollouts = 0
        self.last_eval: EvalResult | None = None
        self.best_success = 0.0
        self.next_eval = cfg.loop.eval_every_env_steps
        if resume:
            self._restore()
            self._restore_stored_chunks()
        if cfg.loop.demos_path is not None:
            self._load_demos(Path(cfg.loop.demos_path))
        self.learner.publish()
        self._stop = threading.Event()
        transport = self.transport
        self.actors = [] if transport is None else [
            Actor(env, self.algo.make_policy(), transport.actor_endpoint(i), seed=seed + i,
                  send_timeout_s=cfg.loop.max_wait_s, stop=self._stop) for i, env in enumerate(self.envs)]
        for a in self.actors:
            a.sync_weights()
        if cfg.loop.hil is not None:
            self._attach_hil(cfg.loop.hil)
        self.eval_policy = self.algo.make_policy()
        self.runlog = RunLog(self.run_dir)
        self._thread_errors: list[BaseException] = []

    # ---- checkpoints ------------------------------------------------------------------------

    def _attach_replay(self, resume: bool) -> None:
        """Back the replay by segment files in ``<run>/replay/`` and, on resume, reload them."""
        self.replay_persisted, self._replay_chunks = attach_run_replay(
            self.learner, self.algo, self.run_dir, self.cfg.replay, resume, f"robot-rl train --resume {self.run_dir}")

    def _load_demos(self, path: Path) -> None:
        from robot_rl.data.demos import RaCWeights, load_demos_into

        storage = self.learner.storage
        demos = storage.buffers.get("demos") if isinstance(storage, NamedBufferStorage) else None
        if demos is not None and len(demos) > 0:
            # A resumed run reloads its demo buffer from the replay segments; loading again would double it.
            log.info("demo buffer already holds %d transitions; not loading %s again", len(demos), path)
            return
        loop = self.cfg.loop
        rac = None
        if (loop.demos_correction_weight, loop.demos_rewind_weight) != (1, 1):
            rac = RaCWeights(correction_weight=loop.demos_correction_weight, rewind_weight=loop.demos_rewind_weight)
        n = load_demos_into(self.learner.storage, path, self.spec, self.device, rac=rac)
        log.info("loaded %d demo transitions from %s", n, path)

    def _restore_stored_chunks(self) -> None:
        restore_stored_chunks(self.learner, self._replay_chunks)

    def _restore(self) -> None:
        restored = restore_learner(self.run_dir, self.algo, self.learner, self.replay_persisted)
        if restored is None:
            return
        _, meta = restored
        self.wall_offset = float(meta.get("wall_s", 0.0))
        self.best_success = float(meta.get("best_success", 0.0))
        every = self.cfg.loop.eval_every_env_steps
        self.next_eval = (self.learner.transitions // every + 1) * every

    def checkpoint(self, wall_s: float) -> Path:
        """Commit the replay's pending rows, then a checkpoint of everything a resume needs.

        Raises :class:`DiskFullError` when the disk is full (the previous checkpoint stays intact).
        """
        return save_learner_checkpoint(self.run_dir, self.algo, self.learner, self.replay_persisted,
                                       {"wall_s": wall_s, "best_success": self.best_success})

    # ---- evaluation -------------------------------------------------------------------------

    def run_eval(self, wall_s: float) -> EvalResult:
        """Evaluate the learner's current actor weights on the evaluation env."""
        self.eval_policy.load_actor_weights(self.algo.actor_weights())
        result = evaluate(self.eval_policy, self.eval_env, self.cfg.loop.eval_episodes,
                          seed=self.cfg.run.seed + 7)
        self.last_eval = result
        self.best_success = max(self.best_success, result.success_rate)
        self.runlog.eval_row({"env_steps": self.learner.transitions, "updates": self.learner.updates,
                              "wall_s": round(wall_s, 2), "policy_version": self.learner.version,
                              **result.as_dict()})
        return result

    # ---- main loop --------------------------------------------------------------------------

    def train(self) -> TrainResult:
        """Run until the success threshold, the step budget, or Ctrl-C; always checkpoint at the end."""
        cfg = self.cfg
        t0 = time.monotonic() - self.wall_offset
        reached = False
        reason = "budget"
        threads: list[threading.Thread] = []
        on_policy = self.algo.on_policy
        if not on_policy:
            threads = [threading.Thread(target=self._actor_thread, args=(a,), daemon=True,
                                        name=f"actor-{a.endpoint.actor_id}") for a in self.actors]
        last_log = last_ckpt = time.monotonic()
        disk_full: DiskFullError | None = None
        ep_returns: list[float] = []
        ep_success: list[bool] = []
        title = f"{_task_name(cfg)} / {_algo_name(cfg)}"
        progress = TrainProgress(cfg.loop.total_env_steps, self.learner.transitions, enabled=cfg.run.progress)
        try:
            with progress:
                progress.print(f"run directory: {self.run_dir}")
                if self.learner.transitions == 0:
                    # A baseline before any learning, so the curve starts where the policy started.
                    ev = self.run_eval(0.0)
                    progress.print(f"eval @ 0 steps (untrained): success {ev.success_rate:.0%}, "
                                   f"return {ev.mean_return:.2f}")
                if cfg.loop.hil is not None and self.learner.updates == 0:
                    from robot_rl.rewards.schedule import run_offline_phase

                    run_offline_phase(self.learner, cfg.loop.hil.offline_updates)
                for th in threads:
                    th.start()
                while self.learner.transitions < cfg.loop.total_env_steps:
                    if on_policy:
                        self._on_policy_iteration()
                    else:
                        self._off_policy_iteration()
                    if self._thread_errors:
                        raise self._thread_errors[0]
                    for a in self.actors:
                        eps = a.pop_episode_stats()
                        ep_returns = (ep_returns + eps.returns)[-100:]
                        ep_success = (ep_success + eps.successes)[-100:]
                    now = time.monotonic()
                    wall = now - t0
                    if self.learner.transitions >= self.next_eval:
                        self.next_eval += cfg.loop.eval_every_env_steps
                        ev = self.run_eval(wall)
                        progress.print(f"eval @ {self.learner.transitions:,} steps ({wall:.0f}s): success "
                                       f"{ev.success_rate:.0%}, return {ev.mean_return:.2f}")
                        if cfg.loop.success_threshold is not None and \
                                ev.success_rate >= cfg.loop.success_threshold:
                            reached, reason = True, "threshold"
                            break
                    if now - last_log >= cfg.loop.log_every_s:
                        last_log = now
                        metrics = self._metrics(ep_returns, ep_success)
                        if self.zmq_endpoint is not None:
                            net = self.zmq_endpoint.metrics()
                            metrics.update({f"transport/{k}": v for k, v in net.items()})
                            log.info("transport: %s", transport_summary(net))
                        self.runlog.scalars(metrics, self.learner.transitions, prefix="train/")
                        self.runlog.scalars(pop_summaries(self.envs), self.learner.transitions, prefix="randomize/")
                        self.runlog.scalars(pop_reward_terms(self.envs), self.learner.transitions, prefix="reward/")
                        self.runlog.train_row({"env_steps": self.learner.transitions, "wall_s": round(wall, 2),
                                               "updates": self.learner.updates, "return": metrics.get("return", ""),
                                               "success": metrics.get("success", "")})
                        progress.update(self.learner.transitions, self._short(metrics))
                    if now - last_ckpt >= cfg.loop.checkpoint_every_s:
                        last_ckpt = now
                        self.checkpoint(wall)
        except KeyboardInterrupt:
            reason = "interrupted"
            log.warning("interrupted; saving a checkpoint")
        except DiskFullError as e:
            disk_full = e
            log.error("disk full: %s; actors stopped (holding), no more data is collected", e)
        finally:
            self._stop.set()  # actors hold: nothing is collected that could not be stored
            for th in threads:
                th.join(timeout=cfg.loop.max_wait_s)
        wall = time.monotonic() - t0
        if disk_full is not None:
            self._stop_on_disk_full(disk_full, wall)
        self.checkpoint(wall)
        self.learner.confirm_due(force=True)  # the rows are on disk now: acknowledge the last chunks
        if self.last_eval is None or reason != "threshold":
            self.run_eval(wall)
        curve = self.runlog.plot_learning_curve(title)
        assert self.last_eval is not None
        result = TrainResult(self.run_dir, self.learner.transitions, self.learner.updates, self.learner.version,
                             wall, reached, self.last_eval, reason)
        nonfinite = sum(a.nonfinite_rows for a in self.actors)
        self.runlog.write_summary({
            "title": title, "stop_reason": reason, "reached_success_threshold": reached,
            "success_threshold": cfg.loop.success_threshold, "env_steps": result.env_steps,
            "gradient_updates": result.updates, "policy_version": result.policy_version,
            "wall_clock_s": round(wall, 1), "final_eval": self.last_eval.as_dict(),
            "best_success_rate": self.best_success, "nonfinite_rows_dropped": nonfinite,
            "discarded_rollouts": self.discarded_rollouts, "cut_actor_sessions": self.learner.cut_sessions,
            "rejected_batches": dict(self.learner.endpoint.stats.rejected),
            "learning_curve": str(curve) if curve else None,
        })
        self.runlog.close()
        logging.getLogger("robot_rl").removeHandler(self._log_handler)
        for env in [*self.envs, self.eval_env]:
            env.close()
        for a in self.actors:
            if a.hil is not None:
                a.hil.close()
        if self.zmq_endpoint is not None:
            self.zmq_endpoint.close()
        return result

    def _stop_on_disk_full(self, error: DiskFullError, wall: float) -> None:
        """Try one last checkpoint, release everything, and raise a clear error naming the good checkpoint."""
        try:
            where = f"saved a final checkpoint {self.checkpoint(wall)}"
        except OSError as e:
            good = list_checkpoints(self.run_dir)
            where = (f"the last good checkpoint is {good[-1]}" if good else "no checkpoint was committed") + \
                f" (final save failed: {e})"
        self.runlog.close()
        logging.getLogger("robot_rl").removeHandler(self._log_handler)
        for env in [*self.envs, self.eval_env]:
            env.close()
        if self.zmq_endpoint is not None:
            self.zmq_endpoint.close()
        raise DiskFullError(error.errno, f"training stopped: the disk is full ({error}). Actors were stopped "
                                         f"and hold; {where}. Free space, then `robot-rl train --resume "
                                         f"{self.run_dir}`.") from error

    def _attach_hil(self, hil: Any) -> None:
        """One schedule controller per actor; the teleop device (one human) drives actor 0's sub-env 0."""
        from robot_rl.rewards.schedule import HILController, demo_buffer

        if self.algo.on_policy or self.remote:
            raise ConfigError("loop.hil runs with an off-policy algorithm in `robot-rl train` (e.g. algo=sac)")
        if hil.offline_updates > 0:
            demo_buffer(self.learner)  # fail now, not after the actors started
        for i, a in enumerate(self.actors):
            a.hil = HILController(hil, a.env, lambda: self.learner.transitions,
                                  hil.make_device() if i == 0 else None, seed=self.cfg.run.seed + i)

    def _actor_thread(self, actor: Actor) -> None:
        try:
            while not self._stop.is_set():
                actor.sync_weights()
                actor.step()
        except BaseException as e:
            self._thread_errors.append(e)
            self._stop.set()

    def _off_policy_iteration(self) -> None:
        learner = self.learner
        if learner.owed_updates > 0:
            before = learner.updates
            learner.update_off_policy(max_updates=min(learner.owed_updates,
                                                      self.cfg.loop.weight_sync_every_updates))
            if learner.updates // self.cfg.loop.weight_sync_every_updates != \
                    before // self.cfg.loop.weight_sync_every_updates:
                learner.publish()
            return
        if not learner.pump(timeout_s=0.05) and self._stop.is_set():
            raise RuntimeError("actor thread stopped")

    def _on_policy_iteration(self) -> None:
        learner = self.learner
        rollout = self.algo.rollout_length if isinstance(self.algo, OnPolicyAlgorithm) else 1
        if self.remote:
            # Remote actors collect; the rollout is complete when every column is full.
            deadline = time.monotonic() + self.cfg.loop.max_wait_s
            while not learner.update_on_policy():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no complete rollout within {self.cfg.loop.max_wait_s:.0f}s; "
                                       "are the actors running and connected?")
                learner.pump(timeout_s=0.05)
            learner.publish()
            return
        for _ in range(rollout):
            for a in self.actors:
                a.step()
                while learner.pump(timeout_s=0):
                    pass
        if not learner.update_on_policy():
            # Rows were dropped (non-finite env output): a rollout with holes cannot be used for GAE,
            # so it is discarded whole, counted and reported, never learned from.
            self.discarded_rollouts += 1
            log.warning("discarding an incomplete rollout (%d so far): an env produced NaN/inf",
                        self.discarded_rollouts)
            if not isinstance(learner.storage, OnPolicyStorage):
                raise RuntimeError("on-policy storage was not full after a rollout and cannot be cleared")
            learner.storage.clear()
        learner.publish()
        for a in self.actors:
            a.sync_weights()

    def _metrics(self, ep_returns: list[float], ep_success: list[bool]) -> dict[str, float]:
        m: dict[str, float] = {"updates": float(self.learner.updates), "version": float(self.learner.version),
                               "queue": float(self.learner.endpoint.pending())}
        if ep_returns:
            m["return"] = float(np.mean(ep_returns))
            m["success"] = float(np.mean(ep_success))
        m.update({k: float(v) for k, v in self.learner.last_stats.items()})
        if self.cotrain is not None:
            m.update(self.cotrain.metrics(self.learner.transitions, self.learner.updates))
        return m

    @staticmethod
    def _short(metrics: dict[str, float]) -> dict[str, Any]:
        keep = ("return", "success", "critic_loss", "actor_loss", "alpha", "value_loss", "surrogate_loss",
                "kl")
        out: dict[str, Any] = {k: metrics[k] for k in keep if k in metrics}
        if "success" in out:
            out["success"] = f"{out['success']:.0%}"
        if "transport/transitions_per_s" in metrics:
            rejects = sum(v for k, v in metrics.items() if k.startswith("transport/rejects/"))
            out["net"] = (f"{metrics['transport/transitions_per_s']:,.0f}tr/s "
                          f"{metrics['transport/mb_per_s']:.1f}MB/s acks {metrics['transport/acks_pending']:.0f} "
                          f"lag {metrics['transport/weight_lag_max']:.0f} rej {rejects:.0f}")
        return out


def train(cfg: TrainConfig | None = None, resume_dir: Path | None = None) -> TrainResult:
    """Train ``cfg`` (default: SAC on ``reach``), or continue the run in ``resume_dir``."""
    if resume_dir is not None:
        cfg = cfg or load_run_config(resume_dir)
        return InProcessRunner(cfg, run_dir=resume_dir, resume=True).train()
    return InProcessRunner(cfg or TrainConfig()).train()
