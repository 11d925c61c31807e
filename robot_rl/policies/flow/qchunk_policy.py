"""Q-chunking's acting side: the chunk critic ensemble and the policy that executes chunks (:mod:`.qchunk`).

:class:`FlowQCPolicy` is what actor processes build and load the published weights into: the flow policy, the
frozen critic encoder, the critic ensemble and, with QC-FQL, the one-step policy (:mod:`.fql`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from robot_rl.core.algorithm import Policy
from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.core.transition import Obs
from robot_rl.policies.flow.fql import OneStepChunkPolicy
from robot_rl.policies.flow.model import FlowVLAPolicy, VLAEncoder
from robot_rl.policies.modules.ensemble import EnsembleMLP

if TYPE_CHECKING:
    from robot_rl.policies.flow.qchunk import FlowQCConfig

#: Seed of the fixed noises deterministic acting scores (the same candidates on every call).
DETERMINISTIC_SEED = 0


class ChunkCritic(nn.Module):
    """Ensemble ``Q_j(features [B, C], executed chunk [B, E·A]) → [num_critics, B]``."""

    def __init__(self, feature_dim: int, chunk_dim: int, cfg: FlowQCConfig) -> None:
        super().__init__()
        self.q = EnsembleMLP(cfg.num_critics, feature_dim + chunk_dim, cfg.critic_hidden, 1, cfg.critic_layer_norm)

    def forward(self, features: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """Every member's Q."""
        return self.q(torch.cat([features, chunk], dim=-1)).squeeze(-1)


class BestOfNScoring:
    """Candidate noises and critic scores of best-of-N acting.

    For a policy with ``num_samples``, ``horizon``, ``action_dim``, ``execute`` and ``generator``: the flow
    policy here, a LeRobot VLA in :mod:`.qchunk_lerobot`.
    """

    num_samples: int
    horizon: int
    action_dim: int
    execute: int
    generator: torch.Generator | None

    def score(self, critic: nn.Module, features: torch.Tensor, chunks: torch.Tensor, how: str) -> torch.Tensor:
        """``agg_j Q_j`` ``[n, N]`` of candidate chunks ``[n, N, H, A]`` at states with ``features`` ``[n, C]``."""
        n, k = chunks.shape[:2]
        q = critic(features.repeat_interleave(k, dim=0), chunks[:, :, : self.execute].reshape(n * k, -1))
        q = q.min(dim=0).values if how == "min" else q.mean(dim=0)
        return q.view(n, k)

    def noise(self, n: int, deterministic: bool, device: torch.device) -> torch.Tensor:
        """``[n, N, H, A]`` initial noises: drawn per call, or (deterministic) a fixed set led by ``x0 = 0``."""
        shape = (self.num_samples, self.horizon, self.action_dim)
        if deterministic:
            g = torch.Generator(device=device).manual_seed(DETERMINISTIC_SEED)
            x0 = torch.randn(shape, generator=g, device=device)
            x0[0] = 0.0
            return x0.expand(n, *shape)
        return torch.randn((n, *shape), generator=self.generator, device=device)


class FlowQCPolicy(BestOfNScoring, Policy):
    """The acting policy: flow policy + frozen critic encoder + critic ensemble.

    It acts with the best of N flow chunks under the critics, or (QC-FQL, ``actor=fql``) the one-step policy's chunk.
    ``critic_encoder`` is the flow's own encoder when that is frozen (``freeze_encoder``), else a frozen copy.
    """

    def __init__(self, spec: EnvSpec, cfg: FlowQCConfig) -> None:
        super().__init__()
        cfg.validate()
        if len(spec.action.shape) != 2 or spec.action.shape[0] != cfg.policy.horizon:
            raise SpecMismatchError(f"flow_qc acts in action chunks [horizon={cfg.policy.horizon}, A]; the task's "
                                    f"action is {list(spec.action.shape)} (e.g. set task.chunk_horizon="
                                    f"{cfg.policy.horizon})")
        self.flow = FlowVLAPolicy(spec, cfg.policy)
        self.horizon, self.action_dim = cfg.policy.horizon, self.flow.action_dim
        self.execute = cfg.execute_steps or cfg.policy.horizon
        self.num_samples, self.select = cfg.num_samples, cfg.select
        self.critic_encoder = self.flow.encoder if cfg.freeze_encoder else VLAEncoder(spec, cfg.policy)
        self.critic_encoder.requires_grad_(False)
        self.critic = ChunkCritic(self.critic_encoder.out_dim, self.execute * self.action_dim, cfg)
        self.onestep = (OneStepChunkPolicy(self.critic_encoder.out_dim, self.horizon, self.action_dim,
                                           cfg.fql_hidden, self.flow.low, self.flow.high)
                        if cfg.actor == "fql" else None)
        self.generator: torch.Generator | None = None
        self.train(self.training)

    @property
    def shared_encoder(self) -> bool:
        """Whether the critic reads the flow's own (frozen) encoder."""
        return self.critic_encoder is self.flow.encoder

    def train(self, mode: bool = True) -> FlowQCPolicy:
        """As ``nn.Module.train``, but the frozen critic encoder stays in eval mode (fixed normalisation statistics)."""
        super().train(mode)
        self.critic_encoder.eval()
        return self

    def reseed(self, seed: int) -> None:
        """Draw the sampled chunks' noise from this policy's own generator seeded ``seed``."""
        device = next(self.parameters()).device
        self.generator = torch.Generator(device=device).manual_seed(int(seed))

    def chunks_from_noise(self, cond: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        """The flow's noise-free ODE from ``x0`` ``[M, H, A]`` under conditions ``[M, C]``, clamped to the bounds."""
        x = x0
        for k in range(self.flow.cfg.num_steps):
            x = self.flow._mean_step(x, k, cond)
        return self.flow._bound(x)

    @torch.no_grad()
    def conditions(self, obs: Obs, rows: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
        """``(critic features, flow conditions)`` of ``obs``, ``rows`` at a time, in eval mode (fixed statistics)."""
        was_training = self.training
        self.eval()
        n = next(iter(obs.values())).shape[0]
        parts = [{k: v[i:i + rows] for k, v in obs.items()} for i in range(0, n, rows)]
        features = torch.cat([self.critic_encoder(o) for o in parts])
        cond = features if self.shared_encoder else torch.cat([self.flow.encoder(o) for o in parts])
        self.train(was_training)
        return features, cond

    def candidates(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``(chunks [n, N, H, A], critic features [n, C])``: the N chunks the flow proposes at ``obs``."""
        cond = self.flow.encoder(obs)
        features = cond if self.shared_encoder else self.critic_encoder(obs)
        n, k = cond.shape[0], self.num_samples
        x0 = self.noise(n, deterministic, cond.device).reshape(n * k, self.horizon, self.action_dim)
        chunks = self.chunks_from_noise(cond.repeat_interleave(k, dim=0), x0)
        return chunks.view(n, k, self.horizon, self.action_dim), features

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The chunk to execute ``[n, H, A]``; no extras.

        The best of N flow samples under the critic ensemble, or (QC-FQL) the one-step policy's chunk from
        ``z ~ N(0, I)`` (``z = 0`` when deterministic).
        """
        if self.onestep is not None:
            features = self.critic_encoder(obs)
            shape = (features.shape[0], self.horizon, self.action_dim)
            z = (torch.zeros(shape, device=features.device) if deterministic
                 else torch.randn(shape, generator=self.generator, device=features.device))
            return self.onestep.bounded(self.onestep(features, z)), {}
        chunks, features = self.candidates(obs, deterministic)
        best = self.score(self.critic, features, chunks, self.select).argmax(dim=1)
        return chunks[torch.arange(chunks.shape[0], device=chunks.device), best], {}
