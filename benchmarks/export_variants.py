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

Trained actors instead (`--trained`): each run's actor exported as `robot-rl export` does it (1,000 random and 1,000
recorded observations, every variant its architecture takes, no cross builds), the error on the recorded and on the
random observations apart, and int8_full also calibrated on all of them (as the export did before it took the
recorded ones alone) for comparison. Its own section in RESULTS_export.md and
benchmarks/results/export_variants_trained.json:

    for s in 0 1 2; do robot-rl train --name reach-s$s run.seed=$s; done      # the README's default run, 3 seeds
    .venv/bin/python benchmarks/export_variants.py --trained runs/reach-s0 runs/reach-s1 runs/reach-s2
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from robot_rl.core.specs import EnvSpec
from robot_rl.export.c_int8 import generate_int8_c
from robot_rl.export.graph import MLPGraph
from robot_rl.export.int8_full import as_vision, calibrate
from robot_rl.export.run_export import (
    LoadedActor,
    export_actor,
    is_conversion_helper,
    load_actor,
    random_observations,
    recorded_observations,
    torch_actions,
)
from robot_rl.export.toolchain import QEMU_BOARDS, build_vision_harness, qemu_available, qemu_cost
from robot_rl.export.vision import VisionGraph, extract_graph
from robot_rl.policies.sac import SACConfig, SACPolicy
from robot_rl.sims.reach import ReachConfig
from robot_rl.sims.reach_pixels import ReachPixelsConfig

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("cortex-m4f", "cortex-m7", "cortex-m0plus")
SHORT = {"cortex-m4f": "M4F", "cortex-m7": "M7", "cortex-m0plus": "M0+"}
START, END = "<!-- export_variants:start -->", "<!-- export_variants:end -->"
TRAINED = "<!-- export_variants_trained:start -->", "<!-- export_variants_trained:end -->"
RESULT_FILE, TRAINED_FILE = "results/export_variants.json", "results/export_variants_trained.json"  # from benchmarks/
MLP_VARIANTS = ("float32", "int8", "int8_full", "q15", "q7")
PIXEL_VARIANTS = ("float32", "int8_full", "q15", "q7")
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


def _opts(results: dict) -> tuple[str, ...]:
    """The optimisation levels a run measured (``--quick``: -Os only), from its instruction counts."""
    keys = {k for r in results.values() for v in r["variants"].values() for k in v["instructions"]}
    return tuple(o for o in ("-Os", "-O2") if any(k.endswith(o) for k in keys))

def _marked(function: str, path: str, lines: list[str]) -> list[str]:
    """A table between ``benchmarks/report.py``'s markers, so that its check covers the section this script writes."""
    return [f"<!-- table: export_variants.{function} {path} -->", "", *lines, "", "<!-- /table -->"]


def sizes(records: list[dict]) -> str:
    """:func:`size_table` of results/export_variants.json (``benchmarks/report.py``)."""
    return "\n".join(size_table(records[0]["results"]))


def instructions(records: list[dict]) -> str:
    """:func:`insn_table` of results/export_variants.json."""
    return "\n".join(insn_table(records[0]["results"], _opts(records[0]["results"])))


def fits(records: list[dict]) -> str:
    """:func:`verdict` of results/export_variants.json."""
    return "\n".join(verdict(records[0]["results"], _opts(records[0]["results"])))


def trained_errors(records: list[dict]) -> str:
    """:func:`trained_table` of results/export_variants_trained.json."""
    return "\n".join(trained_table(records[0]["results"]))



#: docs/export.md's names for the benchmark's actors.
DOC_NAMES = {"reach": "SAC's default reach actor (12 → 256 → 256 → 2)",
             "pixels64": "pixel SAC 64×64 (8 channels, 32 features, 64×64)",
             "pixels64-default": "64×64 (`reach_pixels`' default), 32, 50, 256×256 (SAC's defaults)",
             "pixels64-gen": "64×64, 8, 32, 64×64", "pixels32-gen": "32×32, 8, 32, 64×64"}


def docs_sizes(records: list[dict]) -> str:
    """docs/export.md's "Sizes and speed per variant and core": flash at -Os with libm or soft float linked in, RAM,
    and instructions per forward pass at -Os, for the reach actor and the 64×64 pixel actor."""
    results = records[0]["results"]
    lines = ["| actor | variant | flash M4F / M0+ B | RAM B | instructions M4F | M7 | M0+ |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name in ("reach", "pixels64"):
        for i, (variant, v) in enumerate(results[name]["variants"].items()):
            t, ins = v["targets"], v["instructions"]
            flash = " / ".join(f"{t[k]['flash'] + t[k]['libm_flash']:,}" for k in ("cortex-m4f", "cortex-m0plus"))
            cost = " | ".join(f"{ins[f'{k}-Os']['instructions']:,}" for k in TARGETS)
            actor = f"| {DOC_NAMES[name]} |" if i == 0 else "| |"
            lines.append(f"{actor} {variant} | {flash} | {t['cortex-m4f']['ram']:,} | {cost} |")
    return "\n".join(lines)


def generator_bytes(records: list[dict]) -> str:
    """docs/export.md's table of what the generator reports (constants / workspace bytes, before linking) for the
    pixel actors, per variant."""
    results = records[0]["results"]
    variants = ("float32", "int8_full", "q15", "q7")
    lines = ["| image, conv channels, features, actor | float32 flash / RAM | int8_full | q15 | q7 |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for name, label in (("pixels64-default", DOC_NAMES["pixels64-default"]), ("pixels64", DOC_NAMES["pixels64-gen"]),
                        ("pixels32", DOC_NAMES["pixels32-gen"])):
        v = results[name]["variants"]
        cells = " | ".join(f"{v[k]['const_bytes']:,} / {v[k]['workspace_bytes']:,} B" for k in variants)
        lines.append(f"| {label} | {cells} |")
    return "\n".join(lines)


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
        "convolutions gives); the error is measured on the same observations.", "",
        *_marked("sizes", RESULT_FILE, size_table(results)), "",
        "### Instructions per forward pass (QEMU)", "",
        "`qemu-system-arm -icount shift=0`, SysTick calibrated in the same run. QEMU models no pipeline, caches or "
        "wait states: on silicon expect about 1–2 cycles per instruction on the M4F/M7 and the M0+ (whose "
        "multiplier is single-cycle on most parts). The M0+ column is the ARMv6-M binary run on QEMU's Cortex-M3.",
        "", *_marked("instructions", RESULT_FILE, insn_table(results, opts)), "",
        "### Does the 64x64 camera policy meet 512 KB flash / 128 KB RAM and >= 20 Hz on a 480 MHz Cortex-M7?", "",
        "Flash here includes libm (for `pixels64-default`, not cross-built: the generator's constant bytes and "
        "workspace, a lower bound); Hz = 480 MHz / (instructions × 2 … 1 cycles per instruction).", "",
        *_marked("fits", RESULT_FILE, verdict(results, opts)), END])


def measure_trained(run_dir: Path, tmp: Path, n_random: int, n_recorded: int, variants: tuple[str, ...] | None) -> dict:
    """A trained run's actor, exported as `robot-rl export` does it; the error on recorded and random observations."""
    loaded = load_actor(run_dir)
    graph = extract_graph(loaded.policy, loaded.spec)
    pixels = isinstance(graph, VisionGraph)
    variants = variants or (PIXEL_VARIANTS if pixels else MLP_VARIANTS)
    t0 = time.time()
    report = export_actor(loaded.policy, loaded.spec, "c", tmp / run_dir.name, variants=variants,  # type: ignore[arg-type]
                          num_random=n_random, num_recorded=n_recorded, targets=(), loaded=loaded, graph=graph)
    print(f"{run_dir}: exported {variants} in {time.time() - t0:.0f} s", flush=True)
    rows = {v.variant: {"max_abs_err": v.max_abs_err, "recorded": v.max_abs_err_recorded,
                        "random": v.max_abs_err_random, "bound_max": v.bound_max,
                        "worst_err_over_bound": v.worst_err_over_bound} for v in report.variants}
    if "int8_full" in rows:
        rows["int8_full, calibrated on all"] = _int8_full_calibrated_on_all(loaded, graph, n_random, n_recorded, tmp)
    return {"run": str(run_dir), "checkpoint": str(loaded.checkpoint), "architecture": report.architecture,
            "observations": [n_random, report.num_recorded], "variants": rows}


def _int8_full_calibrated_on_all(loaded: LoadedActor, graph: MLPGraph | VisionGraph, n_random: int, n_recorded: int,
                                 tmp: Path) -> dict:
    """The former calibration, on the same observations as the export's (seed 0): random and recorded together."""
    rnd = random_observations(loaded.spec, loaded.policy, n_random, 0)
    rec = recorded_observations(loaded, n_recorded, 0)
    obs = {k: np.concatenate([rnd[k], rec[k]]) for k in rnd}
    vision = graph if isinstance(graph, VisionGraph) else as_vision(graph)
    images = [obs[cam.key] for cam in vision.cameras]
    state = obs["state"] if vision.state_dim else None
    src = generate_int8_c(vision, calibrate(vision, images, state), "policy")
    # A directory per run: dlopen hands back the library already loaded from the same path.
    image_bytes = [int(np.prod(c.image_shape)) for c in vision.cameras]
    lib = build_vision_harness(src, tmp / f"{loaded.run_dir.name}_calibrated_on_all", image_bytes, vision.state_dim,
                               vision.act_dim)
    err = np.abs(lib.forward(images, state).astype(np.float64) - torch_actions(loaded.policy, obs)).max(axis=1)
    return {"max_abs_err": float(err.max()), "recorded": float(err[n_random:].max()),
            "random": float(err[:n_random].max()), "bound_max": None, "worst_err_over_bound": None}


def trained_table(results: dict) -> list[str]:
    lines = ["| run | variant | max \\|C − torch\\| on the recorded observations | on the random ones | bound "
             "(int8, q15, q7; over both) |", "| --- | --- | ---: | ---: | ---: |"]
    for name, r in results.items():
        for variant, v in r["variants"].items():
            bound = f"{v['bound_max']:.3g}" if v["bound_max"] is not None else "–"
            lines.append(f"| {name} | {variant} | {v['recorded']:#.2g} | {v['random']:#.2g} | {bound} |")
    return lines


def render_trained(results: dict) -> str:
    runs = [f"- `{name}`: {r['architecture']} ({r['observations'][0]} random + {r['observations'][1]} recorded "
            f"observations; `.venv/bin/python benchmarks/export_variants.py {r['command']}`, {r['date']}, "
            f"{r['seconds']:.0f} s)" for name, r in results.items()]
    return "\n".join([
        TRAINED[0], "## C variants of trained actors", "",
        f"Machine: 2-core AMD EPYC VM, no GPU, shared with other jobs ({platform.machine()}). Each run's actor "
        "exported as `robot-rl export` does it; the random observations are N(0, 2²) states (or around the "
        "normaliser; uniform images), far outside what the task visits. int8_full is calibrated on the recorded "
        "observations; the row "
        "\"calibrated on all\" is the former calibration on random and recorded together, on the same "
        "observations. A rerun replaces its runs' rows and keeps the others.", "", *runs, "",
        *_marked("trained_errors", TRAINED_FILE, trained_table(results)), TRAINED[1]])


def write_section(path: Path, section: str, markers: tuple[str, str] = (START, END)) -> None:
    start, end = markers
    text = path.read_text() if path.exists() else ""
    if start in text and end in text:
        text = text[:text.index(start)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS_export.md")
    ap.add_argument("--quick", action="store_true", help="skip the 64x64 SAC-default actor and the -O2 builds")
    ap.add_argument("--trained", type=Path, nargs="+", help="measure these runs' trained actors instead")
    ap.add_argument("--num-random", type=int, default=1000, help="--trained: random observations")
    ap.add_argument("--num-recorded", type=int, default=1000, help="--trained: recorded observations")
    ap.add_argument("--variants", nargs="+", help="--trained: these variants (default: all the actor takes)")
    args = ap.parse_args()
    if args.trained:
        main_trained(args)
        return
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



def main_trained(args: argparse.Namespace) -> None:
    path = ROOT / "benchmarks" / "results" / "export_variants_trained.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    argv = " ".join(["--trained", *map(str, args.trained)]
                    + ([f"--num-random {args.num_random}"] if args.num_random != 1000 else [])
                    + ([f"--num-recorded {args.num_recorded}"] if args.num_recorded != 1000 else [])
                    + (["--variants", *args.variants] if args.variants else []))
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d:
        new = {run.name: measure_trained(run, Path(d), args.num_random, args.num_recorded,
                                         tuple(args.variants) if args.variants else None) for run in args.trained}
    for r in new.values():
        r.update(command=argv, date=str(datetime.date.today()), seconds=time.time() - t0)
    results.update(new)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    section = render_trained(results)
    write_section(args.out, section, TRAINED)
    print(section)


if __name__ == "__main__":
    main()
