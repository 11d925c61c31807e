"""The C sizes of `robot-rl distill`'s default student on ``reach_pixels``, at the teacher's 64×64 and at 32×32.

    python benchmarks/distill_sizes.py          # a few seconds; writes benchmarks/results/distill_sizes/<UTC time>.json

Builds the default ``small_cnn`` student (``StudentConfig()``: 8 channels, 32 features, head 64×64, normalised
4-d state) for each image size and asks ``distill.student.c_sizes`` what the C generators make of it: the bytes of
constants (flash) and of static activation buffers (RAM) of the float32 and the int8_full C, before linking. The
sizes depend on the architecture, not on the weights, so an untrained student gives the trained one's.
docs/distill.md's table is built from the file (``docs_table``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

NAME = "distill_sizes"
TASK = "reach_pixels"


def student_sizes(image_size: int | None) -> dict[str, Any]:
    """The default student's C sizes at ``image_size`` (None: the task's own size)."""
    from robot_rl.core.config import TASKS
    from robot_rl.distill.config import StudentConfig
    from robot_rl.distill.student import build_student, c_sizes, student_task

    cfg = StudentConfig(image_size=image_size)
    teacher_task = TASKS.get(TASK)(num_envs=1)
    env = student_task(teacher_task, cfg).make("cpu", 0)
    try:
        spec = env.spec
    finally:
        env.close()
    side = spec.observation[spec.image_keys[0]].shape[0]
    return {"image_size": side, "teacher_image_size": getattr(teacher_task, "image_size", None),
            **c_sizes(build_student(spec, cfg, "cpu", 0), spec).as_dict()}


def docs_table(records: list[dict[str, Any]]) -> str:
    """docs/distill.md's table: flash / RAM of the float32 and the int8_full C per image size."""
    rows = []
    for r in records[0]["results"]["students"]:
        side = r["image_size"]
        how = f"`{TASK}`' default" if side == r["teacher_image_size"] else f"`--image-size {side}`"
        rows.append([f"{side}×{side} ({how})", f"{r['float32_const']:,} / {r['float32_workspace']:,} B",
                     f"{r['int8_full_const']:,} / {r['int8_full_workspace']:,} B"])
    return markdown_table(["image", "float32 flash / RAM", "int8_full flash / RAM"], rows, "-rr")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image-sizes", type=int, nargs="+", default=[64, 32], help="the student's image sides")
    add_out_argument(p, NAME)
    args = p.parse_args()
    started = dt.datetime.now(dt.UTC)
    students = [student_sizes(s) for s in args.image_sizes]
    for s in students:
        print(f"{s['image_size']}x{s['image_size']}: float32 {s['float32_const']} / {s['float32_workspace']} B, "
              f"int8_full {s['int8_full_const']} / {s['int8_full_workspace']} B  ({s['architecture']})")
    path = write_result(args.out or default_path(NAME, started), NAME, args, {"task": TASK, "students": students},
                        started)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
