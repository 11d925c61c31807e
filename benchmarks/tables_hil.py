"""The learning tables of RESULTS_hil.md (and RESULTS_so101.md's camera runs), rebuilt from ``hil_learn.py``'s
``hil_learning*.json`` files (section 6's table comes from ``hil_cli_workflow.runs_table``).

``hil_learn.py`` imports torch and the deploy stack at module level; ``report.py`` imports this module instead (the
standard library only). A learning file holds one entry per run (``with intervener``, ``without``): its episodes,
the evaluations of the policy alone, the learner's counters; and each run's final policy alone.
"""

from __future__ import annotations

import math
from typing import Any

from result_file import markdown_table, pct

Run = dict[str, Any]


def _n(x: float) -> str:
    return f"{math.floor(x + 0.5):,}"


def _thirds(episodes: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    n = len(episodes)
    return [episodes[i * n // 3:(i + 1) * n // 3] for i in range(3)]


def _success(episodes: list[dict[str, Any]]) -> float:
    return sum(bool(e["success"]) for e in episodes) / len(episodes)


def _intervened(episodes: list[dict[str, Any]]) -> float:
    """The share of steps a person drove (each episode's rate weighted by its steps)."""
    return sum(e["intervention_rate"] * e["steps"] for e in episodes) / sum(e["steps"] for e in episodes)


def _pct1(x: float) -> str:
    """``6.9 %`` under 10 %, ``31 %`` above (the page's style for falling rates)."""
    return f"{100 * x:.1f} %" if x < 0.1 else pct(x)


def evals_table(records: list[dict[str, Any]]) -> str:
    """The policy alone at each evaluation of both runs: success, training minutes and mean return per row, the
    last evaluation (the run's end) in the last column with its env steps."""
    runs: dict[str, Run] = records[0]["results"]["runs"]
    every = records[0]["results"]["config"]["eval_every_steps"]
    width = max(len(r["evals"]) for r in runs.values()) - 1  # evaluations between the start and the end
    head = ["policy alone (deterministic, 10 seeded episodes)", "0 steps",
            *(f"{k * every // 1000}k" if every % 1000 == 0 else f"~{k * every:,}" for k in range(1, width)), "end"]
    rows = []
    for name, r in runs.items():
        ev = r["evals"]
        middle, end = ev[:-1], ev[-1]
        pad = ["–"] * (width - len(middle))
        rows.append([f"{name}: success", *(pct(e["success"]) for e in middle), *pad,
                     f"{pct(end['success'])} ({_n(end['env_steps'])})"])
        rows.append([f"{name}: training minutes", *(f"{e['train_wall_s'] / 60:.1f}" if e["env_steps"] else "0"
                                                     for e in middle), *pad, f"{end['train_wall_s'] / 60:.1f}"])
        rows.append([f"{name}: mean return", *(f"{e['mean_return']:.1f}".replace("-", "−") for e in middle), *pad,
                     f"{end['mean_return']:.1f}".replace("-", "−")])
    return markdown_table(head, rows)


def runs_table(records: list[dict[str, Any]]) -> str:
    """Each run's size, learner throughput, training success and intervention rate (first 20 episodes, then thirds
    of its episodes) and its final policy alone."""
    res = records[0]["results"]
    rows = []
    for name, r in res["runs"].items():
        eps, learner, wall = r["episodes"], r["learner"], r["train_wall_s"]
        final = res["final_policy_alone"][name]
        det, sto = final["deterministic"], final["stochastic"]
        intervened = ("–" if learner["intervened_received"] == 0 else
                      f"{pct(_intervened(eps[:20]))} → " + " / ".join(_pct1(_intervened(t)) for t in _thirds(eps)))
        rows.append([name, f"{_n(r['env_steps'])} in {wall / 60:.1f} min", _n(len(eps)),
                     f"{_n(learner['updates'])} ({learner['updates'] / wall:.1f}/s)",
                     f"{pct(_success(eps[:20]))} → " + " / ".join(pct(_success(t)) for t in _thirds(eps)),
                     intervened,
                     f"{pct(det['success'])} / {pct(sto['success'])} ({det['mean_steps']:.1f} / "
                     f"{sto['mean_steps']:.1f} steps)"])
    return markdown_table(["run", "env steps", "episodes", "updates (per s of training)",
                           "training success (first 20 episodes → thirds)",
                           "intervention rate, by steps (first 20 episodes → thirds)",
                           "final alone: deterministic / stochastic (mean steps)"], rows)


def early_table(records: list[dict[str, Any]]) -> str:
    """The short run's evaluations of the policy alone in finer steps, and each final policy alone."""
    res = records[0]["results"]
    every = res["config"]["eval_every_steps"]
    runs: dict[str, Run] = res["runs"]
    width = max(len(r["evals"]) for r in runs.values()) - 1
    head = ["policy alone (deterministic, 10 episodes) at env steps", "0",
            *(f"~{k * every:,}" for k in range(1, width)), "final det. / stoch."]
    rows = []
    for name, r in runs.items():
        middle = r["evals"][:-1]
        final = res["final_policy_alone"][name]
        rows.append([name, *(pct(e["success"]) for e in middle), *["–"] * (width - len(middle)),
                     f"{pct(final['deterministic']['success'])} / {pct(final['stochastic']['success'])}"])
    return markdown_table(head, rows)
