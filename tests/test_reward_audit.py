"""Auditing the success classifier while a policy learns on it (``audit.enabled``): robot_rl/rewards/audit.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_deploy import PointArm, ZeroPolicy, fast

from robot_rl.cli.deploy import actor_summary
from robot_rl.hardware.robot import RobotConfig
from robot_rl.hardware.safety import SafetyLayer
from robot_rl.human_loop.deploy import Deployer
from robot_rl.human_loop.deploy_aids import DeployAids
from robot_rl.human_loop.devices.base import TeleopReading
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.observation import SuccessJudge
from robot_rl.human_loop.reward_audit import AuditDesk
from robot_rl.rewards.audit import Anchors, AuditConfig, RewardAudit, Suspicion, save_anchors
from robot_rl.rewards.audit_queue import AuditQueue
from robot_rl.rewards.classifier import SuccessClassifier
from robot_rl.rewards.data import LabelledFrames

SHAPE = (8, 8, 3)


def _frames(kind: str, n: int, episode: int, rng: np.random.Generator) -> np.ndarray:
    """``lift``: the success pose (a bright top half); ``table``: a dark frame; ``hack``: the top half bright, as in
    a lift, and the bottom too (a frame no training episode showed)."""
    img = rng.integers(0, 30, (n, *SHAPE), dtype=np.uint8)
    if kind == "lift":
        img[:, :4] = 250
    elif kind == "hack":
        img[:, :4] = 250
        img[:, 4:, :4] = 250
    return img


class QuadrantEncoder(torch.nn.Module):
    """Features a person can read: the mean brightness of each quarter of the frame (a known feature space)."""

    out_dim = 4
    shapes: dict[str, tuple[int, ...]] = {"image.front": SHAPE}  # noqa: RUF012 - what a saved classifier records
    features, channels, shared = 4, 0, False

    def check(self, obs: dict[str, torch.Tensor]) -> None:
        assert obs["image.front"].shape[1:] == SHAPE

    def forward(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        x = images["image.front"].float().mean(-1) / 255.0
        return torch.stack([x[:, :4, :4].mean((1, 2)), x[:, :4, 4:].mean((1, 2)),
                            x[:, 4:, :4].mean((1, 2)), x[:, 4:, 4:].mean((1, 2))], -1)


def _anchor_frames() -> LabelledFrames:
    rng = np.random.default_rng(0)
    images = np.concatenate([_frames("lift", 10, 0, rng), _frames("table", 10, 0, rng),
                             _frames("lift", 10, 1, rng), _frames("table", 10, 1, rng)])
    return LabelledFrames({"image.front": images}, np.repeat([True, False, True, False], 10),
                          np.repeat([0, 0, 1, 1], 10))


def _classifier(tmp_path: Path, encoder: torch.nn.Module | None = None) -> tuple[SuccessClassifier, Path]:
    """A classifier that learned "the top is bright" from lifts against dark tables: it fires on the hack too."""
    torch.manual_seed(0)
    model = SuccessClassifier({"image.front": SHAPE}, features=16, channels=4, threshold=0.5)
    out = tmp_path / "clf"
    model.save(out)  # the directory's meta and weights (a real classifier's); the encoder may then be swapped
    if encoder is not None:
        model.encoder = encoder  # type: ignore[assignment]
        model.head = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    frames = _anchor_frames()
    with torch.no_grad():
        x = model.encoder({"image.front": torch.as_tensor(frames.images["image.front"])})
    opt = torch.optim.Adam(model.head.parameters(), lr=1e-2)
    for _ in range(200):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model.head(x).squeeze(-1),
                                                                    torch.as_tensor(frames.label).float())
        opt.zero_grad()
        loss.backward()
        opt.step()
    save_anchors(model, [frames], out)
    return model.eval(), out


def _fires(model: SuccessClassifier, images: np.ndarray) -> np.ndarray:
    return model.predict({"image.front": torch.as_tensor(images)}).numpy()


def test_a_novel_fire_is_asked_about_and_a_no_teaches_the_classifier_to_stop(tmp_path: Path) -> None:
    model, out = _classifier(tmp_path, QuadrantEncoder())
    audit = RewardAudit.from_dir(model, out, AuditConfig(enabled=True, heads=2, follow_rejections=0),
                                 log_path=tmp_path / "audit.jsonl", background=False)
    rng = np.random.default_rng(1)
    lift, hack = _frames("lift", 5, 9, rng), _frames("hack", 5, 9, rng)
    assert _fires(model, hack).all() and _fires(model, lift).all()

    verdict, suspicion, feature = audit.review({"image.front": torch.as_tensor(hack[:1])})
    assert verdict == "ask" and suspicion.novelty > 1.0
    assert audit.answer(feature, False, suspicion, {"episode": 3}) is False
    assert audit.counts.retrains == 0  # the retrained head is taken at the next fire, never in the middle of one
    audit.wait()
    assert audit.counts.retrains == 1
    assert not _fires(model, hack[2:]).any()  # held-out frames of the same hack
    assert _fires(model, lift).all()  # the task's success still pays
    assert audit.review({"image.front": torch.as_tensor(lift[:1])})[0] == "accept"
    row = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[0])
    assert row["episode"] == 3 and row["answer"] is False and row["novelty"] > 1.0


def test_questions_stop_at_the_budget_and_a_lost_answer_pays_the_reward(tmp_path: Path) -> None:
    model, out = _classifier(tmp_path, QuadrantEncoder())
    audit = RewardAudit.from_dir(model, out, AuditConfig(enabled=True, budget=1, heads=0), background=False)
    hack = {"image.front": torch.as_tensor(_frames("hack", 1, 9, np.random.default_rng(2)))}
    verdict, suspicion, feature = audit.review(hack)
    assert verdict == "ask"
    assert audit.answer(feature, None, suspicion) is True  # nobody answered: taken as it was
    assert audit.review(hack)[0] == "accept"
    assert audit.counts.asked == 1 and audit.counts.unanswered == 1 and audit.counts.over_budget_suspicious == 1
    assert "asked 1 of 1" in audit.summary()
    strict = RewardAudit.from_dir(model, out, AuditConfig(enabled=True, budget=0, heads=0, past_budget="withhold"),
                                  background=False)
    assert strict.review(hack)[0] == "withhold"  # suspicious past the budget: not paid
    lift = {"image.front": torch.as_tensor(_frames("lift", 1, 9, np.random.default_rng(3)))}
    assert strict.review(lift)[0] == "accept"  # what looks like the training successes still pays
    assert "1 suspicious past the budget (withheld)" in strict.summary()


def test_the_corrected_classifier_is_saved_with_its_answers(tmp_path: Path) -> None:
    model, out = _classifier(tmp_path)
    audit = RewardAudit.from_dir(model, out, AuditConfig(enabled=True, heads=0, retrain_steps=150), background=False)
    hack = _frames("hack", 3, 9, np.random.default_rng(3))
    _, s, f = audit.review({"image.front": torch.as_tensor(hack[:1])})
    audit.answer(f, False, s)
    saved = audit.save(tmp_path / "audited")
    again = SuccessClassifier.load(saved)
    for key, value in model.state_dict().items():  # the retrained head, as the run ended with it
        assert torch.equal(again.state_dict()[key], value)
    assert again.meta["audit"]["rejected"] == 1 and again.threshold == model.threshold
    anchors = Anchors.load(saved)
    assert len(anchors.label) == 41 and not bool(anchors.label[-1])


def test_a_classifier_without_anchors_gets_one_line_that_says_to_retrain(tmp_path: Path) -> None:
    model = SuccessClassifier({"image.front": SHAPE}, features=16, channels=4)
    model.save(tmp_path / "old")
    with pytest.raises(FileNotFoundError, match="retrain it with `robot-rl reward train-classifier"):
        RewardAudit.from_dir(model, tmp_path / "old", AuditConfig(enabled=True))


# ---- in the deploy loop (a rate loop and the retraining thread: integration tier) -----------------------------------


class CameraPointArm(PointArm):
    """The deploy tests' point arm with a front camera that always shows the hack (the task is never done)."""

    def __init__(self) -> None:
        super().__init__(goal_x=10.0)
        self.config = RobotConfig(control_mode="ee_delta", cameras={"front": SHAPE[:2]})
        self.image = _frames("hack", 1, 0, np.random.default_rng(4))[0]

    def camera_images(self) -> dict[str, np.ndarray]:
        return {"image.front": self.image}


class Watcher:
    """A scripted person who sees the task is not done: answers audits "no" at once, never takes over."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self, step: int) -> TeleopReading:
        return TeleopReading(0.0, delta=np.zeros(6), engage=False)

    def answer_reward_audit(self) -> bool:
        self.asked += 1
        return False


def _audited_deployer(tmp_path: Path, script, budget: int = 50, timeout_s: float = 10.0):
    model, out = _classifier(tmp_path, QuadrantEncoder())
    cfg = fast(episodes=1, max_episode_steps=25, reward_source="classifier", classifier=str(out),
               audit=AuditConfig(enabled=True, budget=budget, heads=2, answer_timeout_s=timeout_s))
    audit = RewardAudit.from_dir(model, out, cfg.audit, log_path=tmp_path / "reward_audit.jsonl")
    aids = DeployAids(SuccessJudge(model, ["image.front"]), None, audit)
    arm = CameraPointArm()
    safety = SafetyLayer(arm, cfg.safety)
    safety.connect()
    dev = ScriptedDevice(script)
    dev.connect()
    d = Deployer(cfg, safety, dev, ZeroPolicy(), aids=aids)
    d.collected = []
    return d, audit


@pytest.mark.integration
def test_a_no_from_the_person_withholds_the_reward_and_the_episode_goes_on(tmp_path: Path) -> None:
    watcher = Watcher()
    d, audit = _audited_deployer(tmp_path, watcher)
    report = d.run()
    (episode,) = report.episodes
    assert episode.end == "time_limit" and not episode.success and episode.ret == 0.0
    assert episode.audit_asked == 1 and episode.audit_rejected == 1 and watcher.asked == 1
    assert all(row["reward"] == 0.0 and not row["terminated"] for row in d.collected)
    assert audit.counts.fires >= 1 and audit.counts.retrains == 1
    assert (tmp_path / "classifier_audited" / "anchors.pt").is_file()  # written when the run closed
    assert len((tmp_path / "reward_audit.jsonl").read_text().splitlines()) == 1
    assert "reward audit: 1 questions of 50, 1 answered 'not a success'" in actor_summary(d.cfg, report, d.safety,
                                                                                         False)


@pytest.mark.integration
def test_a_person_answers_with_the_failure_key_while_the_robot_holds(tmp_path: Path) -> None:
    def presses_failure_on_the_third_read(step: int) -> TeleopReading:
        return TeleopReading(0.0, delta=np.zeros(6), engage=False, events=("failure",) if step == 2 else ())

    d, _ = _audited_deployer(tmp_path, presses_failure_on_the_third_read)
    report = d.run()
    assert report.episodes[0].audit_rejected == 1 and not report.episodes[0].success


@pytest.mark.integration
def test_an_unanswered_question_pays_the_reward(tmp_path: Path) -> None:
    d, audit = _audited_deployer(tmp_path, lambda step: TeleopReading(0.0, delta=np.zeros(6), engage=False),
                                 timeout_s=0.05)
    report = d.run()
    assert report.episodes[0].success and report.episodes[0].end == "success"
    assert audit.counts.unanswered == 1
    # The point arm knows its task (never done at goal_x=10): the learned reward's success is checked against it
    assert report.episodes[0].task_success is False
    assert ("learned reward vs the task: 1 successes, the task agreed on 0 (alone 0 of 1); 0 task successes it "
            "missed") in actor_summary(d.cfg, report, d.safety, False)


@pytest.mark.integration
def test_a_fire_after_the_persons_own_step_is_theirs_and_not_asked_about(tmp_path: Path) -> None:
    watcher = Watcher()

    def takes_over(step: int) -> TeleopReading:
        return TeleopReading(0.0, delta=np.zeros(6), engage=True)

    takes_over.answer_reward_audit = watcher.answer_reward_audit  # type: ignore[attr-defined]
    d, audit = _audited_deployer(tmp_path, takes_over)
    report = d.run()
    # The reset's frame (nobody acted) is asked about; after the person's first step the fire is theirs.
    assert report.episodes[0].success and report.episodes[0].steps == 1
    assert watcher.asked == 1 and audit.counts.person_fires == 1 and audit.counts.asked == 1


def test_the_bar_rises_with_each_yes_and_falls_back_with_each_no(tmp_path: Path) -> None:
    model, out = _classifier(tmp_path, QuadrantEncoder())
    audit = RewardAudit.from_dir(model, out, AuditConfig(enabled=True, heads=0, bar_step=2.0, retrain_steps=1),
                                 background=False)
    feature, s = torch.zeros(4), Suspicion(1.0, 0.0)
    audit.answer(feature, True, s)
    audit.answer(feature, True, s)
    assert audit.bar == 4.0
    audit.answer(feature, False, s)
    assert audit.bar == 2.0
    audit.answer(feature, None, s)  # nobody answered: nothing learnt about the bar
    assert audit.bar == 2.0
    for _ in range(3):
        audit.answer(feature, False, s)
    assert audit.bar == 1.0  # never below min_suspicion
    audit.wait()


def test_random_questions_estimate_the_precision_on_the_policys_frames_and_leave_the_bar(tmp_path: Path) -> None:
    model, out = _classifier(tmp_path, QuadrantEncoder())
    audit = RewardAudit.from_dir(model, out, AuditConfig(enabled=True, heads=0, random_rate=1.0, retrain_steps=1),
                                 background=False)
    lift = {"image.front": torch.as_tensor(_frames("lift", 1, 9, np.random.default_rng(5)))}
    verdict, s, f = audit.review(lift)
    assert verdict == "ask" and s.score < 1.0  # not suspicious: asked because random_rate says so
    audit.answer(f, False, s)
    verdict, s, f = audit.review(lift)
    audit.answer(f, True, s)
    assert audit.bar == 1.0  # random answers say nothing about where the bar should be
    assert (audit.counts.random_asked, audit.counts.random_rejected) == (2, 1)
    assert "precision on the policy's frames ~ 0.50" in audit.summary()
    none = RewardAudit.from_dir(model, out, AuditConfig(enabled=True, heads=0), background=False)
    assert none.review(lift)[0] == "accept"


def test_unsuspicious_fires_are_asked_about_as_often_as_recent_answers_were_no(tmp_path: Path) -> None:
    model, out = _classifier(tmp_path, QuadrantEncoder())
    audit = RewardAudit.from_dir(model, out, AuditConfig(enabled=True, heads=0, retrain_steps=1, follow_rejections=4,
                                                         budget=1000), background=False)
    feature, s = torch.zeros(4), Suspicion(2.0, 0.0)
    assert audit.random_rate == 0.0  # no answers yet: only the suspicious fires are asked about
    audit.answer(feature, False, s)
    assert audit.random_rate == pytest.approx(1 / 3)  # two "yes" of prior: one "no" does not ask about everything
    for ok in (False, False, False):
        audit.answer(feature, ok, s)
    assert audit.random_rate == pytest.approx(4 / 6)
    lift = {"image.front": torch.as_tensor(_frames("lift", 1, 9, np.random.default_rng(5)))}
    verdicts = [audit.review(lift)[0] for _ in range(400)]
    assert 0.55 < verdicts.count("ask") / 400 < 0.78
    for _ in range(4):  # the classifier right again: the rate falls back to random_rate
        audit.answer(feature, True, s)
    assert audit.random_rate == 0.0
    off = RewardAudit.from_dir(model, out, AuditConfig(enabled=True, heads=0, retrain_steps=1, follow_rejections=0),
                               background=False)
    off.answer(feature, False, s)
    assert off.random_rate == 0.0
    audit.wait()


def test_queued_questions_pay_now_and_a_later_no_sends_the_hacks_paid_earlier_back_to_the_replay(
        tmp_path: Path) -> None:
    """``audit.answers=queue``: the question and its frame go to disk, the answer comes back between steps, and
    the retrained classifier's verdict on the fires it paid before becomes corrections for the learner."""
    model, out = _classifier(tmp_path, QuadrantEncoder())
    cfg = AuditConfig(enabled=True, budget=1, heads=2, retrain_steps=100, follow_rejections=0, answers="queue",
                      queue_dir=str(tmp_path / "q"))
    audit = RewardAudit.from_dir(model, out, cfg, log_path=tmp_path / "reward_audit.jsonl", background=False)
    desk = AuditDesk(audit, SuccessJudge(model, ["image.front"]), ScriptedDevice(Watcher()), lambda: None,
                     seen=lambda obs: {"state": obs["state"]}, actor_id=3, learning=True)
    rng = np.random.default_rng(7)

    def obs(kind: str, x: float) -> dict[str, np.ndarray]:
        return {"image.front": _frames(kind, 1, 9, rng)[0], "state": np.full(2, x, np.float32)}

    assert desk.confirm(obs("hack", 0.5), episode=0, step=4)  # suspicious: asked through the queue, paid for now
    assert desk.confirm(obs("hack", 1.5), episode=1, step=6)  # past the budget: paid
    assert desk.confirm(obs("lift", 2.5), episode=2, step=5)  # a true success: paid
    queue = AuditQueue(tmp_path / "q")
    (q,) = queue.pending()
    assert (q.id, q.episode, q.step, q.actor_id, q.key) == ("a03-e000000-s0004", 0, 4, 3, {"state": [0.5, 0.5]})
    assert (queue.directory / q.frames["image.front"]).is_file()  # the frame a person looks at
    queue.answer(q.id, False)
    desk.poll(every_s=0.0)
    assert audit.labels and audit.labels[0][1] is False and audit.counts.rejected == 1
    assert audit.counts.retrains == 1
    (rescored,) = queue.new_relabels()  # the other hack, paid before the answer; not the lift
    assert rescored["key"] == {"state": [1.5, 1.5]} and rescored["success"] is False and rescored["actor_id"] == 3
    assert desk.relabelled == 2  # the answered step (the learner reads its answer) and the rescored one
