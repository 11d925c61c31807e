"""RESULTS_real2sim.md's probe and camera-fit tables, from ``real2sim_probe.py``'s and ``twin_camera.py``'s JSON
(both scripts import MuJoCo and torch at module level; ``report.py`` imports this module instead).

A render module, not a benchmark: it reads result files (``benchmarks/results/**/*.json``) and writes none.
"""

from __future__ import annotations

from typing import Any

from result_file import markdown_table


def probe_table(records: list[dict[str, Any]]) -> str:
    """The default policy on the shifted arm at each servo gain (damping and delay as the rows say)."""
    rows = [[f"{r['gain']:g}" + (" (the benchmark's \"real\")" if r["gain"] == 0.35 else ""),
             f"{r['damping']:g}", str(r["delay"]), f"{r['success']:.2f}", f"{r['mean_length']:.1f}"]
            for r in records[0]["results"]["rows"]]
    return markdown_table(["servo gain (× nominal)", "damping (×)", "delay (steps)", "default policy: success",
                           "mean length (of 50)"], rows, "rrrrr")


def camera_table(records: list[dict[str, Any]]) -> str:
    """``robot-rl twin camera``: each fit's errors against the true camera offset, and the image error."""
    rows = []
    for r in records[0]["results"]["runs"]:
        free = r["free"].split(",")
        pos = r["position_error_m"] * 100
        rows.append(["all seven" if len(free) == 7 else f"`{r['free']}`",
                     f"{pos:.2f} cm" if pos >= 0.01 else f"{pos * 10:.3f} mm",
                     f"≤ {r['turn_error_deg']:.2f}°" if any(k in free for k in ("roll", "pitch", "yaw")) else "–",
                     f"{1 + r['fovy_error']:.4f} (true 1)" if "fovy_scale" in free else "–",
                     f"{r['image_error_before']:.3f} → {r['image_error_after']:.4f}", f"{r['wall_s']:.0f} s"])
    return markdown_table(["`--free`", "position error", "turn error", "field-of-view factor", "image error", "time"],
                          rows, "lrrrlr")
