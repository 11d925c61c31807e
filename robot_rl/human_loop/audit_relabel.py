"""The learner's side of a reward audit: take back, in the replay, the rewards a person's answers rejected.

A learned reward the policy games keeps paying in the replay long after the operator said "no": the rows were
stored with the reward, and the learner samples them again and again. :class:`ReplayRelabeller` reads the audit
queue (:mod:`robot_rl.rewards.audit_queue`) of the run and corrects those rows:

- every answered question that says "not a success" about a step whose reward was paid (``audit.answers=queue``);
- every correction the actor sent after retraining its classifier (``relabels.jsonl``: earlier paid steps the
  retrained classifier no longer calls a success).

A row is found by its actor and its next observation on the small keys the question kept (the state), among the
rows whose reward says success (reward ``success_reward`` and ``terminated``): it gets ``failure_reward``, and since
its episode did end there, ``truncated`` instead of ``terminated`` (the critic bootstraps from it again). A "yes"
about a step that was withheld and ended its episode makes it a success. Corrections are idempotent and persist
with the replay (:mod:`robot_rl.replay.relabels`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from robot_rl.replay.persist import named_buffers
from robot_rl.rewards.audit_queue import AuditQueue

log = logging.getLogger(__name__)


class ReplayRelabeller:
    """Applies the audit queue's corrections to a learner's replay (``storage``: a buffer or a mixing sampler)."""

    def __init__(self, queue: AuditQueue, storage: Any, success_reward: float = 1.0, failure_reward: float = 0.0,
                 every_s: float = 2.0) -> None:
        self.queue = queue
        self.storage = storage
        self.success_reward, self.failure_reward = success_reward, failure_reward
        self.every_s = every_s
        self.rows_changed = 0
        """Replay rows whose reward was corrected."""
        self.corrections = 0
        """Corrections read (answers and the actor's records)."""
        self.unmatched = 0
        """Corrections that found no row to change (already corrected, evicted, or not paid)."""
        self._seen_answers: set[str] = set()
        self._next = 0.0

    def poll(self, force: bool = False) -> int:
        """Read what is new in the queue, correct the replay; returns the rows changed (at most every ``every_s``)."""
        now = time.monotonic()
        if not force and now < self._next:
            return 0
        self._next = now + self.every_s
        records: list[dict[str, Any]] = []
        answers = {k: a for k, a in self.queue.answers().items() if k not in self._seen_answers}
        if answers:
            for q in self.queue.questions():
                a = answers.get(q.id)
                if a is not None and a.success != q.paid:  # what was paid while waiting was wrong
                    records.append({"actor_id": q.actor_id, "key": q.key, "success": a.success})
            self._seen_answers.update(answers)
        records += self.queue.new_relabels()
        changed = sum(self.apply(r) for r in records)
        if records:
            log.info("reward audit: %d corrections read, %d replay rows changed (%d in all)", len(records), changed,
                     self.rows_changed)
        return changed

    def apply(self, record: dict[str, Any]) -> int:
        """Correct the rows one record names (``{"actor_id", "key", "success"}``); returns the rows changed."""
        self.corrections += 1
        key = {k: torch.tensor(v) for k, v in record["key"].items()}
        if not key:
            self.unmatched += 1
            return 0
        success = bool(record["success"])
        changed = 0
        for buf in named_buffers(self.storage).values():
            rows = buf.rows_reaching(int(record["actor_id"]), key)
            if not len(rows):
                continue
            reward, terminated, truncated = buf.outcomes(rows)
            paid = (reward == self.success_reward) & terminated
            # A withheld step that ended its episode becomes its success; one that did not is left alone (the
            # episode went on past it, and a terminal flag in its middle would cut it).
            rows = rows[truncated & ~paid] if success else rows[paid]
            n = len(rows)
            if not n:
                continue
            value = self.success_reward if success else self.failure_reward
            changed += buf.relabel_rows(rows, torch.full((n,), value), torch.full((n,), success),
                                        torch.full((n,), not success))
        self.unmatched += int(changed == 0)
        self.rows_changed += changed
        return changed
