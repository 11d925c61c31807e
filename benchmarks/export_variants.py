"""C export variants side by side: error vs torch, flash/RAM and instructions per forward pass on Cortex-M4F, M7, M0+.

    .venv/bin/python benchmarks/export_variants.py [--out benchmarks/RESULTS_export.md] [--quick]

Actors (random-initialised, as `robot-rl train` builds them; the verification observations are random ones plus
ones recorded by running the actor in its task, as `robot-rl export` does):
- `reach`: SAC's default actor on the default task, 12 state values -> 256 -> 256 ReLU -> tanh-squashed 2 actions;
- `pixels32`, `pixels64`: pixel SAC on `reach_pixels` (32x32 or 64x64 RGB + 4 joint values), DrQ encoder with
  8 channels (4 convs 3x3, stride 2 then 1, ReLU; Linear -> LayerNorm -> tanh, 32 features), actor 64x64;
- `pixels64-default`: SAC's pixel defaults (32 channels, 50 features, actor 256x256) at 64x64, sized only.

Per variant (float32, int8 [MLP only], int8_full, q15, q7), measured in one run and compared with float32:
- max |C - torch| on the verification observations (q15, q7: with its computed bound);
- flash (.text+.rodata+.data of the policy, plus what libm / soft-float adds when linked) and RAM (.data+.bss+peak
  stack) per core at -Os, and whether the forward pass calls float routines (soft float on the M0+);
- instructions per forward pass under `qemu-system-arm -icount shift=0` (examples/firmware/src/bench_qemu.c), with
  the policy built at -Os and at -O2: MPS2-AN386 (M4), MPS2-AN500 (M7), and the ARMv6-M build for the M0+ run on
  MPS2-AN385's Cortex-M3 (QEMU has no M0+ machine with enough RAM; v6-M code is a subset and runs unchanged).
The section is written between markers in RESULTS_export.md (replaced on a rerun) and the numbers to
benchmarks/results/export_variants.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import tempfile
import time
from pathlib import Path

import torch

from robot_rl.core.specs import EnvSpec
from robot_rl.export.run_export import LoadedActor, export_actor, is_conversion_helper
from robot_rl.export.toolchain import QEMU_BOARDS, qemu_available, qemu_cost
from robot_rl.policies.sac import SACConfig, SACPolicy
from robot_rl.sims.reach import ReachConfig
from robot_rl.sims.reach_pixels import ReachPixelsConfig

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("cortex-m4f", "cortex-m7", "cortex-m0plus")
SHORT = {"cortex-m4f": "M4F", "cortex-m7": "M7", "cortex-m0plus": "M0+"}
START, END = "<!-- export_variants:start -->", "<!-- export_variants:end -->"
M7_HZ, FLASH_LIMIT, RAM_LIMIT = 480e6, 512 * 1024, 128 * 1024


def models(quick: bool) -> dict[str, tuple]:
    """name -> (task config, SAC config, variants, observations (random, recorded), QEMU reps)."""
    small = {"image_channels": 8, "image_features": 32, "actor_hidden": (64, 64)}
    pixel_variants = ("float32", "int8_full", "q15", "q7")
    out = {"reach": (ReachConfig(), SACConfig(), ("float32", "int8", "int8_full", "q15", "q7"), (500, 500), 20),
           "pixels32": (ReachPixelsConfig(image_size=32), SACConfig(**small), pixel_variants, (200, 200), 5),
           "pixels64": (ReachPixelsConfig(image_size=64), SACConfig(**small), pixel_variants, (100, 100), 3)}
    if not quick:
        out["pixels64-default"] = (ReachPixelsConfig(image_size=64), SACConfig(), pixel_variants, (30, 30), 0)
    return out


def build_actor(task, sac: SACConfig) -> tuple[SACPolicy, EnvSpec]:
    torch.manual_seed(0)
    env = task.make("cpu", 0, num_envs=1)
    spec = env.spec
    env.close()
    return SACPolicy(spec, sac).eval(), spec


def measure(name: str, cfg: tuple, tmp: Path, opts: tuple[str, ...]) -> dict:
    task, sac, variants, (n_random, n_recorded), reps = cfg
    policy, spec = build_actor(task, sac)
    loaded = LoadedActor(policy, spec, Path("."), Path("(random init)"), task)
    t0 = time.time()
    report = export_actor(policy, spec, "c", tmp / name, variants=variants, num_random=n_random,
                          num_recorded=n_recorded, loaded=loaded, targets=TARGETS if reps else ())
    print(f"{name}: exported {variants} in {time.time() - t0:.0f} s", flush=True)
    out: dict = {"architecture": report.architecture, "observations": [n_random, report.num_recorded],
                 "variants": {}}
    for v in report.variants:
        row = {"max_abs_err": v.max_abs_err, "bound_max": v.bound_max, "const_bytes": v.const_bytes,
               "workspace_bytes": v.workspace_bytes, "targets": v.targets, "instructions": {}}
        if reps and qemu_available():
            checked = v.variant in ("int8_full", "q15", "q7") or "image" in report.architecture
            for opt in opts:
                for target in TARGETS:
                    cost = qemu_cost(tmp / name / v.variant, target, tmp / "fw" / name / v.variant,
                                     checked_api=checked, reps=reps, opt=opt)
                    row["instructions"][f"{target}{opt}"] = {"instructions": cost.instructions, "stack": cost.stack}
                    print(f"  {v.variant} {target} {opt}: {cost.instructions:,} instructions", flush=True)
        out["variants"][v.variant] = row
    return out


def _forward_float(size: dict) -> bool:
    return any(not is_conversion_helper(fn) for fn in size["float_calls"])


def size_table(results: dict) -> list[str]:
    lines = ["| actor | variant | max \\|C − torch\\| | bound (int8, q15, q7) "
             "| flash B M4F / M7 / M0+ (+ libm, soft float) | RAM B M4F / M7 / M0+ | flash / float32 "
             "| float routines in the M0+ forward |",
             "| --- | --- | ---: | ---: | --- | --- | ---: | --- |"]
    for name, r in results.items():
        f32 = r["variants"]["float32"]["targets"].get("cortex-m4f")
        for variant, v in r["variants"].items():
            t = v["targets"]
            if not t:
                continue
            flash = " / ".join(f"{t[k]['flash']:,} (+{t[k]['libm_flash']:,})" for k in TARGETS)
            ram = " / ".join(f"{t[k]['ram']:,}" for k in TARGETS)
            ratio = t["cortex-m4f"]["flash"] / f32["flash"] if f32 else float("nan")
            bound = f"{v['bound_max']:.3g}" if v["bound_max"] is not None else "–"
            soft = "yes" if _forward_float(t["cortex-m0plus"]) else "none"
            lines.append(f"| {name} | {variant} | {v['max_abs_err']:.2g} | {bound} | {flash} | {ram} | {ratio:.2f} "
                         f"| {soft} |")
    return lines


def insn_table(results: dict, opts: tuple[str, ...]) -> list[str]:
    cols = [f"{SHORT[t]} {o}" for o in opts for t in TARGETS]
    lines = ["| actor | variant | " + " | ".join(cols) + " | ratio to float32 (same column order) |",
             "| --- | --- | " + " | ".join("---:" for _ in cols) + " | --- |"]
    for name, r in results.items():
        base = r["variants"]["float32"]["instructions"]
        for variant, v in r["variants"].items():
            ins = v["instructions"]
            if not ins:
                continue
            keys = [f"{t}{o}" for o in opts for t in TARGETS]
            vals = " | ".join(f"{ins[k]['instructions']:,}" for k in keys)
            ratios = " / ".join(f"{ins[k]['instructions'] / base[k]['instructions']:.2f}" for k in keys)
            lines.append(f"| {name} | {variant} | {vals} | {ratios} |")
    return lines


def verdict(results: dict, opts: tuple[str, ...]) -> list[str]:
    """Does the 64x64 camera policy fit 512 KB flash / 128 KB RAM and run at >= 20 Hz on a 480 MHz M7?"""
    lines = ["| actor | variant | M7 flash B | M7 RAM B | fits 512 KB / 128 KB | "
             + " | ".join(f"M7 Hz {o} (2 – 1 cycles/insn)" for o in opts) + " | >= 20 Hz |",
             "| --- | --- | ---: | ---: | --- | " + " | ".join("---" for _ in opts) + " | --- |"]
    for name in ("pixels64", "pixels64-default"):
        for variant, v in results.get(name, {"variants": {}})["variants"].items():
            m7 = v["targets"].get("cortex-m7")
            # Not cross-built (too large to be worth it): the generator's constant data and workspace.
            flash, ram = (m7["flash"] + m7["libm_flash"], m7["ram"]) if m7 else (v["const_bytes"],
                                                                                  v["workspace_bytes"])
            fits = "yes" if flash <= FLASH_LIMIT and ram <= RAM_LIMIT else "no"
            hz, ok = [], []
            for o in opts:
                n = v["instructions"].get(f"cortex-m7{o}", {}).get("instructions")
                hz.append(f"{M7_HZ / (2 * n):.1f} – {M7_HZ / n:.1f}" if n else "– (not run)")
                ok.append(bool(n) and M7_HZ / (2 * n) >= 20)
            speed = "yes" if any(ok) else ("– (not run)" if not any(v["instructions"]) else "no")
            lines.append(f"| {name} | {variant} | {flash:,} | {ram:,} | {fits} | {' | '.join(hz)} | {speed} |")
    return lines


def render(results: dict, opts: tuple[str, ...], seconds: float) -> str:
    archs = [f"- `{n}`: {r['architecture']} ({r['observations'][0]} random + {r['observations'][1]} recorded "
             "observations)" for n, r in results.items()]
    return "\n".join([
        START, f"## C variants for FPU-less and FPU cores: float32, int8, int8_full, q15, q7 ({datetime.date.today()})",
        "", f"Machine: 2-core AMD EPYC VM, no GPU, shared with other jobs ({platform.machine()}); arm-none-eabi-gcc "
        "12.2, QEMU 7.2. Command: `.venv/bin/python benchmarks/export_variants.py"
        f"{' --quick' if opts == ('-Os',) else ''}` "
        f"({seconds / 60:.0f} min). Random-initialised actors, as `robot-rl train` builds them:", "", *archs, "",
        "### Error and memory", "",
        "Flash = the policy's .text+.rodata+.data at -Os (+ what linking it into a newlib-nano image adds: libm, "
        "and on the M0+ the soft-float routines). RAM = .data+.bss+peak stack of the forward pass (GCC's call "
        "graph). Bounds: int8's (`quantize.py`) and q15's and q7's (`fixed_bound.py`) rigorous worst cases, capped at "
        "what the output map allows (2 on these [-1, 1] actions: uninformative, which is what a worst case through 4 "
        "convolutions gives); the error is measured on the same observations.", "", *size_table(results), "",
        "### Instructions per forward pass (QEMU)", "",
        "`qemu-system-arm -icount shift=0`, SysTick calibrated in the same run. QEMU models no pipeline, caches or "
        "wait states: on silicon expect about 1–2 cycles per instruction on the M4F/M7 and the M0+ (whose "
        "multiplier is single-cycle on most parts). The M0+ column is the ARMv6-M binary run on QEMU's Cortex-M3.",
        "", *insn_table(results, opts), "",
        "### Does the 64x64 camera policy meet 512 KB flash / 128 KB RAM and >= 20 Hz on a 480 MHz Cortex-M7?", "",
        "Flash here includes libm (for `pixels64-default`, not cross-built: the generator's constant bytes and "
        "workspace, a lower bound); Hz = 480 MHz / (instructions × 2 … 1 cycles per instruction).", "",
        *verdict(results, opts), END])


def write_section(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else ""
    if START in text and END in text:
        text = text[:text.index(START)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS_export.md")
    ap.add_argument("--quick", action="store_true", help="skip the 64x64 SAC-default actor and the -O2 builds")
    args = ap.parse_args()
    assert set(TARGETS) <= set(QEMU_BOARDS)
    opts = ("-Os",) if args.quick else ("-Os", "-O2")
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d:
        results = {name: measure(name, cfg, Path(d), opts) for name, cfg in models(args.quick).items()}
    (ROOT / "benchmarks" / "results").mkdir(exist_ok=True)
    (ROOT / "benchmarks" / "results" / "export_variants.json").write_text(json.dumps(results, indent=1))
    section = render(results, opts, time.time() - t0)
    write_section(args.out, section)
    print(section)


if __name__ == "__main__":
    main()
