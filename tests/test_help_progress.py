"""The help gate's progress score: a trained process reward model flags a stall, and bad settings are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.core.config import ConfigError
from robot_rl.human_loop.help_desk import HelpDesk
from robot_rl.human_loop.help_gate import HelpGateConfig
from robot_rl.human_loop.help_progress import ProgressStall
from robot_rl.rewards.data import episode_frames
from robot_rl.rewards.demos import REACH_INSTRUCTION, reach_pixel_demos
from robot_rl.rewards.prm import PRMConfig, train_prm

DEMOS = {"image_size": 32, "hover": 0, "travel": 12, "top_extent": 2.0, "stop_short": 0.0}


@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("help_prm")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    train_prm(reach_pixel_demos(40, seed=0, **DEMOS), out, PRMConfig(steps=500, batch_size=32))
    torch.set_num_threads(threads)
    return out


def _frames(seed: int) -> np.ndarray:
    ep = reach_pixel_demos(1, seed=seed, **DEMOS)[0]
    return episode_frames(ep, ["image.top"])[0]["image.top"]


@pytest.mark.integration
def test_a_stall_scores_higher_than_progress(prm_dir: Path) -> None:
    moving, stuck = [], []
    for seed in (101, 102, 103):
        frames = _frames(seed)
        stall = ProgressStall(prm_dir, REACH_INSTRUCTION, window=4)
        moving += [s for f in frames if (s := stall.score({"image.top": f})) is not None]
        stall.reset()
        stuck += [s for _ in range(8) if (s := stall.score({"image.top": frames[len(frames) // 2]})) is not None]
    # Advancing: clearly negative (minus the progress); stuck on one frame: about zero.
    assert np.mean(moving) < -0.1 and abs(np.mean(stuck)) < 0.05, (np.mean(moving), np.mean(stuck))
    assert np.mean(stuck) - np.mean(moving) > 0.1


@pytest.mark.integration
def test_the_gate_asks_for_progress_when_the_robot_stalls(prm_dir: Path, tmp_path: Path) -> None:
    cfg = HelpGateConfig(enabled=True, scores=["progress"], prm=str(prm_dir), goal=REACH_INSTRUCTION, window=4,
                         warmup_steps=20, min_ask_steps=1, bell=False, initial_threshold=1.5)
    desk = HelpDesk(cfg, None, None, None, observed={"image.top": (32, 32, 3)},  # type: ignore[arg-type]
                    score_log=tmp_path / "scores.jsonl")
    asked_while_moving, reasons = 0, []
    for episode, seed in enumerate((201, 202, 203, 204)):
        frames = _frames(seed)
        for frame in frames[:-1]:  # the demo advances: progress every step
            scores = desk.scores(None, {}, np.zeros(7), 0, obs={"image.top": frame})  # type: ignore[arg-type]
            asked = desk.gate.step(scores).ask  # every frame goes through the gate, the stalling episode's too
            asked_while_moving += asked if episode < 3 else 0
        if episode == 3:  # then it stalls halfway, for 10 steps
            for _ in range(10):
                scores = desk.scores(None, {}, np.zeros(7), 0,  # type: ignore[arg-type]
                                     obs={"image.top": frames[len(frames) // 2]})
                decision = desk.gate.step(scores)
                if decision.started:
                    reasons.append(decision.reason)
        desk.end_episode()
    assert reasons and reasons[0].startswith("progress"), reasons
    assert asked_while_moving <= 3


@pytest.mark.integration
def test_bad_progress_settings_are_refused(prm_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"help\.prm needs help\.goal"):
        HelpGateConfig(prm=str(prm_dir))
    with pytest.raises(ConfigError, match="not trained on this instruction"):
        ProgressStall(prm_dir, "juggle three oranges", window=4)
    with pytest.raises(ConfigError, match="no process reward model there"):
        ProgressStall(prm_dir / "missing", REACH_INSTRUCTION, window=4)
    with pytest.raises(ConfigError, match=r"set robot\.cameras"):
        ProgressStall(prm_dir, REACH_INSTRUCTION, window=4).check({"image.front": (64, 64, 3)})
