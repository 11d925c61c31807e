"""The acting policy of a deploy run: loaded from a run directory, and as a plain function for the weight gate."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.algorithm import CriticPublisher, Policy
from robot_rl.core.specs import EnvSpec

log = logging.getLogger(__name__)


def load_run_policy(run_dir: Path, spec: EnvSpec, device: str = "cpu") -> tuple[Policy, int]:
    """The acting policy of a run directory's newest checkpoint, and its weight version.

    The run's recorded spec must match the robot's ``spec`` (a policy trained on other cameras or another
    state layout is refused with the differences listed). Only the policy is built
    (:func:`robot_rl.policy_io.load_policy`).
    """
    from robot_rl.policy_io import load_policy

    loaded = load_policy(run_dir, spec, device)
    log.info("deploy: acting with %s (policy v%s)", loaded.checkpoint, loaded.meta.get("policy_version"))
    return loaded.policy, loaded.version


def load_run_critics(run_dir: Path, spec: EnvSpec) -> tuple[dict[str, torch.Tensor], int] | None:
    """The critics of a run directory's newest checkpoint and its weight version (None: the algorithm has none).

    For the help desk in eval mode (its ``novelty`` and ``risk`` scores). The learner is built once to read
    them out of its saved state (the checkpoint keeps it whole).
    """
    from robot_rl.checkpoint import load_latest
    from robot_rl.config_io import from_dict
    from robot_rl.core.config import AlgoConfig
    from robot_rl.policy_io import read_run_config

    algo = from_dict(AlgoConfig, read_run_config(run_dir)["algo"], where=f"{run_dir}/config.yaml algo")
    state, meta, path = load_latest(run_dir)
    learner = algo.build(spec, "cpu", 0)
    if not isinstance(learner, CriticPublisher):
        return None
    learner.load_state_dict(state["algo"])
    log.info("deploy: the help desk scores with the critics of %s", path)
    return learner.critic_weights(), int(meta.get("policy_version", 0))


def policy_act_fn(policy: Policy, deterministic: bool = True) -> Any:
    """``{key: np [N, ...]}`` → ``np [N, A]`` with ``policy`` (for the weight gate)."""

    @torch.no_grad()
    def act(obs: dict[str, np.ndarray]) -> np.ndarray:
        a, _ = policy.act({k: torch.as_tensor(v) for k, v in obs.items()}, deterministic=deterministic)
        return a.numpy()

    return act
