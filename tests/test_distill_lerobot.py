"""`robot-rl distill` from a LeRobot SmolVLA teacher: a tiny SmolVLA built offline, loaded as a user's checkpoint is.

The teacher labels with its noise-free chunk (``x0 = 0``) for one fixed instruction; a short distillation writes a
student run that `robot-rl eval` and `robot-rl export` take. Those need lerobot, transformers and torchvision (CI's
`.venv-lerobot` step) and skip elsewhere, naming the package; the refusals are decided before anything of LeRobot
loads, so they run everywhere.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from robot_rl.cli import main
from robot_rl.distill import DistillError, UnsupportedTeacherError, load_teacher
from robot_rl.sims.lang_reach import LangReachConfig
from robot_rl.sims.reach_pixels import ReachPixelsConfig

INSTRUCTION = "reach the green target"
WORDS = "reach the red green blue target".split()
MISSING = [m for m in ("lerobot", "transformers", "torchvision") if importlib.util.find_spec(m) is None]
needs_lerobot = pytest.mark.skipif(bool(MISSING), reason=f"needs {', '.join(MISSING)}: bash "
                                   "scripts/install-lerobot.sh VENV (CI's .venv-lerobot)")


@pytest.fixture(scope="module")
def smolvla_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random SmolVLA for reach_pixels: camera ``top``, state 4, action 2, chunks of 4."""
    from robot_rl.testing.tiny_smolvla import build_tiny_smolvla

    return build_tiny_smolvla(tmp_path_factory.mktemp("smolvla"), {"top": (16, 16)}, state_dim=4, action_dim=2,
                              chunk_size=4, words=WORDS)


@pytest.fixture
def fake_smolvla(tmp_path: Path) -> Path:
    """A directory that names itself a SmolVLA (its config.json), enough for every refusal."""
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "config.json").write_text('{"type": "smolvla"}')
    return tmp_path / "fake"


@needs_lerobot
def test_the_smolvla_teacher_labels_with_its_noise_free_chunk(smolvla_dir: Path) -> None:
    task = ReachPixelsConfig(image_size=16)
    teacher = load_teacher(smolvla_dir, task=task, instruction=INSTRUCTION)
    assert teacher.kind == "lerobot_smolvla" and teacher.instruction == INSTRUCTION and not teacher.squashed
    env = task.make("cpu", 0, num_envs=3)
    obs = env.reset(seed=0)
    action, u = teacher.label(obs)
    assert u is None and action.shape == (3, 2) and bool(torch.isfinite(action).all())
    torch.testing.assert_close(teacher.label(obs)[0], action, rtol=0, atol=0)  # deterministic
    # It is LeRobot's own sampler from x0 = 0 over the whole padded chunk, postprocessed, first step, clamped.
    base = teacher.policy.base  # type: ignore[attr-defined]
    lcfg = base.policy.config
    chunk = base.postprocess(base.policy.predict_action_chunk(
        base._batch(obs), noise=torch.zeros(3, lcfg.chunk_size, lcfg.max_action_dim)))
    torch.testing.assert_close(action, chunk[:, 0, :2].float().clamp(-1, 1))
    noisy, _ = teacher.policy.act(obs, deterministic=False)
    assert not torch.allclose(noisy, action)
    # The instruction is an input of the teacher: another fixed text gives other labels.
    other = load_teacher(smolvla_dir, task=task, instruction="reach the red target")
    assert not torch.allclose(other.label(obs)[0], action)


@needs_lerobot
def test_a_short_distillation_writes_a_student_run_that_eval_and_export_take(smolvla_dir: Path, tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]
                                                                              ) -> None:
    out = tmp_path / "student"
    args = ["distill", str(smolvla_dir), "--task", "reach_pixels", "--instruction", INSTRUCTION, "--image-size",
            "16", "--channels", "4", "--features", "8", "--hidden", "16", "--rounds", "2", "--steps-per-round", "2",
            "--num-envs", "4", "--updates-per-round", "3", "--batch-size", "8", "--eval-episodes", "2", "--export",
            "none", "--out", str(out)]
    assert main(args) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert "(lerobot_smolvla)" in text and f"fixed instruction: '{INSTRUCTION}'" in text and "| teacher |" in text
    assert (out / "config.yaml").is_file() and (out / "distill.json").is_file()
    assert main(["eval", str(out), "--episodes", "2"]) == 0
    assert main(["export", str(out), "--format", "c", "--variants", "float32", "--num-random", "0",
                 "--num-recorded", "8", "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "c" / "float32" / "policy.c").is_file()


@needs_lerobot
def test_a_checkpoint_that_does_not_fit_the_task_lists_the_differences(tmp_path: Path) -> None:
    from robot_rl.testing.tiny_smolvla import build_tiny_smolvla

    ckpt = build_tiny_smolvla(tmp_path / "front", {"front": (16, 16)}, state_dim=6, action_dim=2, chunk_size=4,
                              words=WORDS)
    with pytest.raises(DistillError, match=r"(?s)cannot act in reach_pixels.*camera 'front'.*state: env \[4\]"):
        load_teacher(ckpt, task="reach_pixels", instruction=INSTRUCTION)


def test_a_multi_instruction_task_is_refused_unless_one_instruction_is_fixed(fake_smolvla: Path) -> None:
    with pytest.raises(UnsupportedTeacherError, match=r"gives 3 instructions .*'reach the red target'.*--instruction"):
        load_teacher(fake_smolvla, task=LangReachConfig())
    # lang_reach draws its instruction per episode: fixing one would contradict its goal, so it is refused too.
    with pytest.raises(UnsupportedTeacherError, match="draws its instruction per episode"):
        load_teacher(fake_smolvla, task="lang_reach", instruction="reach the red target")


def test_lerobot_teacher_input_errors_say_what_to_do(fake_smolvla: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["distill", str(fake_smolvla), "--instruction", INSTRUCTION]) == 2
    assert "records no task: name the task it acts in with --task" in capsys.readouterr().err
    assert main(["distill", str(fake_smolvla), "--task", "reach_pixels"]) == 2
    assert "pass --instruction" in capsys.readouterr().err
    assert main(["distill", str(fake_smolvla), "--task", "no_such_task", "--instruction", INSTRUCTION]) == 2
    assert "unknown task 'no_such_task'" in capsys.readouterr().err
    assert main(["distill", str(fake_smolvla), "--task", "lang_reach"]) == 2
    assert "gives 3 instructions" in capsys.readouterr().err
    with pytest.raises(DistillError, match="for a LeRobot checkpoint teacher"):
        load_teacher(tmp_path, task="reach_pixels")  # a run (here: not even one) takes no --task
    (fake_smolvla / "config.json").write_text('{"type": "act"}')
    with pytest.raises(UnsupportedTeacherError, match="LeRobot act policy: LeRobot teachers are the flow VLAs"):
        load_teacher(fake_smolvla, task="reach_pixels", instruction=INSTRUCTION)
    if MISSING and "lerobot" in MISSING:
        (fake_smolvla / "config.json").write_text('{"type": "smolvla"}')
        with pytest.raises(UnsupportedTeacherError, match="needs lerobot, which is not installed"):
            load_teacher(fake_smolvla, task="reach_pixels", instruction=INSTRUCTION)


# LeRobot's models and arms, in their own venv (.ci/run): seconds of CPU a test, not the unit tier.
pytestmark = pytest.mark.integration
