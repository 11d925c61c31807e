"""RESULTS_fasttd3.md's section 2 tables, rebuilt from ``sac_compute_fraction.py``'s JSON (that script imports torch
at module level; ``report.py`` imports this module instead, the standard library only).

A render module, not a benchmark: it reads result files (``benchmarks/results/**/*.json``) and writes none.
"""

from __future__ import annotations

import re
from typing import Any

from result_file import markdown_table, pct

_NAMES = {"fp32": "fp32", "bf16": "bf16 autocast", "compile": "`torch.compile` (inductor)",
          "compile_autotune": "`torch.compile`, autotuned GEMM templates (`max-autotune-no-cudagraphs`)",
          "optim_compiled": "Adam steps compiled (inductor's fused optimiser)",
          "flush_denormal": "denormals flushed to zero"}
_SHORT = {"compile_autotune": "`torch.compile`, autotuned", "optim_compiled": "Adam steps compiled"}


def fraction_table(records: list[dict[str, Any]]) -> str:
    """Per variant and thread count: the median ms per update, the speed against fp32 in the same rounds, and the
    fractions of the update's own GEMM bound and of the fp32 peak (bf16's against the fp32 peak, in brackets: bf16
    GEMMs can exceed it)."""
    rows, seen = [], set()
    for r in records[0]["results"]["rows"]:
        v = r["variant"]
        name = _SHORT.get(v, _NAMES[v]) if v in seen else _NAMES[v]
        seen.add(v)
        peak = pct(r["fraction_of_peak"])
        rows.append([name, str(r["threads"]), f"{r['wall_ms']:.2f}", f"{r['speed_vs_fp32']:.2f}",
                     pct(r["fraction_of_bound"]), f"({peak})" if v == "bf16" else peak])
    return markdown_table(["variant", "threads", "ms per update", "× fp32", "fraction of the GEMM bound",
                           "fraction of the fp32 peak"], rows, "lrrrrr")


_MATMULS = ("aten::baddbmm", "aten::bmm", "aten::mm", "aten::addmm")
_ADAM = ("Optimizer.step#Adam.step", "Optimizer.zero_grad#Adam.zero_grad")


def _self_cpu(profile: str) -> dict[str, tuple[float, float, int]]:
    """The profiler table's rows: name -> (self CPU %, self CPU ms, calls)."""
    rows = {}
    for line in profile.splitlines():
        m = re.match(r"^\s*(\S+)\s+([0-9.]+)%\s+([0-9.]+)(ms|us|s)\s+.*?(\d+)\s*$", line)
        if m:
            ms = float(m[3]) * {"ms": 1.0, "us": 1e-3, "s": 1e3}[m[4]]
            rows[m[1]] = (float(m[2]), ms, int(m[5]))
    return rows


def profile_table(records: list[dict[str, Any]]) -> str:
    """Where the first variant's update time goes (``--profile``: 50 updates, by self CPU time): the matmuls, Adam,
    and everything else."""
    res = records[0]["results"]
    rows = _self_cpu(res["profile"])
    updates = 50
    mm = [(n.removeprefix("aten::"), rows[n][0]) for n in _MATMULS if n in rows]
    mm_share = sum(s for _, s in mm)
    mm_ms = sum(rows[n][1] for n in _MATMULS if n in rows) / updates
    adam = sum(rows[n][0] for n in _ADAM if n in rows)
    fp32 = next(r for r in res["rows"] if r["variant"] == "fp32" and r["threads"] == 1)
    return markdown_table(["share of the time", "what"], [
        [f"{mm_share:.0f} %", "matmuls: " + ", ".join(f"`{n}` {s:.0f} %" for n, s in mm)
         + f"; about {mm_ms:.1f} ms per update (their GEMMs alone: {fp32['gemm_bound_ms']:.1f} ms)"],
        [f"{adam:.0f} %", "Adam's step and `zero_grad`"],
        [f"about {100 - mm_share - adam:.0f} %", "hundreds of small element-wise kernels and copies per update "
         "(`mul`, `copy_`, ReLU and its backward, clamps, sums), each a few µs to tens of µs"]], "rl")
