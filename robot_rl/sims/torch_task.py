"""Base class for the built-in pure-torch tasks: the auto-reset contract, written once.

A subclass holds its state as ``[N, ...]`` tensors on ``device`` and fills in five hooks:

- :meth:`TorchTask._reset_envs` re-samples the state of the sub-envs selected by a bool mask;
- :meth:`TorchTask._apply_action` advances the state by one step with a validated, clamped action;
- :meth:`TorchTask._reward_and_status` gives ``(reward, terminated, success)`` after that step;
- :meth:`TorchTask._observe` builds a fresh observation dict from the state;
- :meth:`TorchTask._scene` describes sub-envs as discs and capsules for :meth:`render`.

Resets are masked rather than indexed: every step draws fresh start states for all sub-envs and
keeps them only where an episode ended. That costs a little sampling but never reads the done
mask back to the host, so a CUDA step runs without a synchronisation, and the random stream does
not depend on which episodes ended, which keeps runs reproducible.
"""

from __future__ import annotations

import abc

import torch

from robot_rl.core.env import StepResult, VecEnv, check_action
from robot_rl.core.specs import EnvSpec
from robot_rl.sims.render2d import Shape, rasterize


class TorchTask(VecEnv):
    """A batch of ``num_envs`` planar tasks stepped together in torch on ``device``.

    All randomness comes from one ``torch.Generator`` on the device, seeded by ``seed`` and reseeded
    by ``reset(seed=...)``, so the same seed gives the same episodes on the same device.
    """

    #: Half-width (m) of the square that :meth:`render` shows, and its centre.
    render_extent: float = 1.0
    render_center: tuple[float, float] = (0.0, 0.0)
    #: Side (px) of the frames :meth:`render` returns.
    render_size: int = 256

    def __init__(
        self, spec: EnvSpec, num_envs: int, max_episode_steps: int, device: torch.device | str, seed: int
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        self.spec = spec
        self.num_envs = int(num_envs)
        self.max_episode_steps = int(max_episode_steps)
        self.device = torch.device(device)
        self.seed = int(seed)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(self.seed)
        self.episode_return = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)
        self.episode_length = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._all = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)

    def _finish_init(self) -> None:
        """Give the state valid values, then rewind the generator (subclasses call this last).

        After it, the caller's first ``reset()`` gives the same episodes as ``reset(seed=seed)``.
        """
        self.reset()
        self.generator.manual_seed(self.seed)

    # ----------------------------------------------------------------------------------------
    # Hooks
    # ----------------------------------------------------------------------------------------

    @abc.abstractmethod
    def _reset_envs(self, mask: torch.Tensor) -> None:
        """Re-sample the start state of sub-envs where ``mask`` ``[N]`` is True; keep the others.

        Draw the random numbers for all ``N`` rows (then ``torch.where``), so that the random
        stream does not depend on ``mask``.
        """

    @abc.abstractmethod
    def _apply_action(self, action: torch.Tensor) -> None:
        """Advance every sub-env by one step with ``action`` ``[N, A]`` (finite, within bounds)."""

    @abc.abstractmethod
    def _reward_and_status(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(reward [N] float32, terminated [N] bool, success [N] bool)`` for the step just applied."""

    @abc.abstractmethod
    def _observe(self) -> dict[str, torch.Tensor]:
        """A new observation dict ``{key: [N, ...]}`` (never aliasing the internal state)."""

    def _scene(self, rows: slice) -> list[Shape]:
        """The shapes of sub-envs ``rows`` (each shape batched over those rows), for drawing."""
        raise NotImplementedError(f"{type(self).__name__} has no scene to draw")

    # ----------------------------------------------------------------------------------------
    # VecEnv
    # ----------------------------------------------------------------------------------------

    def rand(self, *shape: int) -> torch.Tensor:
        """Uniform ``[0, 1)`` float32 samples from this env's generator."""
        return torch.rand(*shape, generator=self.generator, device=self.device)

    def uniform(self, low: float, high: float, *shape: int) -> torch.Tensor:
        """Uniform ``[low, high)`` float32 samples from this env's generator."""
        return low + (high - low) * self.rand(*shape)

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Reset all sub-envs (reseeding the generator if ``seed`` is given); return the first obs."""
        if seed is not None:
            self.generator.manual_seed(int(seed))
        self._reset_envs(self._all)
        self.episode_return.zero_()
        self.episode_length.zero_()
        return self._observe()

    def step(self, action: torch.Tensor) -> StepResult:
        """Apply ``action`` ``[N, A]``; same-step auto-reset of finished sub-envs (see robot_rl.core.env).

        ``terminated`` and ``truncated`` are exclusive: an episode that succeeds on its last allowed
        step counts as terminated (no bootstrap), not truncated.
        """
        # Validation happens before any state changes, so a rejected action leaves the env as it was.
        action = check_action(action.to(self.device), self.spec, self.num_envs)
        self._apply_action(action)
        reward, terminated, success = self._reward_and_status()
        self.episode_length += 1
        return self._finish_step(reward, terminated, success)

    def _finish_step(self, reward: torch.Tensor, terminated: torch.Tensor, success: torch.Tensor) -> StepResult:
        """Episode bookkeeping and same-step auto-reset, once ``episode_length`` counts this step."""
        self.episode_return += reward
        truncated = (self.episode_length >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        final_obs = self._observe()
        ep_return = torch.where(done, self.episode_return, torch.zeros_like(self.episode_return))
        ep_length = torch.where(done, self.episode_length, torch.zeros_like(self.episode_length))
        self._reset_envs(done)
        self.episode_return = torch.where(done, torch.zeros_like(self.episode_return), self.episode_return)
        self.episode_length = torch.where(done, torch.zeros_like(self.episode_length), self.episode_length)
        info = {"final_obs": final_obs, "success": success, "episode_return": ep_return, "episode_length": ep_length}
        return StepResult(self._observe(), reward, terminated, truncated, info)

    def render(self) -> torch.Tensor:
        """RGB frame of sub-env 0, uint8 ``[render_size, render_size, 3]``, on the env's device."""
        return self.render_rows(slice(0, 1), self.render_size)[0]

    def render_rows(self, rows: slice, size: int) -> torch.Tensor:
        """Frames of sub-envs ``rows``, uint8 ``[n, size, size, 3]`` (batched, on the env's device)."""
        return rasterize(self._scene(rows), size, self.render_extent, center=self.render_center)
