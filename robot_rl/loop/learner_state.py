"""A learner's durable state: replay segments on disk, checkpoints, and resuming from both.

Shared by every process that runs a :class:`~robot_rl.loop.learner.Learner` for a run directory:
`robot-rl train` / `robot-rl learner` (:class:`~robot_rl.loop.runner.InProcessRunner`) and the HIL learner
of `robot-rl deploy --role learner`. What they write and how they come back after a kill -9 is the
same (docs/replay-and-checkpoints.md):

- the replay is backed by checksummed segments in ``<run>/replay/``; with persistence on, actors'
  chunks are acknowledged only once their rows are on disk (:meth:`Learner._confirm_durable`);
- a checkpoint commits the pending replay rows first, then saves the algorithm, counters, RNGs and the
  transport's acknowledged windows, with a digest of the algorithm state;
- a resume reloads the segments, proves the restored algorithm matches its digest, and tells the
  transport which chunks the disk holds beyond the checkpoint, so resends are dropped, not stored twice.
"""

from __future__ import annotations

import logging
import random
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.checkpoint import CheckpointError, list_checkpoints, load_latest, save_checkpoint, state_digest
from robot_rl.core.algorithm import Algorithm
from robot_rl.core.config import ConfigError
from robot_rl.core.transport import StatefulEndpoint
from robot_rl.loop.config import ReplayConfig
from robot_rl.loop.learner import Learner
from robot_rl.replay.persist import (
    attach_replay,
    durable_chunks,
    flush_replay,
    has_replay_on_disk,
    primary_buffer,
    replay_sizes,
)
from robot_rl.replay.persist import named_buffers as _named

log = logging.getLogger(__name__)


def rng_state() -> dict[str, Any]:
    """Every global RNG's state as tensors (loadable with ``weights_only=True``)."""
    version, mt, gauss = random.getstate()
    _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {"torch": torch.get_rng_state(),
            "python": {"version": version, "mt": torch.tensor(mt, dtype=torch.int64), "gauss": gauss},
            "numpy": {"keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "cached": float(cached)},
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state` (keys missing from older checkpoints are skipped)."""
    torch.set_rng_state(state["torch"])
    if "python" in state:
        p = state["python"]
        random.setstate((p["version"], tuple(int(x) for x in p["mt"].tolist()), p["gauss"]))
    if "numpy" in state:
        n = state["numpy"]
        np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def attach_run_replay(learner: Learner, algo: Algorithm, run_dir: Path, rc: ReplayConfig, resume: bool,
                      resume_hint: str) -> tuple[bool, dict[str, Any]]:
    """Back the learner's replay by segments in ``<run_dir>/replay/``; on resume, reload them.

    Returns ``(persisted, chunks)``: whether the replay is on disk, and per actor session the chunks the
    segments hold (for :func:`restore_stored_chunks`). ``resume_hint`` is the command that resumes the run,
    named in the error when a fresh run would overwrite replay data.
    """
    root = run_dir / "replay"
    persisted = rc.persist and not algo.on_policy
    if not persisted:
        return False, {}
    if not resume and has_replay_on_disk(root):
        raise ConfigError(f"{root} already holds replay data; continue the run with `{resume_hint}` "
                          "or pick another run directory")
    reports = attach_replay(learner.storage, root, rc.segment_transitions, rc.flush_every_s, rc.delete_evicted)
    for name, r in reports.items():
        if r.dropped_segments:
            log.error("replay %s: %s", name, r.summary())
    return True, durable_chunks(reports, learner.storage)


def check_resumable(run_dir: Path) -> None:
    """Raise :class:`ConfigError` unless ``run_dir`` holds what a resume continues: a checkpoint or replay on disk.

    Called before anything is written: a mistyped directory under ``--resume`` must not become a fresh run. A
    run killed before its first checkpoint is still resumable by the replay it committed.
    """
    run_dir = Path(run_dir)
    if list_checkpoints(run_dir) or has_replay_on_disk(run_dir / "replay"):
        return
    what = "does not exist" if not run_dir.exists() else "holds no checkpoint and no replay"
    raise ConfigError(f"--resume: {run_dir} {what}, so there is nothing to resume; check the path, or start a "
                      "new run without --resume")


def restore_learner(run_dir: Path, algo: Algorithm, learner: Learner, persisted: bool
                    ) -> tuple[dict[str, Any], dict[str, Any], Path] | None:
    """Load the newest checkpoint of ``run_dir`` into ``algo`` and ``learner``; ``(state, meta, path)`` or None.

    None when the run was killed before its first checkpoint (the replay, already reloaded, is kept and
    the networks start fresh). Raises :class:`CheckpointError` if the restored algorithm state does not
    match the digest saved with it.
    """
    if not list_checkpoints(run_dir):
        log.warning("%s has no checkpoint yet: the networks start fresh; the replay on disk is kept", run_dir)
        return None
    state, meta, path = load_latest(run_dir)
    algo.load_state_dict(state["algo"])
    # Prove the networks, optimisers and temperature are exactly what was saved (never a fresh init).
    saved = meta.get("algo_digest")
    digest = state_digest(algo.state_dict())
    if saved is not None and digest != saved:
        raise CheckpointError(f"{path}: the restored algorithm state differs from the one saved; refusing "
                              "to continue with different weights")
    learner.load_counters(state["learner"])
    set_rng_state(state["rng"])
    if state.get("transport") is not None and isinstance(learner.endpoint, StatefulEndpoint):
        learner.endpoint.load_state_dict(state["transport"])
    _report_replay_resume(algo, learner, persisted, state.get("replay"))
    log.info("resumed from %s at %d env steps, %d updates, policy version %d, algo digest %s, replay %s",
             path, learner.transitions, learner.updates, learner.version, digest, replay_sizes(learner.storage))
    return state, meta, path


def _report_replay_resume(algo: Algorithm, learner: Learner, persisted: bool, saved: dict[str, Any] | None) -> None:
    if not saved or not persisted:
        if algo.on_policy is False and learner.transitions and not len(learner.storage):
            log.warning("replay was not persisted; the buffer refills from empty")
        return
    now = {name: buf.watermark[0] for name, buf in _named(learner.storage).items()}
    for name, rows in saved.get("watermark", {}).items():
        have = now.get(name, 0)
        if have < rows[0]:
            log.error("replay %s: the checkpoint saw %d transitions committed, the disk holds %d "
                      "(segments were lost or damaged)", name, rows[0], have)
        elif have > rows[0]:
            log.info("replay %s: %d transitions committed after the checkpoint are kept", name, have - rows[0])


def restore_stored_chunks(learner: Learner, chunks: dict[str, Any]) -> None:
    """Tell the transport which actor chunks the replay on disk holds (newer than the checkpoint's).

    A learner killed after a segment commit but before the next checkpoint has rows on disk whose
    chunks the checkpoint's windows do not list; the actors resend the ones whose acknowledgement
    was lost, and these windows make the transport drop them instead of storing them twice.
    """
    if isinstance(learner.endpoint, StatefulEndpoint) and chunks:
        learner.endpoint.merge_state_dict({"sessions": chunks})
        log.info("transport: %d actor sessions' stored chunks restored from the replay on disk", len(chunks))
    buf = primary_buffer(learner.storage)
    if buf is not None and buf.transitions_written > learner.transitions:
        # Counted by what the disk holds: those transitions are never sent again.
        log.info("replay holds %d transitions committed after the checkpoint's %d; counting them",
                 buf.transitions_written - learner.transitions, learner.transitions)
        learner.transitions = buf.transitions_written


def save_learner_checkpoint(run_dir: Path, algo: Algorithm, learner: Learner, persisted: bool,
                            meta: dict[str, Any] | None = None) -> Path:
    """Commit the replay's pending rows, then a checkpoint of everything a resume needs.

    ``meta`` adds run-specific fields (wall-clock, best success, ...). Raises
    :class:`~robot_rl.durable.DiskFullError` when the disk is full (the previous checkpoint stays).
    """
    watermark = flush_replay(learner.storage) if persisted else {}
    algo_state = algo.state_dict()
    endpoint = learner.endpoint
    state = {"algo": algo_state, "learner": learner.counters(), "actor_weights": algo.actor_weights(),
             "rng": rng_state(), "replay": {"watermark": watermark, "sizes": replay_sizes(learner.storage)},
             "transport": endpoint.state_dict() if isinstance(endpoint, StatefulEndpoint) else None}
    full_meta = {"env_steps": learner.transitions, "updates": learner.updates, "policy_version": learner.version,
                 **(meta or {}), "algo_digest": state_digest(algo_state), "replay_watermark": watermark,
                 "time": datetime.now().isoformat(timespec="seconds")}
    return save_checkpoint(run_dir, learner.transitions, state, full_meta)
