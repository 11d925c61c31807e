"""Each C variant's error against torch, and its computed bound, on small random-initialised actors of every kind.

    python benchmarks/export_actor_errors.py     # about a minute of CPU (host gcc); writes
                                                 # benchmarks/results/export_actor_errors/<UTC time>.json

The actors are the export tests' (tests/test_export.py, tests/test_export_conv.py): SAC and PPO MLPs with each
activation the exporter takes (ReLU, ELU, SiLU, tanh, GELU), normalised or not, bounded or not, and pixel SAC
actors with one square camera and with two odd-sized ones, each with non-trivial normaliser statistics. Each is
exported as ``robot-rl export`` does it (``export_actor``: the C built for the host and run on random observations,
no recorded ones, no cross builds), one variant at a time: max |C − torch|, the bound where the variant computes
one (int8, q15, q7), and the generator's constants / workspace bytes.

docs/export.md's error tables are built from this file together with ``export_variants.py``'s two (its reach and
reach_pixels actors, and the trained reach actors): ``int8_table``, ``q15_table``, ``q7_table``,
``variants_table``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

NAME = "export_actor_errors"
#: name: (algo, state dim, hidden, activation, normalise, action shape, action bounds), as tests/test_export.py.
MLPS: dict[str, tuple[Any, ...]] = {
    "sac-relu": ("sac", 12, (64, 64), "relu", True, (2,), (-1.0, 1.0)),
    "ppo-elu": ("ppo", 9, (32, 32, 32), "elu", True, (3,), (-1.0, 1.0)),
    "ppo-silu": ("ppo", 6, (64, 16), "silu", True, (5,), (-0.3, 0.3)),
    "ppo-tanh": ("ppo", 21, (40, 20), "tanh", False, (2,), (None, None)),
    "ppo-gelu": ("ppo", 5, (8,), "gelu", True, (1,), (-1.0, 1.0)),
}
#: name: cameras (key: HWC shape), with a 4-d state and 2 actions in [-2, 1], as tests/test_export_conv.py.
PIXELS: dict[str, dict[str, tuple[int, int, int]]] = {
    "pixel-16x16": {"image.top": (16, 16, 3)},
    "pixel-two-cameras": {"image.front": (18, 20, 3), "image.wrist": (16, 17, 1)},
}
MLP_VARIANTS = ("float32", "int8", "int8_full", "q15", "q7")
PIXEL_VARIANTS = ("float32", "int8_full", "q15", "q7")


def _perturb(policy: Any, seed: int) -> Any:
    """Non-trivial normaliser statistics (updates only fill them during training)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    for m in policy.modules():
        if hasattr(m, "update") and hasattr(m, "var"):
            m.update(torch.randn(256, m.mean.numel(), generator=g) * 3.0 + 2.0)
    return policy.eval()


def build_actor(name: str, seed: int = 0) -> tuple[Any, Any]:
    """The actor ``name`` (an entry of MLPS or PIXELS) and its spec, its weights drawn from ``seed``."""
    import torch

    from robot_rl.core.specs import ArraySpec, EnvSpec
    from robot_rl.policies.ppo import PPOPolicy
    from robot_rl.policies.sac import SACConfig, SACPolicy

    torch.manual_seed(seed)
    if name in PIXELS:
        obs = {k: ArraySpec(shape, "uint8", low=0, high=255) for k, shape in PIXELS[name].items()}
        spec = EnvSpec({**obs, "state": ArraySpec((4,))}, ArraySpec((2,), low=-2.0, high=1.0))
        cfg = SACConfig(actor_hidden=(32, 32), image_channels=8, image_features=16, normalize_obs=True)
        return _perturb(SACPolicy(spec, cfg), seed), spec
    algo, obs_dim, hidden, act, norm, act_shape, (low, high) = MLPS[name]
    spec = EnvSpec({"state": ArraySpec((obs_dim,))}, ArraySpec(act_shape, low=low, high=high))
    policy = (SACPolicy(spec, SACConfig(actor_hidden=hidden, normalize_obs=norm)) if algo == "sac"
              else PPOPolicy(spec, hidden, act, 1.0, norm))
    return _perturb(policy, seed), spec


def measure(name: str, num_random: int, tmp: Path) -> dict[str, Any]:
    """Every variant of actor ``name``, exported one at a time."""
    from robot_rl.export import export_actor

    policy, spec = build_actor(name)
    variants: dict[str, Any] = {}
    architecture = ""
    for variant in PIXEL_VARIANTS if name in PIXELS else MLP_VARIANTS:
        report = export_actor(policy, spec, "c", tmp / name / variant, variants=(variant,), num_random=num_random,
                              targets=())
        (v,) = report.variants
        architecture = report.architecture
        variants[variant] = {"max_abs_err": v.max_abs_err, "bound_max": v.bound_max,
                             "worst_err_over_bound": v.worst_err_over_bound, "const_bytes": v.const_bytes,
                             "workspace_bytes": v.workspace_bytes}
        print(f"{name:18s} {variant:9s} err {v.max_abs_err:.3g}  bound {v.bound_max}  "
              f"{v.const_bytes} / {v.workspace_bytes} B", flush=True)
    low, high = spec.action.low, spec.action.high
    bounds = None if low is None or high is None else [float(low), float(high)]
    return {"architecture": architecture, "action_bounds": bounds, "num_random": num_random, "variants": variants}


# ---- docs/export.md's tables ---------------------------------------------------------------------------------------

#: How docs/export.md names each actor: this benchmark's, then export_variants.py's (random weights, its own
#: observations), then its trained ones (named by what their run directories share).
LABELS = {"sac-relu": "SAC MLP 12 → 64 → 64 ReLU → 2", "ppo-elu": "PPO MLP 9 → 3×32 ELU → 3",
          "ppo-silu": "PPO MLP 6 → 64 → 16 SiLU → 5", "ppo-tanh": "PPO MLP 21 → 40 → 20 tanh → 2",
          "ppo-gelu": "PPO MLP 5 → 8 GELU → 1", "pixel-16x16": "pixel SAC, 16×16×3 + state 4, 8 channels",
          "pixel-two-cameras": "pixel SAC, 18×20×3 + 16×17×1 + state 4, 8 channels",
          "reach": "SAC's default reach actor, 12 → 256 → 256 ReLU → 2",
          "pixels32": "pixel SAC on `reach_pixels` 32×32, 8 channels, 32 features, 64×64",
          "pixels64": "the same at 64×64",
          "reach-s": "SAC's default reach actor trained by `robot-rl train` (3 seeds; recorded observations)",
          "pix": "a `reach_pixels` run (64×64×3 + state 4, 32 channels, actor 64×64; 320 env steps, before SAC's first "
                 "update; recorded observations)"}
#: export_variants.py's actors, all acting in [-1, 1] (its file does not hold the bounds).
BENCH_BOUNDS = [-1.0, 1.0]


def _g(x: float) -> str:
    """An error or bound as the page prints it: two significant digits, e-notation below 1e-3 (``1.3e-4``)."""
    if x < 1e-3:
        mantissa, exponent = f"{x:.1e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{x:#.2g}"


def _span(values: list[float], fmt: Any = _g) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def _range(bounds: list[float] | None) -> str:
    return "unbounded" if bounds is None else f"[{bounds[0]:g}, {bounds[1]:g}]".replace("-", "−")


def _bound(x: float | None, bounds: list[float] | None) -> str:
    """A computed bound; one at the output map's own limit (the action range's width) is that limit, "(cap)"."""
    if x is None:
        return "–"
    if bounds is not None and x >= (bounds[1] - bounds[0]) * (1 - 1e-3):
        return f"{bounds[1] - bounds[0]:g} (cap)"
    return _g(x)


Actor = tuple[str, list[float] | None, list[dict[str, Any]], bool, dict[str, Any]]


def _actors(records: list[dict[str, Any]]) -> list[Actor]:
    """Every actor of the files in the pages' order: (label, action bounds, its variants per run, trained?, the
    variants of a random-weight actor of the same architecture, whose generator sizes are the trained one's). A
    trained actor groups the runs of one architecture (the three reach seeds); its errors are on recorded
    observations."""
    by = {r["benchmark"]: r["results"] for r in records}
    rows: list[Actor] = []
    sized: dict[str, dict[str, Any]] = {}
    for name, r in by.get(NAME, {}).items():
        if isinstance(r, dict) and "variants" in r:
            rows.append((LABELS[name], r["action_bounds"], [r["variants"]], False, r["variants"]))
    for name in ("reach", "pixels32", "pixels64"):
        if name in by.get("export_variants", {}):
            r = by["export_variants"][name]
            sized[r["architecture"]] = r["variants"]
            rows.append((LABELS[name], BENCH_BOUNDS, [r["variants"]], False, r["variants"]))
    trained = by.get("export_variants_trained", {})
    for prefix in ("reach-s", "pix"):
        runs = [r for k, r in trained.items() if k.startswith(prefix)]
        if runs:
            rows.append((LABELS[prefix], BENCH_BOUNDS, [r["variants"] for r in runs], True,
                         sized.get(runs[0]["architecture"], {})))
    return rows


def _err(runs: list[dict[str, Any]], variant: str, trained: bool) -> str:
    have = [v[variant] for v in runs if variant in v]
    return _span([v["recorded"] if trained else v["max_abs_err"] for v in have]) if have else "–"


def int8_table(records: list[dict[str, Any]]) -> str:
    """docs/export.md's int8_full section: the error of weight-only int8 and of int8_full, and float32's flash
    against int8_full's (the generator's constants)."""
    rows = []
    for label, bounds, runs, trained, sizes in _actors(records):
        flash = "–"
        if "float32" in sizes and "int8_full" in sizes:
            flash = f"{sizes['float32']['const_bytes']:,} → {sizes['int8_full']['const_bytes']:,} B"
        rows.append([label, _range(bounds), _err(runs, "int8", trained), _err(runs, "int8_full", trained), flash])
    return markdown_table(["actor", "action range", "weight-only int8", "int8_full", "flash float32 → int8_full"],
                          rows, "--rrr")


def _bounds(runs: list[dict[str, Any]], variant: str, bounds: list[float] | None) -> str:
    have = [v[variant]["bound_max"] for v in runs if variant in v and v[variant]["bound_max"] is not None]
    return _span(have, lambda x: _bound(x, bounds)) if have else "–"


def q15_table(records: list[dict[str, Any]]) -> str:
    """docs/export.md's q15 section: int8_full's and q15's errors and q15's computed bound."""
    rows = [[label, _range(bounds), _err(runs, "int8_full", trained), _err(runs, "q15", trained),
             _bounds(runs, "q15", bounds)] for label, bounds, runs, trained, _ in _actors(records) if "q15" in runs[0]]
    return markdown_table(["actor", "action range", "int8_full", "q15", "q15 bound"], rows, "--rrr")


def q7_table(records: list[dict[str, Any]]) -> str:
    """docs/export.md's q7 section: int8_full's, q15's and q7's errors and q7's computed bound."""
    rows = [[label, _range(bounds), _err(runs, "int8_full", trained), _err(runs, "q15", trained),
             _err(runs, "q7", trained), _bounds(runs, "q7", bounds)]
            for label, bounds, runs, trained, _ in _actors(records) if "q7" in runs[0]]
    return markdown_table(["actor", "action range", "int8_full", "q15", "q7", "q7 bound"], rows, "--rrrr")


#: docs/export.md's "Which variant when": what each variant is, and what it is for.
VARIANT_ROWS = {
    "float32": ("float32 / float32", "all of it", "cores with an FPU (M4F, M7) when flash allows"),
    "int8": ("int8 per row / float32", "all of it", "MLP actors on an FPU core short of flash"),
    "int8_full": ("int8 / int8", "LayerNorm, softmax, normaliser, output",
                  "the most accurate 8-bit variant; FPU cores short of flash"),
    "q15": ("int16 / int16", "none", "FPU-less cores (M0/M0+/M3) when accuracy matters"),
    "q7": ("int8 / int8 (int16 state, action)", "none", "FPU-less cores short of flash, RAM or time"),
}
#: How each variant's error is known: checked against a tolerance, bounded per observation, or measured only.
ERROR_KIND = {"float32": "checked (≤ 1e-5)", "int8": "bounded", "int8_full": "measured", "q15": "bounded",
              "q7": "bounded"}


def variants_table(records: list[dict[str, Any]]) -> str:
    """docs/export.md's "Which variant when" from export_variants.py's two files: each variant's error on the
    recorded observations of the trained reach actors (every seed), and its generator constants against float32's
    on the benchmark's random-weight reach and reach_pixels actors."""
    by = {r["benchmark"]: r["results"] for r in records}
    trained = [r["variants"] for k, r in by["export_variants_trained"].items() if k.startswith("reach-s")]
    bench = [by["export_variants"][n]["variants"] for n in ("reach", "pixels32", "pixels64")]
    rows = []
    for variant, (widths, floats, use) in VARIANT_ROWS.items():
        ratios = [v[variant]["const_bytes"] / v["float32"]["const_bytes"] for v in bench if variant in v]
        rows.append([f"`{variant}`", widths, floats, f"{ERROR_KIND[variant]}; {_err(trained, variant, True)}",
                     _span(ratios, lambda x: f"{x:.2g}"), use])
    return markdown_table(["variant", "weights / activations", "float in the forward pass",
                           "error vs torch on the trained reach actor", "flash vs float32", "use it for"],
                          rows, "----r-")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-random", type=int, default=500, help="random verification observations per MLP actor")
    p.add_argument("--num-random-pixels", type=int, default=300, help="the same per pixel actor")
    add_out_argument(p, NAME)
    args = p.parse_args()
    started = dt.datetime.now(dt.UTC)
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="export_errors_") as tmp:
        results = {name: measure(name, args.num_random_pixels if name in PIXELS else args.num_random, Path(tmp))
                   for name in (*MLPS, *PIXELS)}
    path = write_result(args.out or default_path(NAME, started), NAME, args, results, started)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
