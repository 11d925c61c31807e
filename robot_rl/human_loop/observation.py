"""What the deploy policy sees, and success judged from what the robot observes (a classifier on its cameras).

HIL-SERL's split: a success classifier reads the cameras while the policy may read only part of the
observation (``policy_keys``, e.g. ``[state]``). The learner, the actor and the evaluation all use the
same :func:`policy_spec`; demonstrations are relabelled by the same classifier before their camera keys are
dropped (:func:`learner_demos`), so the demo rows and the robot's rows carry the same reward.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from robot_rl.core.config import ConfigError
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import TransitionBatch

if TYPE_CHECKING:
    from robot_rl.data.demos import RaCWeights
    from robot_rl.hardware.robot import RobotConfig
    from robot_rl.human_loop.deploy import DeployConfig

log = logging.getLogger(__name__)

BatchJudge = Callable[[dict[str, torch.Tensor]], torch.Tensor]
"""``{camera: [N, H, W, C]}`` → ``[N]`` bool success."""


def robot_spec(cfg: RobotConfig) -> EnvSpec:
    """The spec a robot with ``cfg`` declares (everything it observes), without connecting."""
    return cfg.make().features


def policy_spec(cfg: DeployConfig, robot: EnvSpec | None = None) -> EnvSpec:
    """The spec the policy and its learner agree on: the robot's, cut to ``cfg.policy_keys`` when set."""
    spec = robot if robot is not None else robot_spec(cfg.robot)
    return spec.select(list(cfg.policy_keys), what="the robot") if cfg.policy_keys else spec


def select_obs(obs: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``obs`` with only ``keys`` (all of it when ``keys`` is empty)."""
    return {k: obs[k] for k in keys} if keys else obs


def load_success_model(cfg: DeployConfig) -> tuple[BatchJudge, list[str]] | None:
    """The configured success classifier's ``predict`` and the cameras it reads.

    The classifier is a local directory or a served ``tcp://`` one. None unless ``reward_source=classifier``.
    A served one is waited on at most ``classifier_max_wait_s``.
    """
    loaded = _load_classifier(cfg)
    return None if loaded is None else (loaded[0].predict, loaded[1])


def _load_classifier(cfg: DeployConfig) -> tuple[Any, list[str]] | None:
    if cfg.reward_source != "classifier" or not cfg.classifier:
        return None
    model: Any
    if cfg.classifier.startswith(("tcp://", "ipc://")):
        from robot_rl.rewards.remote_models import RemoteClassifier
        from robot_rl.rewards.service import RewardClient

        model = RemoteClassifier(RewardClient(cfg.classifier), max_wait_s=cfg.classifier_max_wait_s)
        cameras = list(model.cameras)
    else:
        from robot_rl.rewards.classifier import SuccessClassifier

        if not Path(cfg.classifier).is_dir():
            raise FileNotFoundError(f"classifier={cfg.classifier}: no such directory; train one with "
                                    "`robot-rl reward train-classifier DEMOS --out DIR`")
        model = SuccessClassifier.load(cfg.classifier)
        cameras = sorted(model.encoder.shapes)
    return model, cameras


def _missing(cameras: list[str], observed: Any) -> None:
    missing = [c for c in cameras if c not in observed]
    if missing:
        raise ConfigError(f"the success classifier reads {missing}, which the robot does not observe "
                          f"(it has {sorted(observed)}); set robot.cameras")


class SuccessJudge:
    """``obs → bool`` for one control step (batch of one: well under a millisecond on a CPU).

    ``probability`` is the classifier's success probability at the last call (None when a served classifier
    missed its deadline): the help gate's ``classifier`` uncertainty.
    """

    def __init__(self, model: Any, cameras: list[str]) -> None:
        self.model = model
        self.cameras = cameras
        self.probability: float | None = None

    def __call__(self, obs: dict[str, np.ndarray]) -> bool:
        """Success at ``obs`` (one observation, unbatched); sets :attr:`probability`."""
        _missing(self.cameras, obs)
        decision, prob = self.model.decide({c: torch.as_tensor(obs[c])[None] for c in self.cameras})
        self.probability = None if prob is None else float(prob[0])
        return bool(decision[0])


def success_judge(cfg: DeployConfig, observed: Any = None) -> SuccessJudge | None:
    """The step-by-step success judge of ``cfg``'s classifier (``reward_source=classifier``), or None.

    ``observed``: the robot's observation keys; a classifier that reads a camera not among them is refused here,
    before the robot connects, instead of at the first step.
    """
    loaded = _load_classifier(cfg)
    if loaded is not None and observed is not None:
        _missing(loaded[1], observed)
    return None if loaded is None else SuccessJudge(*loaded)


def relabel_success(batch: TransitionBatch, predict: BatchJudge, cameras: list[str], chunk: int = 256) -> int:
    """Reward and termination of ``batch`` from the classifier on each row's ``next_obs``; rows changed.

    As on the robot: reward 1 and *terminated* where the classifier fires on the observation the step led to,
    else reward 0; a row the recording ended as terminated without the classifier firing becomes truncated
    (the episode did end there, but not in a success the learner's reward knows).
    """
    _missing(cameras, batch.next_obs)
    fired = torch.cat([predict({c: batch.next_obs[c][i:i + chunk] for c in cameras})
                       for i in range(0, len(batch), chunk)]).to(torch.bool)
    reward = fired.to(batch.reward.dtype)
    changed = int(((reward != batch.reward) | (fired != batch.terminated)).sum())
    ended = batch.terminated | batch.truncated
    batch.reward, batch.terminated, batch.truncated = reward, fired, ended & ~fired
    return changed


def learner_demos(cfg: DeployConfig, path: Path | str, rac: RaCWeights | None = None) -> TransitionBatch:
    """The demos at ``path`` as the deploy learner trains on them.

    Read with everything the robot observes; with ``reward_source=classifier`` their rewards come from the
    classifier (as the robot's rows will); then cut to ``policy_keys``.
    """
    from robot_rl.data.demos import load_demos

    full = robot_spec(cfg.robot)
    batch = load_demos(path, full, rac=rac)
    loaded = load_success_model(cfg)
    if loaded is not None:
        changed = relabel_success(batch, *loaded)
        log.info("%s: rewards from the success classifier (%d of %d rows changed; %d successes)", path, changed,
                 len(batch), int(batch.terminated.sum()))
    if cfg.policy_keys:
        keys = list(policy_spec(cfg, full).observation)
        batch.obs, batch.next_obs = select_obs(batch.obs, tuple(keys)), select_obs(batch.next_obs, tuple(keys))
    return batch
