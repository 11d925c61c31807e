"""Exported-policy inference: generated C vs onnxruntime vs torch on the host, Cortex-M sizes and QEMU cost.

    .venv/bin/python benchmarks/export_inference.py [--out benchmarks/RESULTS_export.md]

For a 2x64 and a 3x256 MLP actor (SAC-style: 32 state values -> hidden ReLU -> tanh-squashed 8 actions,
with observation normalisation), measured in one run:
- host time per forward pass at batch 1: generated C (float32 and int8, gcc -O2, timed inside C over
  1000 observations x reps), onnxruntime (1 thread, one session.run per observation) and torch
  (1 thread, no_grad deterministic act per observation), as ratios to the float32 C;
- flash (.text+.rodata+.data, plus the libm functions it pulls in) and RAM (.data+.bss+peak stack) on
  Cortex-M4F at -Os, float32 against int8;
- with qemu-system-arm and cmake: instructions and measured peak stack per forward pass on MPS2-AN386
  (Cortex-M4) and MPS2-AN500 (Cortex-M7), from examples/firmware/src/bench_qemu.c.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.export import extract_mlp, generate_c
from robot_rl.export.run_export import random_observations
from robot_rl.export.toolchain import arm_available, build_host_harness, cross_compile, write_sources
from robot_rl.policies.sac import SACConfig, SACPolicy

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS_export.md")
    args = ap.parse_args()
    lines = ["# Export: inference cost of the exported actor", "",
             "Date: 2026-11-30. Machine: 2-core AMD EPYC VM, no GPU, shared with other jobs "
             f"({platform.processor() or platform.machine()}).",
             "Command: `.venv/bin/python benchmarks/export_inference.py`", "",
             f"Actors: SAC-style MLP, {OBS_DIM} normalised state values -> hidden ReLU layers -> tanh-squashed "
             f"{ACT_DIM} actions. Host times are per forward pass at batch 1 (C: best of 3 timed loops inside C, "
             "gcc -O2 without -march, as portable MCU code; onnxruntime/torch: >= 1 s Python loops, 1 thread "
             "each, call overhead included); ratios are to the float32 C. The machine is shared, so single "
             "numbers move by up to 2x between runs; the ratios within a run are the result.", "",
             "## Host, time per forward pass", "",
             "| model | params | C float32 ns | C int8 ns | onnxruntime ns | torch ns | int8/C | ort/C | torch/C |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    sizes_lines, qemu_lines = [], []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for label, hidden in MODELS.items():
            pol, spec = make_policy(hidden)
            graph = extract_mlp(pol)
            t = host_times(pol, spec, tmp / label)
            c = t["C float32"]
            lines.append(f"| {label} | {graph.num_params():,} | {c:,.0f} | {t['C int8']:,.0f} | "
                         f"{t['onnxruntime']:,.0f} | {t['torch']:,.0f} | {t['C int8'] / c:.2f} | "
                         f"{t['onnxruntime'] / c:.1f} | {t['torch'] / c:.1f} |")
            print(label, {k: round(v) for k, v in t.items()}, flush=True)
            if not arm_available():
                continue
            sz = {v: cross_compile(generate_c(graph, "p", v), "cortex-m4f", tmp / label / "arm" / v, OBS_DIM,
                                   ACT_DIM) for v in ("float32", "int8")}
            f, i = sz["float32"], sz["int8"]
            sizes_lines.append(f"| {label} | {f.flash:,} | {i.flash:,} | {i.flash / f.flash:.2f} | {f.libm_flash:,} "
                               f"| {f.ram:,} | {i.ram:,} | {f.stack} / {i.stack} |")
            if shutil.which("qemu-system-arm") and shutil.which("cmake"):
                for v in ("float32", "int8"):
                    vdir = tmp / label / "src" / v
                    write_sources(generate_c(graph, "policy", v), vdir)
                    for board, core in (("mps2_an386", "M4"), ("mps2_an500", "M7")):
                        insn, stack = qemu_cost(vdir, board, tmp)
                        qemu_lines.append(f"| {label} | {v} | Cortex-{core} ({board}) | {insn:,} | "
                                          f"{insn / graph.num_params():.1f} | {stack} |")
                        print(label, v, board, insn, stack, flush=True)
    if sizes_lines:
        lines += ["", "## Cortex-M4F (-Os, arm-none-eabi-gcc 12.2), float32 vs int8", "",
                  "Flash = the policy's .text+.rodata+.data; libm = what linking it into a newlib-nano image adds "
                  "(tanhf, fminf, fmaxf). RAM = .data+.bss (the static ping-pong workspace) + peak stack of "
                  "`p_forward` from GCC's call graph.", "",
                  "| model | flash f32 B | flash int8 B | int8/f32 | + libm B | RAM f32 B | RAM int8 B "
                  "| stack f32/int8 B |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |", *sizes_lines]
    if qemu_lines:
        lines += ["", "## Instructions per forward pass under QEMU (stretch)", "",
                  "`qemu-system-arm -icount shift=0` (one instruction per ns of virtual time), SysTick calibrated "
                  "against a loop of known length in the same run; stack measured by painting. QEMU does not "
                  "model pipelines, caches or flash wait states, so cycles on a real part are roughly "
                  "1-2x the instruction count (FPU multiply-accumulate, loads from flash).", "",
                  "| model | variant | core | instructions | per parameter | measured stack B |",
                  "| --- | --- | --- | ---: | ---: | ---: |", *qemu_lines]
    lines += ["", "Not compared: RLtools' published microcontroller timings (no figures for matching layer sizes "
              "were at hand in this run)."]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
