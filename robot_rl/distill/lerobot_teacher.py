"""A LeRobot flow VLA checkpoint (SmolVLA; pi0 / pi0.5 through the same wrapper) as a distillation teacher.

``robot-rl distill CKPT --task reach_pixels --instruction "reach the green target"`` takes a directory written by
lerobot's ``save_pretrained`` (a fine-tuned SmolVLA) as the teacher. :func:`load_lerobot_teacher` loads it with
:func:`~robot_rl.policies.flow.lerobot_base.load_lerobot_flow_policy_for_spec` (LeRobot's own pre- and
post-processors do the tokenisation and the (un)normalisation) and wraps it in :class:`LeRobotChunkTeacher`:

- **label**: the noise-free chunk, LeRobot's sampler integrated from ``x0 = 0`` over the whole padded chunk
  ``[chunk_size, max_action_dim]`` (as our own flow teachers, and as Flow-Noise PPO's deterministic action),
  unnormalised and clamped to the task's action bounds. On a task with one action per step the label is the
  chunk's first action (the teacher re-plans at every step); on a chunk task (``[H, A]`` actions) its first
  ``H`` actions;
- **instruction**: ONE fixed text (``instruction``), the one the VLA was fine-tuned with. The student reads only
  ``state`` and ``image.<camera>``: a constant instruction carries no information for a single-task student, so
  nothing is lost. A task whose instruction changes per episode (it observes ``language`` tokens: ``lang_reach``,
  ``lang_push``) is refused: its instruction names the goal, which a student without language cannot know, and a
  fixed instruction would make the teacher pursue one goal while the env rewards another.

Needs ``lerobot`` (``bash scripts/install-lerobot.sh VENV``, torchvision beside torch); it is imported only here, when a
LeRobot teacher is loaded.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from robot_rl.config_io import from_dict
from robot_rl.core.algorithm import Policy
from robot_rl.core.config import TaskConfig, ensure_registered, resolve_task_id
from robot_rl.core.registry import UnknownNameError
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import Obs
from robot_rl.distill.config import DistillError
from robot_rl.distill.teacher import Teacher, UnsupportedTeacherError, check_observation
from robot_rl.policies.flow.lerobot_base import (
    LEROBOT_FLOW_TYPES,
    LeRobotFlowPolicy,
    ObservationMismatchError,
    env_instruction_table,
    lerobot_policy_type,
    load_lerobot_flow_policy_for_spec,
)


class LeRobotChunkTeacher(Policy):
    """A loaded LeRobot flow VLA acting in a task with one fixed instruction (see the module docstring).

    ``act(obs, deterministic=True)``: the noise-free chunk from ``x0 = 0``, reshaped to the task's action shape;
    ``deterministic=False`` starts from ``N(0, I)`` noise in the action dimensions instead.
    """

    def __init__(self, base: LeRobotFlowPolicy, action_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.base = base
        self.action_shape = tuple(action_shape)
        # x0 = 0 over the whole padded chunk (the wrapper would pad with one fixed random draw otherwise).
        base.pad_noise.zero_()

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(action [N, *action_shape], {})`` inside the task's bounds."""
        n = next(iter(obs.values())).shape[0]
        x0 = torch.zeros(n, self.base.env_horizon, self.base.mapping.action_dim, device=self.base.pad_noise.device)
        if not deterministic:
            x0.normal_()
        chunk = self.base._bound(self.base.sample(obs, x0))
        return chunk.reshape(n, *self.action_shape), {}


def lerobot_available() -> bool:
    """Whether ``lerobot`` can be imported here (without importing it)."""
    return importlib.util.find_spec("lerobot") is not None


def needs_lerobot(what: str) -> str:
    """The message for a LeRobot teacher where lerobot is not installed."""
    return (f"{what}: loading it needs lerobot, which is not installed here: bash scripts/install-lerobot.sh VENV "
            "(docs/datasets.md#installing-lerobot)")


def resolve_task(task: str | TaskConfig | None, ckpt: Path) -> TaskConfig:
    """The task config of a task id (``reach_pixels``, ``maniskill/PickCube-v1``) or a config as given."""
    if isinstance(task, TaskConfig):
        return task
    if not task:
        raise DistillError(f"{ckpt} is a LeRobot checkpoint, which records no task: name the task it acts in with "
                           "--task (e.g. --task reach_pixels)")
    ensure_registered()
    try:
        cls, implied = resolve_task_id(task)
    except UnknownNameError as e:
        raise DistillError(str(e)) from None
    return from_dict(cls, implied, where=f"--task {task}")


def check_instruction(task_name: str, spec: EnvSpec, table: dict[tuple[int, ...], str],
                      instruction: str | None, kind: str) -> str:
    """The one fixed instruction the teacher gets.

    :class:`~robot_rl.distill.teacher.UnsupportedTeacherError` when none can be fixed: the task draws its
    instruction per episode (see the module docstring).
    """
    texts = sorted(set(table.values()))
    if "language" in spec.observation or len(texts) > 1:
        listed = "; ".join(repr(t) for t in texts[:4]) + ("; ..." if len(texts) > 4 else "")
        if instruction is None:
            raise UnsupportedTeacherError(
                f"the task {task_name} gives {len(texts) or 'several'} instructions ({listed or 'language tokens'}), "
                "one per episode, and the instruction names the goal: a student reading only 'state' and cameras "
                "cannot know which one holds. Fix one instruction: distil on a task with a single goal kind and "
                f"pass it with --instruction (e.g. --task reach_pixels --instruction '...')")
        raise UnsupportedTeacherError(
            f"--instruction {instruction!r} is fixed, but the task {task_name} still draws its instruction per "
            f"episode ({listed or 'language tokens'}) and observes it as 'language' tokens: the fixed instruction "
            "would contradict the env's goal in the other episodes, and an exportable student reads no tokens. "
            "Distil on a task without a language observation (e.g. --task reach_pixels)")
    if instruction is None:
        if len(texts) == 1:
            return texts[0]
        raise DistillError(f"a LeRobot {kind} policy is conditioned on an instruction, and the task {task_name} has "
                           "none: pass --instruction '<the text it was fine-tuned with>'")
    if not instruction.strip():
        raise DistillError("--instruction is empty: pass the text the LeRobot policy was fine-tuned with")
    return instruction


def _lerobot_spec(spec: EnvSpec) -> EnvSpec:
    """The task's spec as the LeRobot wrapper takes it: a one-step action ``[A]`` becomes a chunk ``[1, A]``."""
    act = spec.action
    if len(act.shape) != 1:
        return spec
    return EnvSpec(spec.observation, ArraySpec((1, *act.shape), act.dtype, low=act.low, high=act.high),
                   dict(spec.extras))


def load_lerobot_teacher(path: Path | str, task: str | TaskConfig | None, instruction: str | None = None,
                         device: torch.device | str = "cpu") -> Teacher:
    """The :class:`~robot_rl.distill.teacher.Teacher` of LeRobot checkpoint directory ``path`` acting in ``task``.

    ``task``: a task id or config (a LeRobot checkpoint records none); ``instruction``: the fixed text (required
    unless the task has exactly one). Errors (each saying why and what to do): not a LeRobot flow VLA, a task with
    per-episode instructions, lerobot not installed (:class:`~robot_rl.distill.teacher.UnsupportedTeacherError`),
    no task or instruction, a task that does not match the checkpoint's features (:class:`DistillError`).
    """
    path = Path(path)
    kind = lerobot_policy_type(path)
    if kind is None:
        raise DistillError(f"{path} is not a LeRobot checkpoint (no config.json with a policy type)")
    if kind not in LEROBOT_FLOW_TYPES:
        raise UnsupportedTeacherError(f"{path} is a LeRobot {kind} policy: LeRobot teachers are the flow VLAs "
                                      f"({', '.join(LEROBOT_FLOW_TYPES)}), whose noise-free chunk is their label")
    cfg = resolve_task(task, path)
    name = task if isinstance(task, str) else type(cfg).__name__
    env = cfg.make(torch.device("cpu"), 0, num_envs=1)
    try:
        spec, table = env.spec, env_instruction_table(env)
    finally:
        env.close()
    text = check_instruction(str(name), spec, table, instruction, kind)
    check_observation(spec, f"LeRobot {kind} on {name}")
    if not lerobot_available():
        raise UnsupportedTeacherError(needs_lerobot(f"{path} is a LeRobot {kind} policy"))
    try:
        base = load_lerobot_flow_policy_for_spec(path, _lerobot_spec(spec), {}, text, device)
    except ObservationMismatchError as e:
        raise DistillError(f"{path} cannot act in {name}: {e}") from None
    except (ImportError, OSError) as e:  # lerobot without its smolvla extra; a VLM config not in the local cache
        raise DistillError(f"{path}: the LeRobot {kind} policy did not load ({type(e).__name__}: {e}). Install "
                           "lerobot with its packages (bash scripts/install-lerobot.sh VENV) and keep the VLM it names "
                           "(vlm_model_name) in the local Hugging Face cache or a local directory") from e
    policy = LeRobotChunkTeacher(base, tuple(spec.action.shape)).to(device).eval()
    return Teacher(policy, spec, cfg, f"lerobot_{kind}", path, path, instruction=text)
