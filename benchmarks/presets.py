"""Every task preset against a small grid around it: env steps and wall-clock to the task's success threshold.

    .venv/bin/python benchmarks/presets.py                          # every case below, 3 seeds
    .venv/bin/python benchmarks/presets.py --only reach/sac --seeds 0 1 2
    .venv/bin/python benchmarks/presets.py --quick                  # the preset and one neighbour, 1 seed, small cap

A case is a built-in task with an algorithm: what ``robot-rl train --task T --algo A`` resolves (the task's preset
for that algorithm, ``preset``) and settings around it that change one or two of network widths, batch size,
update-to-data ratio, env count, the first update and the evaluation interval. Each setting runs as
``robot-rl train`` would (the in-process runner, ``run.progress=false``) until the threshold or the case's env-step
cap, and records env steps, updates and wall-clock of training (evaluations included, start-up excluded) and the
fraction of that wall-clock spent in env stepping, policy inference (the acting policy), gradient updates and
evaluation. With SAC the actor thread steps and infers while the learner updates, so the fractions can sum past 1.

The machine may be shared: the seed is the outer loop and the settings the inner one, so every setting of a seed
runs under about the same load, and the tables compare each setting with the case's ``reference`` setting as the
median of per-seed wall-clock ratios. The load average before each run is recorded. The fastest setting that
reaches the threshold in every seed is the case's candidate preset (:func:`grid_table` marks it).

Each run writes one result file (``<date>.json``: arguments, commit, machine, per-seed rows) to
``benchmarks/results/presets/``; the tables in RESULTS.md, docs/tasks.md and the README are rendered from those
files by ``benchmarks/report.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

NAME = "presets"
PARTS = ("env", "inference", "update", "eval")

#: `robot-rl train`'s SAC on reach before issue 55 (the algorithm's defaults, no preset).
SAC_BEFORE = ["algo.actor_hidden=[256,256]", "algo.critic_hidden=[256,256]", "algo.batch_size=256",
              "algo.utd_ratio=1.0", "algo.learning_starts=5000", "task.num_envs=32",
              "loop.eval_every_env_steps=10000"]
#: `robot-rl train --algo ppo` on reach before issue 55 (preset: 1024 envs; PPO's [256, 256, 256] networks).
PPO_BEFORE = ["task.num_envs=1024", "algo.actor_hidden=[256,256,256]", "algo.critic_hidden=[256,256,256]"]


@dataclass(frozen=True)
class Case:
    """One task with one algorithm, its settings (name → overrides on top of what the CLI resolves) and cap."""

    task: str
    algo: str
    settings: dict[str, list[str]]
    cap_env_steps: int
    reference: str = "before"
    quick: tuple[str, ...] = ("preset",)
    needs: tuple[str, ...] = field(default_factory=tuple)
    sft: str | None = None
    """The key (``algo.init_from`` or ``task.init_from``) that takes a flow SFT checkpoint of ``sft_task``'s demos,
    for the presets that fine-tune one: ``--init-from TASK=DIR`` gives it (:func:`main`)."""
    sft_task: str | None = None

    @property
    def key(self) -> str:
        """``task/algo``."""
        return f"{self.task}/{self.algo}"


def _widths(n: int) -> list[str]:
    """Actor and critic of two hidden layers of ``n`` units."""
    return [f"algo.actor_hidden=[{n},{n}]", f"algo.critic_hidden=[{n},{n}]"]


def _sac_grid() -> dict[str, list[str]]:
    fast = ["algo.learning_starts=1000", "loop.eval_every_env_steps=2000"]
    w128, w64 = _widths(128), _widths(64)
    return {
        "preset": [],
        "before": SAC_BEFORE,
        "start 1k, eval 2k": [*SAC_BEFORE, *fast],
        "[128,128]": [*SAC_BEFORE, *fast, *w128],
        "[128,128] batch 128": [*SAC_BEFORE, *fast, *w128, "algo.batch_size=128"],
        "[128,128] UTD 0.5": [*SAC_BEFORE, *fast, *w128, "algo.utd_ratio=0.5"],
        "[128,128] UTD 0.5, 64 envs": [*SAC_BEFORE, *fast, *w128, "algo.utd_ratio=0.5", "task.num_envs=64"],
        "[128,128] UTD 0.25, 128 envs": [*SAC_BEFORE, *fast, *w128, "algo.utd_ratio=0.25", "task.num_envs=128"],
        "[64,64] batch 128": [*SAC_BEFORE, *fast, *w64, "algo.batch_size=128"],
        "[64,64] batch 128, eval 1k": [*SAC_BEFORE, *fast, *w64, "algo.batch_size=128",
                                       "loop.eval_every_env_steps=1000"],
        "[128,128] batch 128 UTD 0.5": [*SAC_BEFORE, *fast, *w128, "algo.batch_size=128", "algo.utd_ratio=0.5"],
        "[64,64] batch 128 UTD 0.5": [*SAC_BEFORE, *fast, *w64, "algo.batch_size=128", "algo.utd_ratio=0.5"],
        "[64,64] batch 128 UTD 0.25": [*SAC_BEFORE, *fast, *w64, "algo.batch_size=128", "algo.utd_ratio=0.25"],
        "[64,64] batch 128 UTD 0.5, start 500, eval 1k": [
            *SAC_BEFORE, *fast, *w64, "algo.batch_size=128", "algo.utd_ratio=0.5", "algo.learning_starts=500",
            "loop.eval_every_env_steps=1000"],
        "[64,64] batch 128 UTD 0.25, start 500, eval 1k": [
            *SAC_BEFORE, *fast, *w64, "algo.batch_size=128", "algo.utd_ratio=0.25", "algo.learning_starts=500",
            "loop.eval_every_env_steps=1000"],
    }


def _ppo_grid(before: list[str], envs: int) -> dict[str, list[str]]:
    w128, w64 = _widths(128), _widths(64)
    return {
        "preset": [],
        "before": before,
        "[128,128]": [*before, *w128],
        "[64,64]": [*before, *w64],
        f"[128,128], {envs // 2} envs": [*before, *w128, f"task.num_envs={envs // 2}"],
        f"[128,128], {envs * 2} envs": [*before, *w128, f"task.num_envs={envs * 2}"],
        "[128,128], 3 epochs": [*before, *w128, "algo.num_epochs=3"],
        f"[64,64], {envs // 2} envs": [*before, *w64, f"task.num_envs={envs // 2}"],
        f"[64,64], {envs * 2} envs": [*before, *w64, f"task.num_envs={envs * 2}"],
        f"[64,64], {envs // 4} envs": [*before, *w64, f"task.num_envs={envs // 4}"],
        f"[64,64], {envs // 8} envs": [*before, *w64, f"task.num_envs={envs // 8}"],
        f"[64,64], {envs // 16} envs": [*before, *w64, f"task.num_envs={envs // 16}"],
    }


def _mujoco_sac_grid() -> dict[str, list[str]]:
    """mujoco/reach's SAC preset before issue 55 (SAC's [256, 256] networks, batch 256) and the reach preset's
    smaller ones; its other keys (first update, evaluation) come from the task's preset."""
    return {
        "preset": [],
        "before": ["algo.actor_hidden=[256,256]", "algo.critic_hidden=[256,256]", "algo.batch_size=256"],
        "[128,128] batch 128": ["algo.actor_hidden=[128,128]", "algo.critic_hidden=[128,128]",
                                "algo.batch_size=128"],
        "[64,64] batch 128": ["algo.actor_hidden=[64,64]", "algo.critic_hidden=[64,64]", "algo.batch_size=128"],
        "[64,64] batch 128 UTD 0.5": ["algo.actor_hidden=[64,64]", "algo.critic_hidden=[64,64]",
                                      "algo.batch_size=128", "algo.utd_ratio=0.5"],
        "[64,64] batch 128 UTD 0.25": ["algo.actor_hidden=[64,64]", "algo.critic_hidden=[64,64]",
                                       "algo.batch_size=128", "algo.utd_ratio=0.25"],
    }


def _flow_cases() -> list[Case]:
    """The flow presets of ``lang_reach`` and ``lang_push``, each from an SFT checkpoint of its task's demos, and DSRL
    (SAC on the noise of ``lang_reach``'s checkpoint). The caps are a few iterations each, sized for a machine
    shared with other jobs: the fine-tuning runs of benchmarks/RESULTS_flow.md needed 20–55 min to the threshold."""
    caps = {"flow_ppo": 10_000, "hiors": 5_000, "flow_qc": 5_000}
    return [*(Case(task, algo, {"preset": []}, cap, reference="preset", sft="algo.init_from", sft_task=task)
              for task in ("lang_reach", "lang_push") for algo, cap in caps.items()),
            Case("dsrl", "sac", {"preset": []}, 10_000, reference="preset", sft="task.init_from",
                 sft_task="lang_reach")]


#: The SAC presets of the MuJoCo manipulation tasks: [256, 256] networks at one update per env step (22–27 ms an
#: update here), so a run is capped at 3k env steps (1,000 updates after the first 2,000), far short of the ~95k that
#: `pick_cube` needed (benchmarks/RESULTS_mujoco.md).
_MUJOCO_SAC_CAP = 3_000

CASES: dict[str, Case] = {c.key: c for c in (
    Case("reach", "sac", _sac_grid(), cap_env_steps=40_000, quick=("preset", "before")),
    Case("reach", "ppo", _ppo_grid(PPO_BEFORE, 1024), cap_env_steps=1_500_000, quick=("preset", "before")),
    Case("pendulum", "ppo", _ppo_grid(["task.num_envs=512", "algo.actor_hidden=[256,256,256]",
                                       "algo.critic_hidden=[256,256,256]"], 512), cap_env_steps=3_000_000),
    Case("mujoco/reach", "sac", _mujoco_sac_grid(), cap_env_steps=200_000, needs=("mujoco",)),
    Case("mujoco/reach", "ppo", _ppo_grid(["task.num_envs=256", "algo.actor_hidden=[256,256,256]",
                                           "algo.critic_hidden=[256,256,256]"], 256),
         cap_env_steps=5_000_000, needs=("mujoco",)),
    Case("mujoco/reach_shifted", "sac", {"preset": []}, 8_000, reference="preset", needs=("mujoco",)),
    Case("mujoco/reach_shifted", "ppo", {"preset": []}, 300_000, reference="preset", needs=("mujoco",)),
    Case("push", "ppo", {"preset": []}, 300_000, reference="preset"),
    *(Case(f"mujoco/{t}", "sac", {"preset": []}, _MUJOCO_SAC_CAP, reference="preset", needs=("mujoco",))
      for t in ("push", "peg_insert", "pick_cube")),
    *_flow_cases(),
)}


#: The grid setting each case's preset was chosen from (its fastest in every seed); the preset resolves to exactly
#: its config (tests/test_benchmark_results.py checks it), so the runs of either count for both.
CHOSEN: dict[str, str] = {"reach/sac": "[64,64] batch 128 UTD 0.25, start 500, eval 1k",
                          "reach/ppo": "[64,64], 128 envs",
                          "mujoco/reach/sac": "before", "mujoco/reach/ppo": "[64,64], 64 envs",
                          "pendulum/ppo": "[64,64], 256 envs"}
#: A preset that changed after files ran it as ``preset``: ``task/algo`` → (the UTC date of the change, the grid
#: setting it was until then); :func:`merged_cases` counts those files' ``preset`` runs for that setting.
REPLACED: dict[str, tuple[str, str]] = {"reach/ppo": ("2026-12-07T22:30", "[64,64]"),
                                        "reach/sac": ("2026-12-07T22:40", "[64,64] batch 128"),
                                        "mujoco/reach/sac": ("2026-12-07T22:50", "[64,64] batch 128")}

#: Every other task preset (``task/algo``) and why it has no case: :func:`presets_table` lists them, and a test holds
#: CASES and this table to every preset the task registry holds.
NOT_MEASURED: dict[str, str] = {
    "maniskill/ppo": "ManiSkill simulates on a GPU (Vulkan); this machine has none",
}


class PartTimers:
    """Seconds spent in each part of a run, summed over calls; wraps bound methods of one runner's objects."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.last = dict.fromkeys(PARTS, 0.0)
        """The duration of each part's latest call."""

    def wrap(self, obj: Any, method: str, part: str) -> None:
        """Replace ``obj.method`` (on the instance only) by a timed call."""
        inner: Callable[..., Any] = getattr(obj, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.last[part] = time.perf_counter() - t0
                self.seconds[part] += self.last[part]

        object.__setattr__(obj, method, timed)


def run_one(case: Case, overrides: list[str], seed: int, root: str) -> dict[str, Any]:
    """One run of ``case`` with ``overrides``: its end point and where its wall-clock went."""
    from robot_rl.loop.config import resolve_train_config
    from robot_rl.loop.runner import InProcessRunner

    cfg = resolve_train_config(task=case.task, algo=case.algo, overrides=[
        *overrides, f"loop.total_env_steps={case.cap_env_steps}", f"run.seed={seed}", f"run.root={root}",
        f"run.name=s{seed}-{time.monotonic_ns()}", "run.progress=false", "loop.checkpoint_every_s=1e9"])
    load = round(os.getloadavg()[0], 2)
    runner = InProcessRunner(cfg)
    timers = PartTimers()
    for env in runner.envs:
        timers.wrap(env, "step", "env")
    for actor in runner.actors:
        timers.wrap(actor.policy, "act", "inference")
    timers.wrap(runner.algo, "update", "update")
    timers.wrap(runner.evaluator, "run", "eval")
    result = runner.train()
    wall = result.wall_s
    if result.stop_reason != "threshold":  # the closing evaluation of a run that ran out runs after its wall-clock
        timers.seconds["eval"] -= timers.last["eval"]
    return {"reached": result.reached_threshold, "wall_s": round(wall, 2), "env_steps": result.env_steps,
            "updates": result.updates, "load_before": load,
            "fractions": {k: round(v / wall, 3) for k, v in timers.seconds.items()},
            "eval_success": result.last_eval.success_rate if result.last_eval else None,
            "best_success": runner.evaluator.best_success}


def _available(case: Case) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in case.needs)


def measure(cases: list[Case], seeds: list[int], quick: bool, log: Callable[[str], None] = print,
            init_from: dict[str, str] | None = None) -> dict[str, Any]:
    """Seeds outer, cases and settings inner; per case: settings → overrides and per-seed results. A case that
    fine-tunes an SFT checkpoint takes its task's from ``init_from`` (task → run directory of `robot-rl flow-sft`)."""
    out: dict[str, Any] = {}
    for case in cases:
        names = [n for n in case.settings if not quick or n in case.quick]
        sft = [f"{case.sft}={(init_from or {})[case.sft_task]}"] if case.sft and case.sft_task else []
        out[case.key] = {"reference": case.reference if case.reference in names else names[0],
                         "cap_env_steps": case.cap_env_steps,
                         "settings": {n: {"overrides": [*sft, *case.settings[n]], "seeds": {}} for n in names}}
        if sft:
            out[case.key]["sft"] = sft_summary((init_from or {})[str(case.sft_task)])
    with tempfile.TemporaryDirectory() as root:
        for seed in seeds:
            for case in cases:
                for name, setting in out[case.key]["settings"].items():
                    r = run_one(case, setting["overrides"], seed, root)
                    setting["seeds"][str(seed)] = r
                    log(f"{case.key} {name!r} seed {seed}: reached={r['reached']} {r['env_steps']:,} steps "
                        f"{r['updates']:,} updates {r['wall_s']:.1f}s load {r['load_before']} {r['fractions']}")
    for entry in out.values():
        summarise(entry)
    return out


def sft_summary(run_dir: str) -> dict[str, Any]:
    """What a flow SFT checkpoint started from: its directory and the success of its last evaluation in the SFT run
    (``results.json`` of `robot-rl flow-sft`), so a table can put a fine-tuned preset's figures beside it."""
    path = Path(run_dir) / "results.json"
    evals = json.loads(path.read_text()).get("evaluations", []) if path.exists() else []  # [[step, stats], ...]
    step, stats = evals[-1] if evals else (None, {})
    return {"dir": run_dir, "sft_steps": step, "success": stats.get("success_rate")}


def summarise(entry: dict[str, Any]) -> None:
    """Medians per setting, the per-seed wall ratio to the reference, and the fastest setting that always reached."""
    ref = entry["settings"][entry["reference"]]["seeds"]
    for s in entry["settings"].values():
        runs = list(s["seeds"].values())
        s["reached"] = sum(bool(r["reached"]) for r in runs)
        s["median_wall_s"] = statistics.median(r["wall_s"] for r in runs)
        s["median_env_steps"] = statistics.median(r["env_steps"] for r in runs)
        s["median_updates"] = statistics.median(r["updates"] for r in runs)
        s["median_fractions"] = {p: statistics.median(r["fractions"][p] for r in runs) for p in PARTS}
        ratios = [r["wall_s"] / ref[seed]["wall_s"] for seed, r in s["seeds"].items() if seed in ref]
        s["wall_vs_reference"] = statistics.median(ratios) if ratios else None
    full = [(s["median_wall_s"], n) for n, s in entry["settings"].items() if s["reached"] == len(s["seeds"])]
    entry["fastest"] = min(full)[1] if full else None


def _fractions(f: dict[str, float]) -> str:
    return " / ".join(f"{f[p]:.0%}".replace("%", " %") for p in PARTS)


def _reached(setting: dict[str, Any], cap: int) -> str:
    """``k/n`` seeds that reached the threshold; where some did not, the cap they ran out at and their best
    evaluations (files from before the best was recorded give the last one)."""
    seeds = sorted(setting["seeds"], key=int)
    missed = [k for k in seeds if not setting["seeds"][k]["reached"]]
    text = f"{len(seeds) - len(missed)}/{len(seeds)}"
    if not missed:
        return text
    best = [setting["seeds"][k].get("best_success", setting["seeds"][k].get("eval_success")) for k in missed]
    shown = " / ".join("?" if b is None else f"{b:.0%}".replace("%", "") for b in best)
    return (f"{text}; not within {cap:,} env steps: best success {shown} % "
            f"(seed{'s' if len(missed) > 1 else ''} {', '.join(missed)})")


def _sft_flag(case: Case) -> str:
    return f" --init-from {case.sft_task}=SFT_DIR" if case.sft_task else ""


def _label(key: str, entry: dict[str, Any], code: bool = True) -> str:
    """``task/algo`` (in backticks where ``code``), with the success of the SFT checkpoint a flow preset fine-tunes."""
    name = f"`{key}`" if code else key
    sft = entry.get("sft")
    if not sft or sft.get("success") is None:
        return name
    return f"{name} (from SFT at {sft['success']:.0%}, {sft['sft_steps']:,} steps)"


def merged_cases(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``task/algo`` → one entry whose settings hold every file's seeds (a later file's seed replaces an earlier
    one's), summarised again; the reference is ``before`` where some file ran it, else the latest file's. A file's
    ``preset`` from before that preset changed (:data:`REPLACED`) counts for the grid setting it was then."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        for key, entry in run["results"]["cases"].items():
            merged = out.setdefault(key, {"cap_env_steps": entry["cap_env_steps"], "settings": {}})
            merged["reference"] = entry["reference"]
            if "sft" in entry:
                merged["sft"] = entry["sft"]
            for name, s in entry["settings"].items():
                if name == "preset" and key in REPLACED and run["date"] < REPLACED[key][0]:
                    name = REPLACED[key][1]  # the preset of the file's day, not today's
                into = merged["settings"].setdefault(name, {"overrides": s["overrides"], "seeds": {}})
                into["seeds"].update(s["seeds"])
    for key, entry in out.items():
        chosen, settings = CHOSEN.get(key), entry["settings"]
        if chosen is not None and "preset" in settings:  # the same config under its grid name: one row
            into = settings.setdefault(chosen, {"overrides": settings["preset"]["overrides"], "seeds": {}})
            into["seeds"].update(settings.pop("preset")["seeds"])
        if "before" in entry["settings"]:
            entry["reference"] = "before"
        summarise(entry)
    return out


def grid_table(runs: list[dict[str, Any]]) -> str:
    """Per case: every setting's seeds reaching the threshold, median env steps, updates and wall-clock, the median
    per-seed wall ratio to the reference, and the fractions of wall-clock in env / inference / update / eval."""
    blocks = []
    for key, entry, run in ((k, e, r) for r in runs for k, e in r["results"]["cases"].items()):
        ref = entry["reference"]
        rows = []
        for name, s in entry["settings"].items():
            mark = " **(fastest)**" if name == entry["fastest"] else ""
            ratio = s["wall_vs_reference"]
            rows.append([f"{name}{mark}", _reached(s, entry["cap_env_steps"]), f"{s['median_env_steps']:,.0f}",
                         f"{s['median_updates']:,.0f}", f"{s['median_wall_s']:.1f}",
                         f"{ratio:.2f}" if ratio is not None else "—", _fractions(s["median_fractions"])])
        loads = [r["load_before"] for s in entry["settings"].values() for r in s["seeds"].values()]
        blocks.append(f"**{_label(key, entry, code=False)}** (cap {entry['cap_env_steps']:,} env steps; "
                      f"{run['date'][:16]}, "
                      f"{run['machine']['cores']} cores, load average {min(loads):.1f}–{max(loads):.1f}):\n\n"
                      + markdown_table(["setting", "reached", "env steps", "updates", "wall s",
                                        f"wall / {ref}", "env / inference / update / eval"], rows, "lcrrrrr"))
    return "\n\n".join(blocks)


def presets_table(runs: list[dict[str, Any]]) -> str:
    """One row per case, its files merged by seed: the preset's seeds reaching the threshold (its runs under its
    grid name in :data:`CHOSEN` included), median env steps and wall-clock, the settings before issue 55 in the
    seeds both ran (— where the preset is still those), and the parts of the preset's wall-clock; then a row for
    each case that no file ran, with its command, and one for each preset of :data:`NOT_MEASURED`, with why."""
    rows = []
    merged = merged_cases(runs)
    for key, entry in merged.items():
        p = entry["settings"][CHOSEN.get(key, "preset")]
        before = entry["settings"].get("before") if CHOSEN.get(key) != "before" else None
        paired = sorted(set(p["seeds"]) & set(before["seeds"])) if before else []
        rows.append([_label(key, entry), _reached(p, entry["cap_env_steps"]), f"{p['median_env_steps']:,.0f}",
                     f"{p['median_updates']:,.0f}", f"{p['median_wall_s']:.1f}",
                     (f"{statistics.median(before['seeds'][k]['wall_s'] for k in paired):.1f} "
                      f"(seed {', '.join(paired)})") if paired and before else "—",
                     f"{p['wall_vs_reference']:.2f}" if paired and p["wall_vs_reference"] is not None else "—",
                     _fractions(p["median_fractions"])])
    rows += [[f"`{key}`", f"no run on record yet: `python benchmarks/presets.py --only {key}{_sft_flag(c)}`",
              *[""] * 6] for key, c in CASES.items() if key not in merged]
    by_reason: dict[str, list[str]] = {}
    for key, why in NOT_MEASURED.items():
        by_reason.setdefault(why, []).append(f"`{key}`")
    rows += [[", ".join(keys), f"not measured: {why}", *[""] * 6] for why, keys in by_reason.items()]
    return markdown_table(["task / algo", "reached", "env steps", "updates", "wall s", "before: wall s",
                           "preset / before", "env / inference / update / eval"], rows, "lcrrrrrr")


def seed_table(runs: list[dict[str, Any]]) -> str:
    """One row per case, setting and seed of the files, merged by seed: reached (or the best evaluation within the
    cap), env steps, updates and wall-clock, the load average before the run, and the parts of its wall-clock."""
    rows = []
    for key, entry in merged_cases(runs).items():
        for name, s in entry["settings"].items():
            for seed in sorted(s["seeds"], key=int):
                r = s["seeds"][seed]
                best = r.get("best_success", r.get("eval_success"))
                reached = "yes" if r["reached"] else (
                    f"no: best {best:.0%} within {entry['cap_env_steps']:,}".replace("%", " %") if best is not None
                    else f"no, within {entry['cap_env_steps']:,}")
                rows.append([_label(key, entry), name, seed, reached, f"{r['env_steps']:,}", f"{r['updates']:,}",
                             f"{r['wall_s']:.0f}", f"{r['load_before']:.0f}", _fractions(r["fractions"])])
    return markdown_table(["task / algo", "setting", "seed", "reached 90 %", "env steps", "updates", "wall s",
                           "load before", "env / inference / update / eval"], rows, "llcrrrrrr")


def readme_timing(runs: list[dict[str, Any]]) -> str:
    """The README's line under "What a run looks like": `robot-rl train`'s preset beside the settings before it."""
    entry = merged_cases(runs)["reach/sac"]
    p, before = entry["settings"][CHOSEN["reach/sac"]], entry["settings"]["before"]
    loads = [r["load_before"] for s in (p, before) for r in s["seeds"].values()]
    return (f"Side by side in {len(p['seeds'])} seeds on a 2-core machine (load average "
            f"{min(loads):.1f}–{max(loads):.1f}), `benchmarks/presets.py` measured a median of "
            f"**{p['median_wall_s']:.0f} s** of training to the threshold ({p['median_env_steps']:,.0f} env steps, "
            f"{p['median_updates']:,.0f} updates), **{p['wall_vs_reference']:.2f}×** the wall-clock of the settings "
            f"before issue 55 ({before['median_env_steps']:,.0f} env steps, {before['median_updates']:,.0f} updates) — "
            f"[benchmarks/RESULTS.md](benchmarks/RESULTS.md).")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", default=None, metavar="TASK/ALGO", help=f"cases: {', '.join(CASES)}")
    ap.add_argument("--settings", nargs="+", default=None, help="only these settings of each case (by name)")
    ap.add_argument("--without", nargs="+", default=(), help="leave these settings out (e.g. a preset that equals "
                    "``before``)")
    ap.add_argument("--reference", default=None, help="the setting the others are compared with (default: the "
                    "case's, usually ``before``)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--init-from", nargs="+", default=[], metavar="TASK=DIR", help="the flow SFT checkpoint "
                    "(`robot-rl flow-sft --out DIR`) each flow case of TASK fine-tunes; cases without one are skipped")
    ap.add_argument("--quick", action="store_true", help="the preset and one neighbour, seed 0, env cap ÷ 10")
    add_out_argument(ap, NAME)
    args = ap.parse_args()
    unknown = sorted(set(args.only or ()) - set(CASES))
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    cases = [c for k, c in CASES.items() if args.only is None or k in args.only]
    init_from = dict(kv.split("=", 1) for kv in args.init_from)
    skipped = [c.key for c in cases if not _available(c) or (c.sft_task and c.sft_task not in init_from)]
    cases = [c for c in cases if c.key not in skipped]
    if skipped:
        print(f"skipped (a module missing, or no --init-from for their task): {', '.join(skipped)}")
    if args.reference:
        cases = [replace(c, reference=args.reference) for c in cases]
    if args.settings or args.without:
        keep = [n for c in cases for n in c.settings if (not args.settings or n in args.settings)
                and n not in args.without]
        cases = [replace(c, settings={n: o for n, o in c.settings.items() if n in keep or n == c.reference})
                 for c in cases]
    seeds = args.seeds
    if args.quick:
        seeds = seeds[:1]
        cases = [replace(c, cap_env_steps=c.cap_env_steps // 10) for c in cases]
    import torch

    started = dt.datetime.now(dt.UTC)
    results = {"cases": measure(cases, seeds, args.quick, init_from=init_from), "skipped": skipped,
               "torch_threads": torch.get_num_threads()}
    path = write_result(args.out or default_path(NAME, started), NAME, args, results, started)
    record = {"results": results, "date": started.isoformat(), "machine": {"cores": os.cpu_count()}}
    print(grid_table([record]))
    print(f"result file: {path}")


if __name__ == "__main__":
    main()
