"""DAgger: roll out a mixture of teacher and student, label every visited observation with the teacher, retrain.

Ross, Gordon & Bagnell (2011). Round ``i`` acts, per sub-env and step, with the teacher's action with probability
``β_i`` and the student's otherwise (round 0: ``β = 1``, the teacher's own rollouts); every observation visited is
labelled with the teacher's deterministic action ``a*(o)`` whoever acted, and the student minimises, over
``D`` (all rounds' rows so far),

    L(θ) = mean_D ‖u_θ(o) − clip(u*(o), ±c)‖²      a tanh-squashed teacher (a SquashedActor)
    L(θ) = mean_D ‖π_θ(o) − a*(o)‖²                 any other teacher

where ``u`` is the pre-squash action (``a = tanh(u)·scale + bias``,
:class:`~robot_rl.core.algorithm.SquashedActor`) and ``π_θ`` the student's deterministic action.
Matching ``u`` (the continuous analogue of matching logits) matters: a teacher that saturates its actions at the
bounds (a trained SAC actor, most of the time) gives labels of ±1 that say only on which side the goal is, and a
pixel student learns nothing from them in thousands of steps, while ``u`` still says how far. ``c`` (5:
``tanh 5 = 0.9999``) keeps far-saturated rows from dominating the squared error.
The student sees its own observation of the same world (:class:`RolloutEnvs`: a second env, stepped in lockstep,
when it renders its cameras at another size than the teacher's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from robot_rl.core.algorithm import DeterministicActor, Policy, SquashedActor
from robot_rl.core.config import TaskConfig
from robot_rl.core.env import StepResult, VecEnv
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs, finite_obs_rows
from robot_rl.distill.config import DaggerConfig, DistillError
from robot_rl.distill.hint import FeatureHint, teacher_features
from robot_rl.distill.teacher import Teacher
from robot_rl.policies.sac_networks import SACPolicy

Progress = Callable[[str, int, int, str], None]
"""``progress(stage, done, total, info)``: a progress bar's update (the CLI draws it)."""


def distill_loss(student: DeterministicActor, obs: Obs, action: torch.Tensor, pre_squash: torch.Tensor | None = None,
                 clip: float = 5.0) -> torch.Tensor:
    """The module docstring's ``L`` on one batch (squared error summed over action dims, averaged over rows).

    ``pre_squash`` (the teacher's ``u``, ``[B, *A]``) is matched when given and the student is a
    :class:`~robot_rl.core.algorithm.SquashedActor`; otherwise the action ``[B, *A]`` is.
    """
    return distill_losses(student, obs, {"action": action} if pre_squash is None else
                          {"action": action, "pre_squash": pre_squash}, clip)[0]


def distill_losses(student: DeterministicActor, obs: Obs, labels: dict[str, torch.Tensor], clip: float = 5.0,
                   hint: FeatureHint | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(L, L_hint)`` on one batch, from one pass of the student's encoder.

    ``L``: :func:`distill_loss`; ``L_hint``: with a ``hint`` and the teacher's ``features`` label, the
    :mod:`robot_rl.distill.hint` term (else None).
    """
    action, pre_squash = labels["action"], labels.get("pre_squash")
    squashed = pre_squash is not None and isinstance(student, SquashedActor)
    target = pre_squash.clamp(-clip, clip) if squashed and pre_squash is not None else action
    hint_loss = None
    if hint is not None and "features" in labels and isinstance(student, SACPolicy):
        features = student.encode(obs)
        mean, _ = student.gaussian(features)
        pred = mean if squashed else torch.tanh(mean) * student.action_scale + student.action_bias
        hint_loss = hint.loss(features, labels["features"])
    else:
        pred = student.pre_squash_action(obs) if squashed else student.deterministic_action(obs)  # type: ignore[attr-defined]
    loss = (pred.reshape(target.shape) - target).square().reshape(target.shape[0], -1).sum(-1).mean()
    return loss, hint_loss


class LabelledData:
    """The aggregate data set ``D``: the student's observations and the teacher's labels, on the CPU.

    Rows are added a step at a time and concatenated when :meth:`sample` next needs them; past ``max_rows`` the
    oldest are dropped.
    """

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._obs: dict[str, torch.Tensor] = {}
        self._labels: dict[str, torch.Tensor] = {}
        self._pending: list[dict[str, torch.Tensor]] = []
        self.dropped = 0
        """Rows dropped, oldest first, to stay within ``max_rows``."""

    @property
    def obs(self) -> dict[str, torch.Tensor]:
        """``{key: [M, ...]}``: what the student saw, every row so far."""
        self._merge()
        return self._obs

    @property
    def labels(self) -> dict[str, torch.Tensor]:
        """``action`` ``[M, *A]``; from a squashed teacher ``pre_squash`` ``[M, *A]``; ``features`` ``[M, F]``."""
        self._merge()
        return self._labels

    def add(self, obs: Obs, action: torch.Tensor, pre_squash: torch.Tensor | None = None,
            features: torch.Tensor | None = None) -> None:
        """Add rows ``obs`` ``{key: [n, ...]}`` labelled ``action`` (and ``pre_squash``) ``[n, *A]``.

        ``features``: the teacher's ``[n, F]`` (:mod:`robot_rl.distill.hint`), when it gives them. Rows with
        NaN/inf in the observation or a label are skipped.
        """
        n = action.shape[0]
        labels = {"action": action}
        if pre_squash is not None:
            labels["pre_squash"] = pre_squash
        if features is not None:
            labels["features"] = features
        ok = finite_obs_rows(obs, n)
        for v in labels.values():
            ok &= torch.isfinite(v.reshape(n, -1)).all(1)
        rows = {**{f"obs/{k}": v for k, v in obs.items()}, **{f"label/{k}": v for k, v in labels.items()}}
        self._pending.append({k: (v if bool(ok.all()) else v[ok]).detach().cpu() for k, v in rows.items()})

    def _merge(self) -> None:
        if not self._pending:
            return
        held = {**{f"obs/{k}": v for k, v in self._obs.items()}, **{f"label/{k}": v for k, v in self._labels.items()}}
        merged = {k: torch.cat(([held[k]] if held else []) + [p[k] for p in self._pending]) for k in self._pending[0]}
        self._pending.clear()
        extra = next(iter(merged.values())).shape[0] - self.max_rows
        if extra > 0:
            merged = {k: v[extra:] for k, v in merged.items()}
            self.dropped += extra
        self._obs = {k[4:]: v for k, v in merged.items() if k.startswith("obs/")}
        self._labels = {k[6:]: v for k, v in merged.items() if k.startswith("label/")}

    def __len__(self) -> int:
        labels = self.labels
        return int(labels["action"].shape[0]) if labels else 0

    def sample(self, batch_size: int, generator: torch.Generator, device: torch.device
               ) -> tuple[Obs, dict[str, torch.Tensor]]:
        """``(obs, labels)`` of ``batch_size`` rows drawn uniformly (with replacement), on ``device``."""
        n = len(self)
        if n == 0:
            raise DistillError("no labelled rows to train on (every rollout row was non-finite?)")
        idx = torch.randint(0, n, (batch_size,), generator=generator)
        return ({k: v[idx].to(device) for k, v in self.obs.items()},
                {k: v[idx].to(device) for k, v in self.labels.items()})


class RolloutEnvs:
    """The teacher's env and, when the student's task differs (another image size), the student's, in lockstep.

    Both are built with the same seed and always get the same actions, so they hold the same world; each step
    checks that their rewards and episode ends agree and raises :class:`DistillError` if they ever differ.
    """

    def __init__(self, teacher_task: TaskConfig, student_task: TaskConfig, num_envs: int,
                 device: torch.device, seed: int) -> None:
        self.teacher_env: VecEnv = teacher_task.make(device, seed, num_envs=num_envs)
        self.student_env: VecEnv | None = None
        if student_task != teacher_task:
            self.student_env = student_task.make(device, seed, num_envs=num_envs)
        self.num_envs = self.teacher_env.num_envs

    @property
    def student_spec(self) -> EnvSpec:
        """What the student observes."""
        return (self.student_env or self.teacher_env).spec

    def reset(self, seed: int) -> tuple[Obs, Obs]:
        """``(teacher's observation, student's observation)`` of a fresh batch of episodes."""
        t = self.teacher_env.reset(seed=seed)
        return t, (self.student_env.reset(seed=seed) if self.student_env is not None else t)

    def step(self, action: torch.Tensor) -> tuple[Obs, Obs, StepResult]:
        """Step both with ``action``; the teacher env's result (rewards, dones, success) with both observations."""
        r = self.teacher_env.step(action)
        if self.student_env is None:
            return r.obs, r.obs, r
        s = self.student_env.step(action)
        if not (torch.equal(r.terminated, s.terminated) and torch.equal(r.truncated, s.truncated)
                and torch.allclose(r.reward, s.reward, atol=1e-5, equal_nan=True)):
            raise DistillError("the teacher's and the student's envs diverged (the task's randomness depends on the "
                               "image size?): leave the student's image_size unset")
        return r.obs, s.obs, r

    def close(self) -> None:
        """Close both envs."""
        self.teacher_env.close()
        if self.student_env is not None:
            self.student_env.close()


@dataclass
class RoundStats:
    """One DAgger round: what was collected and how the student fit it."""

    round: int
    beta: float
    """Probability of acting with the teacher."""
    rows: int
    """Rows added in this round."""
    total_rows: int
    """Rows of the aggregate data set after it."""
    teacher_share: float
    """Fraction of this round's steps actually driven by the teacher."""
    episodes: int
    """Episodes that ended during the round."""
    success_rate: float
    """Success of those episodes (the mixture's, not the student's alone); NaN when none ended."""
    loss: float
    """The student's mean training loss over this round's last 50 updates."""
    hint_loss: float | None = None
    """Its mean feature-hint loss over the same updates (:mod:`robot_rl.distill.hint`); None without a hint."""

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return dict(self.__dict__)


class Collector:
    """Steps :class:`RolloutEnvs` with a β-mixture of teacher and student, adding labelled rows to ``data``."""

    def __init__(self, envs: RolloutEnvs, teacher: Teacher, student: Policy, cfg: DaggerConfig, seed: int) -> None:
        self.envs, self.teacher, self.student, self.cfg = envs, teacher, student, cfg
        self.device = envs.teacher_env.device
        self.generator = torch.Generator(device=self.device).manual_seed(seed + 1)
        self.obs = envs.reset(seed)
        spec = teacher.spec.action
        self.low = None if spec.low is None else torch.as_tensor(spec.low, dtype=torch.float32, device=self.device)
        self.high = None if spec.high is None else torch.as_tensor(spec.high, dtype=torch.float32, device=self.device)

    @torch.no_grad()
    def mix(self, label: torch.Tensor, student_obs: Obs, beta: float) -> tuple[torch.Tensor, int]:
        """The executed action: per sub-env the teacher's ``label`` with probability ``beta``, else the student's."""
        n = label.shape[0]
        if beta >= 1.0:
            action, teacher_steps = label, n
        else:
            mine, _ = self.student.act(student_obs, deterministic=True)
            use = torch.rand(n, generator=self.generator, device=self.device) < beta
            action = torch.where(use.view(n, *[1] * (label.dim() - 1)), label, mine.reshape(label.shape))
            teacher_steps = int(use.sum())
        if self.cfg.action_noise > 0:
            noise = torch.randn(action.shape, generator=self.generator, device=self.device)
            action = action + self.cfg.action_noise * noise
            if self.low is not None and self.high is not None:
                action = torch.maximum(torch.minimum(action, self.high), self.low)
        return action, teacher_steps

    def collect(self, data: LabelledData, beta: float, steps: int) -> tuple[int, float, int, float]:
        """Run ``steps`` steps; ``(rows added, teacher share, episodes ended, their success rate)``."""
        rows = teacher_steps = episodes = successes = 0
        for _ in range(steps):
            teacher_obs, student_obs = self.obs
            label, pre_squash = self.teacher.label(teacher_obs)
            features = teacher_features(self.teacher.policy, teacher_obs) if self.cfg.feature_weight > 0 else None
            data.add(student_obs, label, pre_squash, features)
            rows += label.shape[0]
            action, used = self.mix(label, student_obs, beta)
            teacher_steps += used
            t, s, result = self.envs.step(action)
            done = result.terminated | result.truncated
            episodes += int(done.sum())
            successes += int((result.info["success"] & done).sum())
            self.obs = (t, s)
        return rows, teacher_steps / max(rows, 1), episodes, successes / episodes if episodes else float("nan")


def fit(student: Policy, data: LabelledData, optimizer: torch.optim.Optimizer, updates: int, batch_size: int,
        generator: torch.Generator, device: torch.device, clip: float = 5.0, hint: FeatureHint | None = None,
        hint_weight: float = 0.0) -> tuple[float, float | None]:
    """``updates`` Adam steps on ``L + hint_weight · L_hint``; the means of ``L`` and ``L_hint`` over the last 50."""
    if not isinstance(student, DeterministicActor):
        raise DistillError(f"a {type(student).__name__} has no deterministic_action to train")
    losses: list[float] = []
    hint_losses: list[float] = []
    student.train()
    for _ in range(updates):
        obs, labels = data.sample(batch_size, generator, device)
        loss, hint_loss = distill_losses(student, obs, labels, clip, hint)
        total = loss if hint_loss is None else loss + hint_weight * hint_loss
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if hint_loss is not None:
            hint_losses.append(float(hint_loss.detach()))
    student.eval()
    tail, hint_tail = losses[-50:], hint_losses[-50:]
    return (sum(tail) / len(tail) if tail else float("nan"),
            sum(hint_tail) / len(hint_tail) if hint_tail else None)
