"""benchmarks/report.py: every marked table is rebuilt from its result files, and CI fails on one that differs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import report  # noqa: E402

SCRIPT = '''
def rates(records):
    rows = [f"| {r['results']['name']} | {r['results']['rate']:.2f} |" for r in records]
    return "\\n".join(["| run | rate |", "| --- | --- |", *rows])


def broken(records):
    return records[0]["results"]["absent"]
'''

FRESH = """# Results

<!-- table: bench.rates results/a.json results/b.json -->

| run | rate |
| --- | --- |
| a | 0.50 |
| b | 0.25 |

<!-- /table -->

| hand | made |
| --- | --- |
"""


def _tree(tmp_path: Path, page: str = FRESH) -> Path:
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "benchmarks" / "bench.py").write_text(SCRIPT)
    for name, rate in (("a", 0.5), ("b", 0.25)):
        record = {"benchmark": "bench", "schema": 1, "results": {"name": name, "rate": rate}}
        (tmp_path / "benchmarks" / "results" / f"{name}.json").write_text(json.dumps(record))
    (tmp_path / "README.md").write_text("# Project\n")
    (tmp_path / "benchmarks" / "RESULTS_bench.md").write_text(page)
    return tmp_path


def _report(root: Path, *args: str) -> int:
    return report.main(["--root", str(root), *args])


def test_a_fresh_table_passes_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _report(_tree(tmp_path), "--check") == 0
    assert "1 tables: 1 up to date, 0 stale" in capsys.readouterr().err


def test_an_edited_number_fails_with_a_diff_and_write_restores_it(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path, FRESH.replace("| b | 0.25 |", "| b | 0.30 |"))
    assert _report(root, "--check") == 1
    out = capsys.readouterr().out
    assert "-| b | 0.30 |" in out and "+| b | 0.25 |" in out
    assert "benchmarks/RESULTS_bench.md:3 (committed)" in out  # the diff names the page and the table's line
    assert _report(root, "--write") == 0
    assert (root / "benchmarks" / "RESULTS_bench.md").read_text() == FRESH
    assert _report(root, "--check") == 0


def test_write_fills_an_empty_marker_pair(tmp_path: Path) -> None:
    empty = FRESH.split("\n| run")[0] + "\n<!-- /table -->\n" + FRESH.split("<!-- /table -->\n")[1]
    root = _tree(tmp_path, empty)
    assert _report(root, "--write") == 0
    assert (root / "benchmarks" / "RESULTS_bench.md").read_text() == FRESH


def test_a_missing_result_file_is_one_line_naming_page_and_line(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path, FRESH.replace("results/b.json", "results/gone.json"))
    assert _report(root, "--check") == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("benchmarks/RESULTS_bench.md:3: no result file benchmarks/results/gone.json: "
                      "rerun its benchmark or remove the table")


def test_an_unknown_function_or_script_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path, FRESH.replace("bench.rates", "bench.speeds") + FRESH.replace("bench.rates", "nope.rates"))
    assert _report(root, "--check") == 1
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == ["benchmarks/RESULTS_bench.md:3: benchmarks/bench.py has no function 'speeds' "
                       "(it has: broken, rates)",
                       "benchmarks/RESULTS_bench.md:16: no script benchmarks/nope.py"]


def test_a_render_function_that_fails_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path, FRESH.replace("bench.rates", "bench.broken"))
    assert _report(root, "--write") == 1
    assert "bench.broken failed on its files: KeyError: 'absent'" in capsys.readouterr().err
    assert (root / "benchmarks" / "RESULTS_bench.md").read_text() == FRESH.replace("bench.rates", "bench.broken")


@pytest.mark.parametrize(("page", "line", "message"), [
    ("<!-- table: bench.rates results/a.json -->\n| x |\n", 1, "never closed"),
    ("| x |\n<!-- /table -->\n", 2, "without its"),
    ("<!-- table: bench results/a.json -->\n<!-- /table -->\n", 1, "malformed marker"),
    ("<!-- table: bench.rates -->\n<!-- /table -->\n", 1, "malformed marker"),
    ("<!-- table: bench.rates results/a.json -->\n<!-- table: bench.rates results/a.json -->\n<!-- /table -->\n",
     1, "not closed before the next one"),
])
def test_a_malformed_marker_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], page: str, line: int,
                                        message: str) -> None:
    assert _report(_tree(tmp_path, page), "--check") == 1
    err = capsys.readouterr().err.splitlines()[0]
    assert err.startswith(f"benchmarks/RESULTS_bench.md:{line}: ") and message in err


def test_a_table_in_a_list_item_keeps_its_indentation(tmp_path: Path) -> None:
    indented = "- a list item:\n\n" + "".join(f"  {line}\n" if line else "\n" for line in FRESH.split("\n")[2:13])
    root = _tree(tmp_path, indented.replace("0.25", "0.3"))
    assert _report(root, "--write") == 0
    assert (root / "benchmarks" / "RESULTS_bench.md").read_text() == indented


def test_a_marker_inside_a_code_fence_is_an_example(tmp_path: Path) -> None:
    assert _report(_tree(tmp_path, "```text\n<!-- table: x.y z -->\n```\n"), "--check") == 0


def test_a_glob_expands_in_sorted_order_and_must_match(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path, FRESH.replace("results/a.json results/b.json", "results/*.json"))
    assert _report(root, "--check") == 0
    root = _tree(tmp_path / "other", FRESH.replace("results/a.json results/b.json", "results/z*.json"))
    assert _report(root, "--check") == 1
    assert "no result file matches benchmarks/results/z*.json" in capsys.readouterr().err


def test_unbacked_lists_each_pages_tables_outside_markers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path)
    (root / "docs" / "guide.md").write_text("| a |\n| - |\n\ntext\n\n| b |\n```\n| in a fence |\n```\n")
    assert _report(root, "--unbacked") == 1  # a figure without its result file fails (CI runs it)
    assert capsys.readouterr().out.splitlines() == ["docs/guide.md: 2 (1, 6)", "benchmarks/RESULTS_bench.md: 1 (12)",
                                                    "3 tables without a marker"]


def test_a_reference_table_is_not_listed_as_unbacked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path)
    (root / "docs" / "guide.md").write_text("<!-- reference table: the settings -->\n| a |\n| - |\n\n"
                                            "<!-- reference table: layout -->\n\n| b |\n\n<!-- reference table: -->\n"
                                            "| c: the comment names nothing |\n")
    assert _report(root, "--unbacked", "--files", "docs/guide.md") == 1
    assert capsys.readouterr().out.splitlines() == ["docs/guide.md: 1 (10)", "1 tables without a marker"]
    (root / "docs" / "guide.md").write_text("<!-- reference table: the settings -->\n| a |\n| - |\n")
    assert _report(root, "--unbacked", "--files", "docs/guide.md") == 0


def test_files_limits_the_pages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path, FRESH.replace("| b | 0.25 |", "| b | 0.30 |"))
    assert _report(root, "--check", "--files", "README.md") == 0
    assert _report(root, "--check", "--files", "benchmarks/RESULTS_bench.md") == 1
    capsys.readouterr()
    assert _report(root, "--check", "--files", "setup.py") == 2
    assert "setup.py: not a page the report reads" in capsys.readouterr().err


@pytest.mark.integration  # the real repository, as CI and a user run it
def test_the_repositorys_tables_match_their_result_files() -> None:
    out = subprocess.run([sys.executable, "benchmarks/report.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
