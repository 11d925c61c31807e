"""The auxiliary supervised loss of stage 2, and the hook learners call.

Learners call :meth:`robot_rl.core.algorithm.Algorithm.aux_loss` once per gradient step of their actor
and add what it returns to the actor's loss. :class:`AuxLoss` is the co-training hook behind it: it
draws a batch from the **real** demonstrations only (its own generator) and returns
``λ(t) · L_sup(real batch)``, or ``None`` when ``λ(t) = 0`` — then nothing is sampled or computed,
so λ = 0 is plain RL bit for bit.

``L_sup`` is the algorithm's own :class:`~robot_rl.core.algorithm.SupervisedLoss` (written next to its RL
losses): the Gaussian negative log-likelihood for PPO, the tanh-Gaussian one for SAC (features detached in
stage 2: the critic trains the encoder), the rectified-flow matching loss for ``flow_ppo``, ``hiors`` and a
bare :class:`~robot_rl.policies.flow.model.FlowVLAPolicy`. Another algorithm plugs in by implementing that
Protocol; one that does not is refused with a :class:`TypeError`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from robot_rl.core.algorithm import SupervisedLoss
from robot_rl.cotrain.config import CotrainConfig
from robot_rl.cotrain.data import DemoSet


def supervised(algo: object) -> SupervisedLoss:
    """``algo`` as a :class:`SupervisedLoss`, or a :class:`TypeError` saying that co-training cannot use it."""
    if not isinstance(algo, SupervisedLoss):
        raise TypeError(f"co-training needs an algorithm with a supervised loss (robot_rl.core.algorithm."
                        f"SupervisedLoss: ppo, sac, flow_ppo, hiors); {type(algo).__name__} has none")
    return algo


def supervised_loss(algo: object, obs: dict[str, torch.Tensor], action: torch.Tensor, mask: torch.Tensor | None,
                    generator: torch.Generator | None = None, train_encoder: bool = False) -> torch.Tensor:
    """``algo``'s supervised loss of (obs, action) rows (a :class:`TypeError` if it has none)."""
    return supervised(algo).supervised_loss(obs, action, mask, generator, train_encoder)


class AuxLoss:
    """The stage-2 hook: ``λ(t) · L_sup`` on a real batch per call (``t`` = the learner's update count)."""

    def __init__(self, cfg: CotrainConfig, real: DemoSet, progress: Callable[[], int], seed: int) -> None:
        self.cfg = cfg
        self.real = real
        self.progress = progress
        device = real.action.device
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.calls = 0
        self.weight = cfg.weight_at(0)
        self._sum = torch.zeros((), device=device)
        self._count = 0

    def __call__(self, algo: object) -> torch.Tensor | None:
        """``λ·L_sup(real batch)``, or ``None`` (nothing drawn) when ``λ(t) = 0``."""
        self.weight = self.cfg.weight_at(self.progress())
        if self.weight == 0.0:
            return None
        obs, action, mask = self.real.sample(self.cfg.batch_size, self.generator)
        loss = supervised_loss(algo, obs, action, mask, self.generator, train_encoder=False)
        self.calls += 1
        self._sum += loss.detach()
        self._count += 1
        return self.weight * loss

    def pop_stats(self) -> dict[str, float]:
        """λ now and the mean unweighted aux loss since the last call (one host sync)."""
        out = {"cotrain/lambda": float(self.weight)}
        if self._count:
            out["cotrain/aux_loss"] = float(self._sum) / self._count
            self._sum.zero_()
            self._count = 0
        return out
