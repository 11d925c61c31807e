"""Success classifier: calibration numbers, held-out precision, CLI, checkpoints, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.cli import main
from robot_rl.data.episode import spec_of
from robot_rl.data.store import EpisodeStore
from robot_rl.rewards.audit import Anchors
from robot_rl.rewards.classifier import ClassifierConfig, SuccessClassifier, calibrate, score_frames, train_classifier
from robot_rl.rewards.data import RewardDataError, labelled_frames
from robot_rl.rewards.demos import reach_pixel_demos


def _store(path: Path, episodes: list) -> Path:
    store = EpisodeStore.create(path, spec_of(episodes[0]), fps=20, task=episodes[0].task)
    for ep in episodes:
        store.append(ep)
    return path


def test_calibrate_picks_the_highest_recall_threshold_meeting_the_target() -> None:
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    labels = np.array([1, 1, 0, 1, 1, 0], bool)
    # Cuts: ≥0.9 P=1 R=.25; ≥0.8 P=1 R=.5; ≥0.7 P=2/3; ≥0.6 P=3/4; ≥0.5 P=4/5 R=1; ≥0.4 P=4/6.
    cal = calibrate(scores, labels, 0.8)
    assert (cal.threshold, cal.precision, cal.recall, cal.reached) == (0.5, 0.8, 1.0, True)
    cal = calibrate(scores, labels, 0.95)
    assert (cal.threshold, cal.recall) == (0.8, 0.5)
    never = calibrate(np.array([0.9, 0.1]), np.array([False, True]), 0.9)
    assert not never.reached and never.threshold > 0.9  # never fires rather than firing falsely


def test_calibrate_keeps_the_threshold_above_its_floor() -> None:
    scores = np.array([0.9, 0.8, 0.3, 0.01, 0.005])
    labels = np.array([1, 1, 0, 1, 0], bool)
    # Without a floor: ≥0.01 gives P=3/4, R=1 at 0.75; the hard positive at 0.01 sets the threshold.
    assert calibrate(scores, labels, 0.75).threshold == 0.01
    floored = calibrate(scores, labels, 0.75, min_threshold=0.5)
    assert (floored.threshold, floored.precision, floored.reached) == (0.8, 1.0, True)
    assert floored.recall == 2 / 3
    unreachable = calibrate(np.array([0.4, 0.3]), np.array([True, False]), 0.9, min_threshold=0.5)
    assert not unreachable.reached and unreachable.threshold > 0.4
    with pytest.raises(ValueError, match="min_threshold"):
        calibrate(scores, labels, 0.9, min_threshold=1.0)


def test_cli_trains_calibrates_and_meets_target_precision_on_held_out_episodes(tmp_path: Path) -> None:
    data = _store(tmp_path / "demos", reach_pixel_demos(40, image_size=32, seed=0))
    out = tmp_path / "clf"
    rc = main(["reward", "train-classifier", str(data), "--out", str(out), "--target-precision", "0.9",
               "--steps", "200"])
    assert rc == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["calibration"]["reached"] and meta["calibration"]["precision"] >= 0.9
    assert (out / "pr_curve.png").stat().st_size > 1000
    model = SuccessClassifier.load(out)
    assert model.threshold == meta["threshold"]
    # What a reward audit measures a fire against: every frame's features, label and episode (held out included).
    anchors = Anchors.load(out)
    assert anchors.features.shape == (len(anchors.label), model.encoder.out_dim)
    assert anchors.label.any() and (~anchors.label).any() and len(anchors.episode.unique()) == 40
    # Episodes never seen in training or calibration.
    test = labelled_frames(reach_pixel_demos(30, image_size=32, seed=7), ["image.top"])
    fired = score_frames(model, test) >= model.threshold
    assert fired.sum() > 10
    precision = (fired & test.label).sum() / fired.sum()
    assert precision >= 0.9, precision


def test_multi_camera_shared_and_backbone_round_trip(tmp_path: Path) -> None:
    eps = reach_pixel_demos(8, image_size=24, wrist_size=16, seed=1)
    rep = train_classifier(eps, tmp_path / "a", ClassifierConfig(steps=3, features=16, channels=4))
    assert rep.model.cameras == ["image.top", "image.wrist"]
    # 2 of 8 episodes held out: the summary says how little that is and what to do.
    assert rep.held_out_episodes == 2 and rep.held_out_successes <= 2
    assert "of 2 held-out episodes" in rep.summary() and "Record more episodes" in rep.summary()
    with pytest.raises(ValueError, match="one shape"):
        train_classifier(eps, None, ClassifierConfig(steps=1, shared_encoder=True))
    torch.save(rep.model.encoder.state_dict(), tmp_path / "backbone.pt")
    rep2 = train_classifier(eps, None, ClassifierConfig(steps=0, features=16, channels=4,
                                                        backbone=tmp_path / "backbone.pt", freeze_backbone=True))
    for a, b in zip(rep.model.encoder.parameters(), rep2.model.encoder.parameters(), strict=True):
        assert torch.equal(a, b) and not b.requires_grad
    obs = {k: torch.from_numpy(v[:5]) for k, v in eps[0].obs.items()}
    loaded = SuccessClassifier.load(tmp_path / "a")
    assert torch.equal(loaded.probability(obs), rep.model.probability(obs))


def test_bad_input_is_refused_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    eps = reach_pixel_demos(6, image_size=16, seed=2)
    for ep in eps:
        ep.success[:] = False
    data = _store(tmp_path / "unlabelled", eps)
    rc = main(["reward", "train-classifier", str(data), "--out", str(tmp_path / "x"), "--steps", "1"])
    assert rc == 2 and "no positive (success) labels" in capsys.readouterr().err
    with pytest.raises(RewardDataError, match="not in the data"):
        train_classifier(eps, None, ClassifierConfig(cameras=("wrist",)))
    model = SuccessClassifier({"image.top": (16, 16, 3)}, features=8, channels=4)
    with pytest.raises(ValueError, match=r"image.top: frames are \[32, 32, 3\]"):
        model.probability({"image.top": torch.zeros(2, 32, 32, 3, dtype=torch.uint8)})
    with pytest.raises(ValueError, match="needs camera"):
        model.probability({"image.front": torch.zeros(2, 16, 16, 3, dtype=torch.uint8)})


def test_frame_labels_follow_the_episode_contract() -> None:
    from robot_rl.rewards.data import frame_labels

    ep = reach_pixel_demos(1, image_size=8, seed=0, travel=2, hover=2)[0]
    ep.success[:] = [False, False, True, False]
    # success[t] describes the state after step t: frame t+1 (final_obs is frame 4).
    assert frame_labels(ep, True, "success", 3).tolist() == [False, False, False, True, False]
    # Without final_obs (LeRobot) frame t takes success[t].
    assert frame_labels(ep, False, "success", 3).tolist() == [False, False, True, False]
    assert not frame_labels(ep, True, "last_k", 2).any()  # the episode failed at its last step
    ep.success[-1] = True
    assert frame_labels(ep, True, "last_k", 2).tolist() == [False, False, False, True, True]


def test_recalibrate_moves_only_the_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    episodes = reach_pixel_demos(24, image_size=24, seed=3)
    data = _store(tmp_path / "demos", episodes)
    out = tmp_path / "clf"
    rep = train_classifier(data, out, ClassifierConfig(steps=40, features=16, channels=4, target_precision=0.99))
    before = SuccessClassifier.load(out)
    assert main(["reward", "calibrate", str(out), str(data), "--target-precision", "0.6"]) == 0
    assert "recalibrated (weights unchanged)" in capsys.readouterr().out
    after = SuccessClassifier.load(out)
    assert all(torch.equal(before.state_dict()[k], v) for k, v in after.state_dict().items())
    # The same held-out frames as training used, scored afresh, calibrated at the new target.
    from robot_rl.rewards.data import split_episodes

    _, val_ids = split_episodes(episodes, 0.25, 0)
    val = labelled_frames([episodes[i] for i in val_ids], ["image.top"])
    assert len(val) == rep.held_out_frames
    expected = calibrate(score_frames(after, val), val.label, 0.6)
    meta = json.loads((out / "meta.json").read_text())
    assert after.threshold == pytest.approx(expected.threshold)
    assert meta["calibration"]["precision"] == pytest.approx(expected.precision)
    assert meta["calibration"]["target_precision"] == 0.6 and meta["config"]["target_precision"] == 0.6
    # Other data cannot rebuild the training split: a clear refusal, the model untouched.
    other = _store(tmp_path / "other", reach_pixel_demos(10, image_size=24, seed=9))
    assert main(["reward", "calibrate", str(out), str(other), "--target-precision", "0.5"]) == 2
    assert "not its training data" in capsys.readouterr().err
    assert SuccessClassifier.load(out).threshold == after.threshold
    # --fresh scores every frame of episodes it never saw.
    assert main(["reward", "calibrate", str(out), str(other), "--fresh", "--target-precision", "0.5"]) == 0
    fresh = labelled_frames(reach_pixel_demos(10, image_size=24, seed=9), ["image.top"])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["calibration"]["positives"] == int(fresh.label.sum())


def test_held_out_failures_it_fires_on_are_named() -> None:
    from robot_rl.rewards.false_success import false_success_episodes, false_success_warning

    # Three held-out episodes (store ids 7, 3, 9): a success with ambiguous frames before it, a failure whose last
    # four frames look like success, a failure with one noisy frame.
    scores = np.array([0.1, 0.8, 0.95, 0.97, 0.2, 0.3, 0.9, 0.96, 0.97, 0.99, 0.1, 0.7, 0.1])
    labels = np.array([0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], bool)
    episode = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2])
    found = false_success_episodes(scores, labels, episode, [7, 3, 9], threshold=0.6)
    assert [(f.episode, f.frames, f.length, f.first) for f in found] == [(3, 4, 6, 2)]
    assert "3 (4 of 6 frames, from frame 2)" in false_success_warning(found)
    assert false_success_episodes(scores, labels, episode, [7, 3, 9], threshold=0.98) == []
    assert false_success_warning([]) == ""


def test_training_names_a_failed_episode_that_looks_like_success(tmp_path: Path) -> None:
    """A failure whose frames are a success's (the arm parked where the success frames look alike) is named."""
    import dataclasses

    from robot_rl.rewards.classifier import recalibrate_classifier

    episodes = reach_pixel_demos(24, image_size=24, seed=3)
    out = tmp_path / "clf"
    train_classifier(_store(tmp_path / "demos", episodes), out, ClassifierConfig(steps=60, features=16, channels=4))
    success = next(ep for ep in episodes if ep.success.any())
    lookalike = dataclasses.replace(success, success=np.zeros_like(success.success),
                                    terminated=np.zeros_like(success.terminated))
    fresh = _store(tmp_path / "fresh", [*reach_pixel_demos(6, image_size=24, seed=5), lookalike])
    report = recalibrate_classifier(out, fresh, 0.5, held_out="all")
    assert [f.episode for f in report.false_successes] == [6], report.summary()
    assert "held-out FAILED episodes a success" in report.summary()
    assert json.loads((out / "meta.json").read_text())["false_success_episodes"][0]["episode"] == 6


def test_an_initial_state_classifier_learns_the_demos_first_frames() -> None:
    """``label=first_k``: practice's reset reward, positives the first K frames, the next K left out."""
    from robot_rl.rewards.data import frame_labels

    ep = reach_pixel_demos(1, image_size=8, seed=0, travel=4, hover=2)[0]
    assert frame_labels(ep, True, "first_k", 2).tolist() == [True, True] + [False] * (len(ep) - 1)
    frames = labelled_frames([ep], ["image.top"], "first_k", 2)
    assert len(frames) == len(ep) + 1 - 2 and frames.label.sum() == 2  # frames 2 and 3 are neither class
    # The wide camera sees the arm leave its start (the top one looks at the goal only).
    episodes = reach_pixel_demos(16, image_size=8, seed=1, travel=8, hover=4, wrist_size=16)
    rep = train_classifier(episodes, None, ClassifierConfig(cameras=("wrist",), label="first_k", last_k=2, steps=200,
                                                            features=8, channels=4, target_precision=0.9))
    val = labelled_frames(episodes, ["image.wrist"], "first_k", 2)
    p = score_frames(rep.model, val)
    assert p[val.label].mean() > p[~val.label].mean() + 0.1
