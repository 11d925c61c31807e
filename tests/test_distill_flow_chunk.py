"""A flow chunk teacher (H > 1) distilled into a student that predicts whole chunks, on ``lang_reach`` without
language (one target, ``observe_language: false``), and that task variant's own contract."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.config_io import to_dict
from robot_rl.distill import DaggerConfig, DistillConfig, StudentConfig, distill, load_teacher
from robot_rl.distill.student import save_student_run
from robot_rl.policies.flow.model import FlowVLAConfig
from robot_rl.policies.flow.ppo import FlowPPOConfig
from robot_rl.policy_io import load_policy
from robot_rl.sims.lang_reach import LangReachConfig, LangReachDemonstrator

H = 4


def _task(**kw: object) -> LangReachConfig:
    base: dict[str, object] = dict(num_targets=1, observe_language=False, chunk_horizon=H, image_size=16)
    return LangReachConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_without_language_the_task_observes_camera_and_state_only_and_needs_one_target():
    env = _task().make("cpu", 0, num_envs=3)
    obs = env.reset(seed=0)
    assert set(env.spec.observation) == {"image.top", "state"} == set(obs)
    assert env.spec.action.shape == (H, 2)
    # The scripted expert still reaches the one target it sees.
    expert = LangReachDemonstrator(env)
    done = torch.zeros(3, dtype=torch.bool)
    for _ in range(40):
        result = env.step(expert.act(obs)[0])
        obs, done = result.obs, done | result.info["success"]
    assert bool(done.all())
    with pytest.raises(ValueError, match="observe_language=false needs num_targets=1"):
        LangReachConfig(num_targets=2, observe_language=False).make("cpu", 0, num_envs=1)
    assert "language" in LangReachConfig(num_targets=1).make("cpu", 0, num_envs=1).spec.observation


def _flow_run(path: Path, task: LangReachConfig) -> Path:
    algo = FlowPPOConfig(policy=FlowVLAConfig(horizon=H, num_steps=2, hidden=16, expert_layers=1, image_features=8,
                                              cnn_channels=4, cnn_layers=2, state_features=8))
    env = task.make("cpu", 0, num_envs=1)
    spec = env.spec
    env.close()
    save_student_run(path, {"task": to_dict(task), "algo": to_dict(algo)}, spec, algo.build_policy(spec, "cpu", 0),
                     {"env_steps": 1})
    return path


@pytest.mark.integration
def test_a_flow_chunk_teacher_distils_into_a_student_of_whole_chunks_exported_to_c(tmp_path):
    task = _task()
    teacher = load_teacher(_flow_run(tmp_path / "flow", task))
    obs = task.make("cpu", 0, num_envs=5).reset(seed=0)
    label, u = teacher.label(obs)
    chunk, _ = teacher.policy.act(obs, deterministic=True)
    assert u is None and label.shape == (5, H, 2) and torch.equal(label, chunk)
    cfg = DistillConfig(run_dir=tmp_path / "flow", out=tmp_path / "student",
                        student=StudentConfig(kind="small_cnn", channels=4, features=8, hidden=(16,)),
                        dagger=DaggerConfig(rounds=2, steps_per_round=3, num_envs=8, updates_per_round=50,
                                            batch_size=16),
                        eval_episodes=4, eval_num_envs=4, export_num_random=0, export_num_recorded=16)
    report = distill(cfg)
    assert report.teacher_kind == "flow_ppo" and report.export_error is None
    assert report.rounds[-1]["loss"] < report.rounds[0]["loss"] or report.rounds[0]["loss"] < 1e-3
    student = load_policy(tmp_path / "student").policy
    action, _ = student.act(obs, deterministic=True)
    assert action.shape == (5, H, 2) and bool((action.abs() <= 1).all())
    export = tmp_path / "student" / "export"
    header = (export / "float32" / "policy.h").read_text()
    assert f"#define POLICY_ACTION_DIM {H * 2}" in header
    assert np.isfinite(report.student_eval["success_rate"])
