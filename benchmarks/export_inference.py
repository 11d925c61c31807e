"""Exported-policy inference: generated C vs onnxruntime vs torch on the host, Cortex-M sizes and QEMU cost.

    .venv/bin/python benchmarks/export_inference.py [--out RESULT.json]

For a 2x64 and a 3x256 MLP actor (SAC-style: 32 state values -> hidden ReLU -> tanh-squashed 8 actions,
with observation normalisation), measured in one run:
- host time per forward pass at batch 1: generated C (float32 and int8, gcc -O2, timed inside C over
  1000 observations x reps), onnxruntime (1 thread, one session.run per observation) and torch
  (1 thread, no_grad deterministic act per observation), as ratios to the float32 C;
- flash (.text+.rodata+.data, plus the libm functions it pulls in) and RAM (.data+.bss+peak stack) on
  Cortex-M4F at -Os, float32 against int8;
- with qemu-system-arm and cmake: instructions and measured peak stack per forward pass on MPS2-AN386
  (Cortex-M4) and MPS2-AN500 (Cortex-M7), from examples/firmware/src/bench_qemu.c.

Writes one result file (default ``benchmarks/results/export_inference/<UTC time>.json``); :func:`host_table`,
:func:`sizes_table` and :func:`qemu_table` render benchmarks/RESULTS_export.md's tables from it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.export import extract_mlp, generate_c
from robot_rl.export.run_export import random_observations
from robot_rl.export.toolchain import arm_available, build_host_harness, cross_compile, write_sources
from robot_rl.policies.sac import SACConfig, SACPolicy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import default_path, markdown_table, read_result, write_result

NAME = "export_inference"
ROOT = Path(__file__).resolve().parents[1]
MODELS = {"2x64": (64, 64), "3x256": (256, 256, 256)}
OBS_DIM, ACT_DIM = 32, 8


def make_policy(hidden):
    torch.manual_seed(0)
    spec = EnvSpec({"state": ArraySpec((OBS_DIM,))}, ArraySpec((ACT_DIM,), low=-1.0, high=1.0))
    pol = SACPolicy(spec, SACConfig(actor_hidden=hidden, normalize_obs=True)).eval()
    pol.encoder.normalizer.update(torch.randn(4096, OBS_DIM) * 2.0 + 0.5)
    return pol, spec


def time_python(fn, obs, min_s=1.0):
    for row in obs[:50]:
        fn(row)
    n, t0 = 0, time.perf_counter()
    while True:
        for row in obs:
            fn(row)
        n += len(obs)
        if time.perf_counter() - t0 >= min_s:
            return (time.perf_counter() - t0) / n * 1e9


def host_times(pol, spec, tmp):
    import onnxruntime as ort

    from robot_rl.export.onnx_export import export_onnx

    graph = extract_mlp(pol)
    obs = random_observations(spec, pol, 1000, seed=0)["state"]
    out = {}
    for variant in ("float32", "int8"):
        h = build_host_harness(generate_c(graph, "p", variant), tmp / variant, OBS_DIM, ACT_DIM)
        reps = max(1, int(2e8 / (graph.num_params() * len(obs))))
        h.bench_ns(obs, 1)
        out[f"C {variant}"] = min(h.bench_ns(obs, reps) for _ in range(3))
    export_onnx(pol, spec, tmp / "p.onnx")
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(tmp / "p.onnx"), so, providers=["CPUExecutionProvider"])
    rows = [r[None] for r in obs]
    out["onnxruntime"] = time_python(lambda r: sess.run(None, {"state": r}), rows)
    torch.set_num_threads(1)
    trows = [torch.from_numpy(r) for r in rows]
    with torch.inference_mode():
        out["torch"] = time_python(lambda r: pol.act({"state": r}, deterministic=True), trows)
    return out


def qemu_cost(variant_dir: Path, board: str, tmp: Path):
    build = tmp / f"fw-{board}-{variant_dir.name}"
    fw = ROOT / "examples" / "firmware"
    subprocess.run(["cmake", "-S", str(fw), "-B", str(build), f"-DCMAKE_TOOLCHAIN_FILE={fw}/cmake/arm-none-eabi.cmake",
                    f"-DPOLICY_DIR={variant_dir}", f"-DBOARD={board}"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    proc = subprocess.run(["qemu-system-arm", "-M", board.replace("_", "-"), "-nographic", "-icount", "shift=0",
                           "-semihosting", "-kernel", str(build / "policy_fw.elf")],
                          check=True, capture_output=True, text=True, timeout=300)
    fields = dict(kv.split("=", 1) for kv in (proc.stdout + proc.stderr).split() if "=" in kv)  # semihosting → stderr
    return int(fields["insn_per_forward"]), int(fields["stack_bytes"])


def measure(tmp: Path) -> list[dict[str, Any]]:
    """Per model: host ns per forward (and ratios to the float32 C), Cortex-M4F sizes and QEMU cost where the
    toolchains are installed (``None`` / ``[]`` where not)."""
    models = []
    for label, hidden in MODELS.items():
        pol, spec = make_policy(hidden)
        graph = extract_mlp(pol)
        t = host_times(pol, spec, tmp / label)
        c = t["C float32"]
        model: dict[str, Any] = {"model": label, "hidden": list(hidden), "params": graph.num_params(), "host_ns": t,
                                 "over_c_float32": {k: v / c for k, v in t.items()}, "cortex_m4f": None, "qemu": []}
        models.append(model)
        print(label, {k: round(v) for k, v in t.items()}, flush=True)
        if not arm_available():
            continue
        sz = {v: cross_compile(generate_c(graph, "p", v), "cortex-m4f", tmp / label / "arm" / v, OBS_DIM,
                               ACT_DIM) for v in ("float32", "int8")}
        model["cortex_m4f"] = {v: {"flash": z.flash, "libm_flash": z.libm_flash, "ram": z.ram, "stack": z.stack}
                               for v, z in sz.items()}
        if shutil.which("qemu-system-arm") and shutil.which("cmake"):
            for v in ("float32", "int8"):
                vdir = tmp / label / "src" / v
                write_sources(generate_c(graph, "policy", v), vdir)
                for board, core in (("mps2_an386", "M4"), ("mps2_an500", "M7")):
                    insn, stack = qemu_cost(vdir, board, tmp)
                    model["qemu"].append({"variant": v, "core": f"Cortex-{core}", "board": board,
                                          "instructions": insn, "per_parameter": insn / graph.num_params(),
                                          "stack": stack})
                    print(label, v, board, insn, stack, flush=True)
    return models


def host_table(runs: list[dict[str, Any]]) -> str:
    """Host ns per forward pass at batch 1 and the ratios to the float32 C."""
    rows = []
    for run in runs:
        for m in run["results"]["models"]:
            t, r = m["host_ns"], m["over_c_float32"]
            rows.append([m["model"], f"{m['params']:,}", f"{t['C float32']:,.0f}", f"{t['C int8']:,.0f}",
                         f"{t['onnxruntime']:,.0f}", f"{t['torch']:,.0f}", f"{r['C int8']:.2f}",
                         f"{r['onnxruntime']:.1f}", f"{r['torch']:.1f}"])
    return markdown_table(["model", "params", "C float32 ns", "C int8 ns", "onnxruntime ns", "torch ns", "int8/C",
                           "ort/C", "torch/C"], rows, "lrrrrrrrr")


def sizes_table(runs: list[dict[str, Any]]) -> str:
    """Cortex-M4F flash and RAM at -Os, float32 against int8."""
    rows = []
    for run in runs:
        for m in run["results"]["models"]:
            if not m["cortex_m4f"]:
                continue
            f, i = m["cortex_m4f"]["float32"], m["cortex_m4f"]["int8"]
            rows.append([m["model"], f"{f['flash']:,}", f"{i['flash']:,}", f"{i['flash'] / f['flash']:.2f}",
                         f"{f['libm_flash']:,}", f"{f['ram']:,}", f"{i['ram']:,}", f"{f['stack']} / {i['stack']}"])
    return markdown_table(["model", "flash f32 B", "flash int8 B", "int8/f32", "+ libm B", "RAM f32 B", "RAM int8 B",
                           "stack f32/int8 B"], rows, "lrrrrrrr")


def qemu_table(runs: list[dict[str, Any]]) -> str:
    """Instructions and measured stack per forward pass under QEMU."""
    rows = [[m["model"], q["variant"], f"{q['core']} ({q['board']})", f"{q['instructions']:,}",
             f"{q['per_parameter']:.1f}", str(q["stack"])]
            for run in runs for m in run["results"]["models"] for q in m["qemu"]]
    return markdown_table(["model", "variant", "core", "instructions", "per parameter", "measured stack B"], rows,
                          "lllrrr")


def page(runs: list[dict[str, Any]]) -> str:
    """The three tables with their headings and method notes (what ``--out X.md`` writes)."""
    lines = ["# Export: inference cost of the exported actor", "",
             f"Actors: SAC-style MLP, {OBS_DIM} normalised state values -> hidden ReLU layers -> tanh-squashed "
             f"{ACT_DIM} actions. Host times are per forward pass at batch 1 (C: best of 3 timed loops inside C, "
             "gcc -O2 without -march, as portable MCU code; onnxruntime/torch: >= 1 s Python loops, 1 thread "
             "each, call overhead included); ratios are to the float32 C.", "",
             "## Host, time per forward pass", "", host_table(runs)]
    if any(m["cortex_m4f"] for run in runs for m in run["results"]["models"]):
        lines += ["", "## Cortex-M4F (-Os, arm-none-eabi-gcc), float32 vs int8", "", sizes_table(runs)]
    if any(m["qemu"] for run in runs for m in run["results"]["models"]):
        lines += ["", "## Instructions per forward pass under QEMU (stretch)", "", qemu_table(runs)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None,
                    help="result file (JSON; default benchmarks/results/export_inference/<UTC date-time>.json); "
                         "a path ending in .md (the old use) gets the tables rendered from the result file, which "
                         "then goes to the default path")
    args = ap.parse_args()
    started = dt.datetime.now(dt.UTC)
    markdown = args.out if args.out is not None and args.out.suffix == ".md" else None
    with tempfile.TemporaryDirectory() as d:
        results = {"models": measure(Path(d)), "host": platform.processor() or platform.machine(),
                   "arm_toolchain": arm_available(), "qemu": bool(shutil.which("qemu-system-arm"))}
    path = write_result(default_path(NAME, started) if markdown or args.out is None else args.out, NAME, args,
                        results, started)
    print(f"result file: {path}")
    if markdown is not None:
        markdown.write_text(page([read_result(path)]) + "\n")
        print(f"written to {markdown}")
    else:
        print(page([{"results": results}]))


if __name__ == "__main__":
    main()
