"""The ``reward`` extension of a training run: learned rewards in the training envs (``reward.*``; docs/rewards.md).

Each env the run makes is wrapped by :meth:`~robot_rl.rewards.train_config.RewardModelsConfig.wrap` (the training
envs get the reward models, every env the policy's observation keys), and each reward term's mean since the last
logging period is logged as ``reward/<term>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from robot_rl.core.config import DiscountedConfig
from robot_rl.core.env import VecEnv
from robot_rl.core.extension import BaseExtension, EnvRole, RunHandle, register_extension
from robot_rl.rewards.train_config import RewardModelsConfig


class RewardModels(BaseExtension):
    """Wraps the run's envs in the section's reward models and logs their terms."""

    def __init__(self, section: RewardModelsConfig, run_cfg: Any) -> None:
        self.section = section
        self.gamma = run_cfg.algo.gamma if isinstance(run_cfg.algo, DiscountedConfig) else None
        self.envs: list[VecEnv] = []

    def wrap_env(self, env: VecEnv, role: EnvRole) -> VecEnv:
        """The reward models around a training env; the policy's keys on every env."""
        return self.section.wrap(env, role, self.gamma)

    def attach(self, run: RunHandle) -> None:
        """The training envs whose reward terms are logged."""
        self.envs = list(run.envs)

    def metrics(self) -> Mapping[str, float]:
        """Each term's mean reward since the last call, over the training envs (``reward/<term>``)."""
        from robot_rl.rewards.wrapper import pop_reward_terms

        return pop_reward_terms(self.envs)


# Called first: the other extensions' wrappers see the reward the models give (as before they were extensions).
@register_extension("reward", RewardModelsConfig, "learned rewards in the training envs (success classifier, PRM "
                                                  "shaping) and the keys the policy sees (docs/rewards.md)", order=-30)
def build(section: RewardModelsConfig, run_cfg: Any) -> RewardModels | None:
    """The extension when the section sets a model or the policy's keys, else None."""
    return RewardModels(section, run_cfg) if section.active else None
