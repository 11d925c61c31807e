"""The ``reward`` section of ``robot-rl train``: learned rewards in the actors, one switch per model.

``reward.classifier``: a calibrated success classifier replaces (or adds to) the env's reward;
``reward.prm``: a process reward model adds potential-based shaping; ``reward.policy_keys``: the
observation keys the policy sees, for a state policy beside camera-based reward models. Each model is
a local directory (``robot-rl reward train-classifier`` / ``train-prm``) or the address of a
``robot-rl reward serve`` process. The section is registered by :mod:`robot_rl.rewards.extension`, which wraps
the run's envs with :meth:`RewardModelsConfig.wrap`; this module stays torch-free (the CLI lists its keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from robot_rl.core.config import ConfigError

if TYPE_CHECKING:
    from robot_rl.core.env import VecEnv

EnvRole = Literal["train", "eval"]


@dataclass
class RewardModelsConfig:
    """Learned rewards for the training envs (docs/rewards.md); evaluation always scores the env's own success."""

    classifier: str | None = None
    """Success classifier: a directory from `robot-rl reward train-classifier`, or a reward server's
    address (`tcp://host:port`, `robot-rl reward serve`). null = the env's own reward."""
    classifier_mode: Literal["replace", "add"] = "replace"
    """``replace``: reward = success_reward where it fires, else fail_reward; ``add``: env reward + success_bonus."""
    success_reward: float = 0.0
    """``replace``: the reward where the classifier fires."""
    fail_reward: float = -1.0
    """``replace``: the reward elsewhere."""
    success_bonus: float = 1.0
    """``add``: added where the classifier fires."""
    prm: str | None = None
    """Process reward model for potential-based shaping: a directory from `robot-rl reward train-prm`, or
    a reward server's address. null = no shaping."""
    goal: str = ""
    """The PRM's language goal (required with ``prm``)."""
    shaping_weight: float = 1.0
    """Φ = shaping_weight · PRM progress (the PRM's output is in [-1, 1])."""
    gamma: float | None = None
    """γ of the shaping term γΦ(s') − Φ(s); null = the algorithm's discount (what keeps the optimal policy)."""
    policy_keys: tuple[str, ...] = ()
    """Observation keys the policy sees, e.g. ``[state]`` when only the reward models read the cameras
    (with ``task.obs=state_pixels``); empty = every key the env has."""
    max_wait_s: float = 0.05
    """Served models: how long a step waits for its reply before the documented fallback."""

    @property
    def active(self) -> bool:
        """Whether this section changes the envs at all."""
        return bool(self.classifier or self.prm or self.policy_keys)

    def validate(self) -> None:
        """Raise ``ValueError`` on settings no run can use (before any env is built)."""
        if self.prm and not self.goal:
            raise ConfigError("reward.prm needs reward.goal: the language goal the PRM scores progress toward")
        if self.max_wait_s <= 0:
            raise ConfigError(f"reward.max_wait_s must be > 0, got {self.max_wait_s}")

    def wrap(self, env: VecEnv, role: EnvRole, algo_gamma: float | None = None) -> VecEnv:
        """``env`` with the reward models (training envs only) and the policy's view of the observation.

        Evaluation envs get only the key selection: they score the env's own success, and the policy
        must see there what it saw in training.
        """
        self.validate()
        if role == "train":
            if self.classifier:
                env = self._classifier_wrapper(env)
            if self.prm:
                gamma = self.gamma if self.gamma is not None else (algo_gamma if algo_gamma is not None else 0.99)
                env = self._prm_wrapper(env, gamma)
        if self.policy_keys:
            from robot_rl.core.env import SelectObservation

            env = SelectObservation(env, list(self.policy_keys))
        return env

    def _classifier_wrapper(self, env: VecEnv) -> VecEnv:
        from robot_rl.rewards.wrapper import RewardWrapper, remote_reward_wrapper

        kw: dict[str, Any] = {"mode": self.classifier_mode, "success_reward": self.success_reward,
                              "fail_reward": self.fail_reward, "success_bonus": self.success_bonus}
        assert self.classifier is not None
        if self.classifier.startswith(("tcp://", "ipc://")):
            return remote_reward_wrapper(env, self.classifier, max_wait_s=self.max_wait_s, **kw)
        from robot_rl.rewards.classifier import SuccessClassifier

        return RewardWrapper(env, SuccessClassifier.load(_existing(self.classifier, "reward.classifier")), **kw)

    def _prm_wrapper(self, env: VecEnv, gamma: float) -> VecEnv:
        from robot_rl.rewards.wrapper import ProgressShapingWrapper, remote_reward_wrapper

        assert self.prm is not None
        if self.prm.startswith(("tcp://", "ipc://")):
            return remote_reward_wrapper(env, self.prm, goal=self.goal, max_wait_s=self.max_wait_s, gamma=gamma,
                                         weight=self.shaping_weight)
        from robot_rl.rewards.prm import ProcessRewardModel

        model = ProcessRewardModel.load(_existing(self.prm, "reward.prm")).to(env.device)
        if not model.tokenizer.is_known(self.goal):  # fail before training, not at the first step
            from robot_rl.rewards.prm import UnseenInstructionError

            raise UnseenInstructionError(f"reward.goal {self.goal!r} is mostly words the PRM at {self.prm} never saw; "
                                         f"it was trained on {model.meta.get('goals', '(goals not recorded)')}")
        return ProgressShapingWrapper(env, model, self.goal, gamma=gamma, weight=self.shaping_weight,
                                      cameras=model.encoder.keys)


def _existing(path: str, name: str) -> str:
    from pathlib import Path

    if not Path(path).is_dir():
        raise FileNotFoundError(f"{name}={path}: no such model directory (train one with `robot-rl reward "
                                f"train-{'classifier' if 'classifier' in name else 'prm'}`, or give a "
                                "`robot-rl reward serve` address tcp://HOST:PORT)")
    return path
