"""A LeRobot flow-matching VLA (pi0, pi0.5, SmolVLA) as the frozen base policy of DSRL.

LeRobot's flow VLAs sample an action chunk by integrating a velocity field from Gaussian noise, and
their ``predict_action_chunk(batch, noise=...)`` takes that noise: with the noise given, the chunk is
a deterministic function of (observation, noise), which is all DSRL needs
(:class:`~robot_rl.policies.flow.dsrl.LatentNoiseEnv`). :class:`LeRobotFlowPolicy` presents such a
policy with the interface DSRL uses on our own :class:`~robot_rl.policies.flow.model.FlowVLAPolicy`:

- ``cfg.horizon``: the chunk length (lerobot's ``chunk_size``);
- ``encoder(obs) → [N, C]``: what the noise policy sees: the normalised state and, per camera, the
  base model's own vision-tower embedding, mean-pooled over patches;
- ``sample(obs, x0)``: the chunk for noise ``x0 [N, H, A]`` (``A``: the env's action size). lerobot
  pads actions to ``max_action_dim``; the noise of the padded dimensions is one fixed draw (seeded),
  so the map stays deterministic and DSRL's action space is the env's own chunk shape;
- ``_bound``: clamps a chunk to the env's action bounds.

Observations map by name: ``image.<cam>`` (uint8 HWC) → ``observation.images.<cam>`` (float CHW in
[0, 1]); ``state`` → ``observation.state``; the instruction text comes from the env's
``instructions`` / ``instruction_tokens`` table (built-in language tasks), or a fixed ``instruction``.
LeRobot's own pre/post-processors saved with the checkpoint do tokenisation and (un)normalisation.

Needs lerobot with SmolVLA's packages (``bash scripts/install-lerobot.sh VENV``; pi0 needs lerobot's pi extra);
weights load from a local directory written by lerobot's ``save_pretrained`` (nothing is downloaded
unless the checkpoint's config names a hub model that is not in the local cache).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robot_rl.core.config import ConfigError
from robot_rl.core.env import LanguageTask, wrapped_envs
from robot_rl.core.errors import UserError
from robot_rl.core.specs import EnvSpec
from robot_rl.policies.flow.model import clamp_to_bounds

#: lerobot policy types this adapter drives: how to get their images ready and embed them.
LEROBOT_FLOW_TYPES = ("smolvla", "pi0", "pi05")


def lerobot_policy_type(path: Path | str) -> str | None:
    """The lerobot policy type of checkpoint directory ``path`` (``config.json``'s ``type``), else None."""
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return None
    try:
        kind = json.loads(cfg.read_text()).get("type")
    except (OSError, json.JSONDecodeError):
        return None
    return kind if isinstance(kind, str) else None


class ObservationMismatchError(ValueError, UserError):
    """The env's observations/actions cannot feed the LeRobot checkpoint; the message lists every difference."""


@dataclass
class _Mapping:
    cameras: list[str]
    state_dim: int
    action_dim: int


def check_alignment(spec: EnvSpec, input_features: dict[str, Any], action_dim: int, horizon: int,
                    env_horizon: int) -> _Mapping:
    """Match the env's spec to the checkpoint's features; raise listing every difference at once."""
    problems: list[str] = []
    cameras: list[str] = []
    state_dim = 0
    for name, feat in input_features.items():
        shape = tuple(feat.shape)
        if name.startswith("observation.images."):
            cam = name.removeprefix("observation.images.")
            ours = spec.observation.get(f"image.{cam}")
            if ours is None:
                problems.append(f"checkpoint camera {cam!r} ({name}) has no env observation 'image.{cam}'")
            elif len(ours.shape) != 3 or ours.shape[-1] != 3:
                problems.append(f"image.{cam}: env shape {list(ours.shape)} is not [H, W, 3]")
            cameras.append(cam)
        elif name == "observation.state":
            ours = spec.observation.get("state")
            if ours is None:
                problems.append("checkpoint needs observation.state; the env has no 'state'")
            elif tuple(ours.shape) != shape:
                problems.append(f"state: env {list(ours.shape)} vs checkpoint {list(shape)}")
            state_dim = shape[0] if shape else 0
        else:
            problems.append(f"checkpoint input {name!r} has no counterpart in the env (env keys: "
                            f"{sorted(spec.observation)})")
    act = spec.action.shape
    if len(act) != 2:
        problems.append(f"the env's action must be a chunk [H, A]; got {list(act)} (set task.chunk_horizon)")
    else:
        if act[-1] != action_dim:
            problems.append(f"action size: env {act[-1]} vs checkpoint {action_dim}")
        if env_horizon > horizon:
            problems.append(f"chunk horizon: env {env_horizon} > checkpoint chunk_size {horizon}")
    if problems:
        raise ObservationMismatchError("the env does not match the LeRobot checkpoint:\n  - " + "\n  - ".join(problems))
    return _Mapping(cameras, state_dim, action_dim)


class _Features(nn.Module):
    """``obs → [N, C]``: normalised state and each camera's pooled vision-tower embedding."""

    def __init__(self, owner: LeRobotFlowPolicy) -> None:
        super().__init__()
        self._owner = [owner]  # a list: not registered as a submodule (no cycle in .modules())
        self.out_dim = 0

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._owner[0].features(obs)


class LeRobotFlowPolicy(nn.Module):
    """A loaded LeRobot flow VLA behind the interface DSRL uses (see the module docstring)."""

    def __init__(self, policy: Any, preprocess: Any, postprocess: Any, spec: EnvSpec, kind: str,
                 instruction: str | None = None, instruction_table: dict[tuple[int, ...], str] | None = None,
                 noise_seed: int = 0) -> None:
        super().__init__()
        if kind not in LEROBOT_FLOW_TYPES:
            raise ConfigError(f"lerobot policy type {kind!r} is not a flow VLA this adapter drives "
                              f"({', '.join(LEROBOT_FLOW_TYPES)})")
        self.policy, self.preprocess, self.postprocess, self.kind = policy, preprocess, postprocess, kind
        self.spec = spec
        lcfg = policy.config
        action_dim = int(lcfg.output_features["action"].shape[0])
        env_horizon = int(spec.action.shape[0]) if len(spec.action.shape) == 2 else 0
        self.mapping = check_alignment(spec, dict(lcfg.input_features), action_dim, int(lcfg.chunk_size), env_horizon)
        self.env_horizon = env_horizon
        self.cfg = _HorizonView(env_horizon)
        self.instruction = instruction
        self.instruction_table = instruction_table or {}
        if not self.instruction_table and instruction is None:
            raise ConfigError("the LeRobot base policy needs an instruction: pass instruction='...' "
                              "(task.instruction) or use an env with an instruction table")
        gen = torch.Generator().manual_seed(noise_seed)
        self.pad_noise: torch.Tensor
        self.register_buffer("pad_noise", torch.randn(int(lcfg.chunk_size), int(lcfg.max_action_dim), generator=gen))
        low, high = spec.action.low, spec.action.high
        self.low = float(low) if low is not None else None
        self.high = float(high) if high is not None else None
        self.encoder = _Features(self)
        dummy = {k: torch.zeros(1, *s.shape, dtype=s.torch_dtype) for k, s in spec.observation.items()}
        if "language" in dummy and self.instruction_table:
            dummy["language"][0] = torch.tensor(next(iter(self.instruction_table)))
        self.encoder.out_dim = int(self.features(dummy).shape[-1])

    # ---- observations -----------------------------------------------------------------------

    def _texts(self, obs: dict[str, torch.Tensor]) -> list[str]:
        n = next(iter(obs.values())).shape[0]
        if "language" in obs and self.instruction_table:
            texts = []
            for row in obs["language"].tolist():
                text = self.instruction_table.get(tuple(row))
                if text is None:
                    raise ValueError(f"language tokens {row} are not one of the env's {len(self.instruction_table)} "
                                     "instructions")
                texts.append(text)
            return texts
        assert self.instruction is not None
        return [self.instruction] * n

    def _batch(self, obs: dict[str, torch.Tensor]) -> dict[str, Any]:
        batch: dict[str, Any] = {"task": self._texts(obs)}
        for cam in self.mapping.cameras:
            img = obs[f"image.{cam}"]
            batch[f"observation.images.{cam}"] = img.permute(0, 3, 1, 2).float().div(255.0)
        if self.mapping.state_dim:
            batch["observation.state"] = obs["state"].float()
        return self.preprocess(batch)  # type: ignore[no-any-return]

    @torch.no_grad()
    def features(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[N, C]``: the normalised state, then each camera's mean-pooled vision embedding."""
        batch = self._batch(obs)
        if self.kind == "smolvla":
            images, _ = self.policy.prepare_images(batch)
            embed = self.policy.model.vlm_with_expert.embed_image
        else:
            images, _ = self.policy._preprocess_images(batch)
            embed = self.policy.model.paligemma_with_expert.embed_image
        parts = [batch["observation.state"].float()] if self.mapping.state_dim else []
        parts += [embed(img).float().mean(dim=1) for img in images[:len(self.mapping.cameras)]]
        return torch.cat(parts, dim=-1)

    # ---- sampling ---------------------------------------------------------------------------

    @torch.no_grad()
    def sample(self, obs: dict[str, torch.Tensor], x0: torch.Tensor | None = None,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """Chunk ``[N, H, A]`` in env units for noise ``x0 [N, H, A]`` (fresh N(0, I) noise when None)."""
        batch = self._batch(obs)
        n = len(batch["task"])
        h, a = self.env_horizon, self.mapping.action_dim
        if x0 is None:
            x0 = torch.randn(n, h, a, generator=generator)
        if tuple(x0.shape) != (n, h, a):
            raise ValueError(f"noise must be [{n}, {h}, {a}], got {list(x0.shape)}")
        noise = self.pad_noise.to(x0.device).expand(n, -1, -1).clone()
        noise[:, :h, :a] = x0
        chunk = self.policy.predict_action_chunk(batch, noise=noise)
        chunk = self.postprocess(chunk)
        return chunk[:, :h, :a].float()  # type: ignore[no-any-return]

    def _bound(self, chunk: torch.Tensor) -> torch.Tensor:
        return clamp_to_bounds(chunk, self.low, self.high)


@dataclass
class _HorizonView:
    horizon: int


def load_lerobot_flow_policy(path: Path | str, env: Any, instruction: str | None = None,
                             device: torch.device | str = "cpu", noise_seed: int = 0) -> LeRobotFlowPolicy:
    """Load the LeRobot flow VLA saved in directory ``path`` for ``env`` (a VecEnv with chunk actions).

    ``instruction`` is the task text when the env has no instruction table; an env with
    ``instructions`` and ``instruction_tokens`` (the built-in language tasks) maps each sub-env's
    language tokens to its text.
    """
    return load_lerobot_flow_policy_for_spec(path, env.spec, env_instruction_table(env), instruction, device,
                                             noise_seed)


def env_instruction_table(env: Any) -> dict[tuple[int, ...], str]:
    """Language tokens → instruction text of an env that lists them (the built-in language tasks).

    Reads a :class:`~robot_rl.core.env.LanguageTask`'s table; empty for any other env.
    """
    task = next((e for e in wrapped_envs(env) if isinstance(e, LanguageTask)), None)
    if task is None:
        return {}
    return {tuple(t): s for t, s in zip(task.instruction_tokens.tolist(), task.instructions, strict=True)}


def load_lerobot_flow_policy_for_spec(path: Path | str, spec: EnvSpec, instruction_table: dict[tuple[int, ...], str],
                                      instruction: str | None = None, device: torch.device | str = "cpu",
                                      noise_seed: int = 0) -> LeRobotFlowPolicy:
    """As :func:`load_lerobot_flow_policy`, from the env's spec and instruction table (a learner has no env)."""
    kind = lerobot_policy_type(path)
    if kind is None:
        raise FileNotFoundError(f"{path}: no lerobot config.json (expected a directory from lerobot's save_pretrained)")
    if kind not in LEROBOT_FLOW_TYPES:
        raise ConfigError(f"{path}: lerobot policy type {kind!r} is not a flow VLA ({', '.join(LEROBOT_FLOW_TYPES)})")
    try:
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    except ImportError:
        raise ImportError("a LeRobot base policy needs lerobot: bash scripts/install-lerobot.sh VENV "
                          "(see docs/flow-vla-lerobot.md)") from None
    policy = get_policy_class(kind).from_pretrained(str(path))
    policy.to(device).eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(path),
                                         preprocessor_overrides={"device_processor": {"device": str(device)}})
    return LeRobotFlowPolicy(policy, pre, post, spec, kind, instruction, instruction_table, noise_seed).to(device)
