"""`robot-rl distill`: teacher → DAgger → a small student, scored next to the teacher, saved as a run, exported.

:func:`distill` runs a :class:`~robot_rl.distill.config.DistillConfig`:

1. load the teacher (:func:`~robot_rl.distill.teacher.load_teacher`; or take one built in Python);
2. build the student for its task and measure its C sizes; stop at once when it would not export or not fit the
   flash/RAM budget (:class:`~robot_rl.distill.student.StudentNotExportableError`);
3. DAgger rounds (:mod:`robot_rl.distill.dagger`);
4. score teacher and student on the same evaluation episodes (same seed and sub-envs, so the same goals and start
   poses) with :func:`robot_rl.loop.evaluate.evaluate`;
5. save the student as a SAC run directory and export it with :func:`robot_rl.export.export_run`.

``<out>/distill.json`` and ``<out>/DISTILL.md`` hold the report.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from robot_rl.config_io import to_dict
from robot_rl.core.specs import EnvSpec
from robot_rl.distill.config import DistillConfig, DistillError
from robot_rl.distill.dagger import Collector, LabelledData, Progress, RolloutEnvs, RoundStats, fit
from robot_rl.distill.hint import FeatureHint
from robot_rl.distill.student import (
    CSizes,
    build_student,
    c_sizes,
    check_budget,
    save_student_run,
    student_algo,
    student_task,
)
from robot_rl.distill.teacher import Teacher, load_teacher
from robot_rl.loop.evaluate import EvalResult, evaluate
from robot_rl.policies.sac_networks import SACPolicy
from robot_rl.policy_io import read_run_config


@dataclass
class DistillReport:
    """What a distillation did and measured (also ``<out>/distill.json``)."""

    teacher_run: str
    teacher_kind: str
    student_run: str
    student: dict[str, Any]
    """The student's config section."""
    c_sizes: dict[str, Any]
    """:class:`~robot_rl.distill.student.CSizes` of the student (from the C generator, before linking)."""
    teacher_eval: dict[str, float]
    student_eval: dict[str, float]
    rounds: list[dict[str, Any]] = field(default_factory=list)
    rows: int = 0
    env_steps: int = 0
    updates: int = 0
    seconds: float = 0.0
    export_dir: str | None = None
    export_error: str | None = None
    """Why the export failed (the student is saved all the same)."""
    teacher_instruction: str | None = None
    """The fixed instruction of a LeRobot teacher."""

    @property
    def success_ratio(self) -> float:
        """Student's success rate over the teacher's (NaN when the teacher never succeeds)."""
        t = self.teacher_eval["success_rate"]
        return self.student_eval["success_rate"] / t if t > 0 else math.nan

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (with ``success_ratio``)."""
        return {**asdict(self), "success_ratio": self.success_ratio}


def _noop(stage: str, done: int, total: int, info: str) -> None:
    pass


def run_dagger(cfg: DistillConfig, teacher: Teacher, student: SACPolicy, envs: RolloutEnvs,
               progress: Progress) -> tuple[list[RoundStats], LabelledData]:
    """The DAgger rounds of ``cfg.dagger``: collect with ``β_i``, relabel, aggregate, retrain."""
    d = cfg.dagger
    device = torch.device(cfg.device)
    data = LabelledData(d.max_rows)
    collector = Collector(envs, teacher, student, d, cfg.seed)
    optimizer = torch.optim.Adam(student.parameters(), lr=d.lr)
    generator = torch.Generator().manual_seed(cfg.seed + 2)
    stats: list[RoundStats] = []
    hint: FeatureHint | None = None
    for i in range(d.rounds):
        beta = d.beta_at(i)
        rows, share, episodes, success = collector.collect(data, beta, d.steps_per_round)
        if i == 0 and student.encoder.normalizer is not None:  # the state statistics of the teacher's rollouts
            student.encoder.update_normalizer({"state": data.obs["state"].to(device)})
        if i == 0 and "features" in data.labels:  # standardised by the teacher's own rollouts, then fixed
            hint = FeatureHint(student.encoder.out_dim, data.labels["features"]).to(device)
            optimizer.add_param_group({"params": list(hint.proj.parameters())})
        loss, hint_loss = fit(student, data, optimizer, d.updates_per_round, d.batch_size, generator, device,
                              d.pre_squash_clip, hint, d.feature_weight)
        stats.append(RoundStats(i, beta, rows, len(data), share, episodes, success, loss, hint_loss))
        extra = "" if hint_loss is None else f", hint {hint_loss:.4g}"
        progress("dagger", i + 1, d.rounds, f"round {i}: beta {beta:.2f}, {len(data)} rows, loss {loss:.4g}{extra}")
    return stats, data


def score(cfg: DistillConfig, teacher: Teacher, student: SACPolicy, task: Any) -> tuple[EvalResult, EvalResult]:
    """Teacher and student on the same ``eval_episodes`` episodes (same seed and number of sub-envs)."""
    device = torch.device(cfg.device)
    n = min(cfg.eval_num_envs, cfg.eval_episodes)
    results = []
    for policy, t in ((teacher.policy, teacher.task), (student, task)):
        env = t.make(device, cfg.eval_seed, num_envs=n)
        try:
            results.append(evaluate(policy, env, cfg.eval_episodes, seed=cfg.eval_seed))
        finally:
            env.close()
    return results[0], results[1]


def _student_config(teacher: Teacher, cfg: DistillConfig, task: Any, out: Path) -> dict[str, Any]:
    """The teacher's run config with the student's task and algo (and run name): the student run's config.yaml."""
    run = teacher.run_dir
    # A LeRobot checkpoint teacher has no config.yaml: the student's config is its task and algo alone.
    base: dict[str, Any] = dict(read_run_config(run)) if run is not None and (run / "config.yaml").is_file() else {}
    base["task"] = to_dict(task)
    base["algo"] = to_dict(student_algo(cfg.student))
    if isinstance(base.get("run"), dict):
        base["run"] = {**base["run"], "name": out.name}
    return base


def prepare(cfg: DistillConfig, teacher: Teacher | None) -> tuple[Teacher, Any, RolloutEnvs, SACPolicy, CSizes]:
    """Teacher, student task, rollout envs, the untrained student and its C sizes (checked against the budget)."""
    cfg.validate()
    out = cfg.out_dir()
    if (out / "checkpoints").exists():
        raise DistillError(f"{out} already holds a run: pick another --out (or remove it)")
    teacher = teacher if teacher is not None else load_teacher(cfg.run_dir, cfg.device, cfg.task, cfg.instruction)
    task = student_task(teacher.task, cfg.student)
    envs = RolloutEnvs(teacher.task, task, cfg.dagger.num_envs, torch.device(cfg.device), cfg.seed)
    try:
        student = build_student(envs.student_spec, cfg.student, cfg.device, cfg.seed)
        sizes = c_sizes(student, envs.student_spec, cfg.seed)
        check_budget(sizes, cfg.student)
    except BaseException:
        envs.close()
        raise
    return teacher, task, envs, student.to(cfg.device), sizes


def distill(cfg: DistillConfig, teacher: Teacher | None = None, progress: Progress | None = None) -> DistillReport:
    """Run the whole distillation (module docstring); ``teacher`` overrides loading ``cfg.run_dir``'s."""
    progress = progress or _noop
    start = time.monotonic()
    teacher, task, envs, student, sizes = prepare(cfg, teacher)
    try:
        stats, data = run_dagger(cfg, teacher, student, envs, progress)
        spec: EnvSpec = envs.student_spec
    finally:
        envs.close()
    progress("evaluate", 0, 1, f"teacher and student, {cfg.eval_episodes} episodes each")
    teacher_eval, student_eval = score(cfg, teacher, student, task)
    progress("evaluate", 1, 1, f"teacher {teacher_eval.success_rate:.2f}, student {student_eval.success_rate:.2f}")
    out = cfg.out_dir()
    updates = cfg.dagger.updates_per_round * cfg.dagger.rounds
    env_steps = sum(s.rows for s in stats)
    meta = {"env_steps": env_steps, "updates": updates, "policy_version": cfg.dagger.rounds,
            "distilled_from": str(teacher.run_dir or teacher.kind), "teacher_kind": teacher.kind,
            "teacher_checkpoint": str(teacher.checkpoint or ""), "success_rate": student_eval.success_rate,
            "teacher_success_rate": teacher_eval.success_rate}
    save_student_run(out, _student_config(teacher, cfg, task, out), spec, student.cpu(), meta)
    report = DistillReport(str(teacher.run_dir or ""), teacher.kind, str(out), asdict(cfg.student), sizes.as_dict(),
                           teacher_eval.as_dict(), student_eval.as_dict(), [s.as_dict() for s in stats], len(data),
                           env_steps, updates, teacher_instruction=teacher.instruction)
    export_student(cfg, report, progress)
    report.seconds = time.monotonic() - start
    write_report(report, out)
    return report


def export_student(cfg: DistillConfig, report: DistillReport, progress: Progress) -> None:
    """Export the saved student with `robot-rl export`'s exporter into ``<out>/export``; a failure is recorded."""
    if cfg.export == "none":
        return
    from robot_rl.export import ExportVerificationError, export_run
    from robot_rl.export.toolchain import ToolchainError

    out = Path(report.student_run)
    fmt: Literal["onnx", "c"] = "c" if cfg.export == "c" else "onnx"
    progress("export", 0, 1, f"{fmt} into {out / 'export'}")
    try:
        export_run(out, fmt, out / "export", variants=cfg.export_variants, num_random=cfg.export_num_random,
                   num_recorded=cfg.export_num_recorded, seed=cfg.seed)
        report.export_dir = str(out / "export")
    except (ExportVerificationError, ToolchainError, ImportError) as e:
        report.export_error = f"{type(e).__name__}: {e}"
    progress("export", 1, 1, "done" if report.export_error is None else "failed")


def render_report(r: DistillReport) -> str:
    """``DISTILL.md``: teacher vs student, the rounds, the student's C sizes, where the export went."""
    te, se, s = r.teacher_eval, r.student_eval, r.c_sizes
    lines = [f"# Distillation of {r.teacher_run or 'an in-memory teacher'} ({r.teacher_kind})", "",
             *([f"- teacher's fixed instruction: {r.teacher_instruction!r} (the student reads no language)"]
               if r.teacher_instruction else []),
             f"- student: `{r.student_run}`, {r.student['kind']}: {s['architecture']}",
             f"- data: {r.rows} labelled rows from {r.env_steps} env steps, {r.updates} gradient steps, "
             f"{r.seconds:.0f} s", "",
             f"| policy | success ({te['episodes']:.0f} episodes, same seeds) | mean return | mean length |",
             "| --- | ---: | ---: | ---: |",
             f"| teacher | {te['success_rate']:.3f} | {te['mean_return']:.2f} | {te['mean_length']:.1f} |",
             f"| student | {se['success_rate']:.3f} | {se['mean_return']:.2f} | {se['mean_length']:.1f} |", "",
             (f"Student / teacher success: {r.success_ratio:.3f}." if r.teacher_eval["success_rate"] > 0
              else "Student / teacher success: n/a (the teacher succeeded in none of these episodes)."), "",
             "| C variant | constants (flash) B | workspace (RAM) B |", "| --- | ---: | ---: |",
             f"| float32 | {s['float32_const']:,} | {s['float32_workspace']:,} |",
             f"| int8_full | {s['int8_full_const']:,} | {s['int8_full_workspace']:,} |", "",
             "| round | beta | rows | teacher share | episodes | mixture success | loss | feature-hint loss |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {x['round']} | {x['beta']:.3f} | {x['total_rows']} | {x['teacher_share']:.2f} | {x['episodes']} | "
              f"{x['success_rate']:.2f} | {x['loss']:.4g} | "
              f"{'–' if x.get('hint_loss') is None else format(x['hint_loss'], '.4g')} |" for x in r.rounds]
    if r.export_dir:
        lines += ["", f"Exported to `{r.export_dir}` (its EXPORT.md has the verification)."]
    if r.export_error:
        lines += ["", f"Export failed: {r.export_error}. The student run is saved: retry with "
                      f"`robot-rl export {r.student_run} --format c --num-random 0`."]
    return "\n".join(lines) + "\n"


def write_report(report: DistillReport, out: Path) -> None:
    """``<out>/distill.json`` and ``<out>/DISTILL.md``."""
    (out / "distill.json").write_text(json.dumps(report.to_dict(), indent=2))
    (out / "DISTILL.md").write_text(render_report(report))
