"""How long the test suite takes: pytest's own time and result per selection, with the load beside it.

Runs ``.venv/bin/pytest -q`` (the README's test command) once per selection, one after the other, and records what
pytest prints at the end (passed, failed, skipped, seconds) and the 1-minute load average before and after each,
in ``benchmarks/results/suite_time/<UTC time>.json`` (or ``--out``).

    python benchmarks/suite_time.py                          # the unit tier, then the whole suite
    python benchmarks/suite_time.py --select "unit=-m unit" "one process=-m unit -n 0"
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import ROOT, add_out_argument, default_path, write_result

SUMMARY = re.compile(r"=*\s*(?P<counts>(?:\d+ \w+(?:, )?)+) in (?P<seconds>[0-9.]+)s")


def run_selection(args: list[str]) -> dict[str, Any]:
    """One pytest run: its counts, pytest's seconds and the load average before and after."""
    before = os.getloadavg()[0]
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "pytest"), "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    found = [m for m in (SUMMARY.search(line) for line in done.stdout.splitlines()[-5:]) if m]
    if not found:
        raise RuntimeError(f"pytest printed no summary line (rc {done.returncode}):\n{done.stdout[-2000:]}")
    counts = {kind: int(n) for n, kind in (c.split(" ", 1) for c in found[-1]["counts"].split(", "))}
    return {"args": args, "rc": done.returncode, "counts": counts, "seconds": float(found[-1]["seconds"]),
            "load_before": round(before, 2), "load_after": round(os.getloadavg()[0], 2)}


def suite_table(records: list[dict[str, Any]]) -> str:
    """docs/testing.md's table: per selection, pytest's time, the result and the load (benchmarks/report.py)."""
    lines = ["| selection | pytest's time | result | load average before, after |", "| --- | ---: | --- | --- |"]
    for rec in records:
        for name, r in rec["results"]["selections"].items():
            result = ", ".join(f"{n} {kind}" for kind, n in r["counts"].items())
            lines.append(f"| {name} (`{' '.join(['pytest', '-q', *r['args']])}`) | {r['seconds']:.0f} s | {result} | "
                         f"{r['load_before']}, {r['load_after']} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--select", nargs="+", default=["unit tier=-m unit", "whole suite="], metavar="NAME=ARGS",
                   help="selections, each a name and pytest's arguments (default: the unit tier, the whole suite)")
    add_out_argument(p, "suite_time")
    a = p.parse_args()
    selections = {}
    for item in a.select:
        name, _, args = item.partition("=")
        selections[name] = run_selection(shlex.split(args))
        print(f"{name}: {selections[name]}", flush=True)
    path = write_result(a.out or default_path("suite_time"), "suite_time", a, {"selections": selections})
    print(suite_table([{"results": {"selections": selections}}]))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
