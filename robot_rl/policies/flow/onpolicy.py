"""What the on-policy flow learners (``flow_ppo``, ``hiors``) share on the actor side.

Both train one :class:`~robot_rl.policies.flow.model.FlowVLAPolicy` on rollouts of chunk steps, start it
from an SFT checkpoint (:func:`load_sft_into`), hand actors the whole policy (:func:`build_flow_policy` builds
an actor's alone) and learn from demonstrations by flow matching (co-training, SFT); only their updates differ.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from robot_rl.core.algorithm import OnPolicyAlgorithm, Weights
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.core.transition import Obs
from robot_rl.policies.flow.model import FlowVLAConfig, FlowVLAPolicy
from robot_rl.replay.rollout import RolloutStorage


class FlowOnPolicyAlgorithm(OnPolicyAlgorithm):
    """Actor copies, rollout storage and actor weights of an on-policy flow learner.

    Subclasses set ``cfg`` (with ``policy`` and ``rollout_length``), ``spec``, ``device``, ``seed`` and
    ``policy``, and ``_policies_made = 0``.
    """

    cfg: Any
    spec: EnvSpec
    device: torch.device
    seed: int
    policy: FlowVLAPolicy
    reference: FlowVLAPolicy
    _policies_made: int

    def make_policy(self) -> FlowVLAPolicy:
        """An independent actor copy (samples chunks stochastically when ``deterministic=False``)."""
        self._policies_made += 1
        policy = FlowVLAPolicy(self.spec, self.cfg.policy).to(self.device)
        policy.load_actor_weights(self.policy.state_dict())
        # Each actor copy samples from its own seeded generator: the same run seed gives the same rollouts.
        policy.reseed(self.seed * 1000 + self._policies_made)
        return policy

    def make_storage(self, num_envs: int) -> RolloutStorage:
        """A ``[rollout_length, num_envs]`` rollout of chunk steps."""
        return RolloutStorage(self.spec, num_envs, self.cfg.rollout_length, self.device)

    def actor_weights(self) -> Weights:
        """The whole flow policy (encoder, expert, σ): what actors sample chunks with."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.policy.state_dict().items()}

    def load_actor_weights(self, weights: Weights) -> None:
        """Load actor weights (strict)."""
        self.policy.load_actor_weights(weights)

    # ---- supervised learning (co-training, SFT): robot_rl.core.algorithm.SupervisedLoss -------------

    def supervised_loss(self, obs: Obs, action: torch.Tensor, mask: torch.Tensor | None = None,
                        generator: torch.Generator | None = None, train_encoder: bool = False) -> torch.Tensor:
        """The policy's flow-matching loss on target chunks ``[B, H, A]`` (``mask`` ``[B, H]``)."""
        return self.policy.supervised_loss(obs, action, mask, generator, train_encoder)

    def supervised_parameters(self) -> list[nn.Parameter]:
        """The policy's parameters but σ (a frozen encoder trains too: SFT turns ``requires_grad`` on)."""
        return self.policy.supervised_parameters()

    def prepare_supervised(self, obs: Obs) -> None:
        """Nothing to fit (no normaliser)."""

    def finish_supervised(self) -> None:
        """The frozen reference (flow_ppo's KL guard) starts from the supervised policy, as with ``init_from``."""
        self.reference.load_state_dict(self.policy.state_dict(), strict=True)


def build_flow_policy(cfg: FlowVLAConfig, spec: EnvSpec, device: torch.device | str, seed: int) -> FlowVLAPolicy:
    """A flow policy alone, for weights that come later (``load_actor_weights``).

    ``seed`` seeds its placeholder initialisation (without touching the global RNG) and its sampling noise
    (:meth:`FlowVLAPolicy.reseed`); ``pretrained_path`` is not read: the actor weights hold the backbone.
    """
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        policy = FlowVLAPolicy(spec, dataclasses.replace(cfg, pretrained_path=None)).to(device)
    policy.reseed(seed)
    return policy


def load_sft_into(policy: FlowVLAPolicy, run_dir: str, spec: EnvSpec, device: torch.device) -> None:
    """Load the SFT checkpoint of ``run_dir`` into ``policy`` (all but ``log_sigma``); mismatches are errors."""
    from robot_rl.policies.flow.sft import load_flow_policy

    sft, sft_spec = load_flow_policy(run_dir, device)
    if sft.cfg.horizon != policy.cfg.horizon or sft_spec.observation.keys() != spec.observation.keys():
        raise SpecMismatchError(f"{run_dir}: the SFT policy (horizon {sft.cfg.horizon}, observations "
                                f"{sorted(sft_spec.observation)}) does not fit this task/config (horizon "
                                f"{policy.cfg.horizon}, observations {sorted(spec.observation)})")
    weights = {k: v for k, v in sft.state_dict().items() if k != "log_sigma"}
    result = policy.load_state_dict(weights, strict=False)
    if set(result.missing_keys) != {"log_sigma"} or result.unexpected_keys:
        raise SpecMismatchError(f"{run_dir}: SFT weights do not fit the policy config (missing "
                                f"{result.missing_keys}, unexpected {result.unexpected_keys})")
