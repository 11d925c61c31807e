"""One result file per benchmark run: what ran, where, when, and what it measured.

Every benchmark writes its figures through :func:`write_result`, and ``benchmarks/report.py`` builds the tables in
``RESULTS*.md``, the README and the docs from these files only, so a figure without a file cannot be published.

A file is a JSON object::

    {"benchmark": "transport_bench", "schema": 1,
     "args": {...},                       # the command line, parsed (what to type to rerun it)
     "command": "python benchmarks/transport_bench.py --chunks 500",
     "commit": "04ff334", "dirty": false, "date": "2026-12-07T12:50:00+00:00",
     "machine": {"cpu": ..., "cores": 2, "gpu": null, "load_average": [..], "host": ..., "python": ..., "torch": ...},
     "results": {...}}                    # the benchmark's own figures: per-seed curves and end points

``results`` is the benchmark's to shape; by convention per-seed data sits under ``seeds`` ({seed: {...}}) and
curves are lists of ``[x, y]`` pairs or parallel lists named for their axes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SCHEMA = 1


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_name() -> str | None:
    """The first CUDA device's name, only where torch is already imported (a benchmark that never touched torch
    should not pay for importing it to learn there is no GPU)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
    except Exception:
        return None
    return None


def machine() -> dict[str, Any]:
    """The machine as it is now: CPU model, cores, GPU, load average, host, Python and torch versions."""
    torch = sys.modules.get("torch")
    return {"cpu": _cpu_name(), "cores": os.cpu_count(), "gpu": _gpu_name(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "host": platform.node(),
            "python": platform.python_version(), "torch": getattr(torch, "__version__", None)}


def _source_state() -> dict[str, Any]:
    """The commit and whether the code differs from it; both None outside a git checkout (an unpacked copy), which
    the file then says instead of naming a commit it cannot know."""
    commit = _git("rev-parse", "--short", "HEAD")
    if not commit:
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(_git("status", "--porcelain", "--", "robot_rl", "benchmarks"))}


def run_record(name: str, args: argparse.Namespace | dict[str, Any] | None, results: dict[str, Any],
               started: dt.datetime | None = None) -> dict[str, Any]:
    """The result file's content for benchmark ``name`` (see the module docstring)."""
    arg_dict = vars(args) if isinstance(args, argparse.Namespace) else dict(args or {})
    return {"benchmark": name, "schema": SCHEMA, "args": _jsonable(arg_dict),
            "command": " ".join(shlex.quote(a) for a in ["python", *_relative_argv()]),
            **_source_state(),
            "date": (started or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds"),
            "machine": machine(), "results": _jsonable(results)}


def write_result(path: Path | str, name: str, args: argparse.Namespace | dict[str, Any] | None,
                 results: dict[str, Any], started: dt.datetime | None = None) -> Path:
    """Write the result file atomically (a killed run leaves the previous file, never half of one)."""
    path = Path(path)
    if not path.is_absolute() and not path.exists() and path.parent == Path("."):
        path = RESULTS / path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(run_record(name, args, results, started), indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path


def default_path(name: str, started: dt.datetime | None = None) -> Path:
    """Where a run of benchmark ``name`` writes without ``--out``: ``benchmarks/results/<name>/<UTC time>.json``
    (one file per run: a rerun never overwrites the file a published table was made from)."""
    return RESULTS / name / f"{(started or dt.datetime.now(dt.UTC)):%Y-%m-%dT%H%M%SZ}.json"


def add_out_argument(parser: argparse.ArgumentParser, name: str, flag: str = "--out") -> None:
    """The ``--out`` option every benchmark takes: its result file (default: :func:`default_path`)."""
    parser.add_argument(flag, type=Path, default=None,
                        help=f"result file (JSON; default benchmarks/results/{name}/<UTC date-time>.json)")


def runner_eval_curve(run_dir: Path | str) -> dict[str, list[float]]:
    """A ``robot-rl train`` run's evaluations from its ``eval.csv`` as parallel lists ``env_steps``, ``success``,
    ``mean_return``, ``wall_s`` (the final evaluation, which repeats the last one at the same env steps, once)."""
    import csv

    path = Path(run_dir) / "eval.csv"
    curve: dict[str, list[float]] = {"env_steps": [], "success": [], "mean_return": [], "wall_s": []}
    if not path.exists():
        return curve
    with open(path) as f:
        for r in csv.DictReader(f):
            if curve["env_steps"] and int(r["env_steps"]) == curve["env_steps"][-1]:
                continue
            curve["env_steps"].append(int(r["env_steps"]))
            curve["success"].append(float(r["success_rate"]))
            curve["mean_return"].append(float(r["mean_return"]))
            curve["wall_s"].append(float(r["wall_s"]))
    return curve


def markdown_table(head: list[str], rows: list[list[str]], align: str = "") -> str:
    """A Markdown table; ``align`` has one letter per column (``l``, ``r``, ``c``; missing ones: ``---``)."""
    marks = {"l": ":---", "r": "---:", "c": ":---:"}
    rule = [marks.get(align[i], "---") if i < len(align) else "---" for i in range(len(head))]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [head, rule, *rows])


def pct(x: float | None, digits: int = 0) -> str:
    """``0.5`` as ``50 %`` (the pages' style), ``None`` as ``–``."""
    return "–" if x is None else f"{100 * x:.{digits}f} %"


def read_result(path: Path | str) -> dict[str, Any]:
    """A result file; a file written before this format (no ``schema``) is returned as its ``results``."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict) and data.get("schema") == SCHEMA:
        return data
    return {"benchmark": Path(path).stem, "schema": 0, "results": data}


def _relative_argv() -> list[str]:
    argv = list(sys.argv) or ["?"]
    try:
        argv[0] = str(Path(argv[0]).resolve().relative_to(ROOT))
    except ValueError:
        pass
    return argv


def _jsonable(value: Any) -> Any:
    """Paths, tuples, numpy scalars and arrays as JSON values; NaN and infinities (not JSON) as ``null``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):  # numpy / torch scalars and arrays
        return _jsonable(value.tolist())
    return value
