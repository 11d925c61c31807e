"""The learned reward's success against the audited success (and the task's) over a run: JSON and a plot.

A gamed reward shows as a gap that opens between the curves: the learned reward's success climbs, the success
left once the operator's "no" answers are taken out (and the task's own, on a robot that knows it) does not.
Per episode, from the episode log (`robot-rl deploy --episode-log`) and the audit queue's answers:

- **learned**: the classifier called the episode a success (its reward was paid, or a "no" withheld it);
- **audited**: the reward was paid and no answer, at once or later through the queue, said it was not a success
  (fires nobody was asked about count as successes: this is an upper bound, as tight as the questions are many);
- **task**: the task's own verdict, where the robot knows it (``task_success``; a simulated arm);
- **asked** / **rejected**: the questions about it, and the "no" answers.

`robot-rl reward report RUN` writes ``reward_report.json`` and ``reward_report.png``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from robot_rl.rewards.audit_queue import AuditQueue

EPISODE_LOG = "episodes.jsonl"


@dataclass
class ReportWindow:
    """The rates over consecutive episodes ``[first, last]``."""

    first: int
    last: int
    learned: float
    audited: float
    task: float | None
    asked: int
    rejected: int


@dataclass
class RewardReport:
    """One run's learned vs audited (vs task) success, per window of episodes."""

    episodes: int
    window: int
    windows: list[ReportWindow] = field(default_factory=list)
    learned: int = 0
    audited: int = 0
    task: int | None = None
    task_known: int = 0
    asked: int = 0
    rejected: int = 0

    def save(self, path: Path | str) -> None:
        """Write the report as JSON."""
        Path(path).write_text(json.dumps(asdict(self), indent=1) + "\n")

    def summary(self) -> str:
        """One line: the totals."""
        task = (f"; the task: {self.task} of {self.task_known}" if self.task is not None else "")
        return (f"{self.episodes} episodes: learned-reward successes {self.learned}, left after the audit "
                f"{self.audited} ({self.asked} questions, {self.rejected} answered 'not a success'){task}")


def build_report(records: list[dict[str, Any]], late_no: set[int] | None = None, window: int = 20) -> RewardReport:
    """The report of episode records (the episode log's dicts, in order); ``late_no``: episodes a queued "no" hit."""
    late_no = late_no or set()
    rows: list[dict[str, Any]] = []
    for i, r in enumerate(records):
        rejected = int(r.get("audit_rejected", 0)) + int(i in late_no)
        paid = bool(r["success"])
        rows.append({"learned": paid or rejected > 0, "audited": paid and i not in late_no,
                     "task": r.get("task_success"), "asked": int(r.get("audit_asked", 0)), "rejected": rejected})
    report = RewardReport(len(rows), window)
    for lo in range(0, len(rows), max(1, window)):
        part = rows[lo:lo + window]
        known = [x["task"] for x in part if x["task"] is not None]
        report.windows.append(ReportWindow(
            lo, lo + len(part) - 1, sum(x["learned"] for x in part) / len(part),
            sum(x["audited"] for x in part) / len(part), sum(map(bool, known)) / len(known) if known else None,
            sum(x["asked"] for x in part), sum(x["rejected"] for x in part)))
    known_all = [x["task"] for x in rows if x["task"] is not None]
    report.learned, report.audited = sum(x["learned"] for x in rows), sum(x["audited"] for x in rows)
    report.task, report.task_known = (sum(map(bool, known_all)) if known_all else None), len(known_all)
    report.asked, report.rejected = sum(x["asked"] for x in rows), sum(x["rejected"] for x in rows)
    return report


def queued_rejections(queue: AuditQueue, actor_id: int | None = None) -> set[int]:
    """Episodes whose paid success a queued question was later answered "no" about."""
    answers = queue.answers()
    return {q.episode for q in queue.questions() if q.paid and q.id in answers and not answers[q.id].success
            and (actor_id is None or q.actor_id == actor_id)}


def load_run_report(run: Path | str, episode_log: Path | None = None, window: int = 20) -> RewardReport:
    """The report of the run directory ``run`` (its episode log, and its audit queue when there is one)."""
    path = Path(episode_log) if episode_log is not None else Path(run) / EPISODE_LOG
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run the actor with --episode-log {path} (or pass --episode-log)")
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return build_report(records, queued_rejections(AuditQueue.of_run(run)), window)


def plot_report(report: RewardReport, out: Path | str, title: str = "learned reward vs audited success") -> Path:
    """Draw the curves (success rates per window, and the questions asked) to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [w.last + 1 for w in report.windows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    top.plot(x, [w.learned for w in report.windows], "o-", label="learned reward")
    top.plot(x, [w.audited for w in report.windows], "s-", label="after the audit")
    if any(w.task is not None for w in report.windows):
        top.plot(x, [w.task if w.task is not None else float("nan") for w in report.windows], "^-", label="task")
    top.set_ylabel(f"success rate (per {report.window} episodes)")
    top.set_ylim(-0.05, 1.05)
    top.legend()
    top.set_title(title)
    bottom.bar(x, [w.asked for w in report.windows], width=max(1, report.window * 0.6), label="asked")
    bottom.bar(x, [w.rejected for w in report.windows], width=max(1, report.window * 0.6), label="'no'")
    bottom.set_ylabel("questions")
    bottom.set_xlabel("episodes")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return Path(out)
