"""Load a run's trained policy: the actor alone, as an actor runs it, with no learner around it.

:func:`load_policy` reads ``<run>/config.yaml``'s ``algo`` section and ``<run>/spec.yaml``, builds only the
policy (``AlgoConfig.build_policy``: no critic, no optimiser) and loads the newest verifiable checkpoint's
``actor_weights`` into it. Evaluation, export, recording and deployment load policies this way. It reads
files only: nothing here imports the training loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from robot_rl.checkpoint import load_latest
from robot_rl.config_io import from_dict, load_yaml
from robot_rl.core.algorithm import Policy
from robot_rl.core.config import AlgoConfig, ConfigError, TaskConfig
from robot_rl.core.specs import EnvSpec

log = logging.getLogger(__name__)


@dataclass
class LoadedPolicy:
    """A policy loaded from a run directory, and where it came from."""

    policy: Policy
    spec: EnvSpec
    """The spec the policy was built for (the caller's, else the run's ``spec.yaml``)."""
    algo: AlgoConfig
    checkpoint: Path
    meta: dict[str, Any]
    """The checkpoint's metadata (``env_steps``, ``updates``, ``policy_version``, …)."""

    @property
    def version(self) -> int:
        """The weight version the learner had published when the checkpoint was written."""
        return int(self.meta.get("policy_version", 0))


def read_run_config(run_dir: Path | str) -> dict[str, Any]:
    """``<run>/config.yaml`` as plain data (a :class:`ConfigError` when ``run_dir`` is not a run directory)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml)")
    return load_yaml(path)


def run_spec(run_dir: Path | str) -> EnvSpec | None:
    """``<run>/spec.yaml`` (the spec the policy was trained on), or ``None`` for a run that predates it."""
    path = Path(run_dir) / "spec.yaml"
    return EnvSpec.from_dict(yaml.safe_load(path.read_text())) if path.is_file() else None


def run_task(run_dir: Path | str) -> TaskConfig:
    """The run's ``task`` section: ``make()`` builds the task's env (without the run's reward models)."""
    data = read_run_config(run_dir)
    if "task" not in data:
        raise ConfigError(f"{run_dir}/config.yaml has no task section")
    return from_dict(TaskConfig, data["task"], where=f"{run_dir}/config.yaml task")


def load_policy(run_dir: Path | str, spec: EnvSpec | None = None, device: torch.device | str = "cpu") -> LoadedPolicy:
    """The policy of ``run_dir``'s newest verifiable checkpoint, built alone for ``spec`` on ``device``.

    ``spec``: the env the policy will act in (a robot's features, an eval env's spec); it must match the run's
    ``spec.yaml`` (the differences are listed). ``None`` uses ``spec.yaml``; a run from before ``spec.yaml`` was
    written needs the caller's spec. Errors: not a run directory or no ``algo`` section (:class:`ConfigError`),
    no usable checkpoint (:class:`~robot_rl.checkpoint.CheckpointError`), a spec mismatch
    (:class:`~robot_rl.core.specs.SpecMismatchError`).
    """
    run_dir = Path(run_dir)
    data = read_run_config(run_dir)
    if "algo" not in data:
        raise ConfigError(f"{run_dir}/config.yaml has no algo section")
    algo = from_dict(AlgoConfig, data["algo"], where=f"{run_dir}/config.yaml algo")
    saved = run_spec(run_dir)
    if spec is None:
        if saved is None:
            raise ConfigError(f"{run_dir} has no spec.yaml (a run from before it was written): pass the spec of "
                              "the env the policy acts in")
        spec = saved
    elif saved is not None:
        saved.assert_compatible(spec, f"the env it should act in (left: {run_dir / 'spec.yaml'}, trained on)")
    state, meta, path = load_latest(run_dir)
    policy = algo.build_policy(spec, device)
    weights = state.get("actor_weights")
    if weights is None:
        weights = _actor_weights_of_old_checkpoint(algo, spec, device, state, path)
    policy.load_actor_weights(weights)
    return LoadedPolicy(policy, spec, algo, path, meta)


def _actor_weights_of_old_checkpoint(algo: AlgoConfig, spec: EnvSpec, device: torch.device | str,
                                     state: dict[str, Any], path: Path) -> dict[str, torch.Tensor]:
    # Checkpoints written before they carried ``actor_weights``: the learner's state is all there is, so the
    # whole algorithm is built once to read its actor out of it.
    log.warning("%s has no actor_weights (an older checkpoint): building the learner to read them", path)
    learner = algo.build(spec, device, 0)
    learner.load_state_dict(state["algo"])
    return learner.actor_weights()
