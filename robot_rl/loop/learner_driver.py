"""The one learner driver: `robot-rl train`, `robot-rl learner` and the HIL-SERL deploy learner all run it.

It owns what every learner process shares: the transport's learner side (:class:`LearnerLink`), the
:class:`~robot_rl.loop.learner.Learner`, the crash-safe replay in ``<run>/replay/``, resume from the newest
checkpoint (with the de-duplication windows the replay holds), and checkpoints. What differs stays with the
caller: the in-process runner drives it with actor threads or rollouts and evaluates; the deploy learner
pumps and updates it while a robot streams transitions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from robot_rl.core.algorithm import Algorithm, Storage
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transport import LearnerLink
from robot_rl.loop.config import ReplayConfig
from robot_rl.loop.learner import Learner
from robot_rl.loop.learner_state import (
    attach_run_replay,
    restore_learner,
    restore_stored_chunks,
    save_learner_checkpoint,
)
from robot_rl.replay.persist import flush_replay


class LearnerDriver:
    """Learner + transport link + replay on disk + checkpoints of one run directory.

    ``resume_command`` is what the user types to continue the run; it is named in the error a fresh run
    gets when the directory already holds replay data.
    """

    def __init__(self, algo: Algorithm, spec: EnvSpec, link: LearnerLink, device: torch.device | str,
                 num_envs_total: int, run_dir: Path, replay: ReplayConfig, resume: bool,
                 resume_command: str, storage: Storage | None = None) -> None:
        self.algo = algo
        self.link = link
        self.run_dir = Path(run_dir)
        self.learner = Learner(algo, spec, link.endpoint, device, num_envs_total, storage)
        self.persisted, self._replay_chunks = attach_run_replay(self.learner, algo, self.run_dir, replay, resume,
                                                                resume_command)
        self.restored_from: Path | None = None
        """The checkpoint :meth:`restore` loaded (None: a fresh run, or one resumed from its replay alone)."""

    def restore(self, checkpoint: bool = True) -> dict[str, Any] | None:
        """Load the newest checkpoint and the replay's chunk windows; the checkpoint's metadata, or None.

        None when the run was killed before its first checkpoint: the replay (already reloaded) is kept and
        the networks start fresh. ``checkpoint=False``: the replay's windows only (a data-parallel rank > 0, whose
        directory holds no checkpoint: it takes rank 0's state).
        """
        restored = restore_learner(self.run_dir, self.algo, self.learner, self.persisted) if checkpoint else None
        restore_stored_chunks(self.learner, self._replay_chunks)
        if restored is None:
            return None
        self.restored_from = restored[2]
        return restored[1]

    def checkpoint(self, meta: dict[str, Any] | None = None) -> Path:
        """Commit the replay's pending rows, then a checkpoint of everything a resume needs (+ ``meta``).

        Raises :class:`~robot_rl.durable.DiskFullError` when the disk is full (the previous checkpoint
        stays intact).
        """
        return save_learner_checkpoint(self.run_dir, self.algo, self.learner, self.persisted, meta)

    def commit_replay(self) -> None:
        """Commit the replay's pending rows without a checkpoint (a data-parallel rank > 0 keeps its shard so)."""
        if self.persisted:
            flush_replay(self.learner.storage)

    def close(self) -> None:
        """Stop listening."""
        self.link.close()
