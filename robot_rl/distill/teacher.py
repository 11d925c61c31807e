"""The teacher: a trained policy that labels observations with its deterministic action.

:func:`load_teacher` loads a run directory's newest verifiable checkpoint with
:func:`robot_rl.policy_io.load_policy` (as `robot-rl eval` and `robot-rl export` do) and checks, before anything is
trained, that a student can learn from it and be exported:

- **kinds** (the run's ``algo.type``): SAC, FastSAC, FastTD3, PPO and IQL actors (state or pixels) label with
  their deterministic action; our own flow-matching chunk policies (``flow_ppo``, ``hiors``, ``flow_qc``) with
  the noise-free ODE sample from ``x0 = 0``, one whole chunk per observation (the student then predicts the
  chunk, ``[H, A]``). A :class:`~robot_rl.core.algorithm.SquashedActor` teacher (SAC's policy) also gives its
  pre-``tanh`` action ``u``, which the student matches (see :mod:`robot_rl.distill.dagger`).
- **LeRobot flow VLAs** (SmolVLA; pi0 / pi0.5 through the same wrapper): a checkpoint directory of lerobot's
  ``save_pretrained`` given instead of a run, with the task it acts in and one fixed instruction
  (:mod:`robot_rl.distill.lerobot_teacher`), or a ``flow_ppo`` run fine-tuned from one (``algo.init_from``): the
  noise-free chunk from ``x0 = 0``. Loading either needs ``lerobot``.
- **not supported** (:class:`UnsupportedTeacherError`, saying why and what to do): DSRL runs (their actions are
  a flow policy's noise), and any task observed through keys other than ``state`` and ``image.<camera>``
  (``language`` tokens: no C-exportable student reads them).

:meth:`Teacher.from_policy` wraps any :class:`~robot_rl.core.algorithm.Policy` with its task instead (a scripted
expert such as :class:`~robot_rl.sims.reach_pixels_expert.ReachPixelsExpert`, or a policy still in memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from robot_rl.checkpoint import list_checkpoints
from robot_rl.config_io import from_dict
from robot_rl.core.algorithm import Policy, SquashedActor
from robot_rl.core.config import TaskConfig
from robot_rl.core.specs import EnvSpec
from robot_rl.core.transition import Obs
from robot_rl.distill.config import DistillError
from robot_rl.policy_io import load_policy, read_run_config, run_spec

#: Algorithms whose policies a student can learn from: name → how the teacher's action is taken.
TEACHER_KINDS: dict[str, str] = {
    "sac": "deterministic actor tanh(mu(s))",
    "fastsac": "deterministic actor tanh(mu(s))",
    "fasttd3": "deterministic actor",
    "ppo": "Gaussian mean, clamped to the bounds",
    "iql": "deterministic actor",
    "flow_ppo": "flow chunk, noise-free ODE from x0 = 0",
    "hiors": "flow chunk, noise-free ODE from x0 = 0",
    "flow_qc": "best of its fixed candidate chunks under its critics",
}


class UnsupportedTeacherError(DistillError):
    """The run's policy cannot be distilled (its kind, or what its task observes); the message says why."""


def student_readable(spec: EnvSpec) -> list[str]:
    """The observation keys no exportable student reads (anything but ``state`` and ``image.<camera>``)."""
    return [k for k in spec.observation if k != "state" and not k.startswith("image.")]


@dataclass
class Teacher:
    """A policy that labels observations of its task with its deterministic action."""

    policy: Policy
    spec: EnvSpec
    """What the teacher observes and emits (its run's ``spec.yaml``)."""
    task: TaskConfig
    """The teacher's task: its rollouts and its evaluation run in this task's env."""
    kind: str
    """The run's algorithm name (``sac``, ``flow_ppo``, …) or ``scripted``."""
    run_dir: Path | None = None
    """The teacher's run directory, or its LeRobot checkpoint directory."""
    checkpoint: Path | None = None
    instruction: str | None = None
    """The one fixed instruction a LeRobot teacher is given (None for other teachers)."""

    @property
    def squashed(self) -> bool:
        """Whether the teacher's action is ``tanh(u)·scale + bias`` and it gives ``u`` (SAC, a scripted expert)."""
        return isinstance(self.policy, SquashedActor)

    @torch.no_grad()
    def label(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(action, u)`` for observations ``{key: [N, ...]}``, float32 ``[N, *action_shape]`` each.

        ``action``: the teacher's deterministic action (a flow policy's chunk ``[N, H, A]`` reshaped to the spec's
        action shape, ``[N, A]`` when ``H = 1``); ``u``: its pre-squash action when it is a
        :class:`~robot_rl.core.algorithm.SquashedActor`, else ``None``.
        """
        shape = self.spec.action.shape
        if isinstance(self.policy, SquashedActor):
            u = self.policy.pre_squash_action(obs).reshape(-1, *shape).float()
            return self.policy.deterministic_action(obs).reshape(-1, *shape).float(), u
        action, _ = self.policy.act(obs, deterministic=True)
        return action.reshape(action.shape[0], *shape).float(), None

    @classmethod
    def from_policy(cls, policy: Policy, task: TaskConfig, device: torch.device | str = "cpu",
                    kind: str = "scripted") -> Teacher:
        """Any policy acting in ``task`` (a scripted expert, a policy in memory) as a teacher."""
        env = task.make(torch.device(device), 0, num_envs=1)
        try:
            spec = env.spec
        finally:
            env.close()
        check_observation(spec, kind)
        return cls(policy.to(device).eval(), spec, task, kind)


def teacher_kind(run_dir: Path) -> str:
    """The run's algorithm name, once it is known to be distillable (else :class:`UnsupportedTeacherError`)."""
    data = read_run_config(run_dir)
    algo, task = data.get("algo") or {}, data.get("task") or {}
    kind, task_type = str(algo.get("type", "")), str(task.get("type", ""))
    if task_type == "dsrl":
        base = task.get("init_from") or "<flow SFT run or LeRobot checkpoint>"
        raise UnsupportedTeacherError(
            f"{run_dir} is a DSRL run: its actions are the noise of a frozen flow policy, not robot actions, so a "
            f"student of it would still need that flow policy. Distil the flow policy itself instead: `robot-rl "
            f"distill {base}` (a LeRobot checkpoint also takes --task and --instruction)")
    if kind not in TEACHER_KINDS:
        raise UnsupportedTeacherError(f"{run_dir} was trained with algo {kind or '(none)'!r}, which cannot teach yet; "
                                      f"teachers: {', '.join(TEACHER_KINDS)}")
    return kind


def lerobot_base_of(run_dir: Path) -> tuple[str, str] | None:
    """``(policy type, checkpoint)`` of the LeRobot checkpoint a run acts with (``init_from``), else None."""
    from robot_rl.policies.flow.lerobot_base import lerobot_policy_type

    data = read_run_config(run_dir)
    init_from = (data.get("algo") or {}).get("init_from") or (data.get("task") or {}).get("init_from")
    kind = lerobot_policy_type(str(init_from)) if init_from else None
    return (kind, str(init_from)) if kind is not None else None


def check_observation(spec: EnvSpec, where: str) -> None:
    """Raise :class:`UnsupportedTeacherError` when the task observes anything a student cannot read."""
    extra = student_readable(spec)
    if extra:
        raise UnsupportedTeacherError(
            f"the teacher ({where}) observes {extra}: an exportable student reads only 'state' and 'image.<camera>' "
            "(the C exporter has no token embedding). Distil a teacher trained on a task without them")


def load_teacher(run_dir: Path | str, device: torch.device | str = "cpu", task: str | TaskConfig | None = None,
                 instruction: str | None = None) -> Teacher:
    """The teacher of ``run_dir``: its newest verifiable checkpoint's policy, in eval mode on ``device``.

    ``run_dir`` may also be a LeRobot flow VLA checkpoint directory: then ``task`` (the task it acts in) and
    ``instruction`` (its one fixed instruction) are read, by
    :func:`~robot_rl.distill.lerobot_teacher.load_lerobot_teacher`; a run records both in its config.
    Errors: not a run directory (:class:`~robot_rl.core.config.ConfigError`), no usable checkpoint
    (:class:`~robot_rl.checkpoint.CheckpointError`), a kind or task a student cannot learn from
    (:class:`UnsupportedTeacherError`).
    """
    from robot_rl.policies.flow.lerobot_base import lerobot_policy_type

    run_dir = Path(run_dir)
    if lerobot_policy_type(run_dir) is not None:
        from robot_rl.distill.lerobot_teacher import load_lerobot_teacher

        return load_lerobot_teacher(run_dir, task, instruction, device)
    if task is not None or instruction is not None:
        raise DistillError(f"--task and --instruction are for a LeRobot checkpoint teacher; {run_dir} is a run, "
                           "whose config.yaml names its task (and a LeRobot-based run's algo.instruction)")
    kind = teacher_kind(run_dir)
    if not list_checkpoints(run_dir):
        raise DistillError(f"{run_dir} has no checkpoint yet (nothing in {run_dir / 'checkpoints'}): train it first, "
                           "e.g. `robot-rl train --task reach_pixels run.name=...`, or name a run that saved one")
    data = read_run_config(run_dir)
    run_task = from_dict(TaskConfig, data["task"], where=f"{run_dir}/config.yaml task")
    spec = run_spec(run_dir)
    if spec is None:  # a run from before spec.yaml: ask its task
        env = run_task.make(torch.device("cpu"), 0, num_envs=1)
        spec = env.spec
        env.close()
    check_observation(spec, f"{run_dir}, algo {kind}")
    lerobot = lerobot_base_of(run_dir)
    if lerobot is not None:  # a flow_ppo run fine-tuned from a LeRobot SmolVLA: its VLM loads from init_from
        from robot_rl.distill.lerobot_teacher import lerobot_available, needs_lerobot

        if not lerobot_available():
            raise UnsupportedTeacherError(needs_lerobot(f"{run_dir} acts with a LeRobot {lerobot[0]} policy "
                                                        f"({lerobot[1]})"))
    loaded = load_policy(run_dir, spec, device)
    text = (data.get("algo") or {}).get("instruction") if lerobot is not None else None
    return Teacher(loaded.policy.eval(), loaded.spec, run_task, kind, run_dir, loaded.checkpoint, instruction=text)
