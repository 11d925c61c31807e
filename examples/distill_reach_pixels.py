"""Distil a pixel teacher on ``reach_pixels`` into a small CNN that fits a microcontroller, then export it to C.

    python examples/distill_reach_pixels.py                    # scripted 64x64 teacher -> 32x32 student, 2-12 min
    python examples/distill_reach_pixels.py --teacher runs/px  # a run of `robot-rl train --task reach_pixels`
    python examples/distill_reach_pixels.py --quick            # a smoke run of the whole pipeline, ~20 s

1. The teacher: by default :class:`~robot_rl.sims.reach_pixels_expert.ReachPixelsExpert`, a scripted policy that
   finds the goal in the 64×64 image and steers at it (it succeeds in every episode); with ``--teacher RUN`` the
   policy of a trained run directory (a pixel SAC run), which is what `robot-rl distill RUN` takes.
2. The student: SAC's DrQ encoder with 8 channels and 32 features and a 64×64 head, seeing the same world
   rendered at 32×32 (``--image-size``): its task steps in lockstep with the teacher's.
3. Round 0 rolls out the teacher; DAgger rounds then let the student drive, mixed with the teacher with a
   decaying probability, and the teacher labels every observation visited. The student is scored next to the
   teacher on the same 100 episodes, saved as a SAC run (``--out``), and exported to C (float32 and int8_full,
   checked against torch); ``<out>/DISTILL.md`` and ``<out>/export/EXPORT.md`` hold the figures.

The same with a trained teacher, from the command line::

    robot-rl distill runs/px --student small_cnn --image-size 32 --out runs/px-student
    robot-rl export runs/px-student --format c --variants float32 int8_full --num-random 0 --out px_c
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import torch

from robot_rl.distill import DaggerConfig, DistillConfig, StudentConfig, Teacher, distill, load_teacher
from robot_rl.sims.reach_pixels import ReachPixelsConfig
from robot_rl.sims.reach_pixels_expert import ReachPixelsExpert


def main() -> None:
    """Parse the flags, distil, print teacher vs student and the student's C sizes."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", type=Path, default=None, help="a pixel run directory (default: the scripted expert)")
    ap.add_argument("--image-size", type=int, default=32, help="the student's image side in px")
    ap.add_argument("--out", type=Path, default=Path("runs/distill_reach_pixels"), help="the student's run directory")
    ap.add_argument("--quick", action="store_true", help="a tiny budget: checks the pipeline, not the result")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(4, torch.get_num_threads())))
    if args.out.exists():
        shutil.rmtree(args.out)  # the example's own output: start afresh
    task = ReachPixelsConfig()  # 64x64, as trained by `robot-rl train --task reach_pixels`
    teacher = (load_teacher(args.teacher) if args.teacher is not None
               else Teacher.from_policy(ReachPixelsExpert(task), task))
    dagger = (DaggerConfig(rounds=2, steps_per_round=5, num_envs=16, updates_per_round=20) if args.quick
              else DaggerConfig())
    cfg = DistillConfig(run_dir=args.teacher or Path("scripted"), out=args.out,
                        student=StudentConfig(kind="small_cnn", image_size=args.image_size), dagger=dagger,
                        eval_episodes=20 if args.quick else 100, export_num_recorded=50 if args.quick else 400)
    start = time.monotonic()

    def progress(stage: str, done: int, total: int, info: str) -> None:
        print(f"[{time.monotonic() - start:6.1f} s] {stage} {done}/{total}: {info}", flush=True)

    report = distill(cfg, teacher=teacher, progress=progress)
    print()
    print((args.out / "DISTILL.md").read_text())
    if report.export_dir:
        print(f"C sources and the export check: {report.export_dir} (EXPORT.md)")
    else:
        print(f"export failed: {report.export_error}")


if __name__ == "__main__":
    main()
