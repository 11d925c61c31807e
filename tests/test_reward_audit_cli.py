"""`robot-rl reward audit RUN` as a person types it (or pipes it), and `robot-rl reward report RUN`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from waiting import wait_until

from robot_rl.cli.reward_audit import ReportArgs
from robot_rl.rewards.audit_queue import AuditQueue, Question


def _queue(run: Path, n: int = 3) -> AuditQueue:
    queue = AuditQueue(run / "audit_queue")
    for e in range(n):
        queue.ask(Question(f"a00-e{e:06d}-s0004", e, 4, key={"state": [float(e)]}, suspicion=2.5, probability=0.9),
                  {"image.front": np.full((8, 8, 3), 40 * e, np.uint8)})
    return queue


def _audit(run: Path, *flags: str) -> subprocess.Popen[str]:
    # SIGINT at its default in the child even when the suite runs in a background job (started with it ignored).
    return subprocess.Popen([sys.executable, "-m", "robot_rl.cli", "reward", "audit", str(run), "--show", "paths",
                             *flags], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.integration
def test_piped_answers_are_saved_and_a_skipped_question_waits(tmp_path: Path) -> None:
    queue = _queue(tmp_path)
    proc = _audit(tmp_path)
    out, _ = proc.communicate("y\nmaybe\nn\ns\n", timeout=120)
    assert proc.returncode == 0, out
    answers = queue.answers()
    assert {k: a.success for k, a in answers.items()} == {"a00-e000000-s0004": True, "a00-e000001-s0004": False}
    assert [q.id for q in queue.pending()] == ["a00-e000002-s0004"]
    assert "answer y, n or s" in out and "audit_queue/frames/a00-e000000-s0004_image.front.png" in out
    assert "2 answers saved, 1 skipped; 1 questions wait" in out


@pytest.mark.integration
def test_ctrl_c_keeps_every_answer_given(tmp_path: Path) -> None:
    queue = _queue(tmp_path)
    proc = _audit(tmp_path, "--watch")
    assert proc.stdin is not None
    proc.stdin.write("n\n")
    proc.stdin.flush()
    wait_until(lambda: queue.answers(), 60, "the first answer on disk", poll_s=0.05,
               seen=lambda: f"exit code {proc.poll()}")
    proc.send_signal(signal.SIGINT)  # in the middle of the second question
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "stopped: 1 answers saved, 2 questions still wait" in out
    assert {k: a.success for k, a in queue.answers().items()} == {"a00-e000000-s0004": False}


@pytest.mark.integration
def test_a_run_without_questions_gets_one_line_that_says_how_to_queue_them(tmp_path: Path) -> None:
    proc = _audit(tmp_path)
    out, _ = proc.communicate("", timeout=60)
    assert proc.returncode == 2
    assert out.strip().count("\n") == 0 and "audit.answers=queue" in out


def test_the_report_sets_learned_against_audited_and_task_success(tmp_path: Path) -> None:
    rows = [{"success": True, "task_success": False, "audit_asked": 1, "audit_rejected": 0},  # a "no" came later
            {"success": False, "task_success": False, "audit_asked": 1, "audit_rejected": 1},  # withheld at once
            {"success": True, "task_success": True},
            {"success": False, "task_success": False}]
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    queue = AuditQueue(tmp_path / "audit_queue")
    queue.ask(Question("a00-e000000-s0007", 0, 7, paid=True), {})
    queue.answer("a00-e000000-s0007", False)
    assert ReportArgs(tmp_path, window=2).run() == 0
    report = json.loads((tmp_path / "reward_report.json").read_text())
    totals = (report["learned"], report["audited"], report["task"], report["asked"], report["rejected"])
    assert totals == (3, 1, 1, 2, 2)
    assert [(w["learned"], w["audited"], w["task"]) for w in report["windows"]] == [(1.0, 0.0, 0.0), (0.5, 0.5, 0.5)]
    assert (tmp_path / "reward_report.png").stat().st_size > 1000
    assert ReportArgs(tmp_path / "nothing").run() == 2
