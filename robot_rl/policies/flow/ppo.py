"""Flow-Noise PPO (after pi_RL, arXiv:2510.25889): PPO over action chunks of a flow policy.

A learnable std ``σ_k`` per denoising step turns the sampler into a Gaussian Markov chain
``x_{k+1} ~ N(μ_k(x_k, s), σ_k²)`` (:class:`~robot_rl.policies.flow.model.FlowVLAPolicy`), so the
probability of the whole chain, and with it of the chunk ``x_K`` the env executed, is exact::

    log π(x_0..K | s) = log N(x_0; 0, I) + Σ_k log N(x_{k+1}; μ_k(x_k), σ_k²)

Actors store the chain (``extras["chain"]``) and its log-probability; the learner re-scores stored
chains under the new weights in one batched pass and applies the clipped surrogate with GAE over
chunk-level steps (the env executes each chunk; see ``lang_reach``'s ``chunk_horizon``).

KL guard. Noise-injection RL drifts without one. Every update adds ``β · KL(π_θ ‖ π_SFT)``, the
per-step Gaussian KL of the chain summed over steps and evaluated on the stored chain states, to the
loss, where ``π_SFT`` is a frozen copy of the starting (SFT) policy with the initial σ. ``β`` adapts
after every update: ×2 when the mean KL exceeds ``1.5 · kl_target``, ÷2 below ``kl_target / 1.5``.
``kl_ref`` and ``kl_coef`` are logged.

σ decay (``final_max_sigma``). The clamp on σ_k can decay linearly over ``sigma_decay_updates`` updates
(ReinFlow's decaying noise bounds): PPO optimises the noisy chain, while deployment runs the noise-free one
from ``x_0 = 0``, and a chain that ends nearly noise-free is optimised where it is deployed. The
reference's σ is clamped to the same bound, so the KL guard measures the drift of the means, not the decay.
The bound tightens after an update, never inside one.

Ratio level (``ratio``). The exact chain log-probability sums ``K·H·A`` Gaussian terms (160 for
K = 10, H = 8, A = 2) with a small σ, so a tiny change of the step means moves the chain ratio by
orders of magnitude: almost every sample is clipped after the first minibatch and the policy cannot
move (measured: clip fraction ≈ 0.9, no lift). ``ratio="element"`` (default) clips one ratio per
denoising step and chunk element, ``exp(log N(x_{k+1,j}; μ_{k,j}, σ_{k,j}²) − old)``, sharing the
chunk's advantage (token-level PPO, as pi_RL/RLinf do per action token); ``"step"`` one ratio per
denoising step; ``"chain"`` the exact chain ratio. The old per-element log-probabilities are
re-scored from the stored chains at the start of the update, under the weights that sampled them.

Asynchronous actors (``loop.on_policy_sync=false``). A row acted by weights older than the learner's is corrected
as in :mod:`robot_rl.policies.ppo` (decoupled PPO): the re-scored log-densities above are the proximal policy's,
and each element's loss is weighted by ``min(π_prox/π_behaviour, behaviour_ratio_clip)`` with the behaviour
densities the actor computed while sampling (``extras["element_log_prob"]``), at the same ratio level. Rows the
learner's own weights acted keep weight 1 exactly, so a synchronous rollout trains as before.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from robot_rl.core.algorithm import Policy
from robot_rl.core.config import ALGOS, AlgoConfig
from robot_rl.core.data_parallel import DataParallel, moments
from robot_rl.core.extras import CHAIN, ELEMENT_LOG_PROB
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.core.transition import Obs
from robot_rl.policies.decoupled_ppo import decoupled_surrogate_loss
from robot_rl.policies.flow.model import FlowVLAConfig, FlowVLAPolicy, VLAEncoder, element_log_density
from robot_rl.policies.flow.onpolicy import FlowOnPolicyAlgorithm, build_flow_policy, load_sft_into
from robot_rl.policies.modules.mlp import MLP
from robot_rl.policies.ppo import gaussian_kl, value_loss
from robot_rl.replay.rollout import RolloutStorage, compute_gae, iter_minibatches

log = logging.getLogger(__name__)


@ALGOS.register("flow_ppo")
@dataclass
class FlowPPOConfig(AlgoConfig):
    """PPO over flow-policy action chunks with Flow-Noise log-likelihoods and a KL guard to the SFT policy."""

    policy: FlowVLAConfig = field(default_factory=FlowVLAConfig)
    """Architecture and sampler (must match the SFT checkpoint's)."""
    init_from: str | None = None
    """Run directory of a flow SFT checkpoint (`robot-rl flow-sft --out DIR`) to start from and guard
    towards, or a LeRobot SmolVLA checkpoint directory (lerobot's `save_pretrained`; docs/flow-vla-lerobot.md);
    null = a randomly initialised policy (the KL guard then holds it near its start)."""
    instruction: str | None = None
    """With a LeRobot checkpoint and a task without an instruction table: the language instruction."""
    rollout_length: int = 8
    """Chunk steps collected per sub-env before each update."""
    num_epochs: int = 4
    """Passes over the rollout per update."""
    num_minibatches: int = 4
    """Minibatches per epoch."""
    clip: float = 0.2
    """Surrogate clip ε on the probability ratio."""
    ratio: Literal["element", "step", "chain"] = "element"
    """Ratio level: per denoising step and chunk element, per denoising step, or the whole chain."""
    gamma: float = 0.95
    """Discount per chunk step."""
    lam: float = 0.95
    """GAE λ."""
    actor_lr: float = 3e-5
    """Adam learning rate of the action expert (and encoder unless frozen)."""
    sigma_lr: float = 3e-3
    """Adam learning rate of the Flow-Noise log σ."""
    critic_lr: float = 1e-3
    """Adam learning rate of the critic."""
    value_coef: float = 1.0
    """Weight of the value loss."""
    value_clip: float | None = 0.2
    """Clip of the value update around the rollout's values (null = plain MSE)."""
    reward_scale: float = 0.02
    """Rewards are multiplied by this before GAE (chunk rewards sum many steps)."""
    kl_coef: float = 0.05
    """Initial weight β of the KL guard to the SFT policy."""
    kl_target: float = 2.0
    """Target of the mean chain KL to the SFT policy (nats per chunk) that β adapts to."""
    max_sigma: float = 0.3
    """Upper clamp of each σ_k (keeps the exploration noise from swamping the flow)."""
    final_max_sigma: float | None = None
    """Decay the clamp of σ_k linearly from ``max_sigma`` to this over ``sigma_decay_updates`` updates (ReinFlow's
    decaying noise bounds): explore widely early, end near the noise-free chain that deployment runs. The KL
    guard's reference σ follows the same clamp. null = a constant clamp."""
    sigma_decay_updates: int = 200
    """Updates over which the σ clamp decays to ``final_max_sigma``."""
    freeze_encoder: bool | None = None
    """Keep the SFT observation encoder fixed and fine-tune the action expert and σ only (with a LeRobot
    checkpoint: keep the whole VLM frozen). null = auto: false for our own flow policy, whose small encoder
    trains too (on lang_reach that lifted the x0 = 0 chunk from ~0.85 to 0.95+; benchmarks/RESULTS_flow.md),
    true for a LeRobot checkpoint (the VLM stays frozen)."""
    critic_hidden: tuple[int, ...] = (256, 256)
    """Hidden widths of the critic head (over its own observation encoder)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip of the actor and of the critic."""
    behaviour_ratio_clip: float = 2.0
    """Asynchronous actors (``loop.on_policy_sync=false``): clip of the importance weight ``π_prox/π_behaviour``
    of each element of rows acted by older weights (decoupled PPO, as :mod:`robot_rl.policies.ppo`)."""

    def build(self, spec: EnvSpec, device: torch.device | str, seed: int) -> FlowPPOAlgorithm:
        """Build the Flow-Noise PPO learner (on a LeRobot flow VLA when ``init_from`` is a LeRobot checkpoint)."""
        from robot_rl.policies.flow.lerobot_base import lerobot_policy_type

        if self.init_from and lerobot_policy_type(self.init_from) is not None:
            from robot_rl.policies.flow.lerobot_flow_ppo import LeRobotFlowPPOAlgorithm

            return LeRobotFlowPPOAlgorithm(self, spec, device, seed)
        return FlowPPOAlgorithm(self, spec, device, seed)

    def build_policy(self, spec: EnvSpec, device: torch.device | str, seed: int = 0) -> Policy:
        """The flow policy alone (no critic, reference or optimiser).

        A LeRobot ``init_from`` is loaded (its frozen VLM is not in the actor weights); an SFT one is not (the
        actor weights replace it).
        """
        from robot_rl.policies.flow.lerobot_base import lerobot_policy_type

        if self.init_from and lerobot_policy_type(self.init_from) is not None:
            from robot_rl.policies.flow.lerobot_flow_ppo import build_lerobot_noise_policy

            return build_lerobot_noise_policy(self, spec, device, seed)
        return build_flow_policy(self.policy, spec, device, seed)


class _Critic(nn.Module):
    def __init__(self, spec: EnvSpec, cfg: FlowVLAConfig, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.encoder = VLAEncoder(spec, cfg)
        self.head = MLP(self.encoder.out_dim, hidden, 1, "gelu")

    def forward(self, obs: Obs) -> torch.Tensor:
        return self.head(self.encoder(obs)).squeeze(-1)


def element_log_probs(chain: torch.Tensor, means: torch.Tensor, log_sigma: torch.Tensor, level: str
                      ) -> torch.Tensor:
    """Log-densities of the chain's steps at ``level``.

    ``element`` → ``[B, K·H·A]``, ``step`` → ``[B, K]``, ``chain`` → ``[B, 1]``; the ``x_0`` term is
    left out (it does not depend on the weights).
    """
    return at_ratio_level(element_log_density(chain, means, log_sigma), level)


def at_ratio_level(elements: torch.Tensor, level: str) -> torch.Tensor:
    """Element log-densities ``[B, K, H, A]`` summed to ``level`` (see :func:`element_log_probs`)."""
    lp = elements.flatten(2)  # [B, K, H·A]
    if level == "element":
        return lp.flatten(1)
    if level == "step":
        return lp.sum(-1)
    if level == "chain":
        return lp.flatten(1).sum(-1, keepdim=True)
    raise ValueError(f"ratio must be 'element', 'step' or 'chain', got {level!r}")


def chain_kl(means: torch.Tensor, log_sigma: torch.Tensor, ref_means: torch.Tensor, ref_log_sigma: torch.Tensor
             ) -> torch.Tensor:
    """``Σ_k KL(N(μ_k, σ_k²) ‖ N(μ_ref_k, σ_ref_k²))`` over steps and dims → ``[B]`` (means ``[B, K, H, A]``)."""
    b = means.shape[0]
    ls = log_sigma.expand_as(means).reshape(b, -1)
    rls = ref_log_sigma.expand_as(means).reshape(b, -1)
    return gaussian_kl(means.reshape(b, -1), ls, ref_means.reshape(b, -1), rls)


class FlowPPOTrainForward(nn.Module):
    """What a flow-PPO minibatch step evaluates with trained weights.

    The condition, the chain's step means, the clamped log σ and the critic's value; one module so that
    DistributedDataParallel sees every trained parameter (σ lives beside the expert).
    """

    def __init__(self, policy: Any, critic: nn.Module, freeze_encoder: bool) -> None:
        super().__init__()
        self.policy, self.critic, self.freeze_encoder = policy, critic, freeze_encoder

    def forward(self, obs: Obs, chain: torch.Tensor, log_bound: float
                ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(cond, means [B, K, H, A], log σ [1, K, H, A] clamped to log_bound, value [B])``."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.freeze_encoder):
            cond = self.policy.encoder(obs)
        means = self.policy.chain_means(chain, cond)
        return cond, means, self.policy.log_sigma.clamp(max=log_bound).unsqueeze(0), self.critic(obs)


class FlowPPOAlgorithm(FlowOnPolicyAlgorithm):
    """Learner: flow policy (+ σ), frozen SFT reference, critic; chunk-level PPO with the KL guard."""

    #: ``freeze_encoder=None`` resolves to this: our own policy's encoder is small and trains.
    default_freeze_encoder = False
    corrects_staleness = True

    def __init__(self, cfg: FlowPPOConfig, spec: EnvSpec, device: torch.device | str, seed: int) -> None:
        if len(spec.action.shape) != 2:
            raise SpecMismatchError("flow_ppo acts in action chunks: the task's action must be [horizon, A] "
                                    "(e.g. task.chunk_horizon=8 on lang_reach)")
        if cfg.final_max_sigma is not None and not 0 < cfg.final_max_sigma <= cfg.max_sigma:
            raise ValueError(f"final_max_sigma must be in (0, max_sigma={cfg.max_sigma}], got {cfg.final_max_sigma}")
        if cfg.sigma_decay_updates < 1:
            raise ValueError(f"sigma_decay_updates must be >= 1, got {cfg.sigma_decay_updates}")
        self.cfg, self.spec, self.device, self.seed = cfg, spec, torch.device(device), seed
        self.freeze_encoder = self.default_freeze_encoder if cfg.freeze_encoder is None else cfg.freeze_encoder
        self.rollout_length = cfg.rollout_length
        self._policies_made = 0
        self.policy, self.critic, self.reference, actor_params = self._build_networks()
        self.actor_opt = torch.optim.Adam([{"params": actor_params, "lr": cfg.actor_lr},
                                           {"params": [self.policy.log_sigma], "lr": cfg.sigma_lr}])
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)
        self.kl_coef = cfg.kl_coef
        self.updates = 0
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.data_parallel: DataParallel | None = None
        self._forward: nn.Module = FlowPPOTrainForward(self.policy, self.critic, self.freeze_encoder)

    def enable_data_parallel(self, dp: DataParallel) -> None:
        """Average gradients (DDP), the advantage moments and the KL guard's measured drift over ``dp``'s ranks.

        With one minibatch per epoch every rank then takes the step one process takes on the union of the ranks'
        rollouts; with several, each rank's minibatch is a random part of its own rollout (as PPO's). Rank 0's
        parameters are copied here.
        """
        self.data_parallel = dp
        self._forward = dp.wrap(FlowPPOTrainForward(self.policy, self.critic, self.freeze_encoder))
        self.seed += 100_003 * dp.rank  # actors' sampling noise (make_policy): the same on every rank would repeat

    def sigma_bound(self, updates: int | None = None) -> float:
        """The clamp of σ_k after ``updates`` updates (default: those done so far)."""
        c = self.cfg
        if c.final_max_sigma is None:
            return c.max_sigma
        frac = min((self.updates if updates is None else updates) / c.sigma_decay_updates, 1.0)
        return c.max_sigma + frac * (c.final_max_sigma - c.max_sigma)

    def _build_networks(self) -> tuple[FlowVLAPolicy, nn.Module, FlowVLAPolicy, list[nn.Parameter]]:
        """``(policy, critic, frozen reference, actor parameters but σ)``: the seam a policy adapter overrides."""
        cfg, spec = self.cfg, self.spec
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            policy = FlowVLAPolicy(spec, cfg.policy).to(self.device)
            critic = _Critic(spec, cfg.policy, cfg.critic_hidden).to(self.device)
        if cfg.init_from:
            load_sft_into(policy, cfg.init_from, spec, self.device)
            # The critic's encoder starts from the SFT encoder: it already reads images and language.
            critic.encoder.load_state_dict(policy.encoder.state_dict())
        else:
            log.warning("flow_ppo without algo.init_from: fine-tuning a randomly initialised flow policy")
        reference = copy.deepcopy(policy).requires_grad_(False)
        actor_params = [p for n, p in policy.named_parameters()
                        if n != "log_sigma" and not (self.freeze_encoder and n.startswith("encoder."))]
        if self.freeze_encoder:
            policy.encoder.requires_grad_(False)
        return policy, critic, reference, actor_params

    def _reference_means(self, obs: Obs, chain: torch.Tensor, cond: Any) -> torch.Tensor:
        """The frozen reference's step means on ``chain``.

        ``cond`` is the policy's condition, for adapters whose reference shares a frozen encoder with the policy.
        """
        return self.reference.chain_means(chain, self.reference.encoder(obs))

    def finish_supervised(self) -> None:
        """The reference and the critic's encoder start from the supervised policy, as with ``init_from``."""
        super().finish_supervised()
        if isinstance(self.critic, _Critic):
            self.critic.encoder.load_state_dict(self.policy.encoder.state_dict())

    @torch.no_grad()
    def _advantages(self, storage: RolloutStorage) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        t, n = storage.reward.shape
        flat = {k: v.flatten(0, 1) for k, v in storage.obs.items()}
        nxt = {k: v.flatten(0, 1) for k, v in storage.next_obs.items()}
        values = self.critic(flat).view(t, n)
        next_values = self.critic(nxt).view(t, n)
        adv, ret = compute_gae(storage.reward * self.cfg.reward_scale, values, next_values, storage.terminated,
                               storage.done, self.cfg.gamma, self.cfg.lam)
        return values, adv, ret

    @torch.no_grad()
    def _old_log_probs(self, storage: RolloutStorage) -> torch.Tensor:
        """The stored chains' log-densities at ``cfg.ratio`` level under the current (acting) weights."""
        t, n = storage.reward.shape
        chain = storage.extras[CHAIN.name].flatten(0, 1)
        obs = {k: v.flatten(0, 1) for k, v in storage.obs.items()}
        log_sigma = self.policy.log_sigma.clamp(max=math.log(self.sigma_bound())).unsqueeze(0)
        means = self.policy.chain_means(chain, self.policy.encoder(obs))
        return element_log_probs(chain, means, log_sigma, self.cfg.ratio).view(t, n, -1)

    @torch.no_grad()
    def _behaviour_log_probs(self, storage: RolloutStorage, prox: torch.Tensor) -> torch.Tensor:
        """The log-densities at ``cfg.ratio`` level under the weights that acted each row ``[T, N, L]``.

        ``prox`` (the learner's weights at the start of the update) where those acted; the actor's own
        ``extras["element_log_prob"]`` where older weights acted (asynchronous actors).
        """
        behind = storage.behind()
        if behind is None or not bool((behind > 0).any()):
            return prox
        if ELEMENT_LOG_PROB.name not in storage.extras:
            raise KeyError("asynchronous flow_ppo (loop.on_policy_sync=false) needs the actors' "
                           f"extras[{ELEMENT_LOG_PROB.name!r}] (FlowVLAPolicy.act writes it); this rollout has "
                           f"{sorted(storage.extras)}")
        t, n = storage.reward.shape
        acted = at_ratio_level(storage.extras[ELEMENT_LOG_PROB.name].flatten(0, 1), self.cfg.ratio).view(t, n, -1)
        return torch.where((behind > 0).unsqueeze(-1), acted, prox)

    def update(self, batch: RolloutStorage) -> dict[str, float]:
        """Chunk-level PPO on a full rollout (then cleared); logs the KL to the SFT policy."""
        storage, c, policy = batch, self.cfg, self.policy
        if not storage.is_full():
            raise RuntimeError(f"flow_ppo update needs a full rollout; it holds {len(storage)} rows")
        if CHAIN.name not in storage.extras:
            raise KeyError("flow_ppo needs extras['chain'] from FlowVLAPolicy.act (stochastic actions)")
        dp = self.data_parallel
        values, adv, ret = self._advantages(storage)
        adv_mean, adv_std = moments(adv, dp)  # over every rank's rollout
        adv = (adv - adv_mean) / (adv_std + 1e-8)
        fields = {f"obs.{k}": v for k, v in storage.obs.items()}
        prox = self._old_log_probs(storage)
        fields.update(chain=storage.extras[CHAIN.name], old_log_prob=prox,
                      behaviour_log_prob=self._behaviour_log_probs(storage, prox), advantage=adv, ret=ret,
                      old_value=values)
        # The bound the rollout was sampled under; it tightens only after this update (the first ratio stays 1).
        log_bound = math.log(self.sigma_bound())
        ref_log_sigma = self.reference.log_sigma.clamp(max=log_bound)
        sums = torch.zeros(6, device=self.device)
        n = 0
        for mb in iter_minibatches(fields, c.num_minibatches, c.num_epochs, self.generator):
            obs = {k[4:]: v for k, v in mb.items() if k.startswith("obs.")}
            chain = mb["chain"]
            cond, means, log_sigma, value = self._forward(obs, chain, log_bound)
            with torch.no_grad():
                ref_means = self._reference_means(obs, chain, cond)
            log_prob = element_log_probs(chain, means, log_sigma, c.ratio)
            kl_ref = chain_kl(means, log_sigma, ref_means, ref_log_sigma.unsqueeze(0)).mean()
            surrogate = decoupled_surrogate_loss(log_prob, mb["old_log_prob"], mb["behaviour_log_prob"],
                                                 mb["advantage"].unsqueeze(-1), c.clip, c.behaviour_ratio_clip)
            v_loss = value_loss(value, mb["old_value"], mb["ret"], c.value_clip)
            loss = surrogate + self.kl_coef * kl_ref + c.value_coef * v_loss
            aux = self.aux_loss()  # an extension's term, e.g. co-training's λ·flow-matching loss on real demos
            if aux is not None:
                loss = loss + aux
            self.actor_opt.zero_grad(set_to_none=True)
            self.critic_opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), c.max_grad_norm)
            nn.utils.clip_grad_norm_(self.critic.parameters(), c.max_grad_norm)
            self.actor_opt.step()
            self.critic_opt.step()
            with torch.no_grad():
                policy.log_sigma.clamp_(max=log_bound)
                log_ratio = log_prob.detach() - mb["old_log_prob"]
                approx_kl = ((log_ratio.exp() - 1) - log_ratio).mean()
                clip_frac = ((log_ratio.exp() - 1).abs() > c.clip).float().mean()
            sums += torch.stack([surrogate.detach(), v_loss.detach(), kl_ref.detach(), approx_kl, clip_frac,
                                 log_prob.detach().sum(-1).mean()])
            n += 1
        storage.clear()
        self.updates += 1
        with torch.no_grad():  # the next rollout samples under the decayed bound
            policy.log_sigma.clamp_(max=math.log(self.sigma_bound()))
        means_of = sums / max(n, 1)
        if dp is not None:  # the KL guard's β follows every rank's drift, so that it stays equal on the ranks
            means_of = dp.mean(means_of)
        surr, v_l, kl_ref_m, approx_kl_m, clip_frac_m, lp = means_of.tolist()
        # The KL guard: β follows the measured drift from the SFT policy.
        if kl_ref_m > 1.5 * c.kl_target:
            self.kl_coef = min(self.kl_coef * 2.0, 100.0)
        elif kl_ref_m < c.kl_target / 1.5:
            self.kl_coef = max(self.kl_coef / 2.0, 1e-4)
        return {"surrogate_loss": surr, "value_loss": v_l, "kl_ref": kl_ref_m, "kl_coef": self.kl_coef,
                "approx_kl": approx_kl_m, "clip_fraction": clip_frac_m, "chain_log_prob": lp,
                "noise_std": float(policy.log_sigma.detach().exp().mean()), "sigma_bound": self.sigma_bound()}

    def state_dict(self) -> dict[str, Any]:
        """Policy, frozen reference, critic, both optimisers, β, the update count (σ decay) and the shuffle RNG."""
        return {"policy": self.policy.state_dict(), "reference": self.reference.state_dict(),
                "critic": self.critic.state_dict(), "actor_opt": self.actor_opt.state_dict(),
                "critic_opt": self.critic_opt.state_dict(), "kl_coef": self.kl_coef, "updates": self.updates,
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (strict)."""
        missing = {"policy", "reference", "critic", "actor_opt", "critic_opt", "kl_coef", "generator"} - set(state)
        if missing:
            raise KeyError(f"flow_ppo state is missing {sorted(missing)}")
        self.policy.load_state_dict(state["policy"], strict=True)
        self.reference.load_state_dict(state["reference"], strict=True)
        self.critic.load_state_dict(state["critic"], strict=True)
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.kl_coef = float(state["kl_coef"])
        self.updates = int(state.get("updates", 0))  # absent in checkpoints from before the σ decay
        self.generator.set_state(state["generator"].cpu())
