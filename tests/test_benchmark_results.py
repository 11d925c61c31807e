"""Benchmark scripts write one result file per run, and their table functions render the published tables from it.

Each script runs in this process on tiny arguments (the numbers mean nothing at this size; the file's shape and the
tables it gives are what is checked). ``result_file``'s git lookup is stubbed in the unit tests: it starts a
process, which the unit tier forbids (test_result_file.py checks it, as an integration test).
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import result_file  # noqa: E402

#: The scripts of issue 50 item 1 and the table functions each offers to ``report.py`` (list[dict] -> markdown).
RENDERERS = {
    "actors_vs_inprocess": ["efficiency_table"],
    "async_ppo": ["threshold_table", "sweep_table"],
    "backend_steps": ["table", "gym_parts_table", "isaac_parts_table"],
    "default_train": ["table"],
    "distill_sizes": ["docs_table"],
    "export_actor_errors": ["int8_table", "q15_table", "q7_table", "variants_table"],
    "export_inference": ["host_table", "sizes_table", "qemu_table", "page"],
    "export_lut_error": ["docs_table"],
    "fasttd3_vs_ppo": ["table", "ratio_table"],
    "ik_bench": ["docs_table"],
    "maniskill_steps": ["table"],
    "mujoco_steps": ["table", "pixels_table", "parts_table"],
    "mujoco_train": ["table"],
    "ppo_vs_rsl_rl": ["table", "summary", "details", "report"],
    "practice_bench": ["table", "seeds_table", "ablation_table"],
    "presets": ["grid_table", "presets_table", "readme_timing", "seed_table"],
    "replay_bench": ["table"],
    "reward_audit_bench": ["runs_table", "classifier_table"],
    "reward_bench": ["throughput_table", "loop_table"],
    "reward_sac_bench": ["table", "calibration_table"],
    "sac_vs_sb3": ["table", "summary"],
    "so101_replay_curves": ["curves_table"],
    "suite_time": ["suite_table"],
    "tables_redesign": ["default_train_table", "sac_table", "ppo_table", "transport_table", "suite_table",
                        "fingerprint_table"],
    "transport_bench": ["throughput_table", "ratio_table", "weights_table", "jitter_table"],
    "twin_figures": ["docs_table"],
}


@pytest.fixture
def no_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit lookup and ``platform.processor`` (``uname -p``) without a subprocess (the unit tier's rule)."""
    monkeypatch.setattr(result_file, "_git", lambda *args: "")
    monkeypatch.setattr(platform, "processor", lambda: "")


def _run_main(module: Any, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [f"benchmarks/{module.__name__}.py", *argv])
    # A benchmark's main may choose MUJOCO_GL for its process; in a test worker that choice must not outlive it.
    for key in ("MUJOCO_GL", "PYOPENGL_PLATFORM"):  # setenv/delenv to the same state: undone after the test
        if key in os.environ:
            monkeypatch.setenv(key, os.environ[key])
        else:
            monkeypatch.delenv(key, raising=False)
    module.main()


def _valid(path: Path, name: str) -> dict[str, Any]:
    """The file is strict JSON (no NaN) in result_file's format, and reads back as written."""
    data = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"{path} holds {c}"))
    assert data["benchmark"] == name and data["schema"] == result_file.SCHEMA
    assert data["command"].startswith(f"python benchmarks/{name}.py")
    assert set(data["machine"]) >= {"cpu", "cores", "load_average"} and data["results"]
    assert result_file.read_result(path) == data
    return data


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_a_script_imports_without_running_and_offers_its_table_functions(name: str) -> None:
    module = importlib.import_module(name)
    assert callable(module.main)
    for fn in RENDERERS[name]:
        assert callable(getattr(module, fn)), f"{name}.{fn}"


def test_the_default_path_is_one_new_file_per_run_under_the_benchmarks_folder() -> None:
    path = result_file.default_path("transport_bench")
    assert path.parent == result_file.RESULTS / "transport_bench" and path.suffix == ".json"


def test_reward_bench_writes_its_result_and_renders_both_tables(tmp_path: Path, no_git: None) -> None:
    import reward_bench

    results = reward_bench.measure(min_s=0.01, steps=1, rounds=1, num_envs=2)
    path = result_file.write_result(tmp_path / "r.json", "reward_bench", {"quick": True}, results)
    data = result_file.read_result(path)
    assert data["benchmark"] == "reward_bench" and "nan" not in path.read_text().lower()
    rows = data["results"]["throughput"]
    assert [(r["model"], r["batch"]) for r in rows] == [(m, b) for b in (1, 16, 64) for m in ("classifier", "prm")]
    throughput = reward_bench.throughput_table([data])
    assert throughput.count("\n") == 1 + len(rows)
    assert f"| classifier | 64 | {rows[4]['items_per_s']:,.0f} | {rows[4]['vs_batch_1']:.2f}× |" in throughput
    loop = reward_bench.loop_table([data])
    base = next(r for r in data["results"]["loop"] if r["variant"] == "env reward")
    assert base["vs_env_reward"] == 1.0 and f"| env reward | {base['ms_per_step']:.2f} | 1.00× |" in loop
    assert f"adds {data['results']['batched_adds_ms']:.2f} ms per step for 2 sub-envs" in loop


def test_backend_steps_writes_its_rows_and_parts_and_renders_them(tmp_path: Path, no_git: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gymnasium")
    import backend_steps

    out = tmp_path / "b.json"
    _run_main(backend_steps, ["--backends", "isaacgym", "--isaac-num-envs", "2", "--rounds", "1",
                              "--world-steps", "16", "--parts", "--out", str(out)], monkeypatch)
    data = _valid(out, "backend_steps")
    (row,) = data["results"]["rows"]
    assert row["backend"] == "isaacgym" and row["n"] == 2
    assert row["overhead"] == pytest.approx(row["raw"] / row["ours"] - 1, rel=0.5)  # medians of rounds
    table = backend_steps.table([data])
    assert f"| isaacgym (fake) | cartpole | state | 2 | {row['ours']:,.0f} | {row['raw']:,.0f} |" in table
    parts = backend_steps.isaac_parts_table([data])
    assert parts.splitlines()[2].startswith("| 2 | ") and not backend_steps.gym_parts_table([data]).count("\n") > 1


@pytest.mark.integration  # seconds of training and evaluation
def test_fasttd3_vs_ppo_writes_each_learners_curve_and_the_ratios(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import fasttd3_vs_ppo

    out = tmp_path / "f.json"
    _run_main(fasttd3_vs_ppo, ["--tasks", "reach", "--learners", "fasttd3", "ppo", "--num-envs", "16",
                               "--eval-every", "400", "--eval-episodes", "4", "--budget-s", "0.1",
                               "--max-env-steps", "400", "--threads", "1", "--out", str(out)], monkeypatch)
    data = _valid(out, "fasttd3_vs_ppo")
    (task,) = data["results"]["tasks"]
    assert [r["learner"] for r in task["learners"]] == ["fasttd3", "ppo"] and set(task["ratios"]) == {"ppo/fasttd3"}
    for r in task["learners"]:
        assert len(r["curve"]["env_steps"]) == len(r["curve"]["success"]) >= 1
    table = fasttd3_vs_ppo.table([data])
    assert table.count("\n") == 3 and "| `reach` | 0 | FastTD3 (16 envs) |" in table
    assert "| `reach` | 0 | PPO / FastTD3 |" in fasttd3_vs_ppo.ratio_table([data])


@pytest.mark.integration  # seconds of training and evaluation
def test_sac_vs_sb3_writes_chunk_times_and_renders_both_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gymnasium")
    import sac_vs_sb3

    out = tmp_path / "s.json"
    _run_main(sac_vs_sb3, ["--steps", "40", "--learning-starts", "20", "--chunk", "20", "--eval-episodes", "1",
                           "--batch-size", "8", "--variants", "fp32", "--skip-sb3", "--out", str(out)], monkeypatch)
    data = _valid(out, "sac_vs_sb3")
    (ours,) = data["results"]["learners"]
    assert ours["learner"] == "robot_rl fp32" and len(ours["chunk_seconds"]) == 2
    assert ours["speedup_vs_sb3"] is None  # no peer in this run: no ratio, not NaN
    assert f"| robot_rl fp32 (default config) | {ours['wall_s']:.1f} |" in sac_vs_sb3.table([data])
    assert "| robot_rl, fp32 (default) |" in sac_vs_sb3.summary([data])


def test_async_ppo_renders_the_threshold_and_k_tables_from_its_rows() -> None:
    async_ppo = importlib.import_module("async_ppo")
    row = {"wall_s": 80.0, "env_steps": 147_456, "reached": True, "final_success": 0.92, "updates": 24,
           "stale_rows_dropped": 0}
    data = {"results": {"threshold": [{**row, "name": "sync"},
                                      {**row, "name": "async k=2", "wall_s": 40.0, "stale_rows_dropped": 6_144}],
                        "sweep": [{**row, "name": "async k=0", "reached": False, "stale_rows_dropped": 36_864}]}}
    assert "| async k=2 | 40.0 | 147,456 | yes (92 %) | 24 | 6,144 | 2.00 |" in async_ppo.threshold_table([data])
    assert "| async k=0 | 92 % | 80.0 | 24 | 36,864 (25 %) |" in async_ppo.sweep_table([data])


def test_presets_picks_the_fastest_setting_that_reached_in_every_seed_and_times_its_parts() -> None:
    presets = importlib.import_module("presets")

    def seed(wall: float, reached: bool = True) -> dict[str, Any]:
        return {"reached": reached, "wall_s": wall, "env_steps": 4000, "updates": 3000, "load_before": 1.0,
                "fractions": {"env": 0.1, "inference": 0.05, "update": 0.8, "eval": 0.02}}

    entry: dict[str, Any] = {"reference": "before", "cap_env_steps": 40_000, "settings": {
        "preset": {"overrides": [], "seeds": {"0": seed(10.0), "1": seed(12.0)}},
        "before": {"overrides": ["x=1"], "seeds": {"0": seed(40.0), "1": seed(60.0)}},
        "lucky": {"overrides": ["x=2"], "seeds": {"0": seed(5.0), "1": {**seed(5.0, False), "best_success": 0.62}}}}}
    presets.summarise(entry)
    assert entry["fastest"] == "preset"  # "lucky" is faster but missed the threshold in one seed
    assert entry["settings"]["preset"]["wall_vs_reference"] == pytest.approx((10 / 40 + 12 / 60) / 2)
    record = {"date": "2026-12-07T19:00:00+00:00", "machine": {"cores": 2}, "results": {"cases": {"reach/sac": entry}}}
    grid = presets.grid_table([record])
    assert "| preset **(fastest)** | 2/2 | 4,000 | 3,000 | 11.0 | 0.23 | 10 % / 5 % / 80 % / 2 % |" in grid
    assert "| lucky | 1/2; not within 40,000 env steps: best success 62 % (seed 1) |" in grid
    assert "load average 1.0–1.0" in grid
    # Files merge by seed: a later file's preset-only seed 2 joins the pair of seeds that ran beside "before".
    later = {"date": "2026-12-07T20:00:00+00:00", "machine": {"cores": 2}, "results": {"cases": {"reach/x": {
        "reference": "preset", "cap_env_steps": 40_000,
        "settings": {"preset": {"overrides": [], "seeds": {"2": seed(14.0)}}}}}}}
    record["results"]["cases"] = {"reach/x": entry}
    row = "| `reach/x` | 3/3 | 4,000 | 3,000 | 12.0 | 50.0 (seed 0, 1) | 0.23 | 10 % / 5 % / 80 % / 2 % |"
    table = presets.presets_table([record, later])
    assert row in table
    seeds = presets.seed_table([{**record, "results": {"cases": {"reach/sac": entry}}}])
    assert "| `reach/sac` | lucky | 1 | no: best 62 % within 40,000 | 4,000 | 3,000 | 5 | 1 |" in seeds
    assert "| `push/ppo` | no run on record yet: `python benchmarks/presets.py --only push/ppo` |" in table

    class Thing:
        def work(self, n: int) -> int:
            return n + 1

    timers, thing = presets.PartTimers(), Thing()
    timers.wrap(thing, "work", "update")
    assert thing.work(1) == 2 and timers.seconds["update"] > 0 and timers.seconds["env"] == 0


def test_presets_counts_a_files_preset_for_the_setting_it_was_on_that_day(monkeypatch: pytest.MonkeyPatch) -> None:
    presets = importlib.import_module("presets")
    monkeypatch.setattr(presets, "REPLACED", {"reach/x": ("2026-12-07T19:30", "old")})
    monkeypatch.setattr(presets, "CHOSEN", {})
    run = {"reached": True, "wall_s": 1.0, "env_steps": 10, "updates": 1, "load_before": 1.0,
           "fractions": dict.fromkeys(presets.PARTS, 0.1)}

    def record(date: str, seed: str) -> dict[str, Any]:
        return {"date": date, "results": {"cases": {"reach/x": {"reference": "preset", "cap_env_steps": 10,
                                                                "settings": {"preset": {"overrides": [],
                                                                                        "seeds": {seed: run}}}}}}}

    merged = presets.merged_cases([record("2026-12-07T19:00:00+00:00", "0"), record("2026-12-07T20:00:00+00:00", "1")])
    assert {n: list(s["seeds"]) for n, s in merged["reach/x"]["settings"].items()} == {"old": ["0"], "preset": ["1"]}


def test_every_task_preset_is_measured_or_says_why_not() -> None:
    """Each ``presets`` entry of a built-in task is a case of benchmarks/presets.py or one of its NOT_MEASURED (tasks
    that other tests register, e.g. a benchmark's, are not built in)."""
    from robot_rl.core.config import TASKS

    presets = importlib.import_module("presets")
    held = {f"{name}/{algo}" for name in TASKS.names() if TASKS.get(name).__module__.startswith("robot_rl.")
            for algo in TASKS.get(name).presets}
    assert not set(presets.CASES) & set(presets.NOT_MEASURED)
    listed = set(presets.CASES) | set(presets.NOT_MEASURED)
    assert held == listed, held ^ listed
    assert set(presets.CHOSEN) <= set(presets.CASES)


def test_each_preset_resolves_to_the_grid_setting_it_was_chosen_from() -> None:
    """presets.CHOSEN names the measured setting behind each preset; the table counts that setting's runs for it."""
    from robot_rl.config_io import flatten, to_dict
    from robot_rl.loop.config import resolve_train_config

    presets = importlib.import_module("presets")
    for key, name in presets.CHOSEN.items():
        case = presets.CASES[key]
        preset = flatten(to_dict(resolve_train_config(task=case.task, algo=case.algo)))
        chosen = flatten(to_dict(resolve_train_config(task=case.task, algo=case.algo,
                                                      overrides=case.settings[name])))
        assert preset == chosen, {k: (v, chosen[k]) for k, v in preset.items() if chosen[k] != v}


# ---- every result file is a script's output ---------------------------------------------------------------------

RESULTS = BENCH / "results"
#: Top-level keys that no writer spells as a literal, because the writer formats them: the pattern, and why.
FORMATTED_KEYS = {
    r"(sft_real|sft_cotrain|rlco|rlco_w\d+|rl_w0)/\d+": "cotrain_bench.py: one entry per arm and demo count, "
                                                         "f'{arm}/{demos}'",
    r"(image|video)/(native|lerobot|ratio)": "lerobot_export_bench.py: f'{mode}/{backend}'",
}
#: Files keyed by what the run was given rather than by the script's own names, and why.
NAMED_BY_INPUT = {
    "export_variants_trained.json": "export_variants.py --trained RUN...: one entry per run directory, by its name",
}


def _writer_literals() -> set[str]:
    """The string literals of every benchmark module that writes a file (report.py rewrites pages, not results; a
    table module that only reads a file cannot vouch for its keys)."""
    literals: set[str] = set()
    for path in [*BENCH.glob("*.py"), *BENCH.glob("*/*.py")]:
        text = path.read_text()
        if path.name == "report.py" or not any(w in text for w in ("write_text(", "write_result(", "json.dump")):
            continue
        literals.update(re.findall(r"""["']([^"'\n]{1,80})["']""", text))
    return literals


def _notes(value: Any, where: str = "") -> list[str]:
    """Where a ``note`` key sits in ``value``: no benchmark writes one; a hand-assembled file explains itself there."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += [f"{where}.{key}"] if key == "note" else []
            found += _notes(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _notes(item, f"{where}[{i}]")
    return found


def test_every_result_file_holds_only_keys_a_benchmark_script_writes() -> None:
    """A published figure comes from a file its script wrote (issue 50): a file assembled by hand, from a log or from
    notes, shows itself by a ``note`` or by top-level keys that no writer names. Rerun the script, or withdraw the
    figure and delete the file; a writer that formats its keys goes into FORMATTED_KEYS with the reason."""
    literals, wrong = _writer_literals(), []
    for path in sorted(RESULTS.rglob("*.json")):
        name = str(path.relative_to(RESULTS))
        data = json.loads(path.read_text())
        wrong += [f"{name}: a `note` at {where}" for where in _notes(data)]
        top = data.get("results") if isinstance(data, dict) and data.get("schema") == result_file.SCHEMA else data
        if not isinstance(top, dict) or name in NAMED_BY_INPUT:
            continue
        unknown = [k for k in top if k not in literals and not any(re.fullmatch(p, k) for p in FORMATTED_KEYS)]
        wrong += [f"{name}: keys no benchmark script writes: {unknown}"] if unknown else []
    assert not wrong, "\n".join(wrong)
