"""The typed configs of a distillation run: the student, the DAgger schedule, evaluation and export.

:class:`DistillConfig` is what :func:`robot_rl.distill.run.distill` and `robot-rl distill` run; each field's
docstring is what `robot-rl config distill` prints for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from robot_rl.core.errors import UserError

StudentKind = Literal["small_cnn", "mlp"]
"""``small_cnn``: the DrQ conv encoder of pixel SAC, small, over cameras and ``state``; ``mlp``: an MLP over
``state`` (a teacher without cameras)."""


class DistillError(ValueError, UserError):
    """A distillation cannot start or finish as asked; the message says what to do instead."""


@dataclass
class StudentConfig:
    """The student's architecture: a :class:`~robot_rl.policies.sac_networks.SACPolicy` that C export takes."""

    kind: StudentKind = "small_cnn"
    """small_cnn (cameras + state, for pixel teachers) or mlp (state only, for state teachers)."""
    image_size: int | None = None
    """small_cnn: side (px) of the student's square camera images; the student's task renders at this size while
    the teacher still sees its own (the two envs step in lockstep). null = the teacher's size. Needs a task with
    an ``image_size`` field (reach_pixels)."""
    channels: int = 8
    """small_cnn: channels of each of the encoder's four 3×3 conv layers (the teacher's SAC default is 32)."""
    features: int = 32
    """small_cnn: features per camera after the encoder's Linear → LayerNorm → tanh projection."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden widths of the MLP head (over camera features and state)."""
    normalize_state: bool = True
    """Normalise ``state`` by running statistics, fitted on the teacher's rollouts (round 0) and then fixed."""
    flash_budget: int = 512 * 1024
    """Refuse to train a student whose int8_full C constants exceed this many bytes (0 = no check)."""
    ram_budget: int = 128 * 1024
    """Refuse to train a student whose int8_full C workspace exceeds this many bytes (0 = no check)."""

    def validate(self) -> None:
        """Raise :class:`DistillError` on an impossible setting."""
        if self.kind not in ("small_cnn", "mlp"):
            raise DistillError(f"unknown student {self.kind!r}; valid: small_cnn, mlp")
        if self.channels < 1 or self.features < 1 or any(h < 1 for h in self.hidden):
            raise DistillError("channels, features and every hidden width must be >= 1")
        if self.image_size is not None and self.image_size < 8:
            raise DistillError(f"image_size must be >= 8, got {self.image_size}")
        if self.flash_budget < 0 or self.ram_budget < 0:
            raise DistillError("flash_budget and ram_budget must be >= 0 (0 = no check)")


@dataclass
class DaggerConfig:
    """The data: teacher rollouts, then DAgger rounds of student-driven rollouts relabelled by the teacher.

    Round 0 acts with the teacher alone. In round ``i >= 1`` each sub-env acts, at each step, with the teacher's
    action with probability ``β_i = beta · beta_decay^(i−1)`` and with the student's otherwise; every visited
    observation is labelled with the teacher's deterministic action and added to the aggregate data set, and the
    student is retrained on all of it after every round.
    """

    rounds: int = 8
    """Rounds in all, round 0 (the teacher's own rollouts) included."""
    steps_per_round: int = 20
    """Env steps per round (each adds ``num_envs`` labelled rows). Many sub-envs and short rounds beat the
    converse: a pixel student generalises from the number of distinct goals it has seen, not from rows."""
    num_envs: int = 256
    """Parallel sub-envs of the rollout env."""
    beta: float = 0.5
    """Probability of acting with the teacher in round 1 (round 0 is 1)."""
    beta_decay: float = 0.5
    """β is multiplied by this after every round from round 1 on."""
    action_noise: float = 0.0
    """Std of Gaussian noise added to the executed action (not to the labels), clipped to the bounds: wider
    coverage of states near the teacher's path (DART). 0 = none."""
    updates_per_round: int = 1000
    """Gradient steps on the aggregate data after every round."""
    batch_size: int = 128
    """Rows per gradient step."""
    lr: float = 1e-3
    """Adam learning rate of the student."""
    pre_squash_clip: float = 5.0
    """A squashed teacher's pre-tanh action ``u`` is clipped to ±this before the student matches it
    (tanh 5 = 0.9999: farther is the same action, and would only weigh more in the squared error)."""
    feature_weight: float = 1.0
    """Weight of the feature hint (:mod:`robot_rl.distill.hint`): the student's encoder also learns to predict the
    teacher's standardised observation features through a linear map dropped after training. What lets a pixel
    student learn from a trained SAC actor, whose saturated actions say little about where the goal is. 0 = off;
    a teacher with no features (a scripted expert, a LeRobot VLA) trains without it."""
    max_rows: int = 50_000
    """Cap on the aggregate data set; beyond it the oldest rows are dropped (memory: one camera image per row)."""

    def validate(self) -> None:
        """Raise :class:`DistillError` on an impossible setting."""
        if self.rounds < 1 or self.steps_per_round < 1 or self.num_envs < 1:
            raise DistillError("rounds, steps_per_round and num_envs must be >= 1")
        if not (0.0 <= self.beta <= 1.0 and 0.0 <= self.beta_decay <= 1.0):
            raise DistillError(f"beta and beta_decay must be in [0, 1], got {self.beta} and {self.beta_decay}")
        if self.updates_per_round < 0 or self.batch_size < 1 or self.lr <= 0 or self.max_rows < 1:
            raise DistillError("updates_per_round >= 0, batch_size >= 1, lr > 0 and max_rows >= 1 are needed")
        if self.action_noise < 0 or self.pre_squash_clip <= 0 or self.feature_weight < 0:
            raise DistillError(f"action_noise and feature_weight must be >= 0 and pre_squash_clip > 0, got "
                               f"{self.action_noise}, {self.feature_weight} and {self.pre_squash_clip}")

    def beta_at(self, round_index: int) -> float:
        """``β`` of round ``round_index``: 1 in round 0, then ``beta · beta_decay^(i−1)``."""
        return 1.0 if round_index == 0 else self.beta * self.beta_decay ** (round_index - 1)


@dataclass
class DistillConfig:
    """Distil a run's policy (the teacher) into a small student, evaluate both, save and export the student."""

    run_dir: Path
    """The teacher's run directory (its newest verifiable checkpoint is loaded, as `robot-rl eval` does), or a
    LeRobot flow VLA checkpoint directory (lerobot's ``save_pretrained``: SmolVLA, pi0, pi0.5; then set ``task``
    and ``instruction``)."""
    task: str | None = None
    """With a LeRobot checkpoint: the task id it acts in (``reach_pixels``); a run names its own."""
    instruction: str | None = None
    """With a LeRobot checkpoint: the one fixed instruction it is given (the text it was fine-tuned with); the
    student reads no language, so the task must not change its instruction per episode."""
    out: Path | None = None
    """The student's run directory (must not hold a run yet). null = ``<run_dir>-distilled-<student>``."""
    student: StudentConfig = field(default_factory=StudentConfig)
    """The student's architecture and its size budget."""
    dagger: DaggerConfig = field(default_factory=DaggerConfig)
    """Teacher rollouts, DAgger rounds and the student's training."""
    eval_episodes: int = 100
    """Episodes on which teacher and student are scored (the same episodes: same seed and sub-envs)."""
    eval_num_envs: int = 50
    """Sub-envs of each evaluation env."""
    eval_seed: int = 12345
    """Seed of the evaluation episodes (apart from ``seed``, so training never sees them)."""
    seed: int = 0
    """Seed of the rollouts, the student's initial weights and its minibatches."""
    device: str = "cpu"
    """Device of the teacher, the student and the envs (cpu, cuda, cuda:1)."""
    export: Literal["c", "onnx", "none"] = "c"
    """Export the student once saved (`robot-rl export`'s exporter, verified against torch) into ``<out>/export``."""
    export_variants: tuple[Literal["float32", "int8", "int8_full"], ...] = ("float32", "int8_full")
    """C variants to write (pixel students: float32 and int8_full)."""
    export_num_random: int = 0
    """Random observations the export verifies (and int8_full calibrates) on. 0: random images widen int8_full's
    activation ranges and cost the distilled reach_pixels student 30 points of closed-loop success
    (benchmarks/RESULTS_export.md)."""
    export_num_recorded: int = 400
    """Observations recorded by the student in its task, for the export's check and int8_full's calibration."""

    def validate(self) -> None:
        """Raise :class:`DistillError` on an impossible setting."""
        self.student.validate()
        self.dagger.validate()
        if self.eval_episodes < 1 or self.eval_num_envs < 1:
            raise DistillError("eval_episodes and eval_num_envs must be >= 1")

    def out_dir(self) -> Path:
        """Where the student's run goes: ``out``, or ``<run_dir>-distilled-<student>`` next to the teacher's."""
        if self.out is not None:
            return Path(self.out)
        run = Path(self.run_dir)
        return run.with_name(f"{run.name}-distilled-{self.student.kind}")
