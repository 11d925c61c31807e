"""The batched environment contract every backend implements.

Backends: built-in torch tasks, MuJoCo, ManiSkill3, Isaac Gym, gymnasium adapters, and real robots
with ``num_envs == 1``.

Tensors
-------
All tensors live on ``env.device`` and carry a leading batch dimension ``N = env.num_envs``:

- observation: ``dict[str, Tensor]``, each ``[N, *spec.observation[key].shape]``;
- action: ``[N, *spec.action.shape]`` float32, expected inside ``[spec.action.low, spec.action.high]``
  (backends clamp; a non-finite action raises :class:`NonFiniteActionError`);
- reward: ``[N]`` float32; terminated, truncated: ``[N]`` bool.

Auto-reset (written down once; every backend follows it)
-------------------------------------------------------
``step`` resets every sub-env whose episode ended *in the same call* ("same-step" auto-reset, as
in Isaac Gym / ManiSkill3 / gymnasium's ``SAME_STEP`` mode):

- ``terminated[i]``: the MDP reached a terminal state (success or failure); do not bootstrap.
- ``truncated[i]``: a time limit or similar cut; bootstrap from ``info["final_obs"]``.
- For each ``i`` with ``terminated[i] or truncated[i]``, the returned ``obs`` row ``i`` is already the
  *first observation of the next episode*, and ``info["final_obs"][key][i]`` is the last observation
  of the finished episode. Rows where nothing ended hold copies of ``obs`` in ``final_obs``.
- ``info["success"]``: ``[N]`` bool, whether the task's success criterion holds at this step. An
  episode counts as a success if ``info["success"]`` is True at its last step (``terminated`` or
  ``truncated``). Tasks that stop on success terminate with ``success`` True.
- ``info["episode_return"]``, ``info["episode_length"]``: ``[N]`` totals of the episode that ended,
  valid where done (0 elsewhere).

``reset`` resets all sub-envs and returns the first observation; calling it is only needed once.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch

from robot_rl.core.specs import EnvSpec


class NonFiniteActionError(ValueError):
    """An action contained NaN or inf; it was not applied."""


class StepResult(NamedTuple):
    """What :meth:`VecEnv.step` returns (see the module docstring for semantics)."""

    obs: dict[str, torch.Tensor]
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    info: dict[str, Any]


class VecEnv(abc.ABC):
    """A batch of ``num_envs`` environments stepped together on ``device``."""

    spec: EnvSpec
    num_envs: int
    device: torch.device
    max_episode_steps: int

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Reset all sub-envs; return the first observation ``{key: [N, ...]}``."""

    @abc.abstractmethod
    def step(self, action: torch.Tensor) -> StepResult:
        """Apply ``action`` ``[N, *action_shape]``; auto-reset finished sub-envs (module docstring)."""

    def render(self) -> torch.Tensor | None:
        """Optional RGB frame of sub-env 0, uint8 ``[H, W, 3]``, for videos; ``None`` if unsupported."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, most torch tasks hold nothing
        """Release simulator resources."""


def check_action(action: torch.Tensor, spec: EnvSpec, num_envs: int) -> torch.Tensor:
    """Validate an incoming batched action, reject NaN/inf, and clamp it into the action bounds.

    Clamping alone would let NaN through (``clamp(nan) == nan``), so finiteness is checked first.
    """
    expected = (num_envs, *spec.action.shape)
    if tuple(action.shape) != expected:
        raise ValueError(f"action shape {list(action.shape)} does not match [num_envs, *action] = {list(expected)}")
    if not bool(torch.isfinite(action).all()):
        bad = (~torch.isfinite(action)).reshape(num_envs, -1).any(dim=1).nonzero().flatten().tolist()
        raise NonFiniteActionError(f"non-finite action for sub-envs {bad[:10]}; nothing was applied")
    low, high = spec.action.low, spec.action.high
    if low is not None or high is not None:
        action = action.clamp(min=low, max=high)
    return action


@runtime_checkable
class Observable(Protocol):
    """An env that can say its current observation outside ``step``/``reset``.

    For after its state was written: domain randomisation's new parameters, return-and-explore's demo states.
    """

    def observe(self) -> dict[str, torch.Tensor]:
        """The current observation of every sub-env, ``{key: [N, ...]}``, as ``step`` would return it."""
        ...


@runtime_checkable
class CountsEpisodes(Protocol):
    """An env that keeps each sub-env's running episode totals, ``[N]`` tensors it zeroes where an episode starts."""

    episode_return: torch.Tensor
    episode_length: torch.Tensor


@runtime_checkable
class LanguageTask(Protocol):
    """An env whose instructions come from a fixed table (the built-in language tasks)."""

    @property
    def instructions(self) -> Sequence[str]:
        """The instruction texts."""
        ...

    @property
    def instruction_tokens(self) -> torch.Tensor:
        """``[len(instructions), T]`` int64: each text's tokens, as the observation carries them."""
        ...


def wrapped_envs(env: VecEnv) -> Iterator[VecEnv]:
    """``env``, then each env it wraps (:class:`VecEnvWrapper`), the innermost last.

    Look a capability up here rather than through ``VecEnvWrapper.__getattr__``'s forwarding: from Python 3.12 an
    ``isinstance`` check on a runtime-checkable protocol does not see forwarded attributes.
    """
    while isinstance(env, VecEnvWrapper):
        yield env
        env = env.env
    yield env


def observable(env: VecEnv) -> Observable | None:
    """``env`` where its :meth:`Observable.observe` works, else None.

    It works when the innermost env has one: wrappers pass it through, each changing it as it changes ``step``'s.
    """
    *_, inner = wrapped_envs(env)
    return env if isinstance(inner, Observable) and isinstance(env, Observable) else None


class VecEnvWrapper(VecEnv):
    """Base of wrappers: the wrapped env's spec and size, ``reset``/``step``/``render``/``close`` passed on.

    Attributes the wrapper does not define (a backend's domain-randomisation or state API, a task's
    tensors) are looked up on the wrapped env, so stacking wrappers hides nothing.
    """

    def __init__(self, env: VecEnv) -> None:
        self.env = env
        self.spec, self.num_envs, self.device = env.spec, env.num_envs, env.device
        self.max_episode_steps = env.max_episode_steps

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Reset the wrapped env."""
        return self.env.reset(seed)

    def step(self, action: torch.Tensor) -> StepResult:
        """Step the wrapped env."""
        return self.env.step(action)

    def render(self) -> torch.Tensor | None:
        """The wrapped env's frame."""
        return self.env.render()

    def close(self) -> None:
        """Close the wrapped env."""
        self.env.close()

    def observe(self) -> dict[str, torch.Tensor]:
        """The wrapped env's current observation as this wrapper shows it (through :meth:`observation`).

        Defined here, not forwarded by ``__getattr__``: a forwarded call would skip every wrapper's change to
        the observation. Raises ``TypeError`` when the innermost env is not :class:`Observable` (:func:`observable`).
        """
        if not isinstance(self.env, Observable):
            raise TypeError(f"{type(self.env).__name__} cannot observe outside step/reset (no observe())")
        return self.observation(self.env.observe())

    def observation(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The wrapped env's observation ``obs`` as this wrapper shows it (the identity unless overridden)."""
        return obs

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not yet set (during unpickling or a failed __init__): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)


class SelectObservation(VecEnvWrapper):
    """``env`` showing only the observation keys ``keep`` (in ``obs`` and ``info["final_obs"]``).

    For asymmetric setups: a reward model reads a camera that the policy should not see (wrap the
    reward model's wrapper in this one), or a policy trained on state beside an env that renders.
    Every other part of the step (reward, termination, the rest of ``info``) passes through unchanged.
    """

    def __init__(self, env: VecEnv, keep: list[str] | tuple[str, ...]) -> None:
        spec = env.spec.select(keep)
        super().__init__(env)
        self.keep = tuple(keep)
        self.spec = spec

    def observation(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The kept keys of ``obs``."""
        return {k: obs[k] for k in self.keep}

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Reset the wrapped env; the kept keys of its first observation."""
        return self.observation(self.env.reset(seed))

    def step(self, action: torch.Tensor) -> StepResult:
        """Step the wrapped env; drop the other keys from ``obs`` and ``final_obs``."""
        res = self.env.step(action)
        info = dict(res.info)
        if "final_obs" in info:
            info["final_obs"] = self.observation(info["final_obs"])
        return StepResult(self.observation(res.obs), res.reward, res.terminated, res.truncated, info)
