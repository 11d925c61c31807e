"""QC-FQL's learner steps (:mod:`.fql`'s one-step policy against :mod:`.qchunk`'s chunk critic), as a mixin.

:class:`~robot_rl.policies.flow.qchunk.FlowQCAlgorithm` takes them in; they read its ``actor`` (flow, critic encoder,
critics, one-step policy), ``fql_optim``, ``cfg``, ``per_row`` and ``data_parallel``.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from robot_rl.core.transition import Obs
from robot_rl.policies.flow.fql import distil_flow, fql_loss
from robot_rl.policies.flow.qchunk_data import ChunkTransitions

if TYPE_CHECKING:
    from robot_rl.core.data_parallel import DataParallel
    from robot_rl.policies.flow.qchunk import FlowQCConfig
    from robot_rl.policies.flow.qchunk_policy import FlowQCPolicy

log = logging.getLogger("robot_rl.policies.flow.qchunk")


class QCFQLSteps:
    """The one-step policy's loss, its distillation warm-up and its update step."""

    actor: FlowQCPolicy
    cfg: FlowQCConfig
    fql_optim: torch.optim.Optimizer | None
    data_parallel: DataParallel | None
    device: torch.device
    seed: int
    execute: int
    _fql_loss: Any
    per_row: Any

    def fql_actor_loss(self, features: torch.Tensor, noise: torch.Tensor, flow_chunks: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(L(ω), distillation error, mean Q of its chunks)``: QC-FQL's one-step policy loss (fql.py).

        The critic is called with detached parameters: this loss trains the one-step policy only.
        """
        assert self.actor.onestep is not None
        params = {k: v.detach() for k, v in self.actor.critic.named_parameters()}
        critic = partial(torch.func.functional_call, self.actor.critic, params)
        across = self.data_parallel.mean if self.data_parallel is not None else None
        loss, info = fql_loss(self.actor.onestep, lambda f, c: critic((f, c)), features, noise, flow_chunks,
                              self.execute, self.cfg.fql_alpha, self.cfg.fql_normalize_q, across)
        return loss, info["distill"], info["q"]

    def warm_up_onestep(self, demos: ChunkTransitions, steps: int, max_states: int = 4096) -> float:
        """Distil the flow into the one-step policy on up to ``max_states`` demo observations; the last error.

        It draws from its own generator (the updates that follow draw the same numbers as without it), and the
        optimiser's moments restart after it.
        """
        actor, optim = self.actor, self.fql_optim
        assert actor.onestep is not None and optim is not None
        pick = torch.randperm(len(demos), generator=torch.Generator().manual_seed(self.seed + 1))[:max_states]
        features, cond = actor.conditions(demos.batch(pick, self.device).obs)
        g = torch.Generator(device=self.device).manual_seed(self.seed + 1)
        error = distil_flow(actor.onestep, optim, features, cond, actor.chunks_from_noise, steps,
                            self.cfg.batch_size, g)
        log.info("flow_qc: one-step policy distilled from the flow in %d steps on %d demo states (error %.4f)",
                 steps, len(pick), error)
        return error

    def fql_step(self, obs: Obs, features: torch.Tensor, parts: tuple[int, ...]) -> tuple[float, float]:
        """One step of the one-step policy towards high Q near the flow's chunk from the same noise."""
        actor, optim = self.actor, self.fql_optim
        assert actor.onestep is not None and optim is not None
        z = self.per_row(torch.randn, parts, (actor.horizon, actor.action_dim))
        with torch.no_grad():
            cond = features if actor.shared_encoder else actor.flow.encoder(obs)
            flow_chunks = actor.chunks_from_noise(cond, z)
        loss, distill, q = self._fql_loss(features, z, flow_chunks)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(actor.onestep.parameters(), self.cfg.max_grad_norm)
        optim.step()
        return float(distill), float(q)
