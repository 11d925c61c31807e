"""`robot-rl export`: load a run's deterministic actor, write ONNX or C, and verify what was written.

Verification observations: ``num_random`` random ones (within the spec's bounds, or around the
normaliser's statistics, some beyond its clip) and ``num_recorded`` recorded from the run's own task
with the deterministic policy. ONNX is compared with torch through onnxruntime; C is compiled with the
host compiler and compared with torch (float32: max abs error ≤ :data:`FLOAT32_TOL`; int8: each action
within :func:`~robot_rl.export.quantize.int8_error_bound` + :data:`FLOAT32_TOL`; int8_full: calibrated on the
recorded observations when there are any (random ones, unlike the task's, would widen every range), its error on
them measured and reported, and on the random ones apart; q15 and q7: calibrated on all, each action within
:func:`~robot_rl.export.fixed_bound.fixed_error_bound` + :data:`FLOAT32_TOL`). Pixel actors
(:func:`~robot_rl.export.vision.extract_graph`) get float32, int8_full, q15 and q7. With ``arm-none-eabi-gcc`` on
PATH the C is also built for Cortex-M4F, M7 and M0+ at ``-Os`` and sized.
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from robot_rl.core.algorithm import Policy
from robot_rl.core.config import ConfigError, TaskConfig
from robot_rl.core.specs import EnvSpec
from robot_rl.export.c_codegen import VARIANTS, CSources, Variant, check_name, generate_c
from robot_rl.export.c_fixed import generate_fixed_c
from robot_rl.export.c_int8 import generate_int8_c
from robot_rl.export.c_vision import generate_vision_c, size_main
from robot_rl.export.fixed import build_plan, quantize
from robot_rl.export.fixed_bound import fixed_error_bound
from robot_rl.export.fixed_formats import WIDTHS
from robot_rl.export.graph import MLPGraph
from robot_rl.export.int8_full import as_vision, calibrate
from robot_rl.export.onnx_export import check_onnx, export_onnx
from robot_rl.export.quantize import int8_error_bound
from robot_rl.export.toolchain import (
    CORTEX_TARGETS,
    arm_available,
    build_host_harness,
    build_vision_harness,
    cross_compile,
    write_sources,
)
from robot_rl.export.vision import VisionGraph, describe_node, extract_graph
from robot_rl.policy_io import load_policy, run_spec, run_task

log = logging.getLogger(__name__)

FLOAT32_TOL = 1e-5
"""Max abs error of the float32 C (and of ONNX) against torch."""


class ExportVerificationError(RuntimeError):
    """The exported policy does not reproduce the torch policy within tolerance."""


@dataclass
class LoadedActor:
    """A run's trained actor on the CPU, in eval mode, with what export needs to know about it."""

    policy: Policy
    spec: EnvSpec
    run_dir: Path
    checkpoint: Path
    task: TaskConfig
    """The run's task: recorded verification observations come from its env."""


def load_actor(run_dir: Path, spec: EnvSpec | None = None) -> LoadedActor:
    """The actor of ``run_dir``'s newest verifiable checkpoint (:func:`robot_rl.policy_io.load_policy`).

    A run from before ``spec.yaml`` was written takes ``spec``, or the spec of its task's env.
    """
    run_dir = Path(run_dir)
    task = run_task(run_dir)
    if spec is None and run_spec(run_dir) is None:  # older runs: ask the task itself
        env = task.make(torch.device("cpu"), 0, num_envs=1)
        spec = env.spec
        env.close()
    loaded = load_policy(run_dir, spec, "cpu")
    return LoadedActor(loaded.policy.eval(), loaded.spec, run_dir, loaded.checkpoint, task)


def random_observations(spec: EnvSpec, policy: nn.Module, n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` random observations: bounded keys uniform in their bounds; ``state`` around the normaliser.

    Without bounds, ``state`` is drawn as ``μ + 3σ·z`` (``z ~ N(0, 1)``) from the policy's normaliser
    (so a few rows exceed its clip), or ``N(0, 2²)`` without one. Images are uniform uint8.
    """
    g = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    norm = _normalizer(policy)
    for key, s in spec.observation.items():
        shape = (n, *s.shape)
        if key.startswith("image."):
            out[key] = g.integers(0, 256, shape, dtype=np.uint8)
        elif s.low is not None and s.high is not None:
            out[key] = g.uniform(s.low, s.high, shape).astype(np.float32)
        elif key == "state" and norm is not None:
            mean = norm.mean.cpu().numpy()
            std = torch.sqrt(norm.var + norm.eps).cpu().numpy()
            out[key] = (mean + 3.0 * std * g.standard_normal(shape)).astype(np.float32)
        else:
            out[key] = (2.0 * g.standard_normal(shape)).astype(np.float32)
    return out


def _normalizer(policy: nn.Module) -> Any:
    from robot_rl.policies.modules.normalizer import RunningNormalizer

    for m in policy.modules():
        if isinstance(m, RunningNormalizer):
            return m
    return None


@torch.no_grad()
def recorded_observations(loaded: LoadedActor, n: int, seed: int, num_envs: int = 16) -> dict[str, np.ndarray]:
    """``n`` observations visited by the deterministic policy in the run's own task."""
    env = loaded.task.make(torch.device("cpu"), seed, num_envs=num_envs)
    try:
        obs = env.reset(seed=seed)
        chunks: list[dict[str, torch.Tensor]] = []
        for _ in range(-(-n // env.num_envs)):
            chunks.append({k: v.clone() for k, v in obs.items()})
            action, _ = loaded.policy.act(obs, deterministic=True)
            obs = env.step(action).obs
    finally:
        env.close()
    return {k: torch.cat([c[k] for c in chunks])[:n].cpu().numpy() for k in loaded.spec.observation}


def _concat(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([a[k], b[k]]) for k in a}


@torch.no_grad()
def torch_actions(policy: Policy, obs: dict[str, np.ndarray]) -> np.ndarray:
    """``policy.act(obs, deterministic=True)`` flattened to ``[N, act_dim]`` float32."""
    action, _ = policy.act({k: torch.from_numpy(v) for k, v in obs.items()}, deterministic=True)
    return action.reshape(action.shape[0], -1).numpy()


@dataclass
class VariantReport:
    """One C variant: where it went, how well it matches torch, and its size per Cortex-M target."""

    variant: str
    files: list[str]
    max_abs_err: float
    tolerance: str
    bound_max: float | None = None
    """int8, q15, q7: the largest per-action bound over the verification set."""
    worst_err_over_bound: float | None = None
    """int8, q15, q7: max over observations/actions of error / bound (≤ 1 means the bound held)."""
    const_bytes: int = 0
    workspace_bytes: int = 0
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_abs_err_random: float | None = None
    """The error on the random verification observations alone (None without any)."""
    max_abs_err_recorded: float | None = None
    """The error on the recorded ones alone (None without any)."""


@dataclass
class ExportReport:
    """Everything the export command checked and measured (also written as ``export.json``)."""

    run_dir: str
    checkpoint: str
    format: str
    out_dir: str
    num_random: int
    num_recorded: int
    onnx: dict[str, Any] | None = None
    variants: list[VariantReport] = field(default_factory=list)
    architecture: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        from dataclasses import asdict

        return asdict(self)


def describe(graph: MLPGraph | VisionGraph) -> str:
    """``12 -> 64 relu -> 64 relu -> 2`` with the normaliser and output map (and the cameras of a pixel actor)."""
    if isinstance(graph, VisionGraph):
        cams = ", ".join(f"{c.key} {'x'.join(map(str, c.image_shape))} uint8 -> "
                         + " -> ".join(describe_node(n) for n in c.nodes)
                         + f" -> {c.out_dim}" for c in graph.cameras)
        norm = "normalised " if graph.norm_mean is not None else ""
        return f"{cams}; {norm}state {graph.state_dim}; head {describe(graph.head).replace('state', 'features', 1)}"
    body = " -> ".join(f"{layer.weight.shape[0]}" + (f" {layer.activation}" if layer.activation != "identity"
                                                      else "") for layer in graph.layers)
    norm = "normalised " if graph.norm_mean is not None else ""
    return f"{norm}state {graph.obs_dim} -> {body} -> {graph.output}"


def export_run(run_dir: Path, fmt: Literal["onnx", "c"], out_dir: Path, name: str = "policy",
               variants: tuple[Variant, ...] = VARIANTS, num_random: int = 1000, num_recorded: int = 1000,
               targets: tuple[str, ...] = tuple(CORTEX_TARGETS), seed: int = 0) -> ExportReport:
    """Export ``run_dir``'s deterministic actor as ``fmt`` into ``out_dir`` and verify it (see module doc)."""
    check_name(name)
    if fmt not in ("onnx", "c"):
        raise ConfigError(f"unknown export format {fmt!r}; valid: onnx, c")
    loaded = load_actor(run_dir)
    graph = extract_graph(loaded.policy, loaded.spec) if fmt == "c" else None  # fail fast on what C cannot take
    return export_actor(loaded.policy, loaded.spec, fmt, out_dir, name, variants, num_random, num_recorded,
                        targets, seed, loaded=loaded, graph=graph)


def export_actor(policy: Policy, spec: EnvSpec, fmt: Literal["onnx", "c"], out_dir: Path, name: str = "policy",
                 variants: tuple[Variant, ...] = VARIANTS, num_random: int = 1000, num_recorded: int = 1000,
                 targets: tuple[str, ...] = tuple(CORTEX_TARGETS), seed: int = 0,
                 loaded: LoadedActor | None = None, graph: MLPGraph | VisionGraph | None = None) -> ExportReport:
    """Export an in-memory actor (``loaded`` supplies the task for recorded observations)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    policy = policy.eval()
    obs = random_observations(spec, policy, num_random, seed)
    recorded = 0
    notes: list[str] = []
    if loaded is not None and num_recorded > 0:
        try:
            obs = _concat(obs, recorded_observations(loaded, num_recorded, seed))
            recorded = num_recorded
        except ImportError as e:  # the task's simulator is an extra that is not installed here
            notes.append(f"no recorded observations ({e}); verified on random ones only")
    report = ExportReport(str(loaded.run_dir) if loaded else "", str(loaded.checkpoint) if loaded else "", fmt,
                          str(out_dir), num_random, recorded, notes=notes)
    want = torch_actions(policy, obs)
    if fmt == "onnx":
        path = out_dir / f"{name}.onnx"
        inputs = export_onnx(policy, spec, path)
        check = check_onnx(path, policy, spec, obs)
        report.onnx = {"file": str(path), "inputs": inputs, "max_abs_err": check.max_abs_err,
                       "batch_sizes": list(check.batch_sizes), "tolerance": FLOAT32_TOL}
        if not check.max_abs_err <= FLOAT32_TOL:
            raise ExportVerificationError(f"onnxruntime differs from torch by {check.max_abs_err:.3g} "
                                          f"(> {FLOAT32_TOL:g})")
    else:
        graph = graph or extract_graph(policy, spec)
        report.architecture = describe(graph)
        for variant in variants:
            if isinstance(graph, VisionGraph) or variant in ("int8_full", *WIDTHS):
                if variant == "int8":
                    report.notes.append("no int8 (weight-only) variant for pixel policies: use int8_full")
                    continue
                vision = graph if isinstance(graph, VisionGraph) else as_vision(graph)
                vr = _export_checked_api_variant(vision, name, variant, obs, want, out_dir, targets, report)
            else:
                vr = _export_c_variant(graph, name, variant, obs["state"], want, out_dir, targets, report)
            report.variants.append(vr)
        if not arm_available():
            report.notes.append("arm-none-eabi-gcc not found: no Cortex-M sizes (apt-get install gcc-arm-none-eabi "
                                "libnewlib-arm-none-eabi)")
    (out_dir / "export.json").write_text(json.dumps(report.to_dict(), indent=2))
    (out_dir / "EXPORT.md").write_text(render_report(report))
    return report


def _export_c_variant(graph: MLPGraph, name: str, variant: Variant, state: np.ndarray, want: np.ndarray,
                      out_dir: Path, targets: tuple[str, ...], report: ExportReport) -> VariantReport:
    origin = f"{report.checkpoint or 'in-memory policy'}"
    src = generate_c(graph, name, variant, origin=origin)
    h, c = write_sources(src, out_dir / variant)
    with tempfile.TemporaryDirectory(prefix="robot_rl_export_") as tmp:
        build = Path(tmp)
        got = build_host_harness(src, build / "host", graph.obs_dim, graph.act_dim).forward(state)
        sizes = {t: cross_compile(src, t, build, graph.obs_dim, graph.act_dim).to_dict()
                 for t in (targets if arm_available() else ())}
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    vr = VariantReport(variant, [str(h), str(c)], float(err.max()), "", const_bytes=src.weight_bytes,
                       workspace_bytes=src.workspace_bytes)
    _split_errors(vr, err, report)
    if variant == "float32":
        vr.tolerance = f"max abs err <= {FLOAT32_TOL:g}"
        if not vr.max_abs_err <= FLOAT32_TOL:
            raise ExportVerificationError(f"float32 C differs from torch by {vr.max_abs_err:.3g} (> {FLOAT32_TOL:g})")
    else:
        bound = int8_error_bound(graph, state)
        vr.tolerance = "per action <= int8_error_bound + 1e-5"
        vr.bound_max = float(bound.max())
        vr.worst_err_over_bound = float((err / (bound + FLOAT32_TOL)).max())
        over = err > bound + FLOAT32_TOL
        if over.any():
            raise ExportVerificationError(f"int8 C exceeds its error bound on {int(over.sum())} actions "
                                          f"(worst {vr.worst_err_over_bound:.3g}× the bound)")
    if not np.isfinite(got).all():
        raise ExportVerificationError(f"{variant} C produced non-finite actions")
    vr.targets = sizes
    return vr


def _export_checked_api_variant(graph: VisionGraph, name: str, variant: Variant, obs: dict[str, np.ndarray],
                                want: np.ndarray, out_dir: Path, targets: tuple[str, ...],
                                report: ExportReport) -> VariantReport:
    """A pixel actor (float32, int8_full, q15, q7), or any actor as int8_full, q15 or q7: the size-checked entry point.

    int8_full's, q15's and q7's formats are calibrated on ``obs``; int8_full's error on them is measured, q15's and
    q7's also checked against :func:`~robot_rl.export.fixed_bound.fixed_error_bound`.
    """
    origin = report.checkpoint or "in-memory policy"
    images = [obs[cam.key] for cam in graph.cameras]
    state = obs["state"] if graph.state_dim else None
    if variant in WIDTHS:
        vr, errors = _export_fixed(graph, name, variant, images, state, want, out_dir, targets, origin)
        return _split_errors(vr, errors, report)
    # int8_full's ranges come from the recorded observations when there are any: the random ones (N(0, 2²) states,
    # uniform images) lie far outside what the task visits, and calibrating on them coarsened every scale 3-4x on a
    # trained reach actor (max error 0.093 instead of 0.020 on the recorded ones).
    calib = slice(report.num_random, None) if report.num_recorded else slice(None)
    if variant == "float32":
        src = generate_vision_c(graph, name, "float32", origin=origin)
    else:
        src = generate_int8_c(graph, calibrate(graph, [im[calib] for im in images],
                                               state[calib] if state is not None else None), name, origin=origin)
    got, sizes = _build_checked(src, graph, images, state, targets, "float")
    errors = np.abs(got.astype(np.float64) - want.astype(np.float64))
    err = float(errors.max() if variant == "float32" else errors[calib].max())
    tolerance = (f"max abs err <= {FLOAT32_TOL:g}" if variant == "float32" else
                 f"measured on the {'recorded' if report.num_recorded else 'random'} observations it was calibrated "
                 "on, no bound")
    h, c = write_sources(src, out_dir / variant)
    vr = VariantReport(variant, [str(h), str(c)], err, tolerance, const_bytes=src.weight_bytes,
                       workspace_bytes=src.workspace_bytes, targets=sizes)
    _split_errors(vr, errors, report)
    if not np.isfinite(got).all() or (variant == "float32" and not err <= FLOAT32_TOL):
        raise ExportVerificationError(f"{variant} C differs from torch by {err:.3g} ({tolerance})")
    return vr


def _build_checked(src: CSources, graph: VisionGraph, images: list[np.ndarray], state: np.ndarray | None,
                   targets: tuple[str, ...], io_type: str) -> tuple[np.ndarray, dict[str, dict[str, Any]]]:
    """Run ``src`` on the host for every observation, and size it per Cortex-M target."""
    with tempfile.TemporaryDirectory(prefix="robot_rl_export_") as tmp:
        build = Path(tmp)
        lib = build_vision_harness(src, build / "host", [int(np.prod(cam.image_shape)) for cam in graph.cameras],
                                   graph.state_dim, graph.act_dim)
        got = lib.forward(images, state)
        main = size_main(graph, src.name, io_type)
        sizes = {t: cross_compile(src, t, build, 0, graph.act_dim, main_source=main).to_dict()
                 for t in (targets if arm_available() else ())}
    return got, sizes


def _export_fixed(graph: VisionGraph, name: str, variant: str, images: list[np.ndarray], state: np.ndarray | None,
                  want: np.ndarray, out_dir: Path, targets: tuple[str, ...], origin: str
                  ) -> tuple[VariantReport, np.ndarray]:
    """A fixed-point variant (q15, q7): calibrated, run with the state in its Q formats, checked against its bound.

    Also returns the error per observation and action.
    """
    absmax = np.abs(state).max(axis=0) if state is not None else None
    plan = build_plan(graph, calibrate(graph, images, state), absmax, WIDTHS[variant])
    src = generate_fixed_c(plan, name, origin=origin)
    q_state = quantize(state, plan.state.frac[None, :]) if state is not None and plan.state is not None else None
    got_q, sizes = _build_checked(src, graph, images, q_state, targets, "int16_t")
    got = got_q.astype(np.float64) * 2.0**-plan.f_act
    err = np.abs(got - want.astype(np.float64))
    bound = fixed_error_bound(plan, images, state)
    h, c = write_sources(src, out_dir / variant)
    vr = VariantReport(variant, [str(h), str(c)], float(err.max()), f"per action <= {variant} error bound + 1e-5",
                       float(bound.max()), float((err / (bound + FLOAT32_TOL)).max()), src.weight_bytes,
                       src.workspace_bytes, sizes)
    over = err > bound + FLOAT32_TOL
    if over.any():
        raise ExportVerificationError(f"{variant} C exceeds its error bound on {int(over.sum())} actions "
                                      f"(worst {vr.worst_err_over_bound:.3g}x the bound)")
    return vr, err


def _split_errors(vr: VariantReport, errors: np.ndarray, report: ExportReport) -> VariantReport:
    """Fill ``vr``'s errors on the random and on the recorded observations (the first ``num_random`` rows)."""
    per_obs = errors.reshape(len(errors), -1).max(axis=1)
    n = report.num_random
    vr.max_abs_err_random = float(per_obs[:n].max()) if n else None
    vr.max_abs_err_recorded = float(per_obs[n:].max()) if report.num_recorded else None
    return vr


def render_report(r: ExportReport) -> str:
    """The human-readable ``EXPORT.md`` written next to the exported files."""
    lines = [f"# Export of {r.run_dir or 'an in-memory policy'}", "",
             f"- checkpoint: `{r.checkpoint}`" if r.checkpoint else "- checkpoint: (none)",
             f"- format: {r.format}",
             f"- verified on {r.num_random} random + {r.num_recorded} recorded observations"]
    if r.architecture:
        lines.append(f"- architecture: {r.architecture}")
    lines += [f"- note: {n}" for n in r.notes]
    if r.onnx:
        lines += ["", f"ONNX `{r.onnx['file']}`, inputs {r.onnx['inputs']}, dynamic batch: onnxruntime vs torch "
                      f"max abs err {r.onnx['max_abs_err']:.3g} (tolerance {r.onnx['tolerance']:g})."]
    for v in r.variants:
        lines += ["", f"## C, {v.variant}", "",
                  f"- files: {', '.join(f'`{f}`' for f in v.files)}",
                  f"- host gcc vs torch: max abs err {v.max_abs_err:.3g} ({v.tolerance})"]
        if v.max_abs_err_random is not None and v.max_abs_err_recorded is not None:
            outside = " (outside the calibrated ranges)" if v.variant == "int8_full" and r.num_recorded else ""
            lines.append(f"- on the random observations {v.max_abs_err_random:.3g}{outside}, on the recorded ones "
                         f"{v.max_abs_err_recorded:.3g}")
        if v.bound_max is not None:
            lines.append(f"- {v.variant} error bound: largest {v.bound_max:.3g}; worst error/bound "
                         f"{v.worst_err_over_bound:.3g}")
        lines.append(f"- constant data {v.const_bytes} B, static workspace {v.workspace_bytes} B")
        if v.targets:
            lines += ["", "| target (-Os) | flash B (.text+.rodata+.data) | + libm B | RAM B (.data+.bss+stack) "
                          "| peak stack B | float routines called by the forward pass |",
                      "| --- | ---: | ---: | ---: | ---: | --- |"]
            for t, s in v.targets.items():
                ext = f" (+ frames of {', '.join(s['external_calls'])})" if s["external_calls"] else ""
                lines.append(f"| {t} | {s['flash']} | {s['libm_flash']} | {s['ram']} | {s['stack']}{ext} | "
                             f"{_forward_float_calls(s['float_calls'])} |")
    return "\n".join(lines) + "\n"


def _forward_float_calls(calls: dict[str, list[str]]) -> str:
    """The float routines of a size report, outside the fixed-point float conversion helpers (``-`` for none)."""
    names = sorted({r for fn, rs in calls.items() if not is_conversion_helper(fn) for r in rs})
    return ", ".join(names) if names else "-"


def is_conversion_helper(function: str) -> bool:
    """Whether ``function`` is one of q15's or q7's float conversion helpers, which the forward pass never calls."""
    return function.endswith(tuple(f"_{d}_{v}" for d in ("state_to", "action_from") for v in WIDTHS))
