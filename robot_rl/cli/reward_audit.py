"""`robot-rl reward audit RUN` (answer the run's queued questions) and `robot-rl reward report RUN` (its curves)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from robot_rl.cli.base import Command

ANSWERS = {"y": True, "yes": True, "n": False, "no": False}


@dataclass
class AuditArgs(Command):
    """Answer the questions a run's reward audit queued: is the task done in this frame? (y / n / s to skip).

    The run (`robot-rl deploy --mode learn ... audit.enabled=true audit.answers=queue`) pays the learned reward at
    once and writes each suspicious success, with its camera frames as PNG files, to RUN/audit_queue/. This shows
    each waiting question, oldest first, with the frames' paths (and the frames in a window when a display is
    there), and records each answer the moment it is given; the running actor and learner pick them up (a "no"
    retrains the classifier and takes the reward back in the replay). Ctrl-C or the end of the input stops it;
    every answer given is kept. Answers can be piped, one per line: `robot-rl reward audit runs/x < answers.txt`.
    """

    directory: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="RUN")]]
    """The run directory (or its audit_queue/ directory, or the directory given as audit.queue_dir)."""
    watch: bool = False
    """After the last waiting question, wait for new ones (until Ctrl-C or the end of the input)."""
    show: Literal["auto", "window", "paths"] = "auto"
    """window: show the frames with OpenCV; paths: print their paths only; auto: a window when a display is set."""
    by: str = "person"
    """Who answers (kept with each answer)."""
    poll_s: float = 1.0
    """With --watch: how often to look for new questions (s)."""

    def run(self) -> int:
        """Ask each waiting question; 0 when done or stopped (Ctrl-C, end of input: answers kept), 2: no queue."""
        from robot_rl.rewards.audit_queue import AuditQueue

        queue = AuditQueue.of_run(self.directory)
        if not (queue.directory / "questions").is_dir() and not self.watch:
            print(f"robot-rl reward audit: error: {self.directory} has no audit questions "
                  f"({queue.directory}/questions/ is missing): run the actor with audit.enabled=true "
                  "audit.answers=queue", file=sys.stderr)
            return 2
        window = _window(self.show)
        answered = skipped = 0
        asked: set[str] = set()
        try:
            while True:
                waiting = [q for q in queue.pending() if q.id not in asked]
                if not waiting:
                    if not self.watch:
                        break
                    time.sleep(self.poll_s)
                    continue
                print(f"{len(waiting)} questions wait in {queue.directory}: y = the task is done, n = it is not, "
                      "s = skip for now", flush=True)
                for i, q in enumerate(waiting, 1):
                    asked.add(q.id)
                    frames = [str(queue.directory / f) for f in q.frames.values()]
                    p = f", classifier p={q.probability:.2f}" if q.probability is not None else ""
                    print(f"[{i}/{len(waiting)}] {q.id}: episode {q.episode}, step {q.step}, suspicion "
                          f"{q.suspicion:.2f}{p}\n  frames: {' '.join(frames) or '(none)'}", flush=True)
                    if window is not None:
                        window(frames)
                    choice = _ask()
                    if choice is None:
                        skipped += 1
                        continue
                    queue.answer(q.id, choice, self.by)
                    answered += 1
        except KeyboardInterrupt:
            print(f"\nstopped: {answered} answers saved, {len(queue.pending())} questions still wait", flush=True)
            return 0
        except EOFError:  # the end of piped answers
            pass
        print(f"{answered} answers saved, {skipped} skipped; {len(queue.pending())} questions wait", flush=True)
        return 0

    def resolved_config(self) -> None:
        """No config: options only."""
        return None


def _ask() -> bool | None:
    """One answer from stdin: True / False, None to skip; EOFError at the end of the input."""
    while True:
        reply = input("is the task done? [y/n/s] ").strip().lower()
        if reply in ANSWERS:
            return ANSWERS[reply]
        if reply in ("s", "skip", ""):
            return None
        print("answer y, n or s", flush=True)


def _window(show: str) -> Callable[[list[str]], None] | None:
    """A function that shows frames in an OpenCV window, or None (paths only)."""
    if show == "paths" or (show == "auto" and not os.environ.get("DISPLAY")):
        return None
    try:
        import cv2
    except ImportError:
        print("no OpenCV: showing the frames' paths only (pip install opencv-python for a window)", flush=True)
        return None

    def draw(paths: list[str]) -> None:
        read = [cv2.imread(p) for p in paths]
        images = [cv2.resize(im, (256, 256), interpolation=cv2.INTER_NEAREST) for im in read if im is not None]
        if images:
            cv2.imshow("robot-rl reward audit", cv2.hconcat(images))
            cv2.waitKey(1)

    return draw


@dataclass
class ReportArgs(Command):
    """Learned-reward success against audited success (and the task's, where the robot knows it) over a run.

    Reads the run's episode log (`robot-rl deploy --episode-log RUN/episodes.jsonl`), its reward_audit.jsonl and
    its audit queue's answers; writes RUN/reward_report.json and RUN/reward_report.png (per window of episodes:
    the learned reward's success rate, the rate left once the audit's "no" answers are taken out, the task's own
    rate, and the questions asked).
    """

    directory: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="RUN")]]
    """The run directory."""
    episode_log: Path | None = None
    """The episode log (default RUN/episodes.jsonl)."""
    window: int = 20
    """Episodes per point of the curves."""
    out: Path | None = None
    """Where to write reward_report.json and .png (default RUN)."""

    def run(self) -> int:
        """Write the report; 2 when the run has no episode log."""
        from robot_rl.human_loop.audit_report import load_run_report, plot_report

        try:
            report = load_run_report(self.directory, self.episode_log, self.window)
        except FileNotFoundError as e:
            print(f"robot-rl reward report: error: {e}", file=sys.stderr)
            return 2
        out = self.out or self.directory
        out.mkdir(parents=True, exist_ok=True)
        report.save(out / "reward_report.json")
        plot_report(report, out / "reward_report.png")
        print(report.summary() + f"\nwritten to {out / 'reward_report.json'} and {out / 'reward_report.png'}",
              flush=True)
        return 0

    def resolved_config(self) -> None:
        """No config: options only."""
        return None
