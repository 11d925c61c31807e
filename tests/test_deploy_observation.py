"""What the deploy policy sees (``policy_keys``) and demos relabelled by the success classifier."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco")  # the simulated arm's spec

from robot_rl.core.specs import SpecMismatchError
from robot_rl.data.demos import load_demos
from robot_rl.data.episode import Episode
from robot_rl.data.store import EpisodeStore
from robot_rl.hardware.sim_arm import SimulatedArmConfig
from robot_rl.human_loop.deploy import DeployConfig
from robot_rl.human_loop.observation import learner_demos, policy_spec, relabel_success, robot_spec, success_judge
from robot_rl.rewards.classifier import SuccessClassifier

ROBOT = SimulatedArmConfig(cameras={"front": (8, 8)})


def _episode(spec, steps: int, bright_from: int, rng: np.random.Generator) -> Episode:
    """Camera frames dark until step ``bright_from`` of the observations (incl. the final one), then white."""
    frames = [np.full((8, 8, 3), 255 if t >= bright_from else 0, np.uint8) for t in range(steps + 1)]
    state = rng.standard_normal((steps + 1, spec.observation["state"].shape[0])).astype(np.float32)
    reward = np.full(steps, 0.3, np.float32)  # the task's dense reward: the classifier must replace it
    terminated = np.zeros(steps, bool)
    terminated[-1] = True
    return Episode(obs={"state": state[:-1], "image.front": np.stack(frames[:-1])},
                   action=rng.uniform(-1, 1, (steps, spec.action.shape[0])).astype(np.float32), reward=reward,
                   terminated=terminated, truncated=np.zeros(steps, bool), intervened=np.zeros(steps, bool),
                   success=terminated.copy(), final_obs={"state": state[-1], "image.front": frames[-1]})


def _store(path: Path, spec, episodes: list[Episode]) -> Path:
    store = EpisodeStore.create(path, spec, fps=10)
    for ep in episodes:
        store.append(ep)
    return path


def bright(obs: dict[str, torch.Tensor]) -> torch.Tensor:
    """A success judge that fires on a white front camera (the classifier's role, deterministically)."""
    return obs["image.front"].float().mean(dim=(1, 2, 3)) > 128


def test_policy_spec_keeps_the_named_keys_and_refuses_unknown_ones() -> None:
    full = robot_spec(ROBOT)
    assert set(full.observation) == {"state", "image.front"}
    cut = policy_spec(DeployConfig(robot=ROBOT, policy_keys=("state",)))
    assert list(cut.observation) == ["state"] and cut.action == full.action
    assert policy_spec(DeployConfig(robot=ROBOT)) == full
    with pytest.raises(ValueError, match=r"cannot keep \['image.top'\].*observes"):
        policy_spec(DeployConfig(robot=ROBOT, policy_keys=("state", "image.top")))
    with pytest.raises(ValueError, match="twice"):
        DeployConfig(robot=ROBOT, policy_keys=("state", "state"))


def test_relabel_success_takes_reward_and_termination_from_the_judge(tmp_path: Path) -> None:
    spec = robot_spec(ROBOT)
    rng = np.random.default_rng(0)
    # Episode 0 turns white at observation 3 (reached by step 2); episode 1 never does but ends terminated.
    path = _store(tmp_path / "demos", spec, [_episode(spec, 5, 3, rng), _episode(spec, 4, 99, rng)])
    batch = load_demos(path, spec)
    changed = relabel_success(batch, bright, ["image.front"], chunk=2)  # chunks across rows
    assert batch.reward.tolist() == [0, 0, 1, 1, 1, 0, 0, 0, 0]
    assert batch.terminated.tolist() == [False, False, True, True, True, False, False, False, False]
    # The recording ended episode 1 as terminated; without a classifier success it is a truncation.
    assert batch.truncated.tolist() == [False] * 8 + [True]
    assert changed == 9
    with pytest.raises(ValueError, match=r"reads \['image.wrist'\].*set robot.cameras"):
        relabel_success(batch, bright, ["image.wrist"])


def test_learner_demos_relabel_with_the_classifier_then_drop_its_cameras(tmp_path: Path) -> None:
    spec = robot_spec(ROBOT)
    path = _store(tmp_path / "demos", spec, [_episode(spec, 6, 4, np.random.default_rng(1))])
    always = SuccessClassifier({"image.front": (8, 8, 3)}, features=4, channels=2, threshold=0.0).eval()
    always.save(tmp_path / "clf")
    cfg = DeployConfig(robot=ROBOT, policy_keys=("state",), reward_source="classifier",
                       classifier=str(tmp_path / "clf"))
    batch = learner_demos(cfg, path)
    assert set(batch.obs) == set(batch.next_obs) == {"state"}
    assert batch.reward.tolist() == [1.0] * 6 and bool(batch.terminated.all())  # threshold 0: fires everywhere
    plain = learner_demos(DeployConfig(robot=ROBOT), path)  # the task's own rewards, every key
    assert set(plain.obs) == {"state", "image.front"} and torch.allclose(plain.reward, torch.full((6,), 0.3))
    assert tuple(batch.obs["state"].shape[1:]) == policy_spec(cfg).observation["state"].shape
    missing = DeployConfig(robot=ROBOT, reward_source="classifier", classifier=str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="train-classifier"):
        learner_demos(missing, path)
    other = SimulatedArmConfig(cameras={"front": (16, 16)})
    with pytest.raises(SpecMismatchError, match=r"image\.front"):
        learner_demos(DeployConfig(robot=other), path)


def test_the_success_judge_keeps_the_probability_it_decided_on(tmp_path: Path) -> None:
    clf = SuccessClassifier({"image.front": (8, 8, 3)}, features=4, channels=2, threshold=0.5).eval()
    clf.save(tmp_path / "clf")
    judge = success_judge(DeployConfig(robot=ROBOT, reward_source="classifier", classifier=str(tmp_path / "clf")))
    assert judge is not None and judge.probability is None
    rng = np.random.default_rng(3)
    for _ in range(5):
        frame = rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)
        decided = judge({"image.front": frame, "state": np.zeros(3, np.float32)})
        p = float(clf.probability({"image.front": torch.as_tensor(frame)[None]})[0])
        assert judge.probability == pytest.approx(p) and decided == (p >= 0.5)
    # The help gate's classifier score: most uncertain at p = 0.5.
    from robot_rl.human_loop.help_desk import HelpDesk
    from robot_rl.human_loop.help_gate import HelpGateConfig

    desk = HelpDesk(HelpGateConfig(enabled=True), robot_spec(ROBOT), None, None)  # type: ignore[arg-type]
    assert desk.scores(None, {}, np.zeros(7), 0, success_p=0.5)["classifier"] == 1.0  # type: ignore[arg-type]
    assert desk.scores(None, {}, np.zeros(7), 0, success_p=0.9)["classifier"] == pytest.approx(0.2)  # type: ignore[arg-type]
