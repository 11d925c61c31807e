"""The HIL-SERL learner: the other end of `robot-rl deploy --mode learn`.

It listens on ZeroMQ with the robot's declared spec (so an actor on another robot is refused at connect
time), stores every received row in the ``online`` buffer and the intervened rows also in the
``demos`` buffer (which starts with the offline demonstrations), samples every batch 50/50 from the two
(:class:`~robot_rl.replay.mixing.MixingSampler`, RLPD), updates at the algorithm's UTD ratio and
publishes versioned actor weights. Checkpoints (``actor_weights`` included) go to the run directory,
which `robot-rl deploy --mode eval --run-dir` can then score.

Crash-safe like `robot-rl learner` (:mod:`robot_rl.loop.learner_state`): with ``replay.persist`` (the
default) both buffers are backed by segments in ``<run>/replay/`` and a chunk is acknowledged to the
robot only once its rows are on disk, so hours of robot time survive a kill -9 of the learner;
``resume=True`` (`--resume`) reloads the replay and the newest checkpoint, and resends of chunks the
disk already holds are dropped, not stored twice.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from robot_rl.checkpoint import atomic_write_text, list_checkpoints
from robot_rl.config_io import save_yaml
from robot_rl.core.config import ActorWarmupConfig, ConfigError
from robot_rl.core.transition import DEMO_ACTOR_ID, TransitionBatch
from robot_rl.human_loop.audit_relabel import ReplayRelabeller
from robot_rl.human_loop.deploy import DeployConfig
from robot_rl.human_loop.deploy_extensions import DeployRun
from robot_rl.human_loop.observation import policy_spec
from robot_rl.human_loop.reward_audit import queue_dir
from robot_rl.loop.extensions import RunExtensions
from robot_rl.loop.learner_driver import LearnerDriver
from robot_rl.loop.learner_state import check_resumable
from robot_rl.replay.mixing import MixingSampler
from robot_rl.replay.persist import replay_sizes
from robot_rl.rewards.audit_queue import AuditQueue

log = logging.getLogger(__name__)

DEMOS_FILE = "demos_loaded.json"
"""In the run directory: how many offline demonstrations the run loaded into its demo buffer at the start."""


@dataclass
class HILLearnerStats:
    """Counters for logs and tests."""

    transitions: int = 0
    intervened_received: int = 0
    updates: int = 0
    version: int = 0
    rows_sampled: int = 0
    intervened_sampled: int = 0
    """Sampled rows a person intervened in while the policy acted (demonstrations not counted)."""
    demos_sampled: int = 0
    """Sampled rows of the demonstrations loaded at the start (``--demos``)."""
    demos: int = 0


class HILLearner:
    """Learner + ZeroMQ endpoint + run directory for one deploy run."""

    def __init__(self, cfg: DeployConfig, run_dir: Path, demos: TransitionBatch | None = None,
                 address: str | None = None, device: str = "cpu", publish_every: int = 20,
                 checkpoint_every_s: float = 60.0, resume: bool = False) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        if isinstance(cfg.algo, ActorWarmupConfig) and cfg.algo.actor_bc_updates:
            raise ConfigError(f"algo.actor_bc_updates={cfg.algo.actor_bc_updates}: the HIL learner has no offline "
                              "phase for the actor's cloning warm-up; set it to 0 (`robot-rl train --offline DATA` "
                              "runs one)")
        if resume:  # before anything is written: a mistyped --run-dir must not become a fresh run
            check_resumable(self.run_dir)
        elif list_checkpoints(self.run_dir):
            raise ConfigError(f"{self.run_dir} holds checkpoints of an earlier run: continue it with "
                              "`robot-rl deploy --role learner --resume` or pick another --run-dir")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.spec = policy_spec(cfg)
        save_yaml(cfg, self.run_dir / "config.yaml")
        (self.run_dir / "spec.yaml").write_text(yaml.safe_dump(self.spec.to_dict()))
        torch.manual_seed(cfg.seed)
        self.algo = cfg.algo.build(self.spec, device, cfg.seed)
        transport = cfg.transport if address is None else dataclasses.replace(cfg.transport, address=address)
        self.driver = LearnerDriver(self.algo, self.spec, transport.open_learner(self.spec), device, 1,
                                    self.run_dir, cfg.replay, resume, "robot-rl deploy --role learner --resume")
        self.endpoint = self.driver.link.endpoint
        self.learner = self.driver.learner
        self.stats = HILLearnerStats()
        meta = self.driver.restore() if resume else None
        storage = self.learner.storage
        if isinstance(storage, MixingSampler):
            # What came back from disk, not the interventions routed again from the online buffer on reopening.
            held = len(storage.buffers["demos"]) - storage.rows_rerouted
            if held:  # a resumed run's demo buffer came back from disk: loading the demos again would double it
                log.info("demo buffer already holds %d transitions (demos and interventions); not loading "
                         "the demos again", held)
            else:
                # Written before anything can reach the replay on disk: a learner killed before its first
                # checkpoint still knows on resume which of the demo buffer's rows were demos, not interventions.
                loaded = len(demos) if demos is not None else 0
                atomic_write_text(self.run_dir / DEMOS_FILE, json.dumps({"demos": loaded}))
                if demos is not None and loaded:  # marked as demos whoever built them: not counted as interventions
                    storage.add_to("demos", dataclasses.replace(demos.to(device), actor_id=DEMO_ACTOR_ID))
            self.stats.demos = self._demos_loaded(meta, len(storage.buffers["demos"]))
            if meta is not None:
                # Counters are the whole run's, like the learner's transitions: the demos loaded at its start,
                # and the sampling counts so far (the interventions are the demo buffer's other rows).
                storage.restore_sampled(int(meta.get("rows_sampled", 0)), int(meta.get("intervened_sampled", 0)),
                                        int(meta.get("demos_sampled", 0)))
            self.stats.intervened_received = len(storage.buffers["demos"]) - self.stats.demos
        elif demos is not None:
            log.warning("algo has no demo buffer (demo_ratio=0): %d demonstrations go to the online buffer",
                        len(demos))
            storage.add(demos.to(device))
        # Actors that ask for help score states with the critics: they get them with every version.
        self.learner.publish_critic = cfg.help.enabled
        # max_unlearned_chunks: a chunk is acknowledged once its updates ran, and soon after (the actor waits for
        # it): a replay segment is committed every half of what the actor may hold unacknowledged.
        self.learned_acks = cfg.max_unlearned_chunks > 0
        if self.learned_acks:
            self.learner.ack_max_chunks = max(1, cfg.max_unlearned_chunks // 2)
        self.publish_every = publish_every
        self.checkpoint_every_s = checkpoint_every_s
        self._last_ckpt = time.monotonic()
        self._since_publish = 0
        self.resumed = resume
        self.stats.transitions, self.stats.updates = self.learner.transitions, self.learner.updates
        self.stats.version = self.learner.publish()
        self.relabeller = (ReplayRelabeller(AuditQueue(queue_dir(cfg.audit, self.run_dir)), storage)
                           if cfg.audit.enabled and cfg.audit.relabel else None)
        """Takes back, in the replay, the learned rewards the operator's answers rejected (``audit.relabel``)."""
        self._attach_extensions(cfg, device, meta)

    def _attach_extensions(self, cfg: DeployConfig, device: str, meta: dict[str, Any] | None) -> None:
        """The deploy config's extensions, as `robot-rl learner` runs them (robot_rl.human_loop.deploy_extensions)."""
        self.extensions = RunExtensions(cfg)
        self._closers: list[Callable[[], None]] = []

        def publish() -> None:
            self.stats.version = self.learner.publish()

        run = DeployRun(cfg, self.run_dir, lambda: self.spec, lambda: self.learner.transitions, self.learner,
                        self.algo, device, self.resumed, publish)
        self.extensions.attach(run, [], self._closers.append, meta)
        self.extensions.start(run)

    def start_line(self) -> str:
        """What the learner prints as it starts: where it listens, and what a resumed run continued from."""
        where = f"listening on {self.address} (run directory {self.run_dir}, {self.stats.demos} demos)"
        if not self.resumed:
            return f"HIL learner {where}"
        ckpt = self.driver.restored_from
        source = (f"checkpoint {ckpt.name}" if ckpt is not None
                  else "its replay alone (killed before its first checkpoint: the networks start fresh)")
        held = ", ".join(f"{name} {n}" for name, n in replay_sizes(self.learner.storage).items())
        return (f"HIL learner resumed from {source}: {self.stats.transitions} transitions "
                f"({self.stats.intervened_received} intervened), {self.stats.updates} updates, now publishing weights "
                f"v{self.stats.version}; replay rows: {held}; {where}")

    def _demos_loaded(self, meta: dict[str, Any] | None, held: int) -> int:
        """Demonstrations loaded at the run's start (the demo buffer's other ``held`` rows are interventions)."""
        path = self.run_dir / DEMOS_FILE
        if path.exists():
            return int(json.loads(path.read_text())["demos"])
        if meta is not None and "demos" in meta:  # a run from before the file existed
            return int(meta["demos"])
        return held

    @property
    def address(self) -> str:
        """The bound address (with the real port when bound to port 0)."""
        return str(self.driver.link.address)

    def step(self, recv_timeout_s: float = 0.02, max_updates: int = 4) -> None:
        """Ingest what arrived, run owed updates (at most ``max_updates``), publish and checkpoint when due.

        With ``max_unlearned_chunks`` it takes in (and so acknowledges) no new chunk while updates are owed.
        """
        while not (self.learned_acks and self.learner.owed_updates >= 1) and self.learner.pump(recv_timeout_s):
            recv_timeout_s = 0.0
        self.stats.transitions = self.learner.transitions
        storage = self.learner.storage
        if isinstance(storage, MixingSampler):  # intervened rows are copied there by MixingSampler.add
            self.stats.intervened_received = len(storage.buffers["demos"]) - self.stats.demos
        if self.relabeller is not None:
            self.relabeller.poll()
        done = self.learner.update_off_policy(max_updates)
        if isinstance(storage, MixingSampler):  # RLPD's 50/50 draw: how many sampled rows a human acted in
            self.stats.rows_sampled = storage.rows_sampled
            self.stats.intervened_sampled = storage.intervened_sampled
            self.stats.demos_sampled = storage.demos_sampled
        self._since_publish += done
        self.stats.updates = self.learner.updates
        if self._since_publish >= self.publish_every:
            self._since_publish = 0
            self.stats.version = self.learner.publish()
        if time.monotonic() - self._last_ckpt >= self.checkpoint_every_s:
            self.checkpoint()

    def checkpoint(self) -> Path:
        """Commit the replay, then save what a resume needs (and the actor weights `deploy --mode eval` loads)."""
        self._last_ckpt = time.monotonic()
        metrics = self.extensions.metrics()
        if metrics:
            log.info("extensions at %d transitions: %s", self.learner.transitions, metrics)
        return self.driver.checkpoint({"demos": self.stats.demos, "rows_sampled": self.stats.rows_sampled,
                                       "intervened_sampled": self.stats.intervened_sampled,
                                       "demos_sampled": self.stats.demos_sampled, **self.extensions.state()})

    def serve(self, stop: threading.Event, max_s: float | None = None) -> HILLearnerStats:
        """Learn until ``stop`` is set (or ``max_s``); checkpoint on the way out."""
        t0 = time.monotonic()
        try:
            while not stop.is_set() and (max_s is None or time.monotonic() - t0 < max_s):
                self.step()
        finally:
            self.checkpoint()
        return self.stats

    def close(self) -> None:
        """Close the extensions (last attached, first closed), then the endpoint."""
        for close in reversed(self._closers):
            try:
                close()
            except Exception:  # one failing close must not keep the others (or the endpoint) open
                log.exception("closing %s failed", close)
        self._closers.clear()
        self.driver.close()

    @contextmanager
    def serving(self) -> Iterator[HILLearner]:
        """Learn in a daemon thread for the ``with`` block; on exit stop it (it checkpoints) and close.

        The way to run the learner beside a deploy loop in one process (tests, benchmarks, examples);
        ``robot-rl deploy --role learner`` runs :meth:`serve` in its own process instead.
        """
        stop = threading.Event()
        thread = threading.Thread(target=self.serve, args=(stop,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=30)
            self.close()
