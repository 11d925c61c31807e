"""benchmarks/result_file.py: every benchmark's result file says what ran, where and when."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from result_file import read_result, write_result


@pytest.mark.integration  # it asks git for the commit
def test_a_result_file_carries_args_commit_date_machine_and_results(tmp_path: Path) -> None:
    args = argparse.Namespace(seeds=[1, 2], out=tmp_path / "x.json")
    path = write_result(tmp_path / "bench.json", "bench", args,
                        {"seeds": {1: {"curve": np.arange(3)}}, "rate": np.float32(0.5)})
    data = json.loads(path.read_text())
    assert data["benchmark"] == "bench" and data["schema"] == 1
    assert data["args"] == {"seeds": [1, 2], "out": str(tmp_path / "x.json")}
    assert data["results"] == {"seeds": {"1": {"curve": [0, 1, 2]}}, "rate": 0.5}
    assert data["date"].endswith("+00:00")
    in_git = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                            capture_output=True).returncode == 0
    # CI's first step runs the suite in an unpacked copy without .git: the file says it does not know the commit
    assert (bool(data["commit"]) and isinstance(data["dirty"], bool)) if in_git else data["commit"] is None
    m = data["machine"]
    assert m["cores"] and m["cpu"] and len(m["load_average"]) == 3
    assert not list(tmp_path.glob("*.tmp"))
    assert read_result(path) == data


def test_a_file_from_before_the_format_reads_as_its_results(tmp_path: Path) -> None:
    (tmp_path / "old.json").write_text(json.dumps({"median": 3}))
    assert read_result(tmp_path / "old.json") == {"benchmark": "old", "schema": 0, "results": {"median": 3}}
