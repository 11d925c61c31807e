"""Q-chunking over a frozen LeRobot SmolVLA: a chunk critic picks the best of the VLA's N chunks.

``robot-rl train --algo flow_qc algo.init_from=<SmolVLA checkpoint dir>`` builds this learner instead of
:class:`~robot_rl.policies.flow.qchunk.FlowQCAlgorithm`. The VLA stays frozen (as for Flow-Noise PPO's VLM; a
flow-matching step through lerobot's model is not written) and proposes ``num_samples`` chunks per state from as
many noises; the critic ensemble reads the VLA's pooled features (normalised state and each camera's mean vision
embedding, :meth:`LeRobotFlowPolicy.features`) and the executed part of a chunk. It learns :mod:`.qchunk`'s chunk
TD target (the best of ``target_samples`` VLA chunks at ``s'`` under the target critics, demo rows mixed in as
there), and acting executes the best of N. This is Q-chunking's best-of-N actor with its behaviour flow fixed: it
improves on the VLA as far as the VLA's own samples reach, which is where it fits a CPU-sized budget and a VLA too
large to fine-tune. Only the critic trains, so only the critic is published to actors and checkpointed; every
process loads the VLA from ``init_from``.

Cost: each act and each update's target run the VLA on ``N`` (``target_samples``) copies of every state; lower
``num_samples`` / ``target_samples`` on a CPU.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from robot_rl.core.algorithm import Policy
from robot_rl.core.data_parallel import DataParallel
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.core.transition import Obs, TransitionBatch
from robot_rl.policies.flow.lerobot_base import LeRobotFlowPolicy, lerobot_policy_type
from robot_rl.policies.flow.qchunk import FlowQCAlgorithm, FlowQCConfig
from robot_rl.policies.flow.qchunk_data import chunk_td_target
from robot_rl.policies.flow.qchunk_policy import BestOfNScoring, ChunkCritic


def is_lerobot_base(init_from: str | None) -> bool:
    """Whether ``init_from`` is a LeRobot checkpoint directory (not a flow SFT run)."""
    return bool(init_from) and lerobot_policy_type(Path(str(init_from))) is not None


class LeRobotQCPolicy(BestOfNScoring, Policy):
    """Acting: the best of N chunks of a frozen LeRobot VLA under the chunk critic ensemble."""

    def __init__(self, base: LeRobotFlowPolicy, spec: EnvSpec, cfg: FlowQCConfig) -> None:
        super().__init__()
        cfg.validate()
        if len(spec.action.shape) != 2:
            raise SpecMismatchError(f"flow_qc acts in action chunks [H, A]; the task's action is "
                                    f"{list(spec.action.shape)} (set task.chunk_horizon)")
        self._base = [base]  # not a submodule: frozen, loaded by each process, never in the weights
        self.horizon, self.action_dim = int(spec.action.shape[0]), int(spec.action.shape[1])
        self.execute = cfg.execute_steps or self.horizon
        if not 1 <= self.execute <= self.horizon:
            raise ValueError(f"algo.execute_steps must be in [1, {self.horizon}] (the task's chunk), "
                             f"got {self.execute}")
        self.num_samples, self.select = cfg.num_samples, cfg.select
        self.critic = ChunkCritic(base.encoder.out_dim, self.execute * self.action_dim, cfg)
        self.generator: torch.Generator | None = None

    @property
    def base(self) -> LeRobotFlowPolicy:
        """The frozen VLA that proposes the chunks."""
        return self._base[0]

    def reseed(self, seed: int) -> None:
        """Draw the sampled chunks' noise from this policy's own generator seeded ``seed``."""
        device = next(self.critic.parameters()).device
        self.generator = torch.Generator(device=device).manual_seed(int(seed))

    def features(self, obs: Obs) -> torch.Tensor:
        """The critic's input features of ``obs`` ``[n, C]`` (the VLA's, no gradient)."""
        return self.base.features(obs).to(next(self.critic.parameters()).device)

    def chunks(self, obs: Obs, x0: torch.Tensor) -> torch.Tensor:
        """The VLA's chunks ``[n, N, H, A]`` (clamped to the bounds) from noises ``x0`` ``[n, N, H, A]``."""
        n, k = x0.shape[:2]
        repeated = {key: value.repeat_interleave(k, dim=0) for key, value in obs.items()}
        chunks = self.base._bound(self.base.sample(repeated, x0.flatten(0, 1)))
        return chunks.to(x0.device).view(n, k, self.horizon, self.action_dim)

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The best of N VLA chunks ``[n, H, A]`` under the critics (a fixed candidate set when deterministic)."""
        features = self.features(obs)
        chunks = self.chunks(obs, self.noise(features.shape[0], deterministic, features.device))
        best = self.score(self.critic, features, chunks, self.select).argmax(dim=1)
        return chunks[torch.arange(chunks.shape[0], device=chunks.device), best], {}


def build_lerobot_qc_policy(cfg: FlowQCConfig, spec: EnvSpec, device: torch.device | str,
                            seed: int = 0) -> LeRobotQCPolicy:
    """An actor's policy alone: the VLA of ``cfg.init_from`` and a fresh critic (the actor weights replace it)."""
    from robot_rl.policies.flow.lerobot_flow_ppo import load_smolvla_for_task

    assert cfg.init_from is not None
    base = load_smolvla_for_task(cfg.init_from, cfg.instruction, spec, device, "Q-chunking (flow_qc)")
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        policy = LeRobotQCPolicy(base, spec, cfg).to(device)
    policy.reseed(seed)
    return policy


class LeRobotQCAlgorithm(FlowQCAlgorithm):
    """Learner: the chunk critics over a frozen VLA (demo mixing, chunk TD targets and replay as in :mod:`.qchunk`)."""

    actor: LeRobotQCPolicy  # type: ignore[assignment]
    #: Co-training's SFT stage has no flow-matching loss through lerobot's model: it refuses this learner.
    supervised_loss = None  # type: ignore[assignment]

    def __init__(self, cfg: FlowQCConfig, spec: EnvSpec, device: torch.device, seed: int) -> None:
        # Not FlowQCAlgorithm.__init__: there is no flow, critic encoder or one-step policy to build.
        if cfg.actor != "best_of_n":
            raise ValueError("flow_qc over a LeRobot VLA acts best-of-N only (algo.actor=best_of_n): QC-FQL's "
                             "one-step policy distils a flow this learner does not train")
        self.cfg, self.spec, self.device, self.seed = cfg, spec, device, seed
        self.batch_size, self.utd_ratio, self.learning_starts = cfg.batch_size, cfg.utd_ratio, cfg.learning_starts
        self.actor = build_lerobot_qc_policy(cfg, spec, device, seed)
        self.execute = self.actor.execute
        self.critic_target = copy.deepcopy(self.actor.critic).requires_grad_(False)
        self.critic_optim = torch.optim.Adam(self.actor.critic.parameters(), lr=cfg.critic_lr)
        self.fql_optim = None
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.num_updates = self._policies_made = 0
        self.data_parallel: DataParallel | None = None
        self._critic_loss = self.critic_loss
        self._warm_up_due = False
        self.chunk_discount, self.demos = self._task_data(self.actor.horizon)

    def enable_data_parallel(self, dp: DataParallel) -> None:
        """Not written for a LeRobot base: say so rather than train ranks apart."""
        raise NotImplementedError("flow_qc over a LeRobot VLA trains in one process (run.distributed=none)")

    def make_policy(self) -> LeRobotQCPolicy:  # type: ignore[override]
        """An acting copy with its own critic and noise that shares this learner's VLA tensors (one copy in memory).

        The VLA's wrapper is copied: lerobot's processor pipelines keep per-call state, and an actor thread and the
        learner sampling through one pipeline at once mix their batches up.
        """
        self._policies_made += 1
        base = self.actor.base
        shared = {id(t): t for t in (*base.parameters(), *base.buffers())}
        policy = LeRobotQCPolicy(copy.deepcopy(base, shared), self.spec, self.cfg).to(self.device)
        policy.load_actor_weights(self.actor_weights())
        policy.reseed(self.seed * 1000 + self._policies_made)
        return policy

    @torch.no_grad()
    def td_target(self, reward: torch.Tensor, terminated: torch.Tensor, next_obs: Obs,
                  parts: tuple[int, ...] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(y [B], gain [B])``: the chunk TD target over the VLA's chunks at ``s'``, and the best-of-N gain."""
        actor = self.actor
        features = actor.features(next_obs)
        k = self.cfg.target_samples or self.cfg.num_samples
        x0 = self.per_row(torch.randn, parts or (len(reward),), (k, actor.horizon, actor.action_dim))
        q = actor.score(self.critic_target, features, actor.chunks(next_obs, x0), self.cfg.target)
        value = q.max(dim=1).values
        y = chunk_td_target(reward * self.cfg.reward_scale, terminated, value, self.cfg.gamma, self.execute)
        return y, value - q.mean(dim=1)

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        """One critic step on the chunk TD targets, then the target critics (the VLA does not train)."""
        rows, _, parts = self._rows(batch)
        target, gain = self.td_target(rows.reward.float(), rows.terminated, rows.next_obs, parts)
        features = self.actor.features(rows.obs)
        critic_loss, q = self._critic_loss(features, rows.action.float()[:, : self.execute].flatten(1), target)
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        nn.utils.clip_grad_norm_(self.actor.critic.parameters(), self.cfg.max_grad_norm)
        self.critic_optim.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(self.critic_target.parameters()), list(self.actor.critic.parameters()),
                                 self.cfg.tau)
        self.num_updates += 1
        stats = torch.stack([critic_loss.detach(), q.detach().mean(), target.mean(), gain.mean()]).tolist()
        return dict(zip(("critic_loss", "q_mean", "target_mean", "best_of_n_gain"), stats))

    def _optimisers(self) -> dict[str, torch.optim.Optimizer]:
        """The critics' optimiser alone: the VLA does not train (checkpoints hold the critics, not the VLA)."""
        return {"critic_optim": self.critic_optim}


__all__ = ["LeRobotQCAlgorithm", "LeRobotQCPolicy", "build_lerobot_qc_policy", "is_lerobot_base"]
