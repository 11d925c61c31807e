"""Flow-Noise PPO (pi_RL) on a LeRobot SmolVLA: the VLA's own sampler made a Gaussian Markov chain.

``robot-rl train --task lang_reach --algo flow_ppo algo.init_from=<SmolVLA checkpoint dir>`` builds
:class:`LeRobotFlowPPOAlgorithm`: the unchanged Flow-Noise PPO update of ``ppo.py`` over
:class:`LeRobotFlowNoisePolicy`, an adapter giving the SmolVLA the methods that update uses on our own
:class:`~robot_rl.policies.flow.model.FlowVLAPolicy` (``encoder``, ``chain_means``, ``log_sigma``).

The chain. LeRobot's sampler (``VLAFlowMatching.sample_actions``) runs the VLM once over the prefix
(images, instruction, state) into a KV cache, then integrates from ``t = 1`` (noise) to ``t = 0`` with
``K = num_steps`` Euler steps ``x_{k+1} = x_k + dt · v(x_k, t_k)``, ``dt = −1/K``, ``t_k = 1 + k·dt``, each
velocity one pass of the action expert over that cache (``denoise_step``). This adapter runs the same
loop itself and adds Flow-Noise::

    x_0 ~ N(0, I),   x_{k+1} ~ N(μ_k(x_k), σ_k²),   μ_k(x) = x + dt · v(x, t_k | prefix)

over the whole padded chunk ``[chunk_size, max_action_dim]`` (the padded dimensions feed the expert, so
they are part of the chain; noise there keeps the chain's density exact). With ``σ = 0`` the chain's end
is exactly ``predict_action_chunk(batch, noise=x_0)``. The env executes LeRobot's postprocessed (un-
normalised) ``x_K[:, :H, :A]``, clamped to the action bounds.

What trains (``algo.freeze_encoder``, true unless set to false): the action expert (``lm_expert``, the action
in/out projections and the action–time MLP) and σ; the VLM (vision tower, text model, state
projection) stays frozen, so the prefix runs without gradients and the frozen reference policy of the KL
guard shares it. The critic is a small MLP on the VLM's prefix output, mean-pooled over its valid
tokens (images, instruction, state: what the expert attends to). With ``freeze_encoder=false`` the
whole VLA trains and the reference becomes a full copy.

Actors. In-process actor copies share the frozen modules with the learner (one copy of the VLM in
memory); the learner publishes, and checkpoints, only the trainable tensors. A remote actor loads the
same checkpoint directory itself and receives the trainable tensors over the wire.

Only SmolVLA is driven: pi0 / pi0.5 keep their prefix in a transformers cache object passed through
PaliGemma/Gemma, which the batched re-scoring would have to repeat per step, and no pi0 builds from
PyPI's transformers to test it on (lerobot's pi0 needs its patched transformers; docs/flow-vla-lerobot.md).
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robot_rl.core.algorithm import Policy, Weights
from robot_rl.core.config import TASKS, ConfigError
from robot_rl.core.extras import CHAIN, ELEMENT_LOG_PROB, LOG_PROB
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.core.transition import Obs
from robot_rl.policies.flow.lerobot_base import (
    LeRobotFlowPolicy,
    env_instruction_table,
    lerobot_policy_type,
    load_lerobot_flow_policy_for_spec,
)
from robot_rl.policies.flow.model import chain_log_prob_of, element_log_density
from robot_rl.policies.flow.ppo import FlowPPOAlgorithm, FlowPPOConfig
from robot_rl.policies.modules.mlp import MLP

log = logging.getLogger(__name__)


@dataclass
class PrefixContext:
    """The VLM's pass over the prefix: per-layer KV cache, padding mask ``[B, L]``, pooled features ``[B, D]``."""

    kv: dict[int, dict[str, torch.Tensor]]
    pad_masks: torch.Tensor
    features: torch.Tensor

    def repeat_interleave(self, k: int) -> PrefixContext:
        """Each row repeated ``k`` times (row ``b`` → rows ``b·k … b·k + k − 1``): ``k`` chain steps at once."""
        kv = {i: {n: t.repeat_interleave(k, dim=0) for n, t in layer.items()} for i, layer in self.kv.items()}
        return PrefixContext(kv, self.pad_masks.repeat_interleave(k, dim=0), self.features.repeat_interleave(k, dim=0))


@dataclass
class _ChainView:
    horizon: int
    num_steps: int


class _PrefixEncoder(nn.Module):
    """``obs → PrefixContext`` (the ``encoder`` the PPO update calls); owns no weights."""

    def __init__(self, owner: LeRobotFlowNoisePolicy) -> None:
        super().__init__()
        self._owner = [owner]  # not a submodule: no cycle in .modules()

    def forward(self, obs: Obs) -> PrefixContext:
        return self._owner[0].prefix(obs)


class LeRobotFlowNoisePolicy(Policy):
    """A LeRobot SmolVLA as a Flow-Noise chain with learnable per-step σ (see the module docstring).

    ``act(obs)`` → ``(chunk [N, H, A], {"chain": [N, K + 1, chunk_size, max_action_dim], "log_prob": [N],
    "element_log_prob": [N, K, chunk_size, max_action_dim]})``;
    ``act(obs, deterministic=True)`` integrates from ``x_0 = 0`` without noise.
    """

    def __init__(self, base: LeRobotFlowPolicy, init_noise_std: float, train_backbone: bool = False) -> None:
        super().__init__()
        if base.kind != "smolvla":
            raise NotImplementedError(f"Flow-Noise PPO drives LeRobot SmolVLA checkpoints, not {base.kind!r}; "
                                      "use DSRL (--task dsrl --algo sac task.init_from=...) for it")
        lcfg = base.policy.config
        if getattr(lcfg, "adapt_to_pi_aloha", False):
            raise ConfigError("SmolVLA checkpoints with adapt_to_pi_aloha=True are not supported by Flow-Noise PPO")
        if not getattr(lcfg, "use_cache", True):
            raise ConfigError("Flow-Noise PPO needs the SmolVLA prefix KV cache (config use_cache=True)")
        if init_noise_std <= 0:
            raise ValueError(f"init_noise_std must be > 0, got {init_noise_std}")
        self.base = base
        self.num_steps = int(lcfg.num_steps)
        self.chunk_size, self.pad_dim = int(lcfg.chunk_size), int(lcfg.max_action_dim)
        self.action_dim = base.mapping.action_dim
        self.cfg = _ChainView(base.env_horizon, self.num_steps)
        self.log_sigma = nn.Parameter(torch.full((self.num_steps, self.chunk_size, self.pad_dim),
                                                 math.log(init_noise_std)))
        self.encoder = _PrefixEncoder(self)
        self.generator: torch.Generator | None = None
        base.requires_grad_(False)
        for module in ([base.policy] if train_backbone else self.expert_modules()):
            module.requires_grad_(True)
        base.eval()

    def expert_modules(self) -> list[nn.Module]:
        """What trains with a frozen backbone: the action expert and its input/output/time projections."""
        m = self.base.policy.model
        return [m.vlm_with_expert.lm_expert, m.action_in_proj, m.action_out_proj, m.action_time_mlp_in,
                m.action_time_mlp_out]

    def trainable_names(self) -> list[str]:
        """Names of the parameters that train (and that actors receive)."""
        return [n for n, p in self.named_parameters() if p.requires_grad]

    def train(self, mode: bool = True) -> LeRobotFlowNoisePolicy:
        """Stays in eval mode: the VLA's dropout would make the chain's means random."""
        return super().train(False)

    def reseed(self, seed: int) -> None:
        """Draw sampling noise from an own generator seeded ``seed`` (same seed → same chunks)."""
        self.generator = torch.Generator(device=self.log_sigma.device).manual_seed(int(seed))

    # ---- the chain --------------------------------------------------------------------------

    def prefix(self, obs: Obs) -> PrefixContext:
        """Run the VLM over images, instruction and state once: the KV cache every denoising step reads."""
        from lerobot.policies.smolvla.modeling_smolvla import make_att_2d_masks
        from lerobot.utils.constants import OBS_LANGUAGE_ATTENTION_MASK, OBS_LANGUAGE_TOKENS

        batch = self.base._batch(obs)
        policy, model = self.base.policy, self.base.policy.model
        images, img_masks = policy.prepare_images(batch)
        state = policy.prepare_state(batch)
        embs, pad, att = model.embed_prefix(images, img_masks, batch[OBS_LANGUAGE_TOKENS],
                                            batch[OBS_LANGUAGE_ATTENTION_MASK], state=state)
        out, kv = model.vlm_with_expert.forward(attention_mask=make_att_2d_masks(pad, att),
                                                position_ids=torch.cumsum(pad, dim=1) - 1, past_key_values=None,
                                                inputs_embeds=[embs, None], use_cache=True, fill_kv_cache=True)
        keep = pad.unsqueeze(-1).float()
        features = (out[0].float() * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        return PrefixContext(kv, pad, features)

    def velocity(self, x: torch.Tensor, t: torch.Tensor, ctx: PrefixContext) -> torch.Tensor:
        """``v(x [B, chunk, pad_dim], t [B] | prefix)``: one action-expert pass (lerobot's ``denoise_step``)."""
        return self.base.policy.model.denoise_step(prefix_pad_masks=ctx.pad_masks, past_key_values=ctx.kv, x_t=x,
                                                   timestep=t)  # type: ignore[no-any-return]

    def _time(self, k: int) -> float:
        return 1.0 + k * (-1.0 / self.num_steps)  # lerobot's t_k, computed the same way (bit-equal chunks)

    def chain_means(self, chain: torch.Tensor, ctx: PrefixContext) -> torch.Tensor:
        """``μ_k(x_k)`` for every step of chains ``[B, K + 1, chunk, pad_dim]`` → ``[B, K, chunk, pad_dim]``."""
        b, k1 = chain.shape[:2]
        k = k1 - 1
        if k != self.num_steps:
            raise SpecMismatchError(f"chain has {k} steps, the SmolVLA sampler {self.num_steps}")
        x = chain[:, :-1].reshape(b * k, *chain.shape[2:])
        t = torch.tensor([self._time(i) for i in range(k)], dtype=torch.float32, device=chain.device).repeat(b)
        v = self.velocity(x, t, ctx.repeat_interleave(k))
        return (x + (-1.0 / self.num_steps) * v).view(b, k, *chain.shape[2:])

    def run_chain(self, ctx: PrefixContext, x0: torch.Tensor, noise: bool = True,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(chain [N, K + 1, chunk, pad_dim], means [N, K, chunk, pad_dim])`` from ``x0``; ``noise=False``: σ = 0."""
        dt = -1.0 / self.num_steps
        sigma = self.log_sigma.exp()
        x, states, means = x0, [x0], []
        for k in range(self.num_steps):
            t = torch.tensor(self._time(k), dtype=torch.float32, device=x.device).expand(x.shape[0])
            mu = x + dt * self.velocity(x, t, ctx)
            means.append(mu)
            x = mu + sigma[k] * torch.randn(x.shape, device=x.device, generator=generator) if noise else mu
            states.append(x)
        return torch.stack(states, dim=1), torch.stack(means, dim=1)

    def to_env(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised padded chunks ``[N, chunk, pad_dim]`` → env chunks ``[N, H, A]`` (postprocessed, unclamped)."""
        chunk = self.base.postprocess(x[:, :, :self.action_dim])
        return chunk[:, :self.cfg.horizon].float().to(x.device)  # type: ignore[no-any-return]

    @torch.no_grad()
    def sample(self, obs: Obs, x0: torch.Tensor) -> torch.Tensor:
        """The noise-free chunk for env-shaped noise ``x0 [N, H, A]``, padded like :meth:`LeRobotFlowPolicy.sample`."""
        n = x0.shape[0]
        full = self.base.pad_noise.to(x0.device).expand(n, -1, -1).clone()
        full[:, :self.cfg.horizon, :self.action_dim] = x0
        chain, _ = self.run_chain(self.prefix(obs), full, noise=False)
        return self.to_env(chain[:, -1])

    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(chunk [N, H, A] clamped to the bounds, extras)``; see the class docstring."""
        with torch.no_grad():
            ctx = self.prefix(obs)
            n = ctx.features.shape[0]
            shape = (n, self.chunk_size, self.pad_dim)
            device = ctx.features.device
            if deterministic:
                chain, _ = self.run_chain(ctx, torch.zeros(shape, device=device), noise=False)
                return self.base._bound(self.to_env(chain[:, -1])), {}
            x0 = torch.randn(shape, device=device, generator=self.generator)
            chain, means = self.run_chain(ctx, x0, noise=True, generator=self.generator)
            elements = element_log_density(chain, means, self.log_sigma.unsqueeze(0))
            log_prob = chain_log_prob_of(chain, elements)
        return self.base._bound(self.to_env(chain[:, -1])), {CHAIN.name: chain, LOG_PROB.name: log_prob,
                                                             ELEMENT_LOG_PROB.name: elements}

    # ---- weights ------------------------------------------------------------------------------

    def trainable_state(self) -> Weights:
        """Detached CPU copies of the trainable tensors (what actors and checkpoints carry)."""
        return _named_state(self, self.trainable_names())

    def load_actor_weights(self, weights: Weights) -> None:
        """Load :meth:`trainable_state` output; the key sets must match exactly."""
        _load_named(self, weights, self.trainable_names(), "actor weights")

    def share_frozen_copy(self) -> LeRobotFlowNoisePolicy:
        """A copy with its own trainable tensors that shares every frozen tensor (the VLM) with this one."""
        trainable = set(self.trainable_names())
        memo: dict[int, Any] = {id(p): p for n, p in self.named_parameters() if n not in trainable}
        memo.update({id(b): b for b in self.buffers()})
        generator, self.generator = self.generator, None  # a torch.Generator does not deep-copy
        try:
            return copy.deepcopy(self, memo)
        finally:
            self.generator = generator


class _PrefixCritic(nn.Module):
    """``V(s)``: an MLP on the policy's pooled prefix features (no gradient into the VLA)."""

    def __init__(self, policy: LeRobotFlowNoisePolicy, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self._policy = [policy]  # not a submodule: the critic owns only its head
        dim = int(policy.base.policy.model.vlm_with_expert.config.text_config.hidden_size)
        self.head = MLP(dim, hidden, 1, "gelu")

    def forward(self, obs: Obs) -> torch.Tensor:
        with torch.no_grad():
            features = self._policy[0].prefix(obs).features
        return self.head(features).squeeze(-1)  # type: ignore[no-any-return]


def instruction_table(spec: EnvSpec) -> dict[tuple[int, ...], str]:
    """Language tokens → instruction text of the built-in language task named in ``spec.extras["task"]``.

    The learner has the spec, not the env: a one-env copy of the task (with the spec's vocabulary and context
    length) lists its instructions and their tokens. Empty when the spec has no language.
    """
    if "language" not in spec.observation:
        return {}
    name = spec.extras.get("task")
    if not isinstance(name, str) or name not in TASKS.names():
        return {}
    lang = spec.observation["language"]
    cfg = TASKS.get(name)()
    for attr, value in (("context_length", lang.shape[0]), ("vocab_size", int(lang.high or 0) + 1)):
        if hasattr(cfg, attr):
            setattr(cfg, attr, value)
    env = cfg.make("cpu", 0, num_envs=1)
    try:
        return env_instruction_table(env)
    finally:
        env.close()


class LeRobotFlowPPOAlgorithm(FlowPPOAlgorithm):
    """:class:`~robot_rl.policies.flow.ppo.FlowPPOAlgorithm` over a LeRobot SmolVLA (see the module docstring)."""

    policy: LeRobotFlowNoisePolicy  # type: ignore[assignment]
    reference: LeRobotFlowNoisePolicy  # type: ignore[assignment]
    #: ``freeze_encoder=None`` keeps the VLM frozen: only the action expert and σ train.
    default_freeze_encoder = True

    #: Co-training has no supervised loss for a SmolVLA (flow matching through lerobot's model is not written):
    #: ``None`` makes this algorithm no :class:`~robot_rl.core.algorithm.SupervisedLoss`, so co-training refuses it.
    supervised_loss = None  # type: ignore[assignment]

    def _build_networks(self) -> tuple[Any, nn.Module, Any, list[nn.Parameter]]:
        cfg = self.cfg
        base = _load_base(cfg, self.spec, self.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            policy = LeRobotFlowNoisePolicy(base, cfg.policy.init_noise_std, train_backbone=not self.freeze_encoder)
            critic = _PrefixCritic(policy, cfg.critic_hidden).to(self.device)
        policy.to(self.device)
        reference = policy.share_frozen_copy().requires_grad_(False)
        actor_params = [p for n, p in policy.named_parameters() if p.requires_grad and n != "log_sigma"]
        n_train = sum(p.numel() for p in actor_params)
        n_all = sum(p.numel() for p in policy.parameters())
        log.info("flow_ppo on LeRobot %s: %d of %d parameters train (%s)", base.kind, n_train, n_all,
                 "action expert" if self.freeze_encoder else "whole VLA")
        return policy, critic, reference, actor_params

    def _reference_means(self, obs: Obs, chain: torch.Tensor, cond: Any) -> torch.Tensor:
        # A frozen backbone is shared with the reference: the policy's prefix is the reference's too.
        ctx = cond if self.freeze_encoder else self.reference.encoder(obs)
        return self.reference.chain_means(chain, ctx)

    def make_policy(self) -> LeRobotFlowNoisePolicy:  # type: ignore[override]
        """An actor copy sharing the frozen VLM with the learner, with its own trainable tensors and seed."""
        self._policies_made += 1
        policy = self.policy.share_frozen_copy()
        policy.reseed(self.seed * 1000 + self._policies_made)
        return policy

    def actor_weights(self) -> Weights:
        """Only the trainable tensors (action expert and σ by default): the VLM never travels."""
        return self.policy.trainable_state()

    def state_dict(self) -> dict[str, Any]:
        """As flow_ppo's, with the policy and the reference reduced to their trainable tensors.

        The frozen VLM is not saved: it is reloaded from ``algo.init_from``, which must stay in place.
        """
        state = super().state_dict()
        state["policy"] = self.policy.trainable_state()
        state["reference"] = _named_state(self.reference, self.policy.trainable_names())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (strict on the trainable key set)."""
        missing = {"policy", "reference", "critic", "actor_opt", "critic_opt", "kl_coef", "generator"} - set(state)
        if missing:
            raise KeyError(f"flow_ppo state is missing {sorted(missing)}")
        self.policy.load_actor_weights(state["policy"])
        _load_named(self.reference, state["reference"], self.policy.trainable_names(), "reference weights")
        self.critic.load_state_dict(state["critic"], strict=True)
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.kl_coef = float(state["kl_coef"])
        self.updates = int(state.get("updates", 0))  # absent in checkpoints from before the σ decay
        self.generator.set_state(state["generator"].cpu())


def _load_base(cfg: FlowPPOConfig, spec: EnvSpec, device: torch.device | str) -> LeRobotFlowPolicy:
    """The frozen SmolVLA of ``cfg.init_from`` for a task with ``spec`` (its instructions from the task)."""
    assert cfg.init_from is not None
    return load_smolvla_for_task(cfg.init_from, cfg.instruction, spec, device, "Flow-Noise PPO")


def load_smolvla_for_task(init_from: str, instruction: str | None, spec: EnvSpec, device: torch.device | str,
                          who: str) -> LeRobotFlowPolicy:
    """The SmolVLA of ``init_from`` for a task with ``spec`` (its instructions from the task, else ``instruction``).

    ``who`` (the learner's name) is in the errors: another LeRobot flow type, or no instruction to read.
    """
    kind = lerobot_policy_type(init_from)
    if kind != "smolvla":  # checked before loading: a pi0 takes minutes to load only to be refused
        raise NotImplementedError(f"{init_from}: {who} drives LeRobot SmolVLA checkpoints, not "
                                  f"{kind!r}; use DSRL (--task dsrl --algo sac task.init_from=...) for it")
    table = instruction_table(spec)
    if not table and instruction is None:
        raise ConfigError(f"the task {spec.extras.get('task')!r} has no instruction table: set "
                          "algo.instruction='<what the robot should do>' for the LeRobot policy")
    return load_lerobot_flow_policy_for_spec(init_from, spec, table, instruction, device)


def build_lerobot_noise_policy(cfg: FlowPPOConfig, spec: EnvSpec, device: torch.device | str,
                               seed: int = 0) -> LeRobotFlowNoisePolicy:
    """An actor's policy alone (no critic, no reference, no optimiser).

    The SmolVLA of ``cfg.init_from`` with fresh σ, the same tensors trainable as the learner's
    (``freeze_encoder``: they are what ``actor_weights`` carries), sampling noise seeded by ``seed``.
    """
    freeze = LeRobotFlowPPOAlgorithm.default_freeze_encoder if cfg.freeze_encoder is None else cfg.freeze_encoder
    base = _load_base(cfg, spec, device)
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        policy = LeRobotFlowNoisePolicy(base, cfg.policy.init_noise_std, train_backbone=not freeze)
    policy.to(device)
    policy.reseed(seed)
    return policy


def _named_state(module: nn.Module, names: list[str]) -> Weights:
    params = dict(module.named_parameters())
    return {n: params[n].detach().to("cpu", copy=True) for n in names}


def _load_named(module: nn.Module, weights: Weights, names: list[str], what: str) -> None:
    expected = set(names)
    if set(weights) != expected:
        raise KeyError(f"{what} do not fit this LeRobot policy: missing {sorted(expected - set(weights))[:5]}, "
                       f"unexpected {sorted(set(weights) - expected)[:5]}")
    params = dict(module.named_parameters())
    with torch.no_grad():
        for n, w in weights.items():
            params[n].copy_(w)


__all__ = ["LeRobotFlowNoisePolicy", "LeRobotFlowPPOAlgorithm", "PrefixContext", "build_lerobot_noise_policy",
           "instruction_table", "load_smolvla_for_task"]
