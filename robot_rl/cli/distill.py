"""`robot-rl distill`: a run's policy (the teacher) into a small student that exports to C, with DAgger."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from robot_rl.cli.base import Command


@dataclass
class DistillArgs(Command):
    """Distil a run's policy into a small student that fits a microcontroller, then export it.

    The student learns from the teacher's own rollouts, then from DAgger rounds: it drives (mixed with the
    teacher with a decaying probability beta), and the teacher labels every observation visited with its
    deterministic action. Teacher and student are scored on the same evaluation episodes; the student is saved
    as a SAC run directory (--out) that `robot-rl eval` and `robot-rl export` take, and exported to C (or ONNX)
    into <out>/export. Teachers: SAC, FastSAC, FastTD3, PPO, IQL (state or pixels) and flow chunk policies
    (flow_ppo, hiors, flow_qc) on tasks observed through state and cameras; a LeRobot SmolVLA (pi0, pi0.5)
    checkpoint directory with --task and one fixed --instruction (needs lerobot). See docs/distill.md.
    """

    run_dir: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="RUN_DIR")]]
    """The teacher's run directory (runs/<name>), whose newest verifiable checkpoint teaches; or a LeRobot flow VLA
    checkpoint directory (lerobot's save_pretrained: SmolVLA, pi0, pi0.5) with --task and --instruction."""
    task: str | None = None
    """LeRobot checkpoint only: the task id it acts in (e.g. reach_pixels)."""
    instruction: str | None = None
    """LeRobot checkpoint only: its one fixed instruction (the text it was fine-tuned with); the student reads no
    language, so a task that draws its instruction per episode (lang_reach) is refused."""
    student: Literal["small_cnn", "mlp"] = "small_cnn"
    """small_cnn: a small conv encoder over the cameras and state (pixel teachers); mlp: an MLP over state."""
    out: Path | None = None
    """The student's run directory (default: <RUN_DIR>-distilled-<student>)."""
    image_size: int | None = None
    """small_cnn: the student's camera image side in px (its task renders at this size); default: the teacher's."""
    channels: int = 8
    """small_cnn: channels of each of the four 3x3 conv layers."""
    features: int = 32
    """small_cnn: features per camera after the encoder's projection."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden widths of the student's MLP head."""
    rounds: int = 8
    """Rounds in all: round 0 is the teacher's own rollouts, then DAgger rounds."""
    steps_per_round: int = 20
    """Env steps per round (each labels num_envs observations)."""
    num_envs: int = 256
    """Parallel sub-envs of the rollouts (many: a pixel student generalises from the number of goals it saw)."""
    beta: float = 0.5
    """Probability of acting with the teacher in round 1 (then multiplied by --beta-decay every round)."""
    beta_decay: float = 0.5
    """Decay of beta per round."""
    updates_per_round: int = 1000
    """Gradient steps on all the data so far after every round."""
    batch_size: int = 128
    """Rows per gradient step."""
    lr: float = 1e-3
    """Adam learning rate of the student."""
    action_noise: float = 0.0
    """Std of Gaussian noise on the executed actions (not the labels): wider state coverage. 0 = none."""
    pre_squash_clip: float = 5.0
    """A tanh-squashed teacher's (SAC's) pre-tanh action, which the student matches, is clipped to +-this."""
    feature_weight: float = 1.0
    """Weight of the feature hint: the student's encoder also learns to predict the teacher's observation features
    (what lets a pixel student learn from a trained SAC actor). 0 = off; scripted and LeRobot teachers have none."""
    eval_episodes: int = 100
    """Episodes teacher and student are each scored on (the same episodes)."""
    flash_budget: int = 512 * 1024
    """Refuse a student whose int8_full C constants exceed this many bytes (0: no check)."""
    ram_budget: int = 128 * 1024
    """Refuse a student whose int8_full C workspace exceeds this many bytes (0: no check)."""
    export: Literal["c", "onnx", "none"] = "c"
    """Export the saved student: c (float32 and int8_full, checked against torch), onnx, or none."""
    seed: int = 0
    """Seed of the rollouts, the student's initialisation and its minibatches."""
    device: str = "cpu"
    """cpu, cuda or cuda:N."""

    def resolved_config(self) -> Any:
        """The :class:`~robot_rl.distill.config.DistillConfig` this command runs."""
        from robot_rl.distill.config import DaggerConfig, DistillConfig, StudentConfig

        student = StudentConfig(kind=self.student, image_size=self.image_size, channels=self.channels,
                                features=self.features, hidden=self.hidden, flash_budget=self.flash_budget,
                                ram_budget=self.ram_budget)
        dagger = DaggerConfig(rounds=self.rounds, steps_per_round=self.steps_per_round, num_envs=self.num_envs,
                              beta=self.beta, beta_decay=self.beta_decay, action_noise=self.action_noise,
                              pre_squash_clip=self.pre_squash_clip, feature_weight=self.feature_weight,
                              updates_per_round=self.updates_per_round, batch_size=self.batch_size, lr=self.lr)
        return DistillConfig(run_dir=self.run_dir, task=self.task, instruction=self.instruction, out=self.out,
                             student=student, dagger=dagger,
                             eval_episodes=self.eval_episodes, seed=self.seed, device=self.device, export=self.export)

    def run(self) -> int:
        """Distil with a progress bar and print the report; 2 on bad input, 1 when the export failed."""
        from rich.markup import escape  # descriptions are rich markup: a [bracket] in the text is not a style
        from rich.progress import Progress

        from robot_rl.checkpoint import CheckpointError
        from robot_rl.distill import DistillError, distill

        cfg = self.resolved_config()
        try:
            tty = sys.stderr.isatty()
            with Progress(transient=True, disable=not tty) as bar:
                tasks: dict[str, Any] = {}

                def progress(stage: str, done: int, total: int, info: str) -> None:
                    if not tty:  # a log file or a pipe: one line per event instead of a redrawn bar
                        print(f"{stage} {done}/{total}: {info}", file=sys.stderr, flush=True)
                        return
                    if stage not in tasks:
                        tasks[stage] = bar.add_task(escape(stage), total=total)
                    bar.update(tasks[stage], completed=done, description=escape(f"{stage}: {info}"))

                report = distill(cfg, progress=progress)
        except (DistillError, CheckpointError) as e:
            print(f"robot-rl distill: error: {e}", file=sys.stderr)
            return 2
        print((Path(report.student_run) / "DISTILL.md").read_text(), end="")
        return 1 if report.export_error else 0
