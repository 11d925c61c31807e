"""The deploy loop's side of a reward audit (``audit.enabled``): put a suspicious success to the operator.

When the success classifier fires, :class:`AuditDesk` asks :class:`~robot_rl.rewards.audit.RewardAudit` whether the
fire is suspicious; if so, it asks the person: a device that sees the task (the simulated pick's scripted people)
answers at once; a person answers with the success or failure key while the robot holds still, up to
``audit.answer_timeout_s``. A "no" withholds the reward and the episode goes on. Every question is a line in the
run's ``reward_audit.jsonl``; the corrected classifier is written at the end of the run (``classifier_audited/``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.config import ConfigError
from robot_rl.hardware.teleop import AnswersRewardAudits, TeleopDevice
from robot_rl.human_loop.observation import SuccessJudge
from robot_rl.rewards.audit import AuditConfig, RewardAudit

log = logging.getLogger(__name__)

AUDIT_LOG = "reward_audit.jsonl"
AUDITED_CLASSIFIER = "classifier_audited"


def load_audit(cfg: AuditConfig, judge: SuccessJudge | None, classifier: str | None,
               run_dir: Path | None) -> RewardAudit | None:
    """The audit of ``judge``'s classifier, or None when ``audit.enabled`` is off.

    Raises ``ValueError`` (a served classifier, no classifier) or ``FileNotFoundError`` (no ``anchors.pt``) before
    anything connects.
    """
    if not cfg.enabled:
        return None
    if judge is None or not classifier:
        raise ConfigError("audit.enabled=true audits a success classifier: set reward_source=classifier "
                          "classifier=DIR")
    if classifier.startswith(("tcp://", "ipc://")):
        raise ConfigError("audit.enabled=true needs the classifier's directory (classifier=DIR): a served classifier "
                          f"({classifier}) cannot be retrained from the actor")
    where = run_dir or Path(".")
    return RewardAudit.from_dir(judge.model, classifier, cfg, log_path=where / AUDIT_LOG)


class AuditDesk:
    """Asks about the classifier's suspicious fires for one deploy loop."""

    def __init__(self, audit: RewardAudit, judge: SuccessJudge, device: TeleopDevice, hold: Any,
                 announce: Any = None) -> None:
        self.audit = audit
        self.judge = judge
        self.device = device
        self.hold = hold
        """``() -> None``: one control period with the robot held (feeds the watchdog) while a person answers."""
        self.announce = announce or (lambda text: text and print(text, flush=True))
        """``(text) -> None``: show the question to the person ("" when answered)."""
        self.episode_asked = 0
        self.episode_rejected = 0

    def confirm(self, obs: dict[str, np.ndarray], episode: int, step: int, by_person: bool = False) -> bool:
        """The classifier fired at ``obs``: pay the reward (True) or withhold it (False).

        Only what the policy did is audited: a fire after the person's own step is theirs to judge (they press
        success when it is one). After a "no", the episode's later fires are withheld without asking again: the
        person said the task is not done, and presses success when it is; one question per episode at most.
        """
        if by_person:
            self.audit.counts.person_fires += 1
            return True
        if self.episode_rejected:
            self.audit.counts.withheld_unasked += 1
            return False
        images = {c: torch.as_tensor(obs[c])[None] for c in self.judge.cameras}
        verdict, suspicion, feature = self.audit.review(images)
        if verdict == "accept":
            return True
        if verdict == "withhold":
            return False
        self.episode_asked += 1
        answer = self._ask(suspicion.score)
        paid = self.audit.answer(feature, answer, suspicion,
                                 {"episode": episode, "step": step, "probability": self.judge.probability})
        self.episode_rejected += int(answer is False)
        return paid

    def _ask(self, score: float) -> bool | None:
        if isinstance(self.device, AnswersRewardAudits):
            seen = self.device.answer_reward_audit()
            if seen is not None:  # a script that cannot tell answers with keys, or not at all, like a person
                return seen
        self.announce(f"reward audit: the classifier says SUCCESS (suspicion {score:.1f}). Is the task done? "
                      f"success key = yes, failure key = no ({self.audit.cfg.answer_timeout_s:.0f}s)")
        deadline = time.monotonic() + self.audit.cfg.answer_timeout_s
        try:
            while time.monotonic() < deadline:
                reading = self.device.read()
                events = reading.events if reading is not None else ()
                if "success" in events or "failure" in events:
                    return "success" in events
                self.hold()
            return None
        finally:
            self.announce("")

    def end_episode(self) -> dict[str, int]:
        """The episode's questions and "no" answers (for its record), reset for the next."""
        out = {"audit_asked": self.episode_asked, "audit_rejected": self.episode_rejected}
        self.episode_asked = self.episode_rejected = 0
        return out

    def close(self) -> None:
        """Log the summary and write the corrected classifier next to the audit log (when anything was answered)."""
        log.info("%s", self.audit.summary())
        if self.audit.labels:
            where = self.audit.log_path.parent if self.audit.log_path is not None else Path(".")
            out = self.audit.save(where / AUDITED_CLASSIFIER)
            log.info("reward audit: corrected classifier written to %s", out)
