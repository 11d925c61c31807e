"""SAC's loss terms: what offline-to-online RL and co-training add to SAC's losses, one small class each.

:meth:`~robot_rl.policies.sac.SACAlgorithm.update` is textbook SAC (critics, actor and temperature, targets). A
term adds to one of its two losses, and the learner calls it at three defined points of every update:

1. ``inputs(learner, batch, action)``, before the losses: what the term reads this step, the batch's columns and
   every random number it needs, drawn from the learner's generator (:meth:`~.sac.SACAlgorithm.draw`) so that the
   loss functions stay pure: compilable, and equal on every data-parallel rank. ``None``: the term is off this step.
2. ``critic_loss(learner, obs, features, q, inputs)``, inside the critic's loss: added to ``L_Q``
   (:class:`CQL`'s conservative term).
3. ``actor_loss(learner, features, inputs)``, inside the actor's loss: added to ``L_π`` (:class:`ExtensionLoss`,
   co-training's λ·BC on real demos). A term with ``replaces_actor_loss`` gives ``actor_objective`` instead:
   ``L_π`` itself while the term is on, so that the actor optimises it instead of Q and α rests (:class:`BCWarmup`).

Each term has a typed config registered in :data:`SAC_LOSS_TERMS`; a new one needs no edit of ``sac.py``: register
its config class and list it, ``algo.loss_terms=[{type: NAME, ...}]``. The built-in CQL and BC warm-up are also
switched on by :class:`~robot_rl.policies.sac_config.SACConfig`'s flat keys (``algo.cql_alpha``,
``algo.actor_bc_updates`` …), their documented spelling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from robot_rl.core.config import ConfigError
from robot_rl.core.registry import Registry
from robot_rl.core.transition import Obs, TransitionBatch
from robot_rl.policies.offline_rl import cql_penalty, mc_calibration, sampled_action_q
from robot_rl.policies.sac_networks import squashed_mean_error

if TYPE_CHECKING:
    from robot_rl.policies.sac import SACAlgorithm

__all__ = ["CQL", "SAC_LOSS_TERMS", "BCWarmup", "BCWarmupConfig", "CQLConfig", "ExtensionLoss", "SACLossTerm",
           "SACLossTermConfig", "sum_losses"]


class SACLossTerm:
    """A term of SAC's losses (the module docstring says when each method is called); the defaults add nothing."""

    #: While the term is on, :meth:`actor_objective` is ``L_π``: no Q, and the temperature gets a zero gradient.
    replaces_actor_loss: ClassVar[bool] = False

    def inputs(self, learner: SACAlgorithm, batch: TransitionBatch, action: torch.Tensor) -> Any:
        """What this step of the term reads (``action``: the batch's squashed actions ``[B, |A|]``); ``None``: off."""
        return ()

    def critic_loss(self, learner: SACAlgorithm, obs: Obs, features: torch.Tensor, q: torch.Tensor,
                    inputs: Any) -> torch.Tensor | None:
        """A term of ``L_Q``: ``obs`` as the critic read it, its ``features`` ``[B, F]``, Q of the data ``[E, B]``."""
        return None

    def actor_loss(self, learner: SACAlgorithm, features: torch.Tensor, inputs: Any) -> torch.Tensor | None:
        """A term of ``L_π``, on the actor's features ``[B, F]`` of the batch (detached from a critic-trained CNN)."""
        return None

    def actor_objective(self, learner: SACAlgorithm, features: torch.Tensor, inputs: Any) -> torch.Tensor:
        """``L_π`` itself, in place of SAC's, while a term that ``replaces_actor_loss`` is on."""
        raise NotImplementedError(f"{type(self).__name__} replaces the actor's loss: it must define actor_objective")


def sum_losses(losses: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    """``((l_0 + l_1) + l_2) …`` of the losses that are not ``None``, in order (``None`` when all are)."""
    total = None
    for loss in losses:
        if loss is not None:
            total = loss if total is None else total + loss
    return total


@dataclass
class SACLossTermConfig:
    """Base of the loss terms' configs (registered in :data:`SAC_LOSS_TERMS`)."""

    registry: ClassVar[Registry[type[SACLossTermConfig]]]
    #: The term belongs to the offline phase: ``finish_offline`` removes it (online rows lack what it reads).
    offline_only: ClassVar[bool] = False

    @property
    def reads_mc_return(self) -> bool:
        """Whether the replay must give each row its Monte-Carlo return (``extras["mc_return"]``), online rows too."""
        return False

    def validate(self) -> None:
        """Raise ``ValueError`` on an impossible setting."""

    def build(self) -> SACLossTerm:
        """The term."""
        raise NotImplementedError(f"{type(self).__name__} must define build()")


#: Loss terms by name; a third-party package registers its own under the ``robot_rl.sac_loss_terms`` entry points.
SAC_LOSS_TERMS: Registry[type[SACLossTermConfig]] = Registry("SAC loss term", "robot_rl.sac_loss_terms")
SACLossTermConfig.registry = SAC_LOSS_TERMS


# ---- CQL / Cal-QL ---------------------------------------------------------------------------------------------


@SAC_LOSS_TERMS.register("cql")
@dataclass
class CQLConfig(SACLossTermConfig):
    """CQL's conservative critic term (Kumar et al., 2020), with Cal-QL's calibration (Nakamoto et al., 2023).

    SACConfig's ``cql_alpha``, ``cql_samples`` and ``calql`` build it; their docs are the user's.
    """

    offline_only: ClassVar[bool] = True

    alpha: float = 1.0
    """Weight of the term in the critic loss."""
    samples: int = 10
    """Actions sampled per state, from the policy and uniformly each, to estimate the log-sum-exp."""
    calql: bool = False
    """Clamp the policy's Q in the term from below by each row's Monte-Carlo return (``extras["mc_return"]``)."""

    @property
    def reads_mc_return(self) -> bool:
        """Cal-QL's clamp reads each row's return."""
        return self.calql

    def validate(self) -> None:
        """Raise ``ValueError`` on an impossible setting."""
        if self.alpha <= 0 or self.samples < 1:
            raise ConfigError(f"the cql term needs alpha > 0 and samples >= 1, got {self.alpha} and {self.samples}")

    def build(self) -> CQL:
        """The term."""
        return CQL(self)


class CQL(SACLossTerm):
    """``+ α_cql·Σ_j (log Σ_a exp Q_j(s, a) − Q_j(s, a_data))``: pushes down the Q of actions the data lacks.

    The log-sum-exp is estimated from ``K`` policy and ``K`` uniform actions per state
    (:func:`~robot_rl.policies.offline_rl.cql_penalty`); Cal-QL first clamps the policy's Q by the data's return.
    """

    def __init__(self, cfg: CQLConfig) -> None:
        self.cfg = cfg

    def inputs(self, learner: SACAlgorithm, batch: TransitionBatch, action: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Gaussian noise and uniform actions ``[K, B, |A|]``, and Cal-QL's reference values ``[B]`` (or ``None``)."""
        n = len(batch)
        shape = (self.cfg.samples, n, learner.actor.act_dim)
        noise, uniform = learner.draw(torch.randn, shape), learner.draw(torch.rand, shape) * 2.0 - 1.0
        return noise, uniform, mc_calibration(batch.extras, n) if self.cfg.calql else None

    def critic_loss(self, learner: SACAlgorithm, obs: Obs, features: torch.Tensor, q: torch.Tensor,
                    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]) -> torch.Tensor:
        """The weighted term, summed over the critics."""
        noise, uniform, calibration = inputs
        actor, critic = learner.actor, learner.critic
        actor_features = features if critic.encoder is None else actor.encoder(obs)
        sampled = sampled_action_q(critic, actor.sample, features, actor_features, noise, uniform)
        return self.cfg.alpha * cql_penalty(q, *sampled, actor.act_dim, calibration).sum()


# ---- the actor's behaviour-cloning warm-up ----------------------------------------------------------------------


@SAC_LOSS_TERMS.register("bc_warmup")
@dataclass
class BCWarmupConfig(SACLossTermConfig):
    """The first updates clone the batch's actions instead of maximising Q (CQL's ``policy_eval_start``).

    SACConfig's ``actor_bc_updates`` builds it.
    """

    updates: int = 0
    """Updates (counted from the learner's first) during which the actor clones the batch."""

    def validate(self) -> None:
        """Raise ``ValueError`` on an impossible setting."""
        if self.updates < 0:
            raise ConfigError(f"the bc_warmup term needs updates >= 0, got {self.updates}")

    def build(self) -> BCWarmup:
        """The term."""
        return BCWarmup(self)


class BCWarmup(SACLossTerm):
    """``L_π = mean_b ‖tanh μ(s_b) − a_b‖²`` for the first updates; σ and α rest, the critics learn as usual."""

    replaces_actor_loss = True

    def __init__(self, cfg: BCWarmupConfig) -> None:
        self.cfg = cfg

    def inputs(self, learner: SACAlgorithm, batch: TransitionBatch, action: torch.Tensor) -> torch.Tensor | None:
        """The batch's squashed actions during the warm-up; ``None`` after it."""
        return action if learner.num_updates < self.cfg.updates else None

    def actor_objective(self, learner: SACAlgorithm, features: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """Behaviour cloning onto the deterministic action (:func:`~.sac_networks.squashed_mean_error`).

        No α·log π: its tanh term pulls μ off the bound, where demos often sit.
        """
        return squashed_mean_error(learner.actor.gaussian(features)[0], inputs).mean()


# ---- an extension's term ----------------------------------------------------------------------------------------


class ExtensionLoss(SACLossTerm):
    """The attached extension's actor term (:meth:`~robot_rl.core.algorithm.Algorithm.aux_loss`).

    E.g. co-training's ``λ·BC`` on real demos (:mod:`robot_rl.cotrain`, configured by its own section). Every SAC
    learner has it last; it adds nothing while no extension is attached or its weight is 0.
    """

    def actor_loss(self, learner: SACAlgorithm, features: torch.Tensor, inputs: Any) -> torch.Tensor | None:
        """``learner.aux_loss()``: the extension draws its own batch (its own generator), in float32 (no autocast)."""
        with torch.autocast(device_type=learner.device.type, enabled=False):
            return learner.aux_loss()
