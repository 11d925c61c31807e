"""Auditing a learned success reward while a policy learns on it: ask about the suspicious fires, learn from answers.

A policy trained on a success classifier looks for frames the classifier pays for; where the task is not done
there, it learns the classifier's mistake (reward hacking) and the logged success climbs while the robot fails.
On sim_so101's pick, a policy learned to raise the empty gripper to where demonstrations lift the cube: its
classifier fired on all 17 such frames of 20 evaluation episodes, none a success.

Those frames look unlike the classifier's training successes, and that is measurable at the moment it fires:

- **novelty**: the distance, in the classifier's own feature space, from the frame to the nearest training
  success, over the 95th percentile of that distance among the training successes themselves (each measured to
  the successes of *other* episodes). Above 1: farther from every success it learned than true successes are.
  (The 17 frames above: 3.2-5.2; training successes: median 0.35.)
- **disagreement**: a small ensemble of heads, each trained from scratch on a bootstrap of the training features,
  and the fraction of them that call the frame a failure (probability below 0.5; 0.4 = 2 of 5 heads).

``suspicion = max(novelty, disagreement / 0.4)``. A fire at or above the bar (``min_suspicion`` at first) is put
to the operator as a yes/no question, within a budget of ``budget`` labels; each "yes" raises the bar a little and
each "no" lowers it (``bar_step``), so the questions follow where the answers are "no". A "no" withholds the
reward (the episode goes on) and becomes a negative; a "yes" a positive; with each answer the classifier's head
(its encoder fixed: the answers are few) is retrained on the training features plus the answers, weighted up, in a
background thread, and the ensemble with it. Until the retrained head lands, a fire nearer an answered "no" than
the novelty scale is withheld without asking again. On the same run, one "no" made the retrained head stop firing
on 8 held-out such frames while keeping recall 0.99 on the training successes.

The features come from the classifier directory's ``anchors.pt``, which `robot-rl reward train-classifier`
writes; the corrected classifier is saved with :meth:`RewardAudit.save` (the run's ``classifier_audited/``).
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from robot_rl.core.config import ConfigError

log = logging.getLogger(__name__)

ANCHORS_FILE = "anchors.pt"
DISAGREEMENT_SCALE = 0.4
"""Disagreement that counts as suspicion 1: two heads of five decide against the classifier."""


@dataclass
class AuditConfig:
    """Ask the operator about suspicious fires of the success classifier (``audit.enabled=true``)."""

    enabled: bool = False
    """Audit the classifier's fires (needs ``reward_source=classifier`` and a device that answers: the simulated
    pick's scripted people, or a person with the success/failure keys)."""
    budget: int = 50
    """Questions at most, over the run (a fire past the budget is taken as it is, and counted)."""
    min_suspicion: float = 1.0
    """Ask about a fire whose suspicion is at least this (1.0: as novel as the 5 % most novel training successes,
    or two of five heads disagree); 0 asks about every fire. The bar adapts (``bar_step``) from here."""
    bar_step: float = 1.15
    """Each "yes" (a question that found nothing) raises the bar by this factor, each "no" lowers it by the same,
    never below ``min_suspicion``: questions go where the answers are "no", and the budget lasts."""
    random_rate: float = 0.0
    """Also ask about this fraction of the unsuspicious fires, chosen at random (within the budget): their answers
    estimate the classifier's precision on the policy's own frames, which neither its held-out split nor the
    suspicious questions measure (the summary gives it), and they teach the head as the others do."""
    follow_rejections: int = 10
    """Ask about unsuspicious fires at the rate the last this-many answers were "no" (with two "yes" of prior; 0:
    off; ``random_rate`` is the floor): a classifier often wrong on the policy's frames, also where they look
    familiar, is asked about more, and its random answers bring the rate down again once it is right. On
    sim_so101, 15 of seed 1's 21 suspicious questions were answered "no" while the bar stayed at its floor."""
    heads: int = 5
    """Ensemble heads for the disagreement (0: novelty alone)."""
    label_weight: float = 20.0
    """Weight of each answered frame against one training frame when the head is retrained."""
    retrain_steps: int = 300
    """Adam steps per retraining of the head (batches of 256 features; with the 5 ensemble heads, 1.5 s of one
    core on the SO-101 classifier)."""
    answer_timeout_s: float = 10.0
    """A person's answer is waited on this long, the robot held; no answer: the fire is taken as it is."""
    seed: int = 0
    """Seed of the ensemble's bootstraps and the retraining batches."""
    answers: Literal["device", "queue"] = "device"
    """device: the robot holds while the person answers with the success/failure keys (a scripted person at once);
    queue: the reward is paid and the question (its frames as PNG) written to the audit queue, for a person to
    answer whenever they like with `robot-rl reward audit RUN`; the run reads the answers back."""
    queue_dir: str = ""
    """The audit queue's directory (default: ``<run-dir>/audit_queue``, or ``./audit_queue`` without --run-dir).
    The learner reads the replay corrections from it too: set it on both when their run directories differ."""
    past_budget: Literal["pay", "withhold"] = "pay"
    """A suspicious fire once the budget is spent: pay it (the classifier trusted) or withhold it (only the
    unsuspicious fires pay from then on). On a planted hack on sim_arm the suspicion kept flagging the hack after
    the 50 questions (396 suspicious fires past the budget in one run), and paying them taught the hack back."""
    relabel: bool = True
    """Correct the replay after each answer: the step a "no" is about, and the earlier paid steps the retrained
    classifier no longer calls a success, lose their reward (and their terminal flag) in the learner's replay."""

    def __post_init__(self) -> None:
        if self.budget < 0 or self.heads < 0 or self.retrain_steps < 1 or self.follow_rejections < 0:
            raise ConfigError("audit.budget, audit.heads and audit.follow_rejections must be >= 0, "
                              "audit.retrain_steps >= 1")
        if not 0.0 <= self.random_rate <= 1.0:
            raise ConfigError("audit.random_rate must be in [0, 1]")
        if self.min_suspicion < 0 or self.label_weight <= 0 or self.answer_timeout_s <= 0 or self.bar_step < 1:
            raise ConfigError("audit.min_suspicion must be >= 0, audit.label_weight and answer_timeout_s > 0, "
                             "audit.bar_step >= 1")


@dataclass
class Suspicion:
    """Why a fire is (or is not) suspicious."""

    novelty: float
    disagreement: float

    @property
    def score(self) -> float:
        """``max(novelty, disagreement / 0.4)``."""
        return max(self.novelty, self.disagreement / DISAGREEMENT_SCALE)


@dataclass
class AuditCounts:
    """What the audit did over the run."""

    fires: int = 0
    """Frames the classifier called a success after a step of the policy's."""
    person_fires: int = 0
    """Fires after a step of the person's (not audited: the person judges their own work)."""
    asked: int = 0
    """Of those, put to the operator."""
    rejected: int = 0
    """Answered "not a success" (the reward withheld)."""
    withheld_unasked: int = 0
    """Withheld without a question: later in an episode answered "no", or near an answered "no" while the
    retrained head was on its way."""
    unanswered: int = 0
    """Questions nobody answered in time (taken as they were)."""
    over_budget_suspicious: int = 0
    """Suspicious fires past the budget (taken as they were)."""
    retrains: int = 0
    """Times the head was retrained and swapped in."""
    random_asked: int = 0
    """Questions about unsuspicious fires chosen at random (``random_rate``)."""
    random_rejected: int = 0
    """Of those, answered "not a success": ``1 - random_rejected / random_asked`` estimates the precision."""


@dataclass
class Anchors:
    """The classifier's training frames in its feature space (``anchors.pt``)."""

    features: torch.Tensor
    label: torch.Tensor
    episode: torch.Tensor

    @classmethod
    def load(cls, model_dir: Path | str) -> Anchors:
        """The anchors of the classifier directory ``model_dir``."""
        path = Path(model_dir) / ANCHORS_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"{model_dir} has no {ANCHORS_FILE} (a classifier trained before audits existed): retrain it with "
                "`robot-rl reward train-classifier DATA --out DIR` to audit its rewards")
        data = torch.load(path, map_location="cpu", weights_only=True)
        return cls(data["features"].float(), data["label"].bool(), data["episode"].long())


def save_anchors(model: Any, frames: list[Any], out: Path | str, batch: int = 256) -> Path:
    """Write ``out/anchors.pt``: ``model``'s encoder features of labelled frame sets (episode ids kept apart)."""
    feats, labels, episodes, offset = [], [], [], 0
    model.eval()
    with torch.no_grad():
        for f in frames:
            for i in range(0, len(f), batch):
                feats.append(model.encoder({k: torch.from_numpy(v[i:i + batch]) for k, v in f.images.items()}))
            labels.append(torch.from_numpy(f.label))
            episodes.append(torch.from_numpy(f.episode.astype(np.int64)) + offset)
            offset += int(f.episode.max()) + 1 if len(f) else 0
    path = Path(out) / ANCHORS_FILE
    torch.save({"features": torch.cat(feats).half(), "label": torch.cat(labels), "episode": torch.cat(episodes)},
               path)
    return path


def novelty_scale(features: torch.Tensor, episode: torch.Tensor) -> float:
    """The 95th percentile of each success's distance to the nearest success of another episode."""
    d = torch.cdist(features, features)
    d[episode[:, None] == episode[None, :]] = float("inf")
    nearest = d.min(1).values
    nearest = nearest[torch.isfinite(nearest)]
    return max(float(nearest.quantile(0.95)) if len(nearest) else 1.0, 1e-6)


class RewardAudit:
    """Audits one classifier (a :class:`~robot_rl.rewards.classifier.SuccessClassifier`) during a run.

    :meth:`review` takes a frame the classifier fired on and says whether to ask; :meth:`answer` records the
    operator's answer. Thread-safe against its own retraining thread only: call both from the control loop.
    """

    def __init__(self, model: Any, anchors: Anchors, cfg: AuditConfig, log_path: Path | None = None,
                 background: bool = True) -> None:
        self.model = model
        self.background = background
        """Retrain on a thread of its own (the control loop's period is never stretched); False: at once."""
        self.cfg = cfg
        self.anchors = anchors
        self.counts = AuditCounts()
        self.log_path = log_path
        self.labels: list[tuple[torch.Tensor, bool]] = []
        self.bar = cfg.min_suspicion
        self._random = False  # the question in flight was a random one (``random_rate``)
        self._ask_rng = np.random.default_rng(cfg.seed + 1)  # apart from the retraining thread's generator
        """The suspicion a fire needs to be asked about now (see ``AuditConfig.bar_step``)."""
        pos = anchors.label
        self.scale = novelty_scale(anchors.features[pos], anchors.episode[pos]) if pos.any() else 1.0
        self._positives = anchors.features[pos]
        self._rng = torch.Generator().manual_seed(cfg.seed)
        self._lock = threading.Lock()
        self._pending: tuple[nn.Module, list[nn.Module]] | None = None
        self._thread: threading.Thread | None = None
        self._rejected_since_swap: list[torch.Tensor] = []
        self.heads = self._fit_heads(self._training_set()) if cfg.heads else []

    @classmethod
    def from_dir(cls, model: Any, model_dir: Path | str, cfg: AuditConfig, log_path: Path | None = None,
                 background: bool = True) -> RewardAudit:
        """The audit of the classifier loaded from ``model_dir`` (reads its ``anchors.pt``)."""
        return cls(model, Anchors.load(model_dir), cfg, log_path, background)

    # ---- suspicion ------------------------------------------------------------------------------

    @torch.no_grad()
    def features(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[D]`` features of one frame (``{camera: [1, H, W, C]}``)."""
        return self.model.encoder(images)[0].float()

    @torch.no_grad()
    def suspicion(self, feature: torch.Tensor) -> Suspicion:
        """The novelty and the ensemble's disagreement at one frame's features."""
        novelty = (float(torch.cdist(feature[None], self._positives).min()) / self.scale
                   if len(self._positives) else float("inf"))
        if not self.heads:
            return Suspicion(novelty, 0.0)
        # Each head at its own boundary (0.5): the heads are trained without the classifier's class weighting,
        # so its calibrated threshold does not apply to them.
        failures = [float(torch.sigmoid(h(feature[None]))[0, 0]) < 0.5 for h in self.heads]
        return Suspicion(novelty, sum(failures) / len(failures))

    # ---- the loop's calls -----------------------------------------------------------------------

    def review(self, images: dict[str, torch.Tensor]) -> tuple[str, Suspicion, torch.Tensor]:
        """A fire at ``images``: ``ask``, ``accept`` or ``withhold`` (near an answered "no"), with why."""
        self._swap_if_ready()
        self.counts.fires += 1
        feat = self.features(images)
        s = self.suspicion(feat)
        if self._rejected_since_swap and float(
                torch.cdist(feat[None], torch.stack(self._rejected_since_swap)).min()) / self.scale < 1.0:
            self.counts.withheld_unasked += 1
            return "withhold", s, feat
        self._random = False
        if s.score < self.bar:
            if self.counts.asked >= self.cfg.budget or self._ask_rng.random() >= self.random_rate:
                return "accept", s, feat
            self._random = True  # an unbiased sample of the fires the classifier is sure of
        elif self.counts.asked >= self.cfg.budget:
            self.counts.over_budget_suspicious += 1
            return ("withhold" if self.cfg.past_budget == "withhold" else "accept"), s, feat
        self.counts.asked += 1
        return "ask", s, feat

    @property
    def asked_at_random(self) -> bool:
        """The last fire :meth:`review` said to ask about was a random one (``random_rate``), not a suspicious one."""
        return self._random

    @property
    def random_rate(self) -> float:
        """The chance of asking about an unsuspicious fire now (``random_rate``, ``follow_rejections``)."""
        recent = [ok for _, ok in self.labels[-self.cfg.follow_rejections:]] if self.cfg.follow_rejections else []
        # Two "yes" answers of prior: one "no" alone does not put every fire to the person.
        return max(self.cfg.random_rate, sum(not ok for ok in recent) / (len(recent) + 2))

    def answer(self, feature: torch.Tensor, success: bool | None, suspicion: Suspicion,
               where: dict[str, Any] | None = None, random: bool | None = None) -> bool:
        """Record the operator's answer about a fire (None: nobody answered); returns whether to pay the reward.

        ``random``: the question was a random one (``random_rate``); default: the last fire reviewed was (an
        answer read from the queue later says so itself).
        """
        if random is not None:
            self._random = random
        self._log({**(where or {}), "novelty": round(suspicion.novelty, 3),
                   "disagreement": round(suspicion.disagreement, 3), "bar": round(self.bar, 3),
                   "kind": "random" if self._random else "suspicious", "answer": success,
                   "time": round(time.time(), 3)})
        if success is None:
            self.counts.unanswered += 1
            return True
        if self._random:  # a sample of the fires below the bar: it says nothing about where the bar should be
            self.counts.random_asked += 1
            self.counts.random_rejected += int(not success)
        else:
            step = self.cfg.bar_step if success else 1.0 / self.cfg.bar_step
            self.bar = max(self.cfg.min_suspicion, self.bar * step)
        if not success:
            self.counts.rejected += 1
            self._rejected_since_swap.append(feature)
        self.labels.append((feature, success))
        self._retrain()
        return success

    # ---- learning from the answers --------------------------------------------------------------

    def _training_set(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, y = self.anchors.features, self.anchors.label.float()
        w = torch.ones(len(x))
        if self.labels:
            x = torch.cat([x, torch.stack([f for f, _ in self.labels])])
            y = torch.cat([y, torch.tensor([float(ok) for _, ok in self.labels])])
            w = torch.cat([w, torch.full((len(self.labels),), self.cfg.label_weight)])
        return x, y, w

    def _fit(self, head: nn.Module, data: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
             rows: torch.Tensor | None = None, lr: float = 1e-3) -> nn.Module:
        x, y, w = data
        rows = rows if rows is not None else torch.arange(len(x))
        opt = torch.optim.Adam(head.parameters(), lr=lr)
        for _ in range(self.cfg.retrain_steps):
            i = rows[torch.randint(0, len(rows), (256,), generator=self._rng)]
            loss = nn.functional.binary_cross_entropy_with_logits(head(x[i]).squeeze(-1), y[i], weight=w[i])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return head.eval()

    def _fit_heads(self, data: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> list[nn.Module]:
        n = len(data[0])
        heads = []
        for _ in range(self.cfg.heads):
            head = copy.deepcopy(self.model.head)
            for layer in head.modules():  # fresh initialisations: the ensemble's spread is the point
                if isinstance(layer, nn.Linear):
                    layer.reset_parameters()
            # From scratch a head needs the larger step to fit within retrain_steps; an undertrained one disagrees
            # on true successes too (on sim_so101 at 1e-3, on 28 of 48 frames a person then called a success).
            heads.append(self._fit(head, data, torch.randint(0, n, (n,), generator=self._rng), lr=3e-3))
        return heads

    def _retrain(self) -> None:
        """Retrain the head and the ensemble on the answers so far, off the control loop's thread."""
        if self._thread is not None and self._thread.is_alive():
            return  # the next answer retrains with this one included
        data = self._training_set()

        def work() -> None:
            with torch.no_grad():
                start = copy.deepcopy(self.model.head)
            head = self._fit(start.train(), data)
            heads = self._fit_heads(data) if self.cfg.heads else []
            with self._lock:
                self._pending = (head, heads)

        if not self.background:
            work()
            return
        self._thread = threading.Thread(target=work, name="reward-audit-retrain", daemon=True)
        self._thread.start()

    def _swap_if_ready(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return
        self.model.head, self.heads = pending
        self._rejected_since_swap = []
        self._positives = torch.cat([self.anchors.features[self.anchors.label],
                                     *[f[None] for f, ok in self.labels if ok]])
        self.counts.retrains += 1
        log.info("reward audit: classifier head retrained on %d answers (%d not a success)", len(self.labels),
                 sum(not ok for _, ok in self.labels))

    @torch.no_grad()
    def decides(self, features: torch.Tensor) -> torch.Tensor:
        """``[N]`` bool: the classifier's decision (its current head) on ``[N, D]`` features."""
        if not len(features):
            return torch.zeros(0, dtype=torch.bool)
        self._swap_if_ready()
        return torch.sigmoid(self.model.head(features.float())).reshape(len(features)) >= self.model.threshold

    def wait(self, timeout_s: float = 30.0) -> None:
        """Let a running retraining finish and take it (tests, the end of a run)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._swap_if_ready()

    # ---- records --------------------------------------------------------------------------------

    def _log(self, row: dict[str, Any]) -> None:
        if self.log_path is not None:
            with self.log_path.open("a") as f:
                f.write(json.dumps(row) + "\n")

    def summary(self) -> str:
        """One line for the end of the run."""
        c = self.counts
        return (f"reward audit: the classifier fired {c.fires} times after the policy's steps ({c.person_fires} "
                f"after the person's); asked {c.asked} of {self.cfg.budget} "
                f"(not a success: {c.rejected}, unanswered: {c.unanswered}), withheld {c.withheld_unasked} more "
                f"after a 'no', {c.over_budget_suspicious} suspicious past the budget "
                f"({'withheld' if self.cfg.past_budget == 'withhold' else 'paid'}); head retrained {c.retrains} "
                "times" + (f"; of {c.random_asked} fires asked about at random, {c.random_rejected} were not a success "
                           f"(the classifier's precision on the policy's frames ~ "
                           f"{1 - c.random_rejected / c.random_asked:.2f})" if c.random_asked else ""))

    def save(self, out: Path | str) -> Path:
        """The corrected classifier, as a classifier directory (its anchors with the answers included)."""
        self.wait()
        meta = self.model.meta
        self.model.meta = {**meta, "audit": {"answers": len(self.labels), **asdict(self.counts)}}
        try:
            path = self.model.save(out)
        finally:
            self.model.meta = meta
        x, y, _ = self._training_set()
        episode = torch.cat([self.anchors.episode, torch.full((len(self.labels),), -1, dtype=torch.long)])
        torch.save({"features": x.half(), "label": y.bool(), "episode": episode}, Path(path) / ANCHORS_FILE)
        return Path(path)

