"""The benchmarks behind the docs' measured tables: each writes one result file per run, and its table function renders
it (``benchmarks/report.py --check`` then keeps the committed tables equal to what the committed files give).

Each script runs in this process on tiny arguments; ``result_file``'s git lookup is stubbed (it starts a process,
which the unit tier forbids).
"""

from __future__ import annotations

import importlib
import json
import platform
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import result_file  # noqa: E402


#: The scripts behind docs/ tables and the table functions each offers to ``report.py``.
@pytest.fixture
def no_git(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(result_file, "_git", lambda *args: "")
    monkeypatch.setattr(platform, "processor", lambda: "")


def _run(name: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``benchmarks/NAME.py ARGV`` in this process; its result file, read back."""
    monkeypatch.setattr(sys, "argv", [f"benchmarks/{name}.py", *argv])
    importlib.import_module(name).main()
    path = Path(argv[argv.index("--out") + 1])
    data = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"{path} holds {c}"))
    assert data["benchmark"] == name and data["schema"] == result_file.SCHEMA and data["results"]
    return data


def test_the_lut_errors_follow_the_interpolation_formula(tmp_path: Path, no_git: None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import export_lut_error

    data = _run("export_lut_error", ["--formats", "14", "--out", str(tmp_path / "l.json")], monkeypatch)
    tanh = data["results"]["formats"]["14"]["tanh"]
    # 513 entries over Q14's ±2: steps of h = 128/16384; linear interpolation errs by h²/8·max|tanh''| (0.77),
    # plus the output's roundings (Q15: tanh stays within ±1 there).
    h = 128 / 16384
    assert tanh["f_out"] == 15 and h**2 / 8 * 0.77 < tanh["max_abs_err"] < h**2 / 8 * 0.77 + 2 * 2.0**-15
    table = export_lut_error.docs_table([data])
    assert table.splitlines()[0] == "| input range (format) | tanh | ELU | SiLU | GELU |"
    assert table.splitlines()[2].startswith("| ±2 (Q14) | 3.4e-5 |")


def test_distill_sizes_gives_the_generators_bytes_per_image_size(tmp_path: Path, no_git: None,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import distill_sizes

    data = _run("distill_sizes", ["--image-sizes", "16", "--out", str(tmp_path / "d.json")], monkeypatch)
    (row,) = data["results"]["students"]
    assert row["image_size"] == 16 and 0 < row["int8_full_const"] < row["float32_const"]
    assert f"| 16×16 (`--image-size 16`) | {row['float32_const']:,} / {row['float32_workspace']:,} B |" in \
        distill_sizes.docs_table([data])


def test_ik_bench_times_each_solve_and_counts_the_misses(tmp_path: Path, no_git: None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mink")
    import ik_bench

    data = _run("ik_bench", ["--arms", "koch", "--poses", "2", "--more", "2", "--out", str(tmp_path / "i.json")],
                monkeypatch)
    koch = data["results"]["arms"]["koch"]
    assert len(koch["test_poses"]) == len(koch["more_poses"]) == 2
    assert all(s["error_m"] < 1e-3 and s["iterations"] >= 1 and s["cpu_s"] > 0 for s in koch["test_poses"])
    row = ik_bench.docs_table([data]).splitlines()[2]
    assert row.startswith("| Koch | ") and "(none over 1 mm)" in row


def test_the_export_tables_take_each_actor_and_mark_a_capped_bound() -> None:
    import export_actor_errors as e

    variants = {"float32": {"max_abs_err": 1e-7, "bound_max": None, "const_bytes": 1000, "workspace_bytes": 100},
                "int8_full": {"max_abs_err": 0.012, "bound_max": None, "const_bytes": 300, "workspace_bytes": 30},
                "q15": {"max_abs_err": 1.21e-4, "bound_max": 0.014, "const_bytes": 500, "workspace_bytes": 50},
                "q7": {"max_abs_err": 0.025, "bound_max": 2.0001, "const_bytes": 250, "workspace_bytes": 25}}
    ours = {"benchmark": e.NAME, "results": {"sac-relu": {"architecture": "", "action_bounds": [-1.0, 1.0],
                                                          "num_random": 20, "variants": variants}}}
    assert "| SAC MLP 12 → 64 → 64 ReLU → 2 | [−1, 1] | – | 0.012 | 1,000 → 300 B |" in e.int8_table([ours])
    assert "| SAC MLP 12 → 64 → 64 ReLU → 2 | [−1, 1] | 0.012 | 1.2e-4 | 0.014 |" in e.q15_table([ours])
    assert e.q7_table([ours]).endswith("| 0.012 | 1.2e-4 | 0.025 | 2 (cap) |")


@pytest.mark.integration  # builds and runs the C of each variant (host gcc)
def test_export_actor_errors_measures_every_variant_within_its_bound(tmp_path: Path) -> None:
    import export_actor_errors

    r = export_actor_errors.measure("ppo-gelu", 20, tmp_path)
    assert list(r["variants"]) == list(export_actor_errors.MLP_VARIANTS) and r["action_bounds"] == [-1.0, 1.0]
    for name in ("int8", "q15", "q7"):
        v = r["variants"][name]
        assert 0 < v["max_abs_err"] <= v["bound_max"], name
    assert r["variants"]["float32"]["max_abs_err"] < 1e-5
