"""VecEnv wrappers that add learned rewards inside ``step``: one batched forward for all sub-envs.

:class:`RewardWrapper` turns a calibrated success classifier into the (sparse) reward;
:class:`ProgressShapingWrapper` adds potential-based shaping from a process reward model.

The reward of a step is judged on the observation the step produced: ``info["final_obs"]`` (which
equals ``obs`` where nothing ended, and is the true last frame where the env auto-reset). Every term
is returned separately in ``info["reward_terms"]`` and accumulated in :attr:`RewardWrapper.term_sums`
for logging; ``info["classifier_success"]`` holds the classifier's decision.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, Protocol

import torch

from robot_rl.core.config import ConfigError
from robot_rl.core.env import StepResult, VecEnv, VecEnvWrapper
from robot_rl.rewards.classifier import SuccessClassifier
from robot_rl.rewards.composer import shaping


class SuccessModel(Protocol):
    """What :class:`RewardWrapper` needs.

    A local :class:`SuccessClassifier` or a served one (:class:`~robot_rl.rewards.remote_models.RemoteClassifier`).
    """

    @property
    def cameras(self) -> list[str]:
        """The ``image.<cam>`` keys it reads."""

    def predict(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[N]`` bool success decisions."""


def _input_shapes(model: Any) -> dict[str, tuple[int, ...]]:
    if isinstance(model, SuccessClassifier):
        return dict(model.encoder.shapes)
    return dict(model.input_shapes())


class _TermsWrapper(VecEnvWrapper):
    """What both reward wrappers share: per-term reward sums (the rest comes from :class:`VecEnvWrapper`)."""

    def __init__(self, env: VecEnv, terms: tuple[str, ...]) -> None:
        super().__init__(env)
        self.term_sums: dict[str, float] = dict.fromkeys(terms, 0.0)
        self.steps = 0
        self._popped_sums = dict(self.term_sums)
        self._popped_steps = 0

    def _count(self, **terms: torch.Tensor) -> None:
        for name, value in terms.items():
            self.term_sums[name] += float(value.sum())
        self.steps += self.num_envs

    def term_means(self) -> dict[str, float]:
        """Mean of each reward term per transition since construction."""
        return {k: v / max(self.steps, 1) for k, v in self.term_sums.items()}

    def pop_term_means(self) -> dict[str, float]:
        """Mean of each reward term per transition since the last pop (the run log's interval); {} if none."""
        steps = self.steps - self._popped_steps
        if steps <= 0:
            return {}
        out = {k: (v - self._popped_sums[k]) / steps for k, v in self.term_sums.items()}
        self._popped_sums, self._popped_steps = dict(self.term_sums), self.steps
        return out



class RewardWrapper(_TermsWrapper):
    """``env`` with its reward replaced by (or added to) a calibrated success classifier's.

    ``mode="replace"``: reward = ``success_reward`` where the classifier fires, else ``fail_reward``
    (the sparse convention of the MuJoCo tasks: 0 / −1). ``mode="add"``: the env's reward plus
    ``success_bonus`` where it fires. A local classifier runs under ``no_grad`` on the env's device; a
    :class:`~robot_rl.rewards.remote_models.RemoteClassifier` asks a reward server (see :func:`remote_reward_wrapper`).
    """

    def __init__(self, env: VecEnv, classifier: SuccessModel, mode: Literal["replace", "add"] = "replace",
                 success_reward: float = 0.0, fail_reward: float = -1.0, success_bonus: float = 1.0) -> None:
        missing = [k for k in classifier.cameras if k not in env.spec.observation]
        if missing:
            raise ConfigError(f"the classifier reads {missing}, the env observes {sorted(env.spec.observation)}")
        shapes = _input_shapes(classifier)
        for k in classifier.cameras:
            shape = tuple(env.spec.observation[k].shape)
            if shape != tuple(shapes[k]):
                raise ConfigError(f"{k}: the env's frames are {list(shape)}, the classifier was trained on "
                                  f"{list(shapes[k])}")
        if isinstance(classifier, torch.nn.Module):
            classifier = classifier.to(env.device).eval()
        super().__init__(env, ("env", "classifier"))
        self.classifier = classifier
        self.mode, self.success_reward, self.fail_reward, self.success_bonus = mode, success_reward, fail_reward, \
            success_bonus

    def step(self, action: torch.Tensor) -> StepResult:
        """Step the env, then score all sub-envs' new frames in one forward pass."""
        res = self.env.step(action)
        seen = res.info.get("final_obs", res.obs)
        fired = self.classifier.predict({k: seen[k] for k in self.classifier.cameras})
        if self.mode == "replace":
            term = torch.where(fired, self.success_reward, self.fail_reward).float()
            reward = term
        else:
            term = fired.float() * self.success_bonus
            reward = res.reward + term
        info = dict(res.info)
        info["reward_terms"] = {"env": res.reward, "classifier": term}
        info["classifier_success"] = fired
        self._count(env=res.reward, classifier=term)
        return StepResult(res.obs, reward, res.terminated, res.truncated, info)


def pop_reward_terms(envs: Iterable[VecEnv]) -> dict[str, float]:
    """Per-term reward means since the last call, over the reward wrappers inside ``envs`` (for the run log).

    Wrappers are found through ``.env`` chains (a reward wrapper inside ``SelectObservation`` or a
    domain-randomisation wrapper counts); each term is averaged over the envs that have it, weighted by
    their transitions. The runner logs the result under ``reward/<term>``.
    """
    sums: dict[str, float] = {}
    weights: dict[str, float] = {}
    for env in envs:
        node: Any = env
        while node is not None:
            if isinstance(node, _TermsWrapper):
                n = node.steps - node._popped_steps
                for k, v in node.pop_term_means().items():
                    sums[k] = sums.get(k, 0.0) + v * n
                    weights[k] = weights.get(k, 0.0) + n
            node = node.__dict__.get("env")
    return {k: sums[k] / weights[k] for k in sums if weights[k] > 0}


ProgressModel = Callable[[dict[str, torch.Tensor], dict[str, torch.Tensor], list[str]],
                         tuple[torch.Tensor, torch.Tensor]]
"""A PRM: ``(obs_t, obs_k, goals) → (progress delta [N], done probability [N])``."""


class ProgressShapingWrapper(_TermsWrapper):
    """``env`` plus potential-based shaping from a process reward model, one batched forward per step.

    ``Φ(s) = weight · PRM(first frame of the episode, s, goal)`` (``Φ = 0`` at the first frame), and
    the added term is ``F = γ Φ(s') − Φ(s)`` with ``Φ(s') = 0`` where the step terminated
    (:func:`~robot_rl.rewards.composer.shaping`), so the optimal policy of the env's reward is
    unchanged. ``info["reward_terms"]`` holds ``env`` and ``shaping``; ``info["progress"]`` Φ(s').
    A PRM that returns NaN for a row (a served PRM whose reply missed its deadline) leaves that
    sub-env's potential where it was (shaping ≈ 0 for the step).
    """

    def __init__(self, env: VecEnv, prm: ProgressModel, goal: str, gamma: float = 0.99, weight: float = 1.0,
                 cameras: list[str] | None = None) -> None:
        super().__init__(env, ("env", "shaping"))
        self.prm, self.goal, self.gamma, self.weight = prm, goal, gamma, weight
        self.cameras = cameras or sorted(k for k in env.spec.observation if k.startswith("image."))
        if not self.cameras:
            raise ConfigError(f"PRM shaping needs camera observations; the env observes {sorted(env.spec.observation)}")
        self.first: dict[str, torch.Tensor] = {}
        self.phi = torch.zeros(self.num_envs, device=self.device)

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Reset the env; every sub-env's first frame is its potential's reference."""
        obs = self.env.reset(seed)
        self.first = {k: obs[k].clone() for k in self.cameras}
        self.phi.zero_()
        return obs

    def step(self, action: torch.Tensor) -> StepResult:
        """Step, score ``(first, s')`` for all sub-envs at once, add ``F``."""
        res = self.env.step(action)
        seen = res.info.get("final_obs", res.obs)
        delta, _done = self.prm(self.first, {k: seen[k] for k in self.cameras}, [self.goal] * self.num_envs)
        delta = delta.to(self.device).float()
        phi_next = torch.where(torch.isnan(delta), self.phi, self.weight * delta)
        term = shaping(self.phi, phi_next, res.terminated, self.gamma)
        ended = res.terminated | res.truncated
        for k in self.cameras:  # a new episode's first frame is the auto-reset observation
            self.first[k] = torch.where(ended.view(-1, *[1] * (res.obs[k].dim() - 1)), res.obs[k], self.first[k])
        self.phi = torch.where(ended, torch.zeros_like(phi_next), phi_next)
        info = dict(res.info)
        info["reward_terms"] = {"env": res.reward, "shaping": term}
        info["progress"] = phi_next
        self._count(env=res.reward, shaping=term)
        return StepResult(res.obs, res.reward + term, res.terminated, res.truncated, info)


def remote_reward_wrapper(env: VecEnv, address: str, goal: str = "", max_wait_s: float = 0.05,
                          connect_timeout_s: float = 5.0, server_public_key: str | None = None,
                          client_secret_key: str | None = None, **kwargs: Any) -> VecEnv:
    """``env`` with its reward from a reward server at ``address`` (``robot-rl reward serve``).

    Asks the server what it serves (deadline ``connect_timeout_s``; ``Unavailable`` if nobody
    answers): a success classifier gives a :class:`RewardWrapper`, a PRM a
    :class:`ProgressShapingWrapper` (``goal`` required). ``kwargs`` go to that wrapper. Each step
    waits at most ``max_wait_s`` for its reply (see :mod:`robot_rl.rewards.service`).
    """
    from robot_rl.rewards.remote_models import RemoteClassifier, RemotePRM
    from robot_rl.rewards.service import RewardClient

    client = RewardClient(address, timeout_s=connect_timeout_s, server_public_key=server_public_key,
                          client_secret_key=client_secret_key)
    try:
        kind = client.describe(connect_timeout_s)["kind"]
        if kind == "success_classifier":
            return RewardWrapper(env, RemoteClassifier(client, max_wait_s), **kwargs)
        if not goal:
            raise ConfigError("a served PRM needs the task's language goal: remote_reward_wrapper(..., goal=...)")
        prm = RemotePRM(client, max_wait_s)
        return ProgressShapingWrapper(env, prm, goal, cameras=prm.cameras, **kwargs)
    except BaseException:
        client.close()
        raise
