"""DSRL (Wagenmaker et al. 2025, arXiv:2506.15799): RL in the latent-noise space of a frozen flow policy.

The flow policy's sampler is a deterministic map from its initial noise ``x0`` to an action chunk
(the ODE from ``t = 0`` to 1, no noise injected). DSRL leaves the flow policy frozen and learns a
policy over ``x0`` instead: every chunk it executes is one the SFT policy can produce, and the RL
learner sees an ordinary bounded continuous action space.

Here that is a task wrapper, so the unchanged SAC learner (and with it the async actor/learner loop,
ZeroMQ actors and interventions) does the RL: :class:`LatentNoiseEnv` exposes

- observation ``state``: the frozen flow policy's observation features (cameras + language + state),
  ``[C]`` float32; the noise policy conditions on what the base policy sees;
- action: the noise ``x0`` ``[H, A]`` in ``[−noise_bound, noise_bound]``;

and steps the wrapped chunk env with ``chunk = clamp(flow.sample(obs, x0))``::

    robot-rl train --task dsrl --algo sac task.init_from=runs/flow-sft

The task settings of the base env come from the SFT checkpoint (its ``task`` metadata), with the action
switched to chunks of the policy's horizon.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from robot_rl.config_io import from_dict
from robot_rl.core.config import TASKS, ChunkedTaskConfig, ConfigError, TaskConfig
from robot_rl.core.env import StepResult, VecEnv
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.policies.flow.lerobot_base import lerobot_policy_type
from robot_rl.policies.flow.model import FlowVLAPolicy


@TASKS.register("dsrl")
@dataclass
class DSRLConfig(TaskConfig):
    """SAC-ready view of a flow SFT policy's task: actions are the flow's initial noise (DSRL)."""

    #: SAC's defaults (α₀ = 1, target entropy −|A|) spread the noise towards uniform on the whole box, out
    #: of the N(0, I) the flow was trained on, and success collapsed (0.49 → 0.14, benchmarks/RESULTS_flow.md);
    #: a small α₀, a lower entropy target (−2 per dim for the default H = 8, A = 2) and a tighter bound lift it.
    presets: ClassVar[dict[str, dict[str, Any]]] = {"sac": {
        "task.num_envs": 16, "task.noise_bound": 1.5, "algo.init_temperature": 0.01, "algo.target_entropy": -32.0,
        "algo.gamma": 0.95, "algo.learning_starts": 2000}}

    init_from: str | None = None
    """The frozen flow policy: a run directory of `robot-rl flow-sft --out DIR`, or a LeRobot pi0 / pi0.5 /
    SmolVLA checkpoint directory (lerobot's `save_pretrained`; then set `base_task`). Required."""
    noise_bound: float = 2.0
    """Noise actions lie in [−noise_bound, noise_bound] (the flow was trained on N(0, I) noise)."""
    base_task: str | None = None
    """With a LeRobot checkpoint: the task id it acts in (its `chunk_horizon` is set to the checkpoint's
    chunk size); our own SFT checkpoints record their task instead."""
    instruction: str | None = None
    """With a LeRobot checkpoint and an env without an instruction table: the language instruction."""

    def make(self, device: torch.device | str, seed: int, num_envs: int | None = None) -> LatentNoiseEnv:
        """Load the frozen flow policy and build its task with chunk actions, wrapped."""
        from robot_rl.policies.flow.sft import load_checkpoint_meta, load_flow_policy

        if not self.init_from:
            raise ConfigError("the dsrl task needs task.init_from=<flow SFT run directory>")
        if lerobot_policy_type(self.init_from) is not None:
            return self._make_lerobot(device, seed, num_envs or self.num_envs)
        policy, _ = load_flow_policy(self.init_from, device)
        meta = load_checkpoint_meta(self.init_from)
        if "task" not in meta:
            raise ConfigError(f"{self.init_from}: the checkpoint does not record its task; re-run flow-sft")
        task_dict = dict(meta["task"])
        task_dict["num_envs"] = num_envs or self.num_envs
        base = from_dict(TaskConfig, task_dict, where=f"{self.init_from} task")
        if isinstance(base, ChunkedTaskConfig):
            base.chunk_horizon = policy.cfg.horizon
        env = base.make(device, seed, num_envs or self.num_envs)
        return LatentNoiseEnv(env, policy, self.noise_bound)


    def _make_lerobot(self, device: torch.device | str, seed: int, num_envs: int) -> LatentNoiseEnv:
        from robot_rl.core.config import resolve_task_id
        from robot_rl.policies.flow.lerobot_base import load_lerobot_flow_policy

        assert self.init_from is not None
        if not self.base_task:
            raise ConfigError(f"{self.init_from} is a LeRobot checkpoint: set task.base_task=<task id> "
                              "(the env it acts in)")
        cls, implied = resolve_task_id(self.base_task)
        base = from_dict(cls, {**implied, "num_envs": num_envs}, where=f"task.base_task={self.base_task}")
        chunk = json.loads((Path(self.init_from) / "config.json").read_text()).get("chunk_size")
        if isinstance(base, ChunkedTaskConfig) and isinstance(chunk, int):
            base.chunk_horizon = chunk
        env = base.make(device, seed, num_envs)
        policy = load_lerobot_flow_policy(self.init_from, env, self.instruction, device)
        return LatentNoiseEnv(env, policy, self.noise_bound)  # type: ignore[arg-type]


class LatentNoiseEnv(VecEnv):
    """Wraps a chunk env: actions are flow noise ``x0``, observations the frozen policy's features."""

    def __init__(self, env: VecEnv, policy: FlowVLAPolicy, noise_bound: float = 2.0) -> None:
        if len(env.spec.action.shape) != 2 or env.spec.action.shape[0] != policy.cfg.horizon:
            raise ConfigError(f"DSRL needs a chunk env with horizon {policy.cfg.horizon}, got action "
                              f"{list(env.spec.action.shape)}")
        if noise_bound <= 0:
            raise ValueError(f"noise_bound must be > 0, got {noise_bound}")
        self.env, self.policy = env, policy.eval().requires_grad_(False)
        self.num_envs, self.device, self.max_episode_steps = env.num_envs, env.device, env.max_episode_steps
        self.spec = EnvSpec({"state": ArraySpec((policy.encoder.out_dim,), "float32")},
                            ArraySpec(tuple(env.spec.action.shape), "float32", low=-noise_bound, high=noise_bound),
                            {**env.spec.extras, "dsrl": True})
        self._obs: dict[str, torch.Tensor] | None = None

    @torch.no_grad()
    def features(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The wrapper's observation: ``{"state": frozen encoder features [N, C]}``."""
        return {"state": self.policy.encoder(obs).float()}

    @torch.no_grad()
    def noise_to_action(self, obs: dict[str, torch.Tensor], noise: torch.Tensor) -> torch.Tensor:
        """The deterministic map: chunk ``[N, H, A]`` = clamp(ODE(x0 = noise)) under the frozen policy."""
        return self.policy._bound(self.policy.sample(obs, x0=noise.to(self.device).float()))

    def reset(self, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Reset the wrapped env."""
        self._obs = self.env.reset(seed=seed)
        return self.features(self._obs)

    def step(self, action: torch.Tensor) -> StepResult:
        """Map the noise to a chunk, step the wrapped env, return features (final_obs mapped too)."""
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        noise = action.to(self.device)
        if tuple(noise.shape) != (self.num_envs, *self.spec.action.shape) or not bool(torch.isfinite(noise).all()):
            raise ValueError(f"noise must be finite [{self.num_envs}, {', '.join(map(str, self.spec.action.shape))}],"
                             f" got {list(noise.shape)}")
        bound = float(self.spec.action.high or 1.0)
        r = self.env.step(self.noise_to_action(self._obs, noise.clamp(-bound, bound)))
        self._obs = r.obs
        info = dict(r.info)
        info["final_obs"] = self.features(r.info["final_obs"])
        return StepResult(self.features(r.obs), r.reward, r.terminated, r.truncated, info)

    def render(self) -> torch.Tensor | None:
        """The wrapped env's frame."""
        return self.env.render()
