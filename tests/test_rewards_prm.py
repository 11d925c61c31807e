"""Process reward model: progress ranks like true progress, reversed < 0, mismatched ≈ 0, unseen goals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.cli import main
from robot_rl.data.episode import spec_of
from robot_rl.data.store import EpisodeStore
from robot_rl.rewards.data import episode_frames
from robot_rl.rewards.demos import REACH_INSTRUCTION, reach_pixel_demos
from robot_rl.rewards.prm import PRMConfig, ProcessRewardModel, episode_progress, spearman, train_prm
from robot_rl.rewards.text import UnseenInstructionError

DEMOS = {"image_size": 32, "hover": 0, "travel": 12, "top_extent": 2.0, "stop_short": 0.0}


@pytest.fixture(scope="module")
def prm(tmp_path_factory: pytest.TempPathFactory) -> tuple[ProcessRewardModel, Path]:
    out = tmp_path_factory.mktemp("prm")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # conftest's per-test setting is not yet active in a module fixture
    report = train_prm(reach_pixel_demos(40, seed=0, **DEMOS), out, PRMConfig(steps=500, batch_size=32))
    torch.set_num_threads(threads)
    return report.model, out


def _frames(ep: object) -> dict[str, np.ndarray]:
    return episode_frames(ep, ["image.top"])[0]  # type: ignore[arg-type]


@pytest.mark.integration
def test_progress_ranks_with_true_progress_on_held_out_demos(prm: tuple[ProcessRewardModel, Path]) -> None:
    model, _ = prm
    rhos = []
    for ep in reach_pixel_demos(12, seed=99, **DEMOS):
        pred = episode_progress(model, _frames(ep), REACH_INSTRUCTION)
        rhos.append(spearman(pred, np.arange(len(pred))))
    assert float(np.mean(rhos)) >= 0.8, rhos


@pytest.mark.integration
def test_reversed_pairs_are_negative_and_mismatched_goals_near_zero(prm: tuple[ProcessRewardModel, Path]) -> None:
    model, _ = prm
    # Demos whose arm visibly moves: a start within a few pixels of the goal gives near-identical
    # first and last frames, which the model rightly scores as stalled (≈ 0), neither sign.
    eps = [e for e in reach_pixel_demos(12, seed=98, **DEMOS) if e.meta["start_goal_distance"] > 0.3]
    assert len(eps) >= 6
    last = {"image.top": torch.from_numpy(np.stack([_frames(e)["image.top"][-1] for e in eps]))}
    first = {"image.top": torch.from_numpy(np.stack([_frames(e)["image.top"][0] for e in eps]))}
    forward, _ = model(first, last, REACH_INSTRUCTION)
    backward, _ = model(last, first, REACH_INSTRUCTION)
    mismatched, done = model(first, last, "open the top drawer")
    assert (forward > 0).all() and (backward < 0).all(), (forward, backward)
    assert forward.median() > 0.5
    assert mismatched.abs().max() < 0.15 and done.max() < 0.5


@pytest.mark.integration
def test_unseen_instruction_errors_or_falls_back_and_checkpoint_round_trips(
        prm: tuple[ProcessRewardModel, Path]) -> None:
    model, out = prm
    ep = reach_pixel_demos(1, seed=97, **DEMOS)[0]
    a = {"image.top": torch.from_numpy(_frames(ep)["image.top"][:3])}
    with pytest.raises(UnseenInstructionError, match="never seen"):
        model(a, a, "fold the laundry")
    loaded = ProcessRewardModel.load(out, on_unseen="zero")
    delta, done = loaded(a, a, ["fold the laundry", REACH_INSTRUCTION, "wash dishes"])
    assert delta[0] == 0 and delta[2] == 0 and done[0] == 0 and loaded.unseen_count == 2
    torch.testing.assert_close(loaded(a, a, REACH_INSTRUCTION)[0], model(a, a, REACH_INSTRUCTION)[0])
    with pytest.raises(ValueError, match="frames are"):
        model({"image.top": torch.zeros(1, 16, 16, 3, dtype=torch.uint8)}, a, REACH_INSTRUCTION)


def test_cli_train_prm_smoke(tmp_path: Path) -> None:
    eps = reach_pixel_demos(4, seed=3, image_size=16, hover=0, travel=4)
    store = EpisodeStore.create(tmp_path / "d", spec_of(eps[0]), fps=20, task=eps[0].task)
    for ep in eps:
        store.append(ep)
    assert main(["reward", "train-prm", str(tmp_path / "d"), "--out", str(tmp_path / "m"), "--steps", "2"]) == 0
    assert ProcessRewardModel.load(tmp_path / "m").tokenizer.is_known(REACH_INSTRUCTION)


def test_spearman_by_hand() -> None:
    assert spearman(np.array([1.0, 2.0, 3.0]), np.array([30.0, 20.0, 10.0])) == pytest.approx(-1.0)
    # Ties share ranks: x ranks (0.5, 0.5, 2), y ranks (0, 1, 2) → r = 0.866.
    assert spearman(np.array([1.0, 1.0, 5.0]), np.array([1.0, 2.0, 3.0])) == pytest.approx(np.sqrt(3) / 2)
