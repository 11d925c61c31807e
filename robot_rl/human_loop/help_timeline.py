"""The request / hold / takeover timeline of a deploy run with ``help.enabled``, drawn from ``help_scores.jsonl``.

    python -m robot_rl.human_loop.help_timeline runs/help/help_scores.jsonl timeline.png [--episodes 3]

The top panel is the gate's urgency (the largest standardised score) against its threshold, the bottom one who
had the robot at each step: the policy, the robot asking and holding (waiting for the operator), or the human
(the answer to a request, or a takeover nobody asked for). Needs matplotlib (``pip install 'robot-rl[viz]'``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any


def read_steps(path: Path, episodes: int | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(steps, events)`` of a score log, the first ``episodes`` episodes (all with None)."""
    steps: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if episodes is not None and row["episode"] >= episodes:
            break
        (events if "event" in row else steps).append(row)
    return steps, events


def plot_timeline(path: Path, out: Path, episodes: int | None = 3) -> Path:
    """Draw the first ``episodes`` episodes of the score log ``path`` into ``out`` (PNG); returns ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, events = read_steps(path, episodes)
    if not steps:
        raise ValueError(f"{path} has no steps (was the run started with help.enabled=true?)")
    x = list(range(len(steps)))
    urgency = [float(s["urgency"]) if isinstance(s["urgency"], (int, float)) else math.nan for s in steps]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 4.2), sharex=True, height_ratios=(2, 1))
    top.plot(x, urgency, lw=1, color="tab:blue", label="urgency (largest standardised score)")
    top.plot(x, [s["threshold"] for s in steps], lw=1.5, color="tab:red", label="threshold (tracks help.budget)")
    top.set_ylabel("standard deviations")
    # A score that was constant and then moved is millions of deviations away: keep the threshold's scale.
    top.set_ylim(-5.0, max(8.0, 2.0 * max(s["threshold"] for s in steps)))
    top.legend(fontsize=8, loc="upper right")
    state = [2 if s["human"] else (1 if s["ask"] else 0) for s in steps]
    colors = {0: "tab:green", 1: "gold", 2: "tab:orange"}
    bottom.bar(x, [1] * len(x), width=1.0, color=[colors[v] for v in state], edgecolor="none")
    starts = [i for i in range(1, len(steps)) if steps[i]["episode"] != steps[i - 1]["episode"]]
    for ax in (top, bottom):
        for i in starts:
            ax.axvline(i, color="grey", lw=0.8, ls=":")
    asks = [i for i, s in enumerate(steps) if s["ask"] and (i == 0 or not steps[i - 1]["ask"])]
    for i in asks:
        top.axvline(i, color="gold", lw=1.2)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in (0, 1, 2)]
    bottom.legend(handles, ["policy acts", "robot asks, holds", "human acts"], fontsize=8, ncol=3,
                  loc="upper right")
    bottom.set_yticks([])
    bottom.set_xlabel(f"control step (episodes separated by dotted lines; {len(events)} request events)")
    fig.suptitle("The robot asks for help: urgency, requests and takeovers")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    """``python -m robot_rl.human_loop.help_timeline SCORES PNG [--episodes N]``."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scores", type=Path, help="help_scores.jsonl of a deploy run (in its run directory)")
    p.add_argument("out", type=Path, help="the PNG to write")
    p.add_argument("--episodes", type=int, default=3, help="how many episodes from the start (0: all)")
    a = p.parse_args()
    if not a.scores.exists():
        raise SystemExit(f"{a.scores} does not exist: deploy writes it to its --run-dir (or ./) with help.enabled=true")
    print(plot_timeline(a.scores, a.out, a.episodes or None))


if __name__ == "__main__":
    main()
