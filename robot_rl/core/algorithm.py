"""The algorithm contract: what a learner trains and what an actor runs.

An :class:`Algorithm` lives in the learner. It owns every network, optimiser and statistic a
resume needs (``state_dict``), and publishes only what actors need (``actor_weights``) — for SAC
the actor network and the observation encoder, never the critics or optimisers.

A :class:`Policy` lives in the actor. An actor process builds it alone from the config and spec
(``AlgoConfig.build_policy``: no critic, no optimiser), an in-process actor gets a copy from
:meth:`Algorithm.make_policy`; either receives new weights with :meth:`Policy.load_actor_weights` without
being rebuilt, so actors pick up new versions without stopping.

Optional capabilities are Protocols checked with ``isinstance``: :class:`SupervisedLoss` (co-training,
SFT), :class:`DeterministicActor` and :class:`MLPActor` (export), :class:`SquashedActor` (distillation),
:class:`CriticPublisher` and :class:`ValueEstimator` (critics evaluated at the actor: the help gate's novelty and
risk).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

import torch
from torch import nn

from robot_rl.core.transition import Obs, TransitionBatch

if TYPE_CHECKING:
    from robot_rl.core.specs import EnvSpec

Weights = dict[str, torch.Tensor]

CRITIC_WEIGHTS_PREFIX = "critic/"
"""Keys of critic weights published with the actor's (a learner asked to, for actors that score states)."""


def split_critic_weights(weights: Weights) -> tuple[Weights, Weights]:
    """``(actor weights, critic weights)`` of a published dict (the critic part without its prefix; often empty)."""
    n = len(CRITIC_WEIGHTS_PREFIX)
    actor = {k: v for k, v in weights.items() if not k.startswith(CRITIC_WEIGHTS_PREFIX)}
    critic = {k[n:]: v for k, v in weights.items() if k.startswith(CRITIC_WEIGHTS_PREFIX)}
    return actor, critic


class Policy(nn.Module, abc.ABC):
    """Actor-side network: observations in, actions out."""

    @abc.abstractmethod
    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Return ``(action [N, *action_shape], extras)``.

        ``extras`` holds per-row tensors the learner needs later (PPO: ``log_prob``, ``value``); it is
        stored with the transition. Actions are inside the action spec's bounds.
        """

    def load_actor_weights(self, weights: Weights) -> None:
        """Replace the weights in place (strict: every key must match)."""
        self.load_state_dict(weights, strict=True)


@runtime_checkable
class Storage(Protocol):
    """Where a learner keeps transitions: a replay buffer (off-policy) or a rollout (on-policy)."""

    def add(self, batch: TransitionBatch) -> None:
        """Store ``batch`` (already validated, on the learner's device)."""

    def __len__(self) -> int:
        """Number of transitions held."""
        ...


@runtime_checkable
class ReplayStorage(Storage, Protocol):
    """Storage an off-policy learner samples minibatches from."""

    def sample(self, batch_size: int) -> TransitionBatch:
        """``batch_size`` transitions drawn on the storage's device."""
        ...


@runtime_checkable
class OnPolicyStorage(Storage, Protocol):
    """A rollout an on-policy learner fills, updates from once full, and empties."""

    def is_full(self) -> bool:
        """Whether every sub-env has ``rollout_length`` steps in it."""
        ...

    def clear(self) -> None:
        """Empty the rollout for the next one."""
        ...

    def truncate_actor(self, actor_id: int) -> None:
        """End the episodes of ``actor_id``'s sub-envs at their last stored step (the actor process died)."""
        ...


@runtime_checkable
class DurableStorage(Storage, Protocol):
    """Storage whose rows can be committed to disk (crash-safe replay, robot_rl/replay/segments.py).

    ``persisted`` is ``False`` while no segment log is attached; then ``flush`` does nothing. The learner
    acknowledges a chunk to its actor only after a ``flush`` that covered the chunk's rows.
    """

    @property
    def persisted(self) -> bool:
        """Whether a segment log backs (any of) the storage's buffers."""
        ...

    def flush(self) -> Any:
        """Commit every pending row to disk and wait for it; returns the storage's watermark(s)."""
        ...


@runtime_checkable
class NamedBufferStorage(Storage, Protocol):
    """A replay made of named buffers (``online``, ``demos``, ``interventions``) sampled in proportions."""

    buffers: dict[str, Any]

    def add_to(self, name: str, batch: TransitionBatch) -> None:
        """Store ``batch`` in buffer ``name`` only."""
        ...


@runtime_checkable
class SupervisedLoss(Protocol):
    """An algorithm (or a bare policy) whose actor learns from demonstrations: co-training and SFT call it.

    The loss is written next to the algorithm's own losses, so nobody recomputes a log-likelihood from the
    algorithm's private fields. Co-training's stage 1 (robot_rl/cotrain/sft.py) calls ``prepare_supervised``
    with the demos' observations, steps its own optimiser over ``supervised_parameters`` on
    ``supervised_loss(..., train_encoder=True)``, then calls ``finish_supervised``; stage 2 adds
    ``λ·supervised_loss(..., train_encoder=False)`` on real demos to the actor's loss (``Algorithm.aux_hook``).
    An algorithm without one sets ``supervised_loss = None`` or leaves these methods out: co-training then
    refuses it.
    """

    def supervised_loss(self, obs: Obs, action: torch.Tensor, mask: torch.Tensor | None = None,
                        generator: torch.Generator | None = None, train_encoder: bool = False) -> torch.Tensor:
        """Scalar loss, differentiable in the actor's parameters, of demonstrated env actions ``[B, *A]``.

        ``mask`` ``[B, H]`` weights the steps of action chunks (1 = a real action, 0 = padding past the
        episode's end); ``generator`` draws the noise a loss needs (flow matching); ``train_encoder=False``
        keeps the gradient out of an observation encoder that another loss trains (SAC: the critic's).
        """
        ...

    def supervised_parameters(self) -> list[nn.Parameter]:
        """The actor parameters supervised learning trains (what an SFT optimiser steps)."""
        ...

    def prepare_supervised(self, obs: Obs) -> None:
        """Fold demonstration observations ``{key: [M, ...]}`` into the actor's input statistics (normalisers)."""
        ...

    def finish_supervised(self) -> None:
        """After supervised steps moved the actor, move what follows it (target encoder, KL reference, …)."""
        ...


@runtime_checkable
class FeatureEncoder(Protocol):
    """A policy whose action head reads features of the observation it can give (distillation's feature hint)."""

    def encode(self, obs: Obs) -> torch.Tensor:
        """``[B, F]``: the features the action head reads (camera encoders and state)."""
        ...


@runtime_checkable
class DeterministicActor(Protocol):
    """A policy with a deterministic action that export can trace: ``obs -> action`` with no sampling."""

    def deterministic_action(self, obs: Obs) -> torch.Tensor:
        """``[B, *action_shape]`` inside the action bounds, the mode of the policy (no noise).

        The same numbers as ``act(obs, deterministic=True)[0]``; a pure function of ``obs`` (traceable).
        """
        ...


@runtime_checkable
class SquashedActor(DeterministicActor, Protocol):
    """A deterministic actor whose action is ``tanh(u)·scale + bias`` (``scale``, ``bias`` from the action bounds).

    Distillation matches ``u``, the pre-squash action: where the action saturates at a bound, ``u`` still says how
    far beyond it the actor wants to go, which a student cannot learn from the saturated action alone.
    """

    def pre_squash_action(self, obs: Obs) -> torch.Tensor:
        """``u`` ``[B, *action_shape]``, with ``deterministic_action(obs) = tanh(u)·scale + bias``."""
        ...


@dataclass
class MLPActorParts:
    """A deterministic actor that is an MLP over a flat ``state``, in the parts the C exporter reads.

    ``action = out(mlp(norm(state))[:, :act_dim]).reshape(-1, *action_shape)``, where ``norm`` is the
    ``normalizer`` (a running normaliser: ``clamp((x − mean)/sqrt(var + eps), ±clip)``; ``None`` = identity),
    ``mlp`` a sequence of ``nn.Linear`` and activation modules, and ``out`` is ``tanh(y)·out_a + out_b``
    (``"tanh_scale"``), ``clamp(y, out_a, out_b)`` (``"clamp"``, ±inf where unbounded) or ``y`` (``"identity"``).
    """

    obs_dim: int
    normalizer: nn.Module | None
    mlp: nn.Module
    act_dim: int
    """Rows of the last layer that are the action (SAC's head also predicts log σ after them)."""
    output: Literal["tanh_scale", "clamp", "identity"]
    out_a: torch.Tensor
    """``[act_dim]``: the scale (``tanh_scale``) or the lower bound (``clamp``)."""
    out_b: torch.Tensor
    """``[act_dim]``: the bias (``tanh_scale``) or the upper bound (``clamp``)."""
    action_shape: tuple[int, ...]


@runtime_checkable
class MLPActor(DeterministicActor, Protocol):
    """A deterministic actor that can describe itself as :class:`MLPActorParts` (C export for microcontrollers)."""

    def mlp_parts(self) -> MLPActorParts | None:
        """The parts of :meth:`deterministic_action`, or ``None`` when this instance is not an MLP over ``state``."""
        ...


@runtime_checkable
class ValueEstimator(Protocol):
    """The critics at the actor: how good the acting policy's action looks, and how much the critics disagree."""

    def load_critic_weights(self, weights: Weights) -> None:
        """Load what :meth:`CriticPublisher.critic_weights` gave (strict: a wrong key or shape raises)."""
        ...

    def q_values(self, policy: Policy, obs: Obs, action: torch.Tensor) -> torch.Tensor:
        """``[E, N]``: each of the E critics' Q of ``action`` ``[N, *action_shape]`` at ``obs``.

        ``action`` is in the action bounds; ``policy``'s observation encoder is read where the critics share it.
        """
        ...


@runtime_checkable
class CriticPublisher(Protocol):
    """An algorithm whose critics an actor can evaluate (:class:`ValueEstimator`).

    Its config builds the actor's estimator with ``build_value_estimator(spec, policy)``.
    """

    def critic_weights(self) -> Weights:
        """The critic ensemble's weights (CPU copies), everything the estimator needs besides the actor's."""
        ...


@runtime_checkable
class BuildsValueEstimator(Protocol):
    """An algorithm config that builds the actor's :class:`ValueEstimator` for its :class:`CriticPublisher`."""

    def build_value_estimator(self, spec: EnvSpec, policy: Policy) -> ValueEstimator | None:
        """The critics for an actor acting with ``policy``; None when they cannot read its encoder."""
        ...


@runtime_checkable
class OfflinePhaseAware(Protocol):
    """An algorithm whose updates change once the offline phase ends (a conservative term only offline)."""

    def finish_offline(self) -> None:
        """The offline phase is over: update as online from now on."""
        ...


@runtime_checkable
class EstimatesTDError(Protocol):
    """An algorithm that can say how well its critics fit transitions it does not train on (offline held-out data)."""

    def td_error(self, batch: TransitionBatch) -> float:
        """Mean squared TD error of the critics on ``batch`` (no update; the targets as in training)."""
        ...


class Algorithm(abc.ABC):
    """A learner's algorithm. Subclasses: one file each under ``robot_rl/policies``."""

    #: On-policy algorithms need whole rollouts made by the current weights; the loop then
    #: collects ``rollout_length`` steps, updates, and only then lets actors continue.
    on_policy: ClassVar[bool] = False
    #: Extension hook (co-training, robot_rl/cotrain): called once per gradient step of the actor with the
    #: algorithm; returns an extra, already weighted loss to add to the actor's loss, or None.
    aux_hook: Callable[[Algorithm], torch.Tensor | None] | None = None

    def aux_loss(self) -> torch.Tensor | None:
        """The attached extension's extra actor loss for this gradient step (``None``: nothing to add)."""
        return None if self.aux_hook is None else self.aux_hook(self)

    @abc.abstractmethod
    def make_policy(self) -> Policy:
        """A new actor-side policy with the current actor weights (an independent copy)."""

    @abc.abstractmethod
    def make_storage(self, num_envs: int) -> Storage:
        """The storage this algorithm learns from, for actors with ``num_envs`` sub-envs in total."""

    @abc.abstractmethod
    def update(self, batch: Any) -> dict[str, float]:
        """One learning step on ``batch`` (SAC: a sampled minibatch; PPO: a full rollout).

        Returns scalar statistics (losses, entropy coefficient, KL, …) for logs.
        """

    @abc.abstractmethod
    def actor_weights(self) -> Weights:
        """Detached CPU copies of exactly what :class:`Policy` needs, nothing more."""

    @abc.abstractmethod
    def load_actor_weights(self, weights: Weights) -> None:
        """Load actor weights (e.g. from a behaviour-cloned policy) into the learner's actor."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs: networks, targets, optimisers, normalisers, temperatures."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output exactly (strict: missing keys are an error)."""


class OffPolicyAlgorithm(Algorithm):
    """An algorithm learning from a replay buffer (SAC, TD3, …).

    The loop feeds transitions into ``make_storage(...)`` and, once ``len(storage) >=
    learning_starts``, runs ``update(storage.sample(batch_size))`` ``utd_ratio`` times per transition
    received (fractional ratios accumulate).
    """

    on_policy: ClassVar[bool] = False
    batch_size: int
    utd_ratio: float
    learning_starts: int


class OnPolicyAlgorithm(Algorithm):
    """An algorithm learning from fresh rollouts (PPO).

    The loop adds one vectorised step at a time to ``make_storage(num_envs)`` (a rollout of
    ``rollout_length`` steps per sub-env); when the storage is full it calls ``update(storage)``,
    which must leave the storage empty for the next rollout, then publishes new weights. Actors
    wait for those weights before collecting again (unless ``loop.on_policy_sync=false`` and the algorithm
    ``corrects_staleness``).
    """

    on_policy: ClassVar[bool] = True
    #: The update corrects for rows acted by weights older than the learner's (its rollout's ``behind()``), so
    #: actors may run ahead without waiting for each update (``loop.on_policy_sync=false``; docs/distributed.md).
    corrects_staleness: ClassVar[bool] = False
    rollout_length: int
