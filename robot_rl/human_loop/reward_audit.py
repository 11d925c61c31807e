"""The deploy loop's side of a reward audit (``audit.enabled``): put a suspicious success to the operator.

When the success classifier fires, :class:`AuditDesk` asks :class:`~robot_rl.rewards.audit.RewardAudit` whether the
fire is suspicious; if so, it asks the person. With ``audit.answers=device`` a device that sees the task (the
simulated pick's scripted people) answers at once, and a person answers with the success or failure key while the
robot holds still, up to ``audit.answer_timeout_s``; a "no" withholds the reward and the episode goes on. With
``audit.answers=queue`` the reward is paid, the question and its frames go to the audit queue
(:mod:`robot_rl.rewards.audit_queue`) and the loop carries on; the answers given there with
`robot-rl reward audit RUN` are read back between steps and teach the classifier as the keys do.

The reward of a step paid before an answer said otherwise is corrected in the learner's replay (``audit.relabel``,
learn mode): a "no" read from the queue names its step, and each time the classifier's head is retrained the fires
it paid earlier are scored again, and those it no longer calls a success are sent as corrections too
(:mod:`robot_rl.human_loop.audit_relabel` applies both). Every question is a line in the run's
``reward_audit.jsonl``; the corrected classifier is written at the end of the run (``classifier_audited/``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.config import ConfigError
from robot_rl.hardware.teleop import AnswersRewardAudits, TeleopDevice
from robot_rl.human_loop.observation import SuccessJudge
from robot_rl.rewards.audit import AuditConfig, RewardAudit, Suspicion
from robot_rl.rewards.audit_queue import QUEUE_DIR, AuditQueue, Question, question_id

log = logging.getLogger(__name__)

AUDIT_LOG = "reward_audit.jsonl"
AUDITED_CLASSIFIER = "classifier_audited"
KEPT_FIRES = 5000
"""Paid fires remembered for rescoring after a retraining (their features: a few hundred kB)."""
KEY_MAX_VALUES = 1024
"""Observation keys of at most this many values name a step's row in the replay (the state; not the cameras)."""


def queue_dir(cfg: AuditConfig, run_dir: Path | None) -> Path:
    """Where the audit queue of a run lives (``audit.queue_dir``, else ``<run_dir|.>/audit_queue``)."""
    return Path(cfg.queue_dir) if cfg.queue_dir else (run_dir or Path(".")) / QUEUE_DIR


def row_key(seen: dict[str, Any]) -> dict[str, list[float]]:
    """The small keys of what the policy saw after a step (its row's ``next_obs``), as JSON lists."""
    return {k: np.asarray(v).reshape(-1).tolist() for k, v in seen.items() if np.asarray(v).size <= KEY_MAX_VALUES}


@dataclass(eq=False)
class PaidFire:
    """A fire whose reward was paid on a step of the policy's: rescored when the classifier is retrained."""

    feature: torch.Tensor
    key: dict[str, list[float]]
    episode: int
    step: int
    confirmed: bool = False
    """A person said it is a success: never taken back by a rescoring."""


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
                 announce: Any = None, seen: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
                 actor_id: int = 0, learning: bool = False) -> None:
        self.audit = audit
        self.judge = judge
        self.device = device
        self.hold = hold
        """``() -> None``: one control period with the robot held (feeds the watchdog) while a person answers."""
        self.announce = announce or (lambda text: text and print(text, flush=True))
        """``(text) -> None``: show the question to the person ("" when answered)."""
        self.seen = seen or (lambda obs: obs)
        """What the policy sees of an observation: the keys of the replay's rows."""
        self.actor_id = actor_id
        cfg = audit.cfg
        self.relabel = learning and cfg.relabel
        """Send corrections of paid rewards to the learner (learn mode, ``audit.relabel``)."""
        run_dir = audit.log_path.parent if audit.log_path is not None else None
        self.queue = (AuditQueue(queue_dir(cfg, run_dir)) if cfg.answers == "queue" or self.relabel else None)
        self.paid: deque[PaidFire] = deque(maxlen=KEPT_FIRES)
        self.relabelled = 0
        """Steps whose paid reward was sent to the learner to be taken back."""
        self._waiting: dict[str, tuple[torch.Tensor, Suspicion, bool, PaidFire, dict[str, Any]]] = {}
        self._retrains_seen = 0
        self._next_poll = 0.0
        self.episode_asked = 0
        self.episode_rejected = 0

    def confirm(self, obs: dict[str, np.ndarray], episode: int, step: int, by_person: bool = False) -> bool:
        """The classifier fired at ``obs``: pay the reward (True) or withhold it (False).

        Only what the policy did is audited: a fire after the person's own step is theirs to judge (they press
        success when it is one). After a "no", the episode's later fires are withheld without asking again: the
        person said the task is not done, and presses success when it is; one question per episode at most.
        """
        self.poll()
        if by_person:
            self.audit.counts.person_fires += 1
            return True
        if self.episode_rejected:
            self.audit.counts.withheld_unasked += 1
            return False
        images = {c: torch.as_tensor(obs[c])[None] for c in self.judge.cameras}
        verdict, suspicion, feature = self.audit.review(images)
        if verdict == "accept":
            self._paid(feature, obs, episode, step)
            return True
        if verdict == "withhold":
            return False
        self.episode_asked += 1
        where = {"episode": episode, "step": step, "probability": self.judge.probability}
        if self.queue is not None and self.audit.cfg.answers == "queue":
            self._enqueue(obs, feature, suspicion, where)
            return True
        answer = self._ask(suspicion.score)
        paid = self.audit.answer(feature, answer, suspicion, where)
        self.episode_rejected += int(answer is False)
        if paid:
            self._paid(feature, obs, episode, step).confirmed = answer is True
        return paid

    def _paid(self, feature: torch.Tensor, obs: dict[str, np.ndarray], episode: int, step: int) -> PaidFire:
        fire = PaidFire(feature, row_key(self.seen(obs)), episode, step)
        self.paid.append(fire)
        return fire

    def _enqueue(self, obs: dict[str, np.ndarray], feature: torch.Tensor, suspicion: Suspicion,
                 where: dict[str, Any]) -> None:
        """Pay now, ask the queue: the answer comes back through :meth:`poll`."""
        assert self.queue is not None
        fire = self._paid(feature, obs, where["episode"], where["step"])
        random = self.audit.asked_at_random
        q = Question(question_id(self.actor_id, where["episode"], where["step"]), where["episode"], where["step"],
                     self.actor_id, round(suspicion.score, 3), where["probability"],
                     "random" if random else "suspicious", key=fire.key)
        self.queue.ask(q, {c: np.asarray(obs[c]) for c in self.judge.cameras})
        self._waiting[q.id] = (feature, suspicion, random, fire, {**where, "id": q.id})

    def poll(self, every_s: float = 0.5) -> None:
        """Take the queue's new answers, and rescore the paid fires after a retraining (at most every ``every_s``)."""
        now = time.monotonic()
        if every_s > 0 and now < self._next_poll:
            return
        self._next_poll = now + every_s
        if self._waiting and self.queue is not None:
            answers = self.queue.answers()
            for qid in [q for q in self._waiting if q in answers]:
                feature, suspicion, random, fire, where = self._waiting.pop(qid)
                ok = answers[qid].success
                self.audit.answer(feature, ok, suspicion, where, random=random)
                fire.confirmed = ok
                if not ok:  # the learner reads the answer itself (the question names the row); not rescored again
                    self.paid.remove(fire)
                    self.relabelled += 1
        self.audit.wait(0.0)  # a retrained head that is ready is taken now
        if self.relabel and self.audit.counts.retrains != self._retrains_seen:
            self._retrains_seen = self.audit.counts.retrains
            self._rescore()

    def _rescore(self) -> None:
        """Send the paid fires the retrained classifier no longer calls a success to the learner's replay."""
        fires = [f for f in self.paid if not f.confirmed]
        if not fires or self.queue is None:
            return
        still = self.audit.decides(torch.stack([f.feature for f in fires]))
        dropped = [f for f, ok in zip(fires, still.tolist(), strict=True) if not ok]
        self.queue.add_relabels([{"actor_id": self.actor_id, "key": f.key, "success": False, "source": "rescored",
                                  "episode": f.episode, "step": f.step} for f in dropped])
        for f in dropped:
            self.paid.remove(f)
        self.relabelled += len(dropped)
        if dropped:
            log.info("reward audit: %d earlier paid steps are no success to the retrained classifier; their "
                     "rewards go back in the learner's replay", len(dropped))

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
        self.poll(every_s=0.0)
        out = {"audit_asked": self.episode_asked, "audit_rejected": self.episode_rejected}
        self.episode_asked = self.episode_rejected = 0
        return out

    def close(self) -> None:
        """Log the summary and write the corrected classifier next to the audit log (when anything was answered)."""
        self.audit.wait()
        self.poll(every_s=0.0)
        log.info("%s", self.audit.summary())
        if self._waiting:
            log.info("reward audit: %d questions still wait in %s (answer them with `robot-rl reward audit`; the "
                     "learner corrects its replay from the answers)", len(self._waiting),
                     self.queue.directory if self.queue is not None else "")
        if self.audit.labels:
            where = self.audit.log_path.parent if self.audit.log_path is not None else Path(".")
            out = self.audit.save(where / AUDITED_CLASSIFIER)
            log.info("reward audit: corrected classifier written to %s", out)
