"""Rows whose reward was corrected after they were stored, kept beside a buffer's segment log (``relabels.json``).

A segment file is immutable (checksummed, chained): a reward corrected after its row reached the disk, because
an operator's later answer said the learned reward was wrong there (:mod:`robot_rl.human_loop.audit_relabel`),
cannot be written into it. The correction goes into this journal instead, one entry per absolute row number
(``reward``, ``terminated``, ``truncated``), committed atomically with every change, and
:meth:`~robot_rl.replay.buffer.ReplayBuffer.attach_log` applies it again over the reloaded rows: a resumed
learner never goes back to chasing a reward a person rejected. Entries of rows pruned from the log are dropped
at the next commit.
"""

from __future__ import annotations

import json
from pathlib import Path

from robot_rl.durable import commit_file

JOURNAL = "relabels.json"

Fix = tuple[float, bool, bool]
"""``(reward, terminated, truncated)`` of one row."""


def read_journal(directory: Path | str) -> dict[int, Fix]:
    """The corrections kept in ``directory`` (empty when there are none)."""
    path = Path(directory) / JOURNAL
    if not path.is_file():
        return {}
    rows = json.loads(path.read_text())["rows"]
    return {int(t): (float(r), bool(term), bool(trunc)) for t, r, term, trunc in rows}


def write_journal(directory: Path | str, fixes: dict[int, Fix], row_floor: int = 0) -> None:
    """Commit ``fixes`` (rows below ``row_floor``, gone from the log, are left out)."""
    rows = [[t, r, term, trunc] for t, (r, term, trunc) in sorted(fixes.items()) if t >= row_floor]
    commit_file(Path(directory) / JOURNAL, [json.dumps({"rows": rows}).encode()])
