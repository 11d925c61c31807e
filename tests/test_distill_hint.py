"""The feature hint of distillation (robot_rl/distill/hint.py): which teachers give features, the standardised
regression term, and that it trains the student's encoder through one pass (and not at all when switched off)."""

from __future__ import annotations

import pytest
import torch

from robot_rl.distill import DaggerConfig, StudentConfig, Teacher
from robot_rl.distill.dagger import Collector, LabelledData, RolloutEnvs, distill_losses, fit
from robot_rl.distill.hint import FeatureHint, teacher_features
from robot_rl.distill.student import build_student
from robot_rl.policies.flow.model import FlowVLAConfig
from robot_rl.policies.sac import SACConfig
from robot_rl.sims.lang_reach import LangReachConfig
from robot_rl.sims.reach_pixels import ReachPixelsConfig
from robot_rl.sims.reach_pixels_expert import ReachPixelsExpert


def _pixel_task() -> ReachPixelsConfig:
    return ReachPixelsConfig(image_size=16)


def _sac_teacher(task: ReachPixelsConfig) -> Teacher:
    env = task.make("cpu", 0, num_envs=1)
    policy = SACConfig(image_channels=4, image_features=8, actor_hidden=(16,)).build_policy(env.spec, "cpu", 0)
    env.close()
    return Teacher.from_policy(policy, task, kind="sac")


def test_sac_and_flow_teachers_give_their_encoders_features_and_a_scripted_expert_none():
    task = _pixel_task()
    obs = task.make("cpu", 0, num_envs=3).reset(seed=0)
    sac = _sac_teacher(task)
    features = teacher_features(sac.policy, obs)
    assert features is not None and features.shape == (3, 8 + 4)  # camera features + the 4 state values
    assert torch.equal(features, sac.policy.encode(obs).float())  # type: ignore[operator]
    assert teacher_features(ReachPixelsExpert(task), obs) is None
    lang = LangReachConfig(num_targets=1, observe_language=False, chunk_horizon=2, image_size=16)
    env = lang.make("cpu", 0, num_envs=2)
    flow = FlowVLAConfig(horizon=2, num_steps=2, hidden=16, expert_layers=1, image_features=8, cnn_channels=4,
                         cnn_layers=2, state_features=8)
    from robot_rl.policies.flow.model import FlowVLAPolicy

    policy = FlowVLAPolicy(env.spec, flow)
    flow_features = teacher_features(policy, env.reset(seed=0))
    assert flow_features is not None and flow_features.shape == (2, policy.encoder.out_dim)


def test_the_hint_regresses_standardised_teacher_features_through_a_linear_map():
    reference = torch.tensor([[0.0, 5.0, 1.0], [2.0, 5.0, 3.0]])  # the middle feature never varies: std floored
    hint = FeatureHint(4, reference)
    assert torch.allclose(hint.mean, torch.tensor([1.0, 5.0, 2.0]))
    assert torch.allclose(hint.std, torch.tensor([2.0**0.5, 1e-2, 2.0**0.5]))
    with torch.no_grad():
        hint.proj.weight.zero_()
        hint.proj.bias.copy_(torch.tensor([0.5, 0.0, -1.0]))
    got = hint.loss(torch.randn(2, 4), reference)
    target = (reference - hint.mean) / hint.std
    assert torch.allclose(got, (torch.tensor([0.5, 0.0, -1.0]) - target).square().mean())


@pytest.mark.parametrize("weight", [1.0, 0.0])
def test_collected_rows_carry_teacher_features_only_when_the_hint_is_on(weight):
    task = _pixel_task()
    teacher = _sac_teacher(task)
    envs = RolloutEnvs(task, task, 4, torch.device("cpu"), seed=0)
    student = build_student(envs.student_spec, StudentConfig(channels=2, features=4, hidden=(8,)), "cpu", 0)
    cfg = DaggerConfig(num_envs=4, feature_weight=weight)
    data = LabelledData(100)
    Collector(envs, teacher, student, cfg, seed=0).collect(data, beta=1.0, steps=3)
    envs.close()
    assert len(data) == 12
    assert ("features" in data.labels) == (weight > 0)
    if weight > 0:
        assert data.labels["features"].shape == (12, 12)


def test_fit_with_a_hint_trains_the_encoder_towards_the_teachers_features():
    task = _pixel_task()
    teacher = _sac_teacher(task)
    envs = RolloutEnvs(task, task, 16, torch.device("cpu"), seed=0)
    # Another seed than the teacher's: the same architecture and seed would be the teacher itself.
    student = build_student(envs.student_spec, StudentConfig(channels=4, features=8, hidden=(16,)), "cpu", 1)
    data = LabelledData(1000)
    Collector(envs, teacher, student, DaggerConfig(num_envs=16), seed=0).collect(data, beta=1.0, steps=8)
    envs.close()
    hint = FeatureHint(student.encoder.out_dim, data.labels["features"])
    obs, labels = data.sample(128, torch.Generator().manual_seed(0), torch.device("cpu"))
    loss0, hint0 = distill_losses(student, obs, labels, hint=hint)
    no_hint, none = distill_losses(student, obs, labels)
    assert none is None and hint0 is not None and torch.allclose(loss0, no_hint)  # the same action loss, one pass
    optim = torch.optim.Adam([*student.parameters(), *hint.proj.parameters()], lr=3e-3)
    loss, hint_loss = fit(student, data, optim, 300, 64, torch.Generator().manual_seed(1), torch.device("cpu"),
                          hint=hint, hint_weight=1.0)
    assert hint_loss is not None and hint_loss < 0.5 * float(hint0.detach())
    assert loss < 0.5 * float(loss0.detach())
