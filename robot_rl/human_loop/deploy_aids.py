"""What a deploy loop reads from files besides its policy, built before anything connects.

The success classifier (``reward_source=classifier``) with its audit (``audit.enabled``) and the help desk
(``help.enabled``: a process reward model, the critics) are loaded from the robot's declared features alone, so a
wrong path, or a model that reads a camera the robot lacks, stops `robot-rl deploy` before the robot is connected
and before a learner hears from the actor (a hello as actor N cuts the episode the running actor N has in flight).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robot_rl.core.algorithm import Policy
from robot_rl.human_loop.help_desk import HelpDesk, OperatorLink
from robot_rl.human_loop.observation import SuccessJudge, policy_spec, success_judge
from robot_rl.human_loop.reward_audit import load_audit
from robot_rl.rewards.audit import RewardAudit


@dataclass
class DeployAids:
    """The deploy loop's success judge and help desk (each None when the config does not use it)."""

    judge: SuccessJudge | None
    help_desk: HelpDesk | None
    audit: RewardAudit | None = None
    """Questions about the classifier's suspicious fires (``audit.enabled``)."""


def load_deploy_aids(cfg: Any, policy: Policy, robot: Any, help_log: Path | None = None,
                     link: OperatorLink | None = None, robot_name: str = "") -> DeployAids:
    """The :class:`DeployAids` of ``cfg`` (a DeployConfig) for ``robot``, connected or not.

    Raises (``FileNotFoundError``, ``ConfigError``, ``ValueError``) on a classifier or process reward model that is
    missing or does not fit the robot's features.
    """
    features = robot.features
    judge = success_judge(cfg, observed=features.observation)
    help_desk = None
    if cfg.help.enabled:
        help_desk = HelpDesk(cfg.help, policy_spec(cfg, features), cfg.algo, policy, score_log=help_log,
                             robot=robot_name or type(robot).__name__, link=link,
                             observed={k: v.shape for k, v in features.observation.items()})
    audit = load_audit(cfg.audit, judge, cfg.classifier, help_log.parent if help_log is not None else None)
    return DeployAids(judge, help_desk, audit)
