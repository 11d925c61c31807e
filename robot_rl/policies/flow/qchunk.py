"""Q-chunking (Li, Zhou & Levine 2025, "Reinforcement Learning with Action Chunking") for the flow chunk policy.

Off-policy RL whose critic values whole action chunks. One replay row is one step of the chunk env
(``chunk_horizon = H``, ``execute_steps = E``): the observation, the chunk ``[H, A]`` the env was given, the reward
the env summed over the ``E`` steps it executed (fewer when the episode ended inside the chunk), and the successor.

- **Critic**: an ensemble ``Q_j(s, a_{0:E})`` of MLPs over the frozen SFT encoder's observation features and the
  flattened *executed* part of the chunk (the rest never reaches the env). The encoder is a frozen copy of the
  SFT policy's, not the critic's own: behaviour cloning already made its features carry what the demonstrator
  acts on (the block, the goal, the pusher), TD gradients through a CNN are noisy when most chunks see no
  success, DSRL learned the most on ``lang_push`` over exactly these frozen features
  (benchmarks/RESULTS_flow.md), and a frozen encoder costs one forward pass per batch and no backward pass.
- **TD target** (``chunk_td_target``), best-of-N as in the paper's QC::

      y = R + γ^E · (1 − terminated) · max_{i ≤ N'} agg_j Q̄_j(s', a'_i),   a'_i ~ π_flow(· | s')

  with ``agg`` the ensemble's min (or mean) and ``Q̄`` the Polyak-averaged target critics. A terminated chunk
  (success inside it) never bootstraps; a truncated one bootstraps from the episode's final observation.
- **Per-step discounting.** The paper backs up ``Σ_h γ^h r_h``. ``R`` is what the chunk env reports: with the
  task's ``chunk_discount = γ`` (the ``flow_qc`` presets of ``lang_reach`` / ``lang_push`` set 0.99) exactly that;
  with 1 the plain sum (the learner warns when the task's discount, read from its spec, is not ``gamma``). Demo
  rows are built with the task's discount (:mod:`robot_rl.policies.flow.qchunk_data`), so every row backs up the
  same quantity. One approximation remains: a chunk cut by the time limit after ``m < E`` steps bootstraps with
  ``γ^E``, not ``γ^m`` (the actor loop forwards no per-step count to the learner).
- **Acting** (:class:`FlowQCPolicy`): sample ``N`` chunks from the flow (x0 ~ N(0, I), noise-free ODE), execute
  the one with the highest ``agg_j Q_j`` (the ensemble mean by default). Deterministic acting scores a fixed
  set of ``N`` noises whose first is ``x0 = 0`` (the flow's own deterministic chunk). The acting policy holds the
  critic, so the published actor weights include it.
- **Behaviour policy**: the flow keeps training by flow matching on the replayed chunks (weight ``bc_weight``;
  intervened rows weight 1) and on the demos (``demos``, ``demo_ratio`` of each batch, padding masked), as the
  paper's QC does: the executed chunks are the critic's choices, so imitating them is the policy improvement.

- **QC-FQL** (``actor=fql``): instead of best-of-N, a one-step policy ``μ(s, z)`` distilled from the flow and
  trained to maximise the critic (flow Q-learning; :mod:`robot_rl.policies.flow.fql`) acts, and gives the TD
  target's next chunk. The flow keeps training by flow matching as the behaviour model it is distilled from.

    robot-rl train --task lang_push --algo flow_qc algo.init_from=runs/flow-sft algo.demos=demos/
    robot-rl train --task lang_push --algo flow_qc algo.actor=fql algo.init_from=runs/flow-sft algo.demos=demos/
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import torch
from torch import nn

from robot_rl.core.algorithm import OffPolicyAlgorithm, Policy, Weights
from robot_rl.core.config import ALGOS, AlgoConfig, ConfigError
from robot_rl.core.data_parallel import DataParallel, draw_rows
from robot_rl.core.extras import ACTION_MASK
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs, TransitionBatch
from robot_rl.policies.flow.model import FlowVLAConfig
from robot_rl.policies.flow.onpolicy import load_sft_into
from robot_rl.policies.flow.qchunk_data import ChunkTransitions, chunk_td_target, chunk_transitions
from robot_rl.policies.flow.qchunk_fql import QCFQLSteps
from robot_rl.policies.flow.qchunk_policy import FlowQCPolicy
from robot_rl.replay.buffer import ReplayBuffer

log = logging.getLogger(__name__)

@ALGOS.register("flow_qc")
@dataclass
class FlowQCConfig(AlgoConfig):
    """Q-chunking: a critic over action chunks, best-of-N acting from the flow policy, flow matching on the replay."""

    policy: FlowVLAConfig = field(default_factory=FlowVLAConfig)
    """Architecture and sampler of the flow policy (must match the SFT checkpoint's)."""
    init_from: str | None = None
    """Run directory of a flow SFT checkpoint (`robot-rl flow-sft --out DIR`): the flow policy and the critic's
    frozen encoder start from it. null = random initialisation (the critic then reads random features). A LeRobot
    SmolVLA checkpoint directory: that VLA stays frozen and proposes the N chunks (:mod:`.qchunk_lerobot`)."""
    instruction: str | None = None
    """With a LeRobot ``init_from`` and a task without an instruction table: the instruction the VLA reads."""
    demos: str | None = None
    """Episode store / LeRobotDataset of demos (per-step or chunk actions) kept in every batch (null = none)."""
    demo_ratio: float = 0.5
    """Share of each batch drawn from ``demos`` (RLPD-style symmetric sampling)."""
    execute_steps: int | None = None
    """Actions of each chunk the task executes per step (its ``execute_steps``; null = the whole chunk): the
    critic reads these and the target bootstraps ``γ^execute_steps`` later. Set it to the task's."""
    actor: Literal["best_of_n", "fql"] = "best_of_n"
    """How a chunk is chosen. ``best_of_n`` (QC): the best of ``num_samples`` flow samples under the critic.
    ``fql`` (QC-FQL): a one-step policy trained to maximise the critic near the flow acts, in one MLP pass."""
    fql_alpha: float = 100.0
    """QC-FQL: weight of the distillation towards the flow (larger stays nearer the data; Q-chunking's
    robomimic and cube runs use 100, FQL's tasks 3-3000). The Q term is normalised by ``mean |Q|``."""
    fql_hidden: tuple[int, ...] = (256, 256, 256)
    """QC-FQL: hidden widths of the one-step policy (an MLP over the critic's features and a noise chunk)."""
    fql_lr: float = 3e-4
    """QC-FQL: Adam learning rate of the one-step policy."""
    fql_normalize_q: bool = True
    """QC-FQL: divide the Q term by ``mean |Q|`` (no gradient) so that ``fql_alpha`` holds at any reward scale."""
    fql_warmup_steps: int = 500
    """QC-FQL: distillation-only steps on the demos' observations when the learner is built (with ``demos``), so
    that the one-step policy first acts like the flow rather than at random (FQL's offline phase, without the Q
    term: the critic knows nothing yet). 0 = none."""
    num_samples: int = 16
    """N: chunks sampled per state when acting (``best_of_n``); the best under the critic is executed."""
    target_samples: int | None = None
    """Chunks sampled per next state for the TD target's max (null = ``num_samples``)."""
    select: Literal["mean", "min"] = "mean"
    """How acting aggregates the critic ensemble before the argmax over the N chunks."""
    target: Literal["min", "mean"] = "min"
    """How the TD target aggregates the target ensemble (min = clipped double Q)."""
    num_critics: int = 2
    """Critic ensemble size."""
    critic_hidden: tuple[int, ...] = (256, 256)
    """Hidden widths of each critic."""
    critic_layer_norm: bool = True
    """LayerNorm after each hidden layer of the critics (keeps Q of unseen chunks from exploding)."""
    gamma: float = 0.99
    """Discount per primitive step (a chunk step discounts by ``gamma ** execute_steps``)."""
    tau: float = 0.005
    """Polyak rate of the target critics."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics."""
    flow_lr: float = 1e-4
    """Adam learning rate of the flow policy's flow-matching (behaviour cloning) steps."""
    bc_weight: float = 1.0
    """Weight of a replayed (non-intervened) chunk in the flow-matching loss, against 1 for demo and intervened
    chunks. 0 keeps the flow on the demos (and interventions) only."""
    bc_every: int = 1
    """A flow-matching step every this many critic updates."""
    freeze_encoder: bool = True
    """Keep the flow's observation encoder frozen; it then is the critic's encoder too (one pass per batch).
    false: flow matching trains the flow's encoder and the critic reads a frozen copy of the SFT encoder."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this in the TD target."""
    batch_size: int = 256
    """Rows per update (demo rows included)."""
    utd_ratio: float = 0.25
    """Updates per chunk transition received."""
    learning_starts: int = 1_000
    """Chunk transitions in the replay before the first update."""
    buffer_size: int = 200_000
    """Replay capacity (chunk transitions)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip of the critics and of the flow."""

    def validate(self) -> None:
        """Raise ``ValueError`` on an impossible setting."""
        self.policy.validate()
        execute = self.execute_steps or self.policy.horizon
        if not 1 <= execute <= self.policy.horizon:
            raise ConfigError(f"execute_steps must be in [1, horizon={self.policy.horizon}], got {execute}")
        if self.num_samples < 1 or (self.target_samples is not None and self.target_samples < 1):
            raise ConfigError(f"num_samples and target_samples must be >= 1, got {self.num_samples}, "
                              f"{self.target_samples}")
        if self.num_critics < 1 or self.bc_every < 1:
            raise ConfigError(f"num_critics and bc_every must be >= 1, got {self.num_critics}, {self.bc_every}")
        if self.actor not in ("best_of_n", "fql"):
            raise ConfigError(f"actor must be 'best_of_n' or 'fql', got {self.actor!r}")
        if not self.fql_alpha >= 0 or not self.fql_lr > 0 or not self.fql_hidden or self.fql_warmup_steps < 0:
            raise ConfigError(f"fql_alpha must be >= 0, fql_lr > 0, fql_hidden non-empty and fql_warmup_steps >= 0, "
                              f"got {self.fql_alpha}, {self.fql_lr}, {self.fql_hidden}, {self.fql_warmup_steps}")
        if self.select not in ("mean", "min") or self.target not in ("mean", "min"):
            raise ConfigError(f"select and target must be 'mean' or 'min', got {self.select!r}, {self.target!r}")
        if not 0.0 <= self.demo_ratio < 1.0 or self.bc_weight < 0:
            raise ConfigError(f"demo_ratio must be in [0, 1) and bc_weight >= 0, got {self.demo_ratio}, "
                              f"{self.bc_weight}")
        if not 0.0 < self.gamma <= 1.0 or not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"gamma and tau must be in (0, 1], got {self.gamma}, {self.tau}")

    def build(self, spec: EnvSpec, device: torch.device | str, seed: int) -> FlowQCAlgorithm:
        """The Q-chunking learner (over a frozen LeRobot VLA when ``init_from`` is a LeRobot checkpoint)."""
        from robot_rl.policies.flow import qchunk_lerobot  # lazy: it subclasses this module's learner

        if qchunk_lerobot.is_lerobot_base(self.init_from):
            return qchunk_lerobot.LeRobotQCAlgorithm(self, spec, torch.device(device), seed)
        return FlowQCAlgorithm(self, spec, torch.device(device), seed)

    def build_policy(self, spec: EnvSpec, device: torch.device | str, seed: int = 0) -> Policy:
        """The acting policy alone (flow and critic placeholders; ``init_from`` and ``pretrained_path`` unread).

        A LeRobot ``init_from`` is loaded: its frozen VLA proposes the chunks and is not in the actor weights.
        """
        from robot_rl.policies.flow import qchunk_lerobot

        if qchunk_lerobot.is_lerobot_base(self.init_from):
            return qchunk_lerobot.build_lerobot_qc_policy(self, spec, device, seed)
        cfg = dataclasses.replace(self, policy=dataclasses.replace(self.policy, pretrained_path=None))
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            policy = FlowQCPolicy(spec, cfg).to(device)
        policy.reseed(seed)
        return policy


class FlowQCAlgorithm(QCFQLSteps, OffPolicyAlgorithm):
    """Learner: the acting policy (flow + critics), target critics, the chunk replay and the demo transitions."""

    def __init__(self, cfg: FlowQCConfig, spec: EnvSpec, device: torch.device, seed: int) -> None:
        self.cfg, self.spec, self.device, self.seed = cfg, spec, device, seed
        self.batch_size, self.utd_ratio, self.learning_starts = cfg.batch_size, cfg.utd_ratio, cfg.learning_starts
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            self.actor = FlowQCPolicy(spec, cfg).to(device)
        if cfg.init_from:
            load_sft_into(self.actor.flow, cfg.init_from, spec, device)
        else:
            log.warning("flow_qc without algo.init_from: the flow policy and the critic's features are random")
        if not self.actor.shared_encoder:
            self.actor.critic_encoder.load_state_dict(self.actor.flow.encoder.state_dict())
        self.execute = self.actor.execute
        self.critic_target = copy.deepcopy(self.actor.critic).requires_grad_(False)
        self.critic_optim = torch.optim.Adam(self.actor.critic.parameters(), lr=cfg.critic_lr)
        flow_params = [p for n, p in self.actor.flow.named_parameters() if n != "log_sigma" and p.requires_grad]
        self.flow_optim = torch.optim.Adam(flow_params, lr=cfg.flow_lr)
        onestep = self.actor.onestep
        self.fql_optim = torch.optim.Adam(onestep.parameters(), lr=cfg.fql_lr) if onestep is not None else None
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.num_updates = 0
        self._policies_made = 0
        self.data_parallel: DataParallel | None = None
        self._critic_loss, self._flow_loss, self._fql_loss = self.critic_loss, self.flow_matching, self.fql_actor_loss
        self.chunk_discount, self.demos = self._task_data(self.actor.horizon)
        # Before the one-step policy first acts or learns, unless a resumed state replaces it (load_state_dict).
        self._warm_up_due = self.demos is not None and self.fql_optim is not None and cfg.fql_warmup_steps > 0

    def _task_data(self, horizon: int) -> tuple[float, ChunkTransitions | None]:
        """``(the task's chunk discount, the demos' chunk transitions or None)``, warning if the discount is not γ."""
        cfg, chunk_discount = self.cfg, float(self.spec.extras.get("chunk_discount", 1.0))
        if abs(chunk_discount - cfg.gamma) > 1e-9:
            log.warning("flow_qc: the task sums a chunk's rewards with discount %g per step, the critic discounts by "
                        "gamma=%g: to back up the per-step discounted return, the chunk tasks take "
                        "task.chunk_discount=%g (a task of your own: discount a chunk's rewards by gamma per step "
                        "and name it in spec.extras['chunk_discount'])", chunk_discount, cfg.gamma, cfg.gamma)
        if not cfg.demos:
            return chunk_discount, None
        from robot_rl.data.demos import read_episodes

        demos = chunk_transitions(read_episodes(cfg.demos)[0], self.spec, horizon, self.execute, chunk_discount)
        log.info("flow_qc: %d demo chunk transitions from %s", len(demos), cfg.demos)
        return chunk_discount, demos

    def enable_data_parallel(self, dp: DataParallel) -> None:
        """Average the critics' and the flow's gradients over ``dp``'s ranks (DDP, one module per optimiser).

        Every per-row draw of an update (the demo rows, the best-of-N chunks' noise, flow matching's noise and
        times) is drawn for the ranks' rows together and shared out, and the flow-matching loss is normalised by
        the weight of every rank's rows: each rank takes the step one process takes on the ranks' batches
        together. Rank 0's parameters are copied here.
        """
        self.data_parallel = dp
        self._critic_loss = dp.wrap_loss(self.critic_loss, self.critic_optim.param_groups[0]["params"])
        self._flow_loss = dp.wrap_loss(self.flow_matching, self.flow_optim.param_groups[0]["params"])
        if self.fql_optim is not None:
            self._fql_loss = dp.wrap_loss(self.fql_actor_loss, self.fql_optim.param_groups[0]["params"])

    # ---- what the loop asks for ------------------------------------------------------------------

    def warm_up(self) -> None:
        """QC-FQL's distillation warm-up (:meth:`warm_up_onestep` on the demos), once, when it is still due."""
        if self._warm_up_due and self.demos is not None:
            self._warm_up_due = False
            self.warm_up_onestep(self.demos, self.cfg.fql_warmup_steps)

    def make_policy(self) -> FlowQCPolicy:
        """An independent acting copy with its own seeded sampling noise."""
        self._policies_made += 1
        policy = self.cfg.build_policy(self.spec, self.device, self.seed * 1000 + self._policies_made)
        assert isinstance(policy, FlowQCPolicy)
        policy.load_actor_weights(self.actor_weights())
        return policy

    def make_storage(self, num_envs: int) -> ReplayBuffer:
        """A replay of chunk transitions (one row per chunk step)."""
        return ReplayBuffer(self.spec, self.cfg.buffer_size, self.device)

    def actor_weights(self) -> Weights:
        """The flow policy, the critic encoder and the critic ensemble (acting scores chunks): CPU copies."""
        self.warm_up()
        return {k: v.detach().to("cpu", copy=True) for k, v in self.actor.state_dict().items()}

    def load_actor_weights(self, weights: Weights) -> None:
        """Load acting weights (strict); the target critics restart from the loaded critics."""
        self.actor.load_state_dict(weights, strict=True)
        self.critic_target.load_state_dict(self.actor.critic.state_dict())

    # ---- supervised learning (co-training, SFT): robot_rl.core.algorithm.SupervisedLoss -------------

    def supervised_loss(self, obs: Obs, action: torch.Tensor, mask: torch.Tensor | None = None,
                        generator: torch.Generator | None = None, train_encoder: bool = False) -> torch.Tensor:
        """The flow's flow-matching loss on target chunks ``[B, H, A]`` (``mask`` ``[B, H]``)."""
        return self.actor.flow.supervised_loss(obs, action, mask, generator, train_encoder)

    def supervised_parameters(self) -> list[nn.Parameter]:
        """The flow's parameters but σ, a frozen encoder included (co-training's SFT stage turns it on)."""
        return self.actor.flow.supervised_parameters()

    def prepare_supervised(self, obs: Obs) -> None:
        """Nothing to fit (no normaliser)."""

    def finish_supervised(self) -> None:
        """The critic's frozen encoder becomes the supervised encoder; the target critics restart from the critics."""
        if not self.actor.shared_encoder:
            self.actor.critic_encoder.load_state_dict(self.actor.flow.encoder.state_dict())
        self.critic_target.load_state_dict(self.actor.critic.state_dict())

    # ---- the update --------------------------------------------------------------------------------

    def per_row(self, draw: Callable[..., torch.Tensor], parts: tuple[int, ...], shape: tuple[int, ...] = ()
                ) -> torch.Tensor:
        """``draw`` (``torch.randn`` …) ``[rows, *shape]`` for the update's rows, in ``parts`` (online, demo rows).

        On ranks, each part is drawn for every rank's rows of that part and this rank keeps its share, so the
        ranks together use the numbers one process draws for their concatenated batches.
        """
        make = partial(draw, generator=self.generator, device=self.device)
        return torch.cat([draw_rows(make, (n, *shape), self.data_parallel) for n in parts if n])

    def best_of_n_values(self, cond: torch.Tensor, features: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        """``agg_j Q̄_j`` ``[B, N']`` of ``N'`` chunks sampled from the flow at each state (target critics).

        ``x0`` ``[B, N', H, A]``: the chunks' initial noise.
        """
        b, k, h, a = x0.shape
        chunks = self.actor.chunks_from_noise(cond.repeat_interleave(k, dim=0), x0.flatten(0, 1)).view(b, k, h, a)
        return self.actor.score(self.critic_target, features, chunks, self.cfg.target)

    @torch.no_grad()
    def td_target(self, reward: torch.Tensor, terminated: torch.Tensor, next_obs: Obs,
                  parts: tuple[int, ...] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(y [B], gain [B])``: the chunk TD target, and the best-of-N gain at the next states.

        The gain is how far the max of the sampled chunks' values lies above their mean: what selecting adds.
        ``parts``: the rows' parts for :meth:`per_row` (default: one).
        """
        features = self.actor.critic_encoder(next_obs)
        onestep = self.actor.onestep
        if onestep is not None:  # QC-FQL: the one-step policy's chunk at s'
            z = self.per_row(torch.randn, parts or (len(reward),), (self.actor.horizon, self.actor.action_dim))
            chunk = onestep.bounded(onestep(features, z))[:, None]  # one candidate per state
            value = self.actor.score(self.critic_target, features, chunk, self.cfg.target)[:, 0]
            y = chunk_td_target(reward * self.cfg.reward_scale, terminated, value, self.cfg.gamma, self.execute)
            return y, torch.zeros_like(value)
        cond = features if self.actor.shared_encoder else self.actor.flow.encoder(next_obs)
        k = self.cfg.target_samples or self.cfg.num_samples
        x0 = self.per_row(torch.randn, parts or (len(reward),), (k, self.actor.horizon, self.actor.action_dim))
        q = self.best_of_n_values(cond, features, x0)
        value = q.max(dim=1).values
        y = chunk_td_target(reward * self.cfg.reward_scale, terminated, value, self.cfg.gamma, self.execute)
        return y, value - q.mean(dim=1)

    def critic_loss(self, features: torch.Tensor, executed: torch.Tensor, target: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Σ_j ½·mean_b (Q_j − y)², Q [E, B])`` of the chunks' executed actions ``[B, E·A]``."""
        q = self.actor.critic(features, executed)
        return 0.5 * (q - target).square().mean(dim=1).sum(), q

    def flow_matching(self, cond: torch.Tensor, actions: torch.Tensor, weight: torch.Tensor, x0: torch.Tensor,
                      t: torch.Tensor, total_weight: torch.Tensor) -> torch.Tensor:
        """Weighted rectified-flow loss ``Σ w·‖v_θ(x_t, t, c) − (a − x0)‖² / W`` (``weight`` ``[B, H]``).

        ``x0`` ``[B, H, A]`` and ``t`` ``[B]``: the noise and times; ``W``: ``total_weight``, the weight of the rows
        (of one rank's rows on average, on ranks: the ranks' mean of this loss is then the whole batch's).
        """
        xt = (1 - t)[:, None, None] * x0 + t[:, None, None] * actions
        err = (self.actor.flow.velocity(xt, t, cond) - (actions - x0)).square().mean(-1)
        return (err * weight).sum() / total_weight.clamp_min(1e-8)

    def _rows(self, batch: TransitionBatch) -> tuple[TransitionBatch, torch.Tensor, tuple[int, int]]:
        """The update's rows, the flow-matching weights, and the numbers of online and demo rows.

        The rows are the sampled batch with its tail replaced by demo rows.
        """
        h = self.actor.horizon
        n_demo = round(self.cfg.batch_size * self.cfg.demo_ratio) if self.demos is not None else 0
        n_demo = min(n_demo, len(batch) - 1) if n_demo else 0
        online = batch if n_demo == 0 else batch.index(slice(0, len(batch) - n_demo))
        online_w = torch.where(online.intervened, 1.0, self.cfg.bc_weight).to(self.device)
        weight = online_w[:, None].expand(-1, h)
        if not n_demo or self.demos is None:
            return online, weight, (len(online), 0)
        idx = self.per_row(partial(torch.randint, 0, len(self.demos)), (n_demo,))
        demo = self.demos.batch(idx, self.device)
        rows = TransitionBatch(
            obs={k: torch.cat([online.obs[k], demo.obs[k]]) for k in online.obs},
            action=torch.cat([online.action, demo.action]), reward=torch.cat([online.reward, demo.reward]),
            terminated=torch.cat([online.terminated, demo.terminated]),
            truncated=torch.cat([online.truncated, demo.truncated]),
            next_obs={k: torch.cat([online.next_obs[k], demo.next_obs[k]]) for k in online.obs},
            intervened=torch.cat([online.intervened, demo.intervened]),
            policy_version=torch.cat([online.policy_version, demo.policy_version]),
            env_index=torch.cat([online.env_index, demo.env_index]))
        return rows, torch.cat([weight, demo.extras[ACTION_MASK.name]]), (len(online), n_demo)

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        """One critic step on the chunk TD targets, a flow-matching step (every ``bc_every``), then the targets."""
        cfg, actor = self.cfg, self.actor
        self.warm_up()
        rows, weight, parts = self._rows(batch)
        action = rows.action.float()
        target, gain = self.td_target(rows.reward.float(), rows.terminated, rows.next_obs, parts)
        with torch.no_grad():
            features = actor.critic_encoder(rows.obs)
        critic_loss, q = self._critic_loss(features, action[:, : self.execute].flatten(1), target)
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        nn.utils.clip_grad_norm_(actor.critic.parameters(), cfg.max_grad_norm)
        self.critic_optim.step()
        bc_loss = torch.tensor(float("nan"))
        if self.num_updates % cfg.bc_every == 0:
            actor.train()  # the policy's train(): a frozen critic encoder stays in eval mode
            cond = features if actor.shared_encoder else actor.flow.encoder(rows.obs)
            x0 = self.per_row(torch.randn, parts, tuple(action.shape[1:]))
            t = self.per_row(torch.rand, parts)
            total = weight.sum() if self.data_parallel is None else self.data_parallel.mean(weight.sum())
            bc_loss = self._flow_loss(cond, action, weight, x0, t, total)
            aux = self.aux_loss()  # an attached extension's term for the actor's gradient step
            self.flow_optim.zero_grad(set_to_none=True)
            (bc_loss if aux is None else bc_loss + aux).backward()
            nn.utils.clip_grad_norm_(actor.flow.parameters(), cfg.max_grad_norm)
            self.flow_optim.step()
        fql: dict[str, float] = {}
        if self.fql_optim is not None:
            fql["fql_distill"], fql["fql_q"] = self.fql_step(rows.obs, features, parts)
        with torch.no_grad():
            torch._foreach_lerp_(list(self.critic_target.parameters()), list(actor.critic.parameters()), cfg.tau)
        self.num_updates += 1
        stats = torch.stack([critic_loss.detach(), q.detach().mean(), target.mean(), gain.mean(),
                             bc_loss.detach().to(critic_loss.device)]).tolist()
        return {**dict(zip(("critic_loss", "q_mean", "target_mean", "best_of_n_gain", "bc_loss"), stats)), **fql}

    # ---- checkpoints ---------------------------------------------------------------------------------

    def _optimisers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimisers a checkpoint holds, by state key."""
        optims: dict[str, torch.optim.Optimizer] = {"critic_optim": self.critic_optim, "flow_optim": self.flow_optim}
        return optims if self.fql_optim is None else {**optims, "fql_optim": self.fql_optim}

    def state_dict(self) -> dict[str, Any]:
        """Acting policy (flow, critic encoder, critics, QC-FQL's one-step policy), targets, optimisers, RNG state.

        Also the update count.
        """
        self.warm_up()
        return {"actor": self.actor.state_dict(), "critic_target": self.critic_target.state_dict(),
                "num_updates": self.num_updates, "generator": self.generator.get_state(),
                **{k: o.state_dict() for k, o in self._optimisers().items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output exactly; a missing or unknown key is an error."""
        optims = self._optimisers()
        expected = {"actor", "critic_target", "num_updates", "generator", *optims}
        if set(state) != expected:
            raise KeyError(f"flow_qc state keys differ: missing {sorted(expected - set(state))}, "
                           f"unknown {sorted(set(state) - expected)} (resume with the algo.actor and algo.init_from "
                           f"the run was trained with; algo.actor is {self.cfg.actor!r})")
        self.actor.load_state_dict(state["actor"], strict=True)
        self.critic_target.load_state_dict(state["critic_target"], strict=True)
        for key, optim in optims.items():
            optim.load_state_dict(state[key])
        self.num_updates = int(state["num_updates"])
        self.generator.set_state(state["generator"].cpu())
        self._warm_up_due = False  # the resumed one-step policy is past it
