"""Soft Actor-Critic (Haarnoja et al., 2018) for state and pixel observations.

The learner, top to bottom: the update (critics, actor and temperature, targets), then the losses it calls, with
their maths in comments. The config is :mod:`robot_rl.policies.sac_config`, the networks
:mod:`robot_rl.policies.sac_networks`, the loss terms :mod:`robot_rl.policies.sac_terms`. What robot learning adds
to textbook SAC:

- a critic *ensemble* evaluated with batched matmuls, with targets taking the min over a random
  subset of ``num_critics_sampled`` members (REDQ / RLPD) and optional LayerNorm critics (RLPD);
- symmetric sampling from a second demo/intervention buffer (RLPD, HIL-SERL): ``demo_ratio``;
- pixels through a small CNN with DrQ random shifts; the critic's gradients train the encoder and
  the actor reads detached features (DrQ / SAC-AE). Or (``image_encoder=resnet10|resnet18``) through a
  pretrained, frozen ResNet trunk that actor, critic and target critic share and that runs once per
  update, each network with its own trainable spatial-embedding head (HIL-SERL);
- a lean update: fused Adam and Polyak averaging, one host sync per update, all randomness drawn up front so
  the loss functions are pure and can be compiled (``compile``), optional bf16 autocast (``amp_bf16``);
- loss terms (:mod:`robot_rl.policies.sac_terms`) that the update calls inside the critic's and the actor's losses:
  CQL / Cal-QL and the actor's behaviour-cloning warm-up for offline pre-training, an extension's term (co-training).

Actions. The policy samples ``u ~ N(μ(s), σ(s))`` and squashes ``a = tanh(u) ∈ [-1, 1]``; actors see
``low + (a + 1)(high − low)/2`` (a spec without bounds is treated as ``[-1, 1]``). Critics and the
entropy work in the squashed ``[-1, 1]`` space, so the replayed env actions are mapped back first.
An action chunk ``[H, A]`` is flattened to ``H·A`` for the MLP heads (one Gaussian over the whole
chunk, target entropy ``−H·A``) and reshaped to ``[N, H, A]`` on the way out.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import nn

from robot_rl.core.algorithm import OffPolicyAlgorithm, Weights
from robot_rl.core.data_parallel import DataParallel, draw_rows
from robot_rl.core.extras import DISCOUNT
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs, TransitionBatch
from robot_rl.policies import sac_networks as nets
from robot_rl.policies.modules.cnn import random_shift
from robot_rl.policies.replay_storage import check_demo_ratio, make_replay
from robot_rl.policies.sac_config import SACConfig
from robot_rl.policies.sac_networks import SACCritic, SACPolicy, make_encoder
from robot_rl.policies.sac_terms import ExtensionLoss, SACLossTerm, sum_losses
from robot_rl.replay.buffer import MixingSampler, ReplayBuffer

__all__ = ["SACAlgorithm", "SACConfig", "SACCritic", "SACPolicy"]


class SACAlgorithm(OffPolicyAlgorithm):
    """The SAC learner. ``self.actor`` is its own policy (shares weights; act with it in-process)."""

    def __init__(self, cfg: SACConfig, spec: EnvSpec, device: torch.device, seed: int) -> None:
        if cfg.num_critics < 1 or not 1 <= (cfg.num_critics_sampled or cfg.num_critics) <= cfg.num_critics:
            raise ValueError(f"need 1 <= num_critics_sampled <= num_critics, got {cfg.num_critics_sampled} "
                             f"and {cfg.num_critics}")
        check_demo_ratio(cfg.demo_ratio)
        self.cfg, self.spec, self.device = cfg, spec, device
        self.batch_size, self.utd_ratio, self.learning_starts = cfg.batch_size, cfg.utd_ratio, cfg.learning_starts
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's RNG
            torch.random.default_generator.manual_seed(seed)
            self.actor = SACPolicy(spec, cfg).to(device)
            backbone = self.actor.backbone  # with a trunk the critic gets its own head on the shared maps
            head = make_encoder(spec, cfg, backbone, share=self.actor.encoder) if backbone is not None else None
            self.critic = SACCritic(self.actor.encoder.out_dim, self.actor.act_dim, cfg, head).to(device)
        if backbone is not None and cfg.image_backbone:
            backbone.load(cfg.image_backbone)
        # Target copies share the live normaliser (its statistics are buffers, which Polyak averaging skips).
        norm = self.actor.encoder.normalizer
        self.critic_target = copy.deepcopy(self.critic, nets.shared_memo(norm)).requires_grad_(False)
        # The target critic reads its own Polyak-averaged copy of the CNN; a parameter-free encoder
        # (state, normaliser) is simply shared.
        has_cnn = self.actor.encoder.cnn is not None and head is None
        encoder_copy = copy.deepcopy(self.actor.encoder, nets.shared_memo(norm)) if has_cnn else None
        self.encoder_target = encoder_copy.requires_grad_(False) if encoder_copy is not None else None
        self._critic_encoder = head if head is not None else self.actor.encoder
        self._target_encoder = self.critic_target.encoder if head is not None else self.encoder_target
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_temperature), device=device))
        self.target_entropy = float(cfg.target_entropy if cfg.target_entropy is not None else -self.actor.act_dim)
        self.num_sampled = cfg.num_critics_sampled or cfg.num_critics

        fused = device.type in ("cpu", "cuda")
        # The critic's loss trains the CNN, or an unfrozen trunk; with a trunk each network trains its own head.
        critic_params = [*self.critic.parameters(), *(self.actor.encoder.parameters() if head is None else ())]
        actor_params = [*self.actor.trunk.parameters(), *(self.actor.encoder.parameters() if head is not None else ())]
        if backbone is not None and not cfg.freeze_backbone:
            critic_params += backbone.parameters()
        self.critic_optim = torch.optim.Adam(critic_params, lr=cfg.critic_lr, fused=fused)
        # log α is a second parameter group of the actor's optimiser: one optimiser step fewer per update.
        self.actor_optim = torch.optim.Adam([{"params": actor_params, "lr": cfg.actor_lr},
                                             {"params": [self.log_alpha], "lr": cfg.temperature_lr}], fused=fused)
        self._online: list[torch.Tensor] = list(self.critic.parameters())
        self._targets: list[torch.Tensor] = list(self.critic_target.parameters())
        if self.encoder_target is not None:
            self._online += list(self.actor.encoder.parameters())
            self._targets += list(self.encoder_target.parameters())

        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.num_updates = 0
        self.terms = self._build_terms()
        mode = cfg.compile_mode
        self._cuda_graphs = cfg.compile and mode == "reduce-overhead"
        self._critic_loss = torch.compile(self.critic_loss, mode=mode) if cfg.compile else self.critic_loss
        self._actor_loss = torch.compile(self.actor_loss, mode=mode) if cfg.compile else self.actor_loss
        self._policy_loss = self.policy_loss
        self.data_parallel: DataParallel | None = None

    def enable_data_parallel(self, dp: DataParallel) -> None:
        """DDP over ``dp``'s ranks, one module per optimiser: each rank takes one process's step on all batches."""
        self.data_parallel = dp
        self._critic_loss = dp.wrap_loss(self._critic_loss, self.critic_optim.param_groups[0]["params"])
        # α has a gradient only when it is learned: DDP waits for a gradient of every parameter it wraps.
        actor = [*self.actor_optim.param_groups[0]["params"], *([self.log_alpha] if self.cfg.autotune_entropy else [])]
        self._policy_loss = dp.wrap_loss(self.policy_loss, actor)

    # ---- the update: critics, actor and temperature, targets ------------------------------------------------------

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        """One SAC step on a sampled minibatch: critics, then actor and temperature, then the target critics.

        The loss terms (``self.terms``: CQL / Cal-QL, the BC warm-up, an extension's) add to the two losses.
        """
        obs, next_obs = self._observe(batch)
        action = self.actor.unit_action(batch.action)  # replayed env actions, in the squashed space of Q and log π
        # Every random number of the step comes from the learner's generator, drawn here (the terms' too), so the
        # loss functions are pure (compilable) and a seed fixes the whole trajectory of parameters on any number of
        # ranks: the noise of a' ~ π(·|s') and of ã ~ π(·|s), REDQ's subset of the target critics.
        noise = self.draw(torch.randn, (2, len(batch), self.actor.act_dim))
        subset = self._critic_subset()
        inputs = [term.inputs(self, batch, action) for term in self.terms]
        alpha = self.log_alpha.detach().exp()
        if self._cuda_graphs:  # CUDA graphs reuse their output memory on the next replay: mark the step
            torch.compiler.cudagraph_mark_step_begin()

        # Critics: one Adam step on L_Q (+ the critic terms).
        with self._autocast():
            critic_loss, q_mean, features = self._critic_loss(obs, action, batch.reward, batch.terminated, next_obs,
                                                              noise[0], subset, alpha, batch.extras.get(DISCOUNT.name),
                                                              inputs)
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optim.step()
        if self._cuda_graphs:  # what outlives the next compiled call, out of the graph's pool
            critic_loss, q_mean, features = critic_loss.detach().clone(), q_mean.clone(), features.clone()

        # Actor and temperature against the critic as just updated: one backward of L_π + L_α (+ the actor terms).
        with self._autocast():
            actor_loss, temperature_loss, terms_loss, log_prob = self._policy_loss(obs, features, noise[1], alpha,
                                                                                   inputs)
        self.actor_optim.zero_grad(set_to_none=True)
        loss = actor_loss + temperature_loss
        (loss if terms_loss is None else loss + terms_loss).backward()
        self.actor_optim.step()  # actor head, and log α when it has a gradient

        self.soft_update_targets()
        self.num_updates += 1

        stats = torch.stack([critic_loss.detach(), actor_loss.detach(), alpha, -log_prob.mean(), q_mean,
                             temperature_loss.detach()]).tolist()  # one host sync for all statistics
        return dict(zip(("critic_loss", "actor_loss", "alpha", "entropy", "q_mean", "temperature_loss"), stats))

    def critic_loss(self, obs: Obs, action: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor,
                    next_obs: Obs, noise: torch.Tensor, subset: torch.Tensor | None,
                    alpha: torch.Tensor, discount: torch.Tensor | float | None = None,
                    inputs: Sequence[Any] = ()) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(L_Q, mean Q, detached features of obs)`` for squashed actions and noise ``[B, |A|]``.

        A pure function of its inputs (``update`` draws the noise for a' and the critic subset).
        ``discount`` is γ, or the per-row γ^m of n-step rows (``batch.extras["discount"]``). ``inputs``: each of
        ``self.terms``' inputs this step (``None``: off); none given, the loss is SAC's alone.
        """
        # Soft TD target, a' ~ π(·|s') and M ⊆ {1..E} a random subset (all members when M = E):
        #   y = r + γ·(1 − terminated)·(min_{j∈M} Q̄_j(s', a') − α·log π(a'|s')), the last term if backup_entropy
        # Truncated rows bootstrap: next_obs is the true final observation, not the reset one.
        with torch.no_grad():
            next_features = self.actor.encoder(next_obs)
            next_action, next_log_prob = self.actor.sample(next_features, noise)
            target_features = next_features if self._target_encoder is None else self._target_encoder(next_obs)
            q_next = self.critic_target(target_features, next_action)
            if subset is not None:
                q_next = q_next[subset]
            soft_value = q_next.min(dim=0).values - (alpha * next_log_prob if self.cfg.backup_entropy else 0.0)
            gamma = self.cfg.gamma if discount is None else discount
            target = reward + gamma * (1.0 - terminated.float()) * soft_value
        # L_Q = ½ Σ_j mean_b (Q_j(s, a) − y)²; its gradient also trains the image encoder (DrQ).
        features = self._critic_encoder(obs)
        q = self.critic(features, action)
        loss = 0.5 * (q - target).square().mean(dim=1).sum()
        # + the critic terms, e.g. CQL's conservative one.
        terms_loss = sum_losses([term.critic_loss(self, obs, features, q, x) for term, x in self._on(inputs)])
        loss = loss if terms_loss is None else loss + terms_loss
        return loss, q.detach().mean(), features.detach()

    def actor_loss(self, features: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor,
                   critic_features: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(L_π, detached log π(ã|s))`` for encoded observations ``[B, F]`` and noise ``[B, |A|]``.

        ``critic_features``: what the critic reads when it has its own encoder (default: ``features``).
        """
        # L_π = mean_b [α·log π(ã|s) − Q(s, ã)], ã = tanh(μ + σ·ε) reparameterised, Q = min_j Q_j
        # (clipped double Q) or mean_j Q_j when targets use random subsets (REDQ). Features are
        # detached (DrQ: only the critic trains the encoder) and so are the critic weights, so the
        # backward pass computes no critic weight gradients at all.
        action, log_prob = self.actor.sample(features, noise)
        q = self.critic(features if critic_features is None else critic_features, action, detach_params=True)
        q_pi = q.min(dim=0).values if self.num_sampled == self.cfg.num_critics else q.mean(dim=0)
        return (alpha * log_prob - q_pi).mean(), log_prob.detach()

    def policy_loss(self, obs: Obs, critic_features: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor,
                    inputs: Sequence[Any] = ()
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """``(L_π, L_α, the actor terms' sum or None, detached log π(ã|s))``, for one ``backward``.

        ``critic_features``: the critic pass's (detached) features of ``obs``, which the actor reuses (saving a
        second CNN pass on pixels) unless it has its own head on a shared trunk's maps. ``inputs``: the terms'
        (:meth:`critic_loss`); while a term that ``replaces_actor_loss`` is on, its objective is ``L_π``.
        """
        own = self.critic.encoder is not None
        features = self.actor.encoder({k: v.detach() for k, v in obs.items()}) if own else critic_features
        on = self._on(inputs)
        lead = next(((term, x) for term, x in on if term.replaces_actor_loss), None)
        if lead is None:
            actor_loss, log_prob = self._actor_loss(features, noise, alpha, critic_features if own else None)
        else:  # a term is L_π this step (the BC warm-up): no Q, and α rests below
            log_prob = self.actor.sample(features, noise)[1].detach()
            actor_loss = lead[0].actor_objective(self, features, lead[1])
        # The actor terms, e.g. co-training's λ·BC on real demos.
        terms_loss = sum_losses([term.actor_loss(self, features, x) for term, x in on])
        # Temperature: L_α = −log α · (mean_b log π(ã|s) + H̄), so ∂L/∂log α = −(mean_b log π + H̄): α grows while
        # the entropy −log π is below the target H̄ and shrinks above it (log π is detached: L_α trains α only).
        # While a term replaces L_π, α rests: a zero gradient, which moves nothing while Adam's moments are still 0.
        log_alpha = (self.log_alpha if self.cfg.autotune_entropy else self.log_alpha.detach()) * (lead is None)
        return actor_loss, -log_alpha * (log_prob.mean() + self.target_entropy), terms_loss, log_prob

    @torch.no_grad()
    def soft_update_targets(self) -> None:
        """Polyak averaging, fused over every target tensor: θ̄ ← θ̄ + τ·(θ − θ̄)."""
        torch._foreach_lerp_(self._targets, self._online, self.cfg.tau)

    # ---- the update's parts ---------------------------------------------------------------------------------------

    def draw(self, draw: Callable[..., torch.Tensor], shape: tuple[int, ...], dim: int = 1) -> torch.Tensor:
        """``draw(shape)`` (torch.randn …) from the learner's generator: this rank's rows along ``dim`` (draw_rows)."""
        return draw_rows(partial(draw, generator=self.generator, device=self.device), shape, self.data_parallel, dim)

    def _on(self, inputs: Sequence[Any]) -> list[tuple[SACLossTerm, Any]]:
        """The terms that are on this step, with their inputs."""
        return [(term, x) for term, x in zip(self.terms, inputs) if x is not None]

    def _build_terms(self) -> list[SACLossTerm]:
        """The config's loss terms, then the attached extension's (:class:`~.sac_terms.ExtensionLoss`)."""
        return [*(c.build() for c in self.cfg.loss_term_configs()), ExtensionLoss()]

    def _observe(self, batch: TransitionBatch) -> tuple[Obs, Obs]:
        """``(obs, next_obs)`` as the losses read them: normaliser updated, DrQ-shifted, through the shared trunk."""
        dp = self.data_parallel
        # Every rank folds every rank's states into its normaliser, in rank order: the statistics stay equal.
        shared = dp is not None and self.actor.encoder.normalizer is not None
        self.actor.encoder.update_normalizer({"state": dp.cat(batch.obs["state"])} if shared and dp else batch.obs)
        obs, next_obs = batch.obs, batch.next_obs
        if self.actor.encoder.cnn is not None and self.cfg.image_shift_pad > 0:
            obs, next_obs = self._augment(obs), self._augment(next_obs)  # independent shifts (DrQ)
        if self.actor.backbone is not None:  # the shared trunk, once per batch for every network
            with self._autocast():
                obs = self.actor.backbone(obs)
                with torch.no_grad():
                    next_obs = self.actor.backbone(next_obs)
        return obs, next_obs

    def _augment(self, obs: Obs) -> Obs:
        pad = self.cfg.image_shift_pad
        offsets = partial(torch.randint, 0, 2 * pad + 1)  # sample_shifts' draw, through draw for the ranks' rows
        return {k: random_shift(v, pad, shifts=self.draw(offsets, (len(v), 2), dim=0)) if k.startswith("image.")
                else v for k, v in obs.items()}

    def _critic_subset(self) -> torch.Tensor | None:
        """REDQ: the M target critics this step's target takes the min over (``None``: all E)."""
        cfg = self.cfg
        if self.num_sampled == cfg.num_critics:
            return None
        return torch.randperm(cfg.num_critics, generator=self.generator, device=self.device)[: self.num_sampled]

    def _autocast(self) -> torch.autocast:
        """bf16 autocast of the hidden layers when ``amp_bf16`` (off: a no-op)."""
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.cfg.amp_bf16)

    # ---- the pieces the loop asks for -----------------------------------------------------------------------------

    def make_policy(self) -> SACPolicy:
        """An independent copy of the current actor (for actor threads/processes)."""
        return copy.deepcopy(self.actor)

    def make_storage(self, num_envs: int) -> ReplayBuffer | MixingSampler:
        """A replay buffer, or with ``demo_ratio > 0`` one mixing ``online``/``demos`` (:func:`make_replay`)."""
        track_returns = any(t.reads_mc_return for t in self.cfg.loss_term_configs())  # Cal-QL online
        return make_replay(self.spec, self.device, self.cfg, track_returns=track_returns)

    def actor_weights(self) -> Weights:
        """Encoder (CNN, or trunk and head; normaliser statistics), actor head and action scaling; never critics."""
        # A frozen trunk never changes, so its tensors go out uncopied: a checkpoint holding the learner's state
        # and these weights then stores them once (torch.save writes a shared storage once).
        trunk = self.actor.backbone
        fixed = trunk is not None and trunk.frozen

        def shared(key: str, v: torch.Tensor) -> bool:
            return fixed and key.startswith("backbone.") and v.device.type == "cpu"

        return {k: v if shared(k, v) else v.detach().to("cpu", copy=True) for k, v in self.actor.state_dict().items()}

    def critic_weights(self) -> Weights:
        """The critic ensemble (and its encoder head) for an actor's :class:`SACValueEstimator`: CPU copies."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.critic.state_dict().items()}

    def load_actor_weights(self, weights: Weights) -> None:
        """Load actor weights (e.g. behaviour cloning); the target encoder restarts from the new CNN."""
        self.actor.load_state_dict(weights, strict=True)
        if self.encoder_target is not None:
            self.encoder_target.load_state_dict(self.actor.encoder.state_dict())

    @torch.no_grad()
    def td_error(self, batch: TransitionBatch) -> float:
        """Mean squared TD error of the critics on ``batch`` (held-out data: no update, no augmentation, no terms)."""
        n = len(batch)
        gen = torch.Generator(self.device).manual_seed(0)  # its own: checking leaves training's draws alone
        noise = torch.randn((n, self.actor.act_dim), generator=gen, device=self.device)
        obs, next_obs = self.actor.embed(batch.obs), self.actor.embed(batch.next_obs)
        loss, _, _ = self.critic_loss(obs, self.actor.unit_action(batch.action), batch.reward, batch.terminated,
                                      next_obs, noise, None, self.log_alpha.exp(), batch.extras.get(DISCOUNT.name))
        return 2.0 * float(loss) / self.cfg.num_critics  # the loss is ½·Σ_j mean_b (Q_j − y)²

    def finish_offline(self) -> None:
        """Online rows have no Monte-Carlo return: the conservative term (CQL, Cal-QL) is the offline phase's."""
        kept = tuple(t for t in self.cfg.loss_terms if not t.offline_only)
        self.cfg = replace(self.cfg, cql_alpha=0.0, calql=False, loss_terms=kept)
        self.terms = self._build_terms()

    # ---- supervised learning (co-training, SFT): robot_rl.core.algorithm.SupervisedLoss ---------------------------

    def supervised_loss(self, obs: Obs, action: torch.Tensor, mask: torch.Tensor | None = None,
                        generator: torch.Generator | None = None, train_encoder: bool = False) -> torch.Tensor:
        """Behaviour cloning, ``mean_b ‖tanh μ(s_b) − a_b‖²`` in the unit box, for demonstrated actions ``[B, *A]``.

        Not the likelihood: it fails on actions at the bound (:func:`~.sac_networks.squashed_mean_error`).
        ``train_encoder=False`` detaches the features: the critic trains the encoder, as in the actor loss.
        ``mask`` and ``generator`` are not used (one action per row, no noise).
        """
        features = self.actor.encode(obs)
        if not train_encoder:
            features = features.detach()
        return self.actor.data_error(features, action).mean()

    def supervised_parameters(self) -> list[nn.Parameter]:
        """The whole actor (encoder and head) but a frozen trunk."""
        return [p for p in self.actor.parameters() if p.requires_grad]

    def prepare_supervised(self, obs: Obs) -> None:
        """Fold the demos' ``state`` into the observation normaliser."""
        self.actor.encoder.update_normalizer(obs)

    def finish_supervised(self) -> None:
        """The target encoder restarts from the encoder supervised learning trained."""
        self.load_actor_weights(self.actor_weights())

    # ---- checkpoints ----------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Networks, targets, optimisers, log α, normaliser statistics, update count and RNG state."""
        return {
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "encoder_target": self.encoder_target.state_dict() if self.encoder_target is not None else {},
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optim": self.actor_optim.state_dict(),
            "critic_optim": self.critic_optim.state_dict(),
            "num_updates": self.num_updates, "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output exactly; a missing or unknown key is an error."""
        nets.check_state_keys("SAC", state, tuple(self.state_dict()))
        self.critic.load_state_dict(state["critic"], strict=True)
        self.critic_target.load_state_dict(state["critic_target"], strict=True)
        if self.encoder_target is not None:
            self.encoder_target.load_state_dict(state["encoder_target"], strict=True)
        # Last, so that the actor's normaliser statistics win where the target copies share the module (a
        # checkpoint from before they shared it holds stale statistics in its target copies).
        self.actor.load_state_dict(state["actor"], strict=True)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.critic_optim.load_state_dict(state["critic_optim"])
        self.num_updates = int(state["num_updates"])
        self.generator.set_state(state["generator"].cpu())
