"""The tables of RESULTS_flow.md, rebuilt from ``flow_bench.py``'s and ``flow_qchunk_bench.py``'s JSON files.

Those scripts import torch and the flow policies at module level, so their tables live here (``report.py`` imports
this module by path; it needs nothing beyond the standard library). Each function takes the records of the files
its marker names, in that order, and returns the markdown. A run's labels (which SFT start, which variant) are
keyed by the file's name: they are prose about the run, the numbers all come from the files.

A render module, not a benchmark: it reads result files (``benchmarks/results/**/*.json``) and writes none.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from result_file import markdown_table

Curve = list[dict[str, Any]]


def _name(record: dict[str, Any]) -> str:
    """The file's stem (``benchmark`` of a file written before the result-file format)."""
    return Path(str(record["benchmark"])).stem


def _curve(record: dict[str, Any]) -> tuple[str, Curve]:
    """The one RL curve of a ``flow_bench.py --methods M`` file: (method, evaluations)."""
    rl = record["results"]["rl"]
    if len(rl) != 1:
        raise ValueError(f"{_name(record)}: expected one method's curve, found {sorted(rl)}")
    return next(iter(rl.items()))


def _curves(record: dict[str, Any]) -> dict[str, Curve]:
    return dict(record["results"]["rl"])


def _n(x: float) -> str:
    """A count or a wall time with thousands separators, halves rounded up as the pages always did."""
    return f"{math.floor(x + 0.5):,}"


def _s(xs: list[float]) -> str:
    return f"{min(xs):.2f}–{max(xs):.2f}"


def _det(c: Curve) -> str:
    """Deterministic success: start → last (best)."""
    s = [r["success_rate"] for r in c]
    return f"{s[0]:.2f} → {s[-1]:.2f} ({max(s):.2f})"


def _last10(c: Curve, mean: bool = False) -> str:
    s = [r["success_rate"] for r in c[1:]][-10:]
    return _s(s) + (f" (mean {sum(s) / len(s):.2f})" if mean else "")


def _first(c: Curve, threshold: float = 0.9) -> str:
    for r in c:
        if r["success_rate"] >= threshold:
            return f"{_n(r['env_steps'])}, {r['wall_s']:.0f} s"
    return "–"


def _sampled(c: Curve, last_ten: bool = False) -> str:
    s = [r["success_stochastic"] for r in c if r.get("success_stochastic") is not None]
    if len(s) < 2 or c[-1].get("success_stochastic") is None:
        return "–"
    tail = f"last ten {_s(s[1:][-10:])}" if last_ten else f"{max(s):.2f}"
    return f"{s[0]:.2f} → {s[-1]:.2f} ({tail})"


def _kl(c: Curve) -> str:
    return f"{c[-1]['kl_to_sft']:.1f}"


def _sft_more_curve(c: Curve) -> str:
    """More SFT (the control): its evaluations after the start, by gradient steps."""
    after = c[1:]
    return (" / ".join(f"{r['success_rate']:.2f}" for r in after) + " at "
            + " / ".join(_n(r["grad_steps"]) for r in after) + " steps")


_V3 = {"flow_bench_rl_v3_ppo_enc_s0": ("A (1,000 demos)", "encoder trains, seed 0"),
       "flow_bench_rl_v3_ppo_enc_s1": ("A (1,000 demos)", "encoder trains, seed 1"),
       "flow_bench_rl_v3_ppo_frozen_s1": ("A (1,000 demos)", "frozen encoder, seed 1, 55 min"),
       "flow_bench_rl_v3_d200_ppo_enc_s0": ("B (200 demos, plateau)", "encoder trains, seed 0"),
       "flow_bench_rl_v3_d200_ppo_enc_s1": ("B (200 demos, plateau)", "encoder trains, seed 1, 28 min")}


def v3_table(records: list[dict[str, Any]]) -> str:
    """The latest section: Flow-Noise PPO variants from the two SFT starts."""
    rows = []
    for rec in records:
        start, variant = _V3[_name(rec)]
        _, c = _curve(rec)
        rows.append([start, variant, _n(c[-1]["env_steps"]), _n(c[-1]["wall_s"]), _det(c), _last10(c, mean=True),
                     _first(c), _sampled(c, last_ten=True), _kl(c)])
    return markdown_table(["SFT start", "PPO variant", "env steps", "wall s", "deterministic: start → last (best)",
                           "last 10 evaluations", "first ≥ 0.9 (env steps, wall s)", "sampled: start → last",
                           "KL to SFT (last)"], rows, "llrr")


_METHOD = {"dsrl": "DSRL", "hiors": "Hi-ORS", "flow_ppo": "Flow-Noise PPO", "flow_qc": "Q-chunking",
           "flow_qc_fql": "QC-FQL"}


def _minutes(rec: dict[str, Any]) -> str:
    minutes = rec["results"].get("args", {}).get("rl_minutes")
    return f"{minutes:.0f} min" if minutes else "?"


def push_v3_table(records: list[dict[str, Any]]) -> str:
    """``lang_push``: DSRL, Hi-ORS and Flow-Noise PPO from the weak SFT policy."""
    rows = []
    for rec in records:
        method, c = _curve(rec)
        label = _METHOD[method] + (", encoder trains" if method == "flow_ppo" else "")  # the preset then
        rows.append([f"{label} ({_minutes(rec)})", _n(c[-1]["env_steps"]), _n(c[-1]["wall_s"]), _det(c),
                     _last10(c, mean=True), _first(c), _sampled(c, last_ten=True), _kl(c)])
    return markdown_table(["method", "env steps", "wall s", "deterministic: start → last (best)",
                           "last 10 evaluations", "first ≥ 0.9", "sampled: start → last", "KL to SFT (last)"],
                          rows, "lrr")


_V2 = {"flow_bench_rl_v2_dsrl_s0": ("DSRL", "seed 0"), "flow_bench_rl_v2_dsrl_s1": ("DSRL", "seed 1"),
       "flow_bench_rl_v2_hiors_s0": ("Hi-ORS", "seed 0"), "flow_bench_rl_v2_hiors_s1": ("Hi-ORS", "seed 1"),
       "flow_bench_rl_v2_flow_ppo_r1": ("Flow-Noise PPO", "r1: σ₀ 0.05, KL target 2, lr 1e-4, 32 × 4 chunks"),
       "flow_bench_rl_v2_flow_ppo_r2": ("Flow-Noise PPO", "r2: as r1, lr 3e-4, 64 × 8 chunks"),
       "flow_bench_rl_v2_flow_ppo_r3": ("Flow-Noise PPO", "r3: as r2, σ₀ 0.2, KL target 20"),
       "flow_bench_rl_v2_flow_ppo_r4": ("Flow-Noise PPO", "r4: as r2, σ₀ 0.3, KL target 40, 24 min")}


def v2_table(records: list[dict[str, Any]]) -> str:
    """Section A of the afternoon: DSRL, Hi-ORS and Flow-Noise PPO from the 0.69 checkpoint (its more-SFT control,
    copied from a log, was withdrawn)."""
    rows = []
    for rec in records:
        method, run = _V2[_name(rec)]
        name, c = _curve(rec)
        if name == "sft_more":
            first = next((r for r in c if r["success_rate"] >= 0.9), None)
            rows.append([method, run, "0", _n(c[-1]["wall_s"]), _det(c), _sft_more_curve(c),
                         "–" if first is None else f"{_n(first['grad_steps'])} steps, {first['wall_s']:.0f} s", "–",
                         _kl(c)])
            continue
        rows.append([method, run, _n(c[-1]["env_steps"]), _n(c[-1]["wall_s"]), _det(c), _last10(c), _first(c),
                     _sampled(c), _kl(c)])
    return markdown_table(["method", "run", "env steps", "wall s", "deterministic: start → last (best)",
                           "last 10 evaluations", "first ≥ 0.9 (env steps, wall s)", "sampled: start → last (best)",
                           "KL to SFT (last)"], rows, "llrr")


def d200_table(records: list[dict[str, Any]]) -> str:
    """Section B of the afternoon: the same methods from the 200-demo SFT plateau."""
    rows = []
    for rec in records:
        name, c = _curve(rec)
        if name == "sft_more":
            rows.append(["control: more SFT", f"{_n(c[-1]['grad_steps'])} grad steps", _n(c[-1]["wall_s"]), _det(c),
                         _sft_more_curve(c), "–", _kl(c)])
            continue
        label = _METHOD[name]
        if name == "flow_ppo":
            a = rec["results"]["args"]
            label += f" (σ₀ {a['rl_init_noise_std']:g}, KL target {a['rl_kl_target']:g}, {_minutes(rec)})"
        rows.append([label, _n(c[-1]["env_steps"]), _n(c[-1]["wall_s"]), _det(c), _last10(c), _sampled(c), _kl(c)])
    return markdown_table(["method", "env steps", "wall s", "deterministic: start → last (best)",
                           "last 10 evaluations", "sampled: start → last (best)", "KL to SFT (last)"], rows, "lrr")


_MORNING = {"flow_bench_rl_flow_ppo": ("r1", "element ratio, encoder frozen, lr 1e-4, σ₀ 0.05, KL target 2"),
            "flow_bench_rl_flow_ppo_r2": ("r2", "element ratio, encoder trained, lr 3e-4, σ₀ 0.1, KL target 8"),
            "flow_bench_rl_dsrl": ("r1", "SAC defaults: α₀ 1, target entropy −16, γ 0.9, bound 2"),
            "flow_bench_rl_dsrl_r2": ("r2", "α₀ 0.01, target entropy −32, γ 0.95, bound 1.5 (15 min)"),
            "flow_bench_rl_dsrl_r3": ("r3", "same as r2, 21 min"),
            "flow_bench_rl_hiors": ("r1", "accept success, 8 updates/iter, lr 1e-4"),
            "flow_bench_rl_hiors_r2": ("r2", "accept top 30 % return, 16 updates/iter, lr 3e-4"),
            "flow_bench_rl_hiors_r3": ("r3", "accept success, 16 updates/iter, lr 3e-4"),
            "flow_bench_rl_sft_more": ("r2", "control: demos only, 16 steps × batch 128 per 'iteration', lr 3e-4")}


def morning_table(records: list[dict[str, Any]]) -> str:
    """The morning's summary: every method from the 400-demo, 3,000-step SFT checkpoint."""
    rows = []
    for rec in records:
        run, settings = _MORNING[_name(rec)]
        name, c = _curve(rec)
        steps = f"{c[-1]['grad_steps']} grad steps" if name == "sft_more" else str(c[-1]["env_steps"])
        rows.append([name, run, settings, steps, _n(c[-1]["wall_s"]).replace(",", ""), _det(c), _kl(c)])
    return markdown_table(["method", "run", "settings", "env steps", "wall s", "success start → last (best)",
                           "KL to SFT (last)"], rows)


def sft_table(records: list[dict[str, Any]]) -> str:
    """One SFT run's success per chunk execution, with the expert and random peers of the same run
    (``lang_push``'s layout)."""
    r = records[0]["results"]
    return markdown_table(["chunk execution", "SFT success", "expert", "random"], [
        ["receding, 4 of 8", f"{r['sft_success_receding']:.2f}", f"{r['expert_success']:.2f}",
         f"{r['random_success']:.2f}"],
        ["temporal ensembling", f"{r['sft_success_ensemble']:.2f}", "", ""],
        ["open loop, whole chunk", f"{r['sft_success_open_loop_chunk']:.2f}", "", ""]])


def sft_ratio_table(records: list[dict[str, Any]]) -> str:
    """The first session's SFT run: success per chunk execution and as a ratio of the expert and random peers."""
    r = records[0]["results"]
    expert, rand = r["expert_success"], r["random_success"]
    rows = [[label, f"{x:.2f}", f"{x / expert:.2f}", f"{x / rand:.0f}×"] for label, x in [
        ("receding, execute 4 of 8", r["sft_success_receding"]),
        ("temporal ensembling (m = 0.01)", r["sft_success_ensemble"]),
        ("open loop, whole chunk of 8", r["sft_success_open_loop_chunk"])]]
    rows += [["scripted expert (ceiling)", f"{expert:.2f}", "1", f"{expert / rand:.0f}×"],
             ["uniform random (floor)", f"{rand:.2f}", f"{rand / expert:.2f}", "1"]]
    return markdown_table(["chunk execution", "SFT success", "SFT / expert", "SFT / random"], rows)


def latency_table(records: list[dict[str, Any]]) -> str:
    """Inference latency per chunk at batch 1, against the time the chunk lasts on the robot."""
    r = records[0]["results"]
    names = {"euler": "Euler", "midpoint": "midpoint"}
    rows = []
    for key, seconds in r["latency_s"].items():
        method, steps = key.split("-")
        rows.append([f"{names[method]}, {steps}", f"{1000 * seconds:.1f}", f"{seconds / r['chunk_duration_s']:.3f}"])
    ms = 1000 * r["chunk_duration_s"]
    return markdown_table(["integrator, steps", "ms per chunk", f"share of the chunk's {ms:.0f} ms (8 steps at 20 Hz)"],
                          rows)


_RATIO = {"chain": "chain (exact, 160 Gaussian terms; the old code)", "step": "step (one ratio per denoising step)",
          "element": "element (per step and chunk element; the new default)"}


def _lr(x: float) -> str:
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e-{int(exponent[1:])}"


def ratio_table(records: list[dict[str, Any]]) -> str:
    """One PPO update per ratio level from the SFT policy (``--ratio-diagnosis``)."""
    rows, seen = [], set()
    for d in records[0]["results"]["ratio_diagnosis"]:
        label = d["ratio"] if d["ratio"] in seen else _RATIO[d["ratio"]]
        seen.add(d["ratio"])
        clip, kl = d["clip_fraction"], d["approx_kl"]
        rows.append([label, _lr(d["actor_lr"]), f"{clip:.2f}" if clip >= 0.1 else f"{clip:.3f}",
                     f"{kl:.1f}" if kl >= 1 else f"{kl:.2f}" if kl >= 0.1 else f"{kl:.3f}", f"{d['kl_ref']:.2f}"])
    return markdown_table(["ratio level", "actor lr", "clip fraction", "approx. KL new/old", "KL to SFT"], rows)


def ppo_lr_table(records: list[dict[str, Any]]) -> str:
    """The first session's Flow-Noise PPO at two learning rates and KL targets (files: lr 1e-4, then lr 3e-4)."""
    a, b = (rec["results"]["flow_ppo"] for rec in records)
    ta, tb = (rec["results"]["args"] for rec in records)
    rows = [[_n(x["env_steps"]), f"{x['wall_s']:.0f}", f"{x['success_rate']:.2f}", f"{x['kl_ref']:.2f}",
             f"{x['kl_coef']:g}", f"{y['success_rate']:.2f}", f"{y['kl_ref']:.2f}", f"{y['kl_coef']:g}"]
            for x, y in zip(a, b, strict=True)]
    label = [f"lr {_lr(t['rl_actor_lr'])}, KL target {t['rl_kl_target']:g}" for t in (ta, tb)]
    return markdown_table(["env steps", "wall s", f"success ({label[0]})", "KL to SFT", "β", f"success ({label[1]})",
                           "KL to SFT", "β"], rows, "rr")


def _stopped(rec: dict[str, Any], c: Curve) -> str:
    """`` (stopped by the N-minute cap)`` when the run ended short of its env-step budget."""
    a = rec["results"]["args"]
    if c[-1]["env_steps"] < 0.95 * a["env_steps"]:
        return f" (stopped by the {a['minutes']:g}-minute cap)"
    return ""


_QC_LABEL = {"flow_qc": "Q-chunking (`flow_qc`: 16 candidates, best-of-N by the critic ensemble)",
             "dsrl": "DSRL", "flow_ppo": "Flow-Noise PPO"}


def qchunk_small_table(records: list[dict[str, Any]]) -> str:
    """``lang_push``, the three methods at the same env-step budget."""
    rows = []
    for rec in records:
        for name, c in _curves(rec).items():
            rows.append([_QC_LABEL[name], _n(c[-1]["env_steps"]) + _stopped(rec, c), _det(c)])
    return markdown_table(["method", "env steps", "success: start → last (best)"], rows, "lrl")


def qchunk_long_table(records: list[dict[str, Any]]) -> str:
    """``lang_push``, longer runs of one method each."""
    rows = []
    for rec in records:
        for name, c in _curves(rec).items():
            s = [f"{r['success_rate']:.2f}" for r in c]
            cell = f"{s[0]} → {', '.join(s[1:])}"
            if "updates" in c[-1]:
                cell += f" ({_n(c[-1]['updates'])} updates)"
            rows.append([_METHOD[name], cell, _n(c[-1]["env_steps"]) + _stopped(rec, c)])
    every = records[0]["results"]["args"]["eval_every"]
    return markdown_table(["method", f"evaluations every {every // 1000}k env steps", "env steps"], rows, "llr")


def qc_fql_table(records: list[dict[str, Any]]) -> str:
    """QC against QC-FQL, plain and per-step discounted chunk rewards (files: the plain run, the discounted one)."""
    rows = []
    for name in ("flow_qc", "flow_qc_fql"):
        for rec in records:
            a = rec["results"]["args"]
            c = rec["results"]["rl"][name]
            label = ("QC (best of 16)" if name == "flow_qc"
                     else f"QC-FQL, α = {a['qc_fql_alpha']:g} (warm-up 500 steps)")
            reward = "plain sum" if a.get("chunk_discount", 1.0) == 1.0 else f"`chunk_discount={a['chunk_discount']:g}`"
            s = [f"{r['success_rate']:.2f}" for r in c]
            at = ", ".join(f"{round(r['env_steps'], -3) // 1000}k" for r in c[1:])
            rows.append([label, reward, f"{s[0]} → {', '.join(s[1:])}" if at else s[0], _n(c[-1]["updates"]),
                         f"{c[-1]['wall_s']:.0f}"])
    at = ", ".join(f"{round(r['env_steps'], -3) // 1000}k" for r in records[0]["results"]["rl"]["flow_qc"][1:])
    return markdown_table(["method", "chunk reward", f"success at 0 → {at} env steps", "updates",
                           "wall s (shared machine)"], rows, "lllrr")


def _near(c: Curve, target: float) -> str:
    """The evaluation nearest ``target`` env steps, if one lies within 25 % of it."""
    r = min(c[1:], key=lambda r: abs(r["env_steps"] - target))
    if abs(r["env_steps"] - target) > 0.25 * target:
        return "–"
    return f"{r['success_rate']:.2f} ({r['env_steps'] / 1000:.0f}k)"


def gpu_table(records: list[dict[str, Any]]) -> str:
    """``lang_push`` on one GPU: every method from the same SFT checkpoint in a fixed wall-clock budget."""
    rows = []
    for rec in records:
        a = rec["results"]["args"]
        for name, c in _curves(rec).items():
            if name == "flow_ppo":
                label = f"Flow-Noise PPO ({a['rl_envs']:,} envs, rollout {a['ppo_rollout']}), seed {a['rl_seed']}"
                updates = f"{c[-1]['iter']} iterations"
            else:
                utd = a["dsrl_utd"] if name == "dsrl" else a["qc_utd"]
                label = {"flow_qc": "Q-chunking, best of 16", "flow_qc_fql": f"QC-FQL, α = {a['qc_fql_alpha']:g}",
                         "dsrl": "DSRL"}[name] + f" ({a['rl_envs']}, {utd:g})"
                updates = _n(c[-1]["updates"]) if "updates" in c[-1] else "–"
            s = [r["success_rate"] for r in c]
            rows.append([label, " / ".join(_near(c, t) for t in (100_000, 300_000, 850_000)),
                         f"{s[-1]:.2f} ({max(s):.2f})", _n(c[-1]["env_steps"]), updates])
    return markdown_table(["method (sub-envs, updates per chunk transition)",
                           "success at ~100k / ~300k / ~850k env steps (the evaluation's env steps)", "last (best)",
                           "env steps in the budget", "updates"], rows, "lllrr")
