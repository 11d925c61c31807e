"""SAC: hand-computed losses, temperature direction, Polyak numbers, determinism, checkpoints, pixels."""

import math
import os

import pytest
import torch
import torch.nn.functional as F

from robot_rl.core.config import ALGOS
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.modules.cnn import ConvEncoder, random_shift
from robot_rl.policies.sac import SACAlgorithm, SACConfig, SACPolicy
from robot_rl.replay.buffer import MixingSampler, ReplayBuffer

STATE_SPEC = EnvSpec(observation={"state": ArraySpec((3,))}, action=ArraySpec((2,), "float32", -1.0, 1.0))
SMALL = {"actor_hidden": (32, 32), "critic_hidden": (32, 32), "batch_size": 16}


def random_batch(spec: EnvSpec, n: int, seed: int) -> TransitionBatch:
    g = torch.Generator().manual_seed(seed)

    def obs():
        return {k: (torch.randint(0, 256, (n, *s.shape), generator=g, dtype=torch.uint8) if s.dtype == "uint8"
                    else torch.randn(n, *s.shape, generator=g)) for k, s in spec.observation.items()}

    low, high = spec.action.low, spec.action.high
    return TransitionBatch(
        obs=obs(), action=torch.rand(n, *spec.action.shape, generator=g) * (high - low) + low,
        reward=torch.randn(n, generator=g), terminated=torch.rand(n, generator=g) < 0.2,
        truncated=torch.zeros(n, dtype=torch.bool), next_obs=obs(), intervened=torch.zeros(n, dtype=torch.bool),
        policy_version=torch.zeros(n, dtype=torch.int64), env_index=torch.arange(n),
    )


def all_state(algo: SACAlgorithm) -> dict[str, torch.Tensor]:
    out = {f"actor.{k}": v for k, v in algo.actor.state_dict().items()}
    out |= {f"critic.{k}": v for k, v in algo.critic.state_dict().items()}
    out |= {f"target.{k}": v for k, v in algo.critic_target.state_dict().items()}
    out["log_alpha"] = algo.log_alpha.detach()
    return out


def assert_same_state(a: SACAlgorithm, b: SACAlgorithm) -> None:
    sa, sb = all_state(a), all_state(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


# ---- hand-computed losses ------------------------------------------------------------------


def tiny_algo(**kw) -> SACAlgorithm:
    """Linear actor and critics with weights set by hand (state and action are 1-d, bounds ±1)."""
    spec = EnvSpec(observation={"state": ArraySpec((1,))}, action=ArraySpec((1,), "float32", -1.0, 1.0))
    algo = SACConfig(actor_hidden=(), critic_hidden=(), gamma=0.99, **kw).build(spec, "cpu", seed=0)
    with torch.no_grad():
        linear = algo.actor.trunk[0]
        linear.weight.zero_()
        linear.bias.copy_(torch.tensor([0.3, 0.0]))  # μ = 0.3, log σ = −5 + 3.5·(tanh 0 + 1) = −1.5
        algo.critic.q.weights[0].copy_(torch.tensor([[[1.0], [2.0]], [[-1.0], [0.5]]]))  # Q = w_s·s + w_a·a + b
        algo.critic.q.biases[0].copy_(torch.tensor([[[0.1]], [[0.0]]]))
    algo.critic_target.load_state_dict(algo.critic.state_dict())
    return algo


# With ε = 0: u = 0.3, a' = tanh 0.3, log π = 1.5 − ½ log 2π − 2(log 2 − 0.3 − softplus(−0.6)).
A_NEXT = math.tanh(0.3)
LOG_PI = 1.5 - 0.5 * math.log(2 * math.pi) - 2 * (math.log(2) - 0.3 - math.log1p(math.exp(-0.6)))
ALPHA = 0.5


def test_critic_target_and_loss_by_hand():
    algo = tiny_algo(num_critics=2)
    s, a, s2 = torch.tensor([[0.5], [0.5]]), torch.tensor([[0.2], [0.2]]), torch.tensor([[1.0], [1.0]])
    loss, q_mean, _ = algo.critic_loss({"state": s}, a, torch.tensor([1.0, 1.0]), torch.tensor([False, True]),
                                       {"state": s2}, torch.zeros(2, 1), None, torch.tensor(ALPHA))
    q1_next, q2_next = 1.0 + 2.0 * A_NEXT + 0.1, -1.0 + 0.5 * A_NEXT
    y = [1.0 + 0.99 * (min(q1_next, q2_next) - ALPHA * LOG_PI), 1.0]  # terminated row: y = r
    q1, q2 = 0.5 + 0.4 + 0.1, -0.5 + 0.1
    expected = 0.5 * (sum((q1 - t) ** 2 for t in y) / 2 + sum((q2 - t) ** 2 for t in y) / 2)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert q_mean.item() == pytest.approx((q1 + q2) / 2)
    # A random subset {member 0} (REDQ): the target takes its value instead of the min.
    loss_sub, _, _ = algo.critic_loss({"state": s[:1]}, a[:1], torch.tensor([1.0]), torch.tensor([False]),
                                      {"state": s2[:1]}, torch.zeros(1, 1), torch.tensor([0]), torch.tensor(ALPHA))
    y_sub = 1.0 + 0.99 * (q1_next - ALPHA * LOG_PI)
    assert loss_sub.item() == pytest.approx(0.5 * ((q1 - y_sub) ** 2 + (q2 - y_sub) ** 2), rel=1e-5)


def test_actor_loss_by_hand_min_and_ensemble_mean():
    s = torch.tensor([[0.5]])
    q1, q2 = 0.5 + 2.0 * A_NEXT + 0.1, -0.5 + 0.5 * A_NEXT
    loss, log_prob = tiny_algo(num_critics=2).actor_loss(s, torch.zeros(1, 1), torch.tensor(ALPHA))
    assert log_prob.item() == pytest.approx(LOG_PI, rel=1e-5)
    assert loss.item() == pytest.approx(ALPHA * LOG_PI - min(q1, q2), rel=1e-5)
    loss, _ = tiny_algo(num_critics=2, num_critics_sampled=1).actor_loss(s, torch.zeros(1, 1), torch.tensor(ALPHA))
    assert loss.item() == pytest.approx(ALPHA * LOG_PI - (q1 + q2) / 2, rel=1e-5)


def test_log_prob_matches_torch_distributions():
    algo = SACConfig(**SMALL).build(STATE_SPEC, "cpu", seed=0)
    features, noise = torch.randn(64, 3), torch.randn(64, 2)
    action, log_prob = algo.actor.sample(features, noise)
    mean, log_std = algo.actor.gaussian(features)
    base = torch.distributions.Normal(mean, log_std.exp())
    u = mean + log_std.exp() * noise
    reference = (base.log_prob(u) - torch.log1p(-torch.tanh(u) ** 2 + 1e-12)).sum(-1)
    torch.testing.assert_close(log_prob, reference, rtol=1e-4, atol=1e-4)
    assert torch.equal(action, torch.tanh(u))


@pytest.mark.parametrize(("target_entropy", "grows"), [(5.0, True), (-50.0, False)])
def test_temperature_moves_towards_the_entropy_target(target_entropy, grows):
    algo = SACConfig(**SMALL, target_entropy=target_entropy).build(STATE_SPEC, "cpu", seed=0)
    stats = algo.update(random_batch(STATE_SPEC, 16, 0))
    alpha_after = algo.log_alpha.exp().item()
    assert stats["alpha"] == pytest.approx(1.0)  # α used in this update: the initial temperature
    assert (alpha_after > 1.0) == grows and alpha_after != 1.0
    # L_α = −log α · (mean log π + H̄), with log α = 0 before the step.
    assert stats["temperature_loss"] == pytest.approx(0.0, abs=1e-7)
    fixed = SACConfig(**SMALL, target_entropy=target_entropy, autotune_entropy=False).build(STATE_SPEC, "cpu", 0)
    fixed.update(random_batch(STATE_SPEC, 16, 0))
    assert fixed.log_alpha.item() == 0.0


def test_polyak_numbers():
    algo = SACConfig(**SMALL, tau=0.25).build(STATE_SPEC, "cpu", seed=0)
    with torch.no_grad():
        for p in algo.critic.parameters():
            p.fill_(1.0)
        for p in algo.critic_target.parameters():
            p.fill_(-1.0)
    algo.soft_update_targets()  # −1 + 0.25·(1 − (−1)) = −0.5
    for p in algo.critic_target.parameters():
        assert torch.all(p == -0.5)
    algo.soft_update_targets()  # −0.5 + 0.25·1.5 = −0.125
    for p in algo.critic_target.parameters():
        assert torch.all(p == -0.125)


def test_update_applies_polyak_to_the_updated_critic():
    algo = SACConfig(**SMALL, tau=0.1).build(STATE_SPEC, "cpu", seed=0)
    algo.update(random_batch(STATE_SPEC, 16, 0))
    before = [p.clone() for p in algo.critic_target.parameters()]
    stats = algo.update(random_batch(STATE_SPEC, 16, 1))
    for old, new, online in zip(before, algo.critic_target.parameters(), algo.critic.parameters()):
        torch.testing.assert_close(new, old + 0.1 * (online - old))
    assert set(stats) >= {"critic_loss", "actor_loss", "alpha", "entropy", "q_mean"}
    assert algo.num_updates == 2


# ---- determinism and checkpoints ------------------------------------------------------------


def run_updates(algo: SACAlgorithm, seeds) -> list[dict[str, float]]:
    return [algo.update(random_batch(algo.spec, 16, s)) for s in seeds]


def test_same_seed_same_parameters_different_seed_differs():
    a, b, c = (SACConfig(**SMALL, num_critics=4, num_critics_sampled=2).build(STATE_SPEC, "cpu", seed)
               for seed in (0, 0, 1))
    assert run_updates(a, range(5)) == run_updates(b, range(5))
    run_updates(c, range(5))
    assert_same_state(a, b)
    assert not torch.equal(a.critic.q.weights[1], c.critic.q.weights[1])


def test_state_dict_round_trip_continues_identically(tmp_path):
    cfg = SACConfig(**SMALL, normalize_obs=True, critic_layer_norm=True)
    a = cfg.build(STATE_SPEC, "cpu", seed=0)
    run_updates(a, range(3))
    torch.save(a.state_dict(), tmp_path / "sac.pt")
    b = cfg.build(STATE_SPEC, "cpu", seed=123)
    b.load_state_dict(torch.load(tmp_path / "sac.pt", weights_only=True))
    assert b.num_updates == 3 and b.actor.encoder.normalizer.count.item() == 48
    assert_same_state(a, b)
    # Optimiser moments, normaliser statistics and the RNG came along: the next updates match exactly.
    assert run_updates(a, range(3, 6)) == run_updates(b, range(3, 6))
    assert_same_state(a, b)
    state = a.state_dict()
    del state["critic_optim"]
    with pytest.raises(KeyError, match="critic_optim"):
        b.load_state_dict(state)


def test_actor_weights_hold_no_critic_and_load_into_a_policy():
    cfg = SACConfig(**SMALL, normalize_obs=True)
    algo = cfg.build(STATE_SPEC, "cpu", seed=0)
    policy = algo.make_policy()
    run_updates(algo, range(3))
    weights = algo.actor_weights()
    assert not any("critic" in k or "target" in k for k in weights)
    assert "encoder.normalizer.mean" in weights and all(v.device.type == "cpu" for v in weights.values())
    obs = {"state": torch.randn(5, 3)}
    assert not torch.equal(policy.act(obs, deterministic=True)[0], algo.actor.act(obs, deterministic=True)[0])
    policy.load_actor_weights(weights)
    assert torch.equal(policy.act(obs, deterministic=True)[0], algo.actor.act(obs, deterministic=True)[0])
    other = cfg.build(STATE_SPEC, "cpu", seed=5)
    other.load_actor_weights(weights)
    assert torch.equal(other.actor.act(obs, deterministic=True)[0], algo.actor.act(obs, deterministic=True)[0])


# ---- policy, action chunks, storage ---------------------------------------------------------


def test_actions_are_scaled_into_the_spec_bounds():
    spec = EnvSpec(observation={"state": ArraySpec((3,))}, action=ArraySpec((2,), "float32", -2.0, 3.0))
    policy = SACConfig(**SMALL).build(spec, "cpu", seed=0).make_policy()
    assert isinstance(policy, SACPolicy)
    with torch.no_grad():
        policy.trunk[-1].weight.zero_()
        policy.trunk[-1].bias.copy_(torch.tensor([0.0, 0.0, 2.0, 2.0]))  # μ = 0, wide σ
    action, extras = policy.act({"state": torch.randn(2000, 3)})
    assert extras == {} and action.shape == (2000, 2)
    assert action.min() >= -2.0 and action.max() <= 3.0 and action.min() < -1.5 and action.max() > 2.5
    det, _ = policy.act({"state": torch.randn(4, 3)}, deterministic=True)
    torch.testing.assert_close(det, torch.full((4, 2), 0.5))  # tanh 0 ↦ (low + high)/2


def test_action_chunks_are_flattened_for_the_heads():
    spec = EnvSpec(observation={"state": ArraySpec((3,))}, action=ArraySpec((4, 2), "float32", -1.0, 1.0))
    algo = SACConfig(**SMALL).build(spec, "cpu", seed=0)
    assert algo.target_entropy == -8.0 and algo.actor.act_dim == 8
    action, _ = algo.actor.act({"state": torch.randn(5, 3)})
    assert action.shape == (5, 4, 2)
    stats = algo.update(random_batch(spec, 16, 0))
    assert all(math.isfinite(v) for v in stats.values())


def test_make_storage_with_demo_ratio_mixes_and_routes_interventions():
    assert isinstance(SACConfig(**SMALL).build(STATE_SPEC, "cpu", 0).make_storage(4), ReplayBuffer)
    algo = SACConfig(**SMALL, demo_ratio=0.5, buffer_size=100, demo_buffer_size=50).build(STATE_SPEC, "cpu", 0)
    storage = algo.make_storage(4)
    assert isinstance(storage, MixingSampler) and storage.buffers["demos"].capacity == 50
    batch = random_batch(STATE_SPEC, 8, 0)
    batch.intervened[:3] = True
    storage.add(batch)
    assert len(storage.buffers["online"]) == 8 and len(storage.buffers["demos"]) == 3
    assert storage.counts(16) == {"online": 8, "demos": 8}
    algo.update(storage.sample(16))


def test_registered_and_config_fields_documented():
    from robot_rl.config_io import field_docs

    assert ALGOS.get("sac") is SACConfig
    docs = field_docs(SACConfig)
    for name in ("utd_ratio", "num_critics_sampled", "demo_ratio", "compile", "normalize_obs", "target_entropy"):
        assert docs.get(name), name


def test_sac_learns_a_one_step_bandit():
    # r = −4(a − 0.5)², every step terminal: Q(s, a) = r and the greedy action is 0.5.
    torch.manual_seed(0)
    spec = EnvSpec(observation={"state": ArraySpec((1,))}, action=ArraySpec((1,), "float32", -1.0, 1.0))
    algo = SACConfig(actor_hidden=(64, 64), critic_hidden=(64, 64), actor_lr=3e-3, critic_lr=3e-3,
                     temperature_lr=3e-3, init_temperature=0.1, batch_size=128).build(spec, "cpu", seed=0)
    buf = algo.make_storage(1)
    n = 2000
    a = torch.rand(n, 1) * 2 - 1
    s = torch.rand(n, 1) * 2 - 1
    buf.add(TransitionBatch(obs={"state": s}, action=a, reward=-4 * (a[:, 0] - 0.5) ** 2,
                            terminated=torch.ones(n, dtype=torch.bool), truncated=torch.zeros(n, dtype=torch.bool),
                            next_obs={"state": s}, intervened=torch.zeros(n, dtype=torch.bool),
                            policy_version=torch.zeros(n, dtype=torch.int64),
                            env_index=torch.zeros(n, dtype=torch.int64)))
    for _ in range(300):
        algo.update(buf.sample(128, generator=algo.generator))
    greedy, _ = algo.actor.act({"state": torch.linspace(-1, 1, 11)[:, None]}, deterministic=True)
    assert (greedy - 0.5).abs().max() < 0.1, greedy.flatten()


# ---- pixels ---------------------------------------------------------------------------------


def test_random_shift_matches_a_hand_shifted_image():
    img = torch.arange(9, dtype=torch.uint8).reshape(1, 3, 3, 1)  # [[0,1,2],[3,4,5],[6,7,8]]
    # Offset (dy, dx) = (2, 0) with pad 1: rows clamp(y + 1), columns clamp(x − 1).
    out = random_shift(img, pad=1, shifts=torch.tensor([[2, 0]]))
    assert out[0, :, :, 0].tolist() == [[3, 3, 4], [6, 6, 7], [6, 6, 7]]
    assert torch.equal(random_shift(img, pad=1, shifts=torch.tensor([[1, 1]])), img)  # offset = pad: identity


def test_random_shift_equals_replicate_pad_and_crop():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (6, 10, 12, 3), generator=g, dtype=torch.uint8)
    shifts = torch.tensor([[0, 0], [8, 8], [4, 4], [1, 7], [6, 2], [3, 0]])
    out = random_shift(images, pad=4, shifts=shifts)
    padded = F.pad(images.permute(0, 3, 1, 2).float(), (4, 4, 4, 4), mode="replicate").permute(0, 2, 3, 1)
    for i, (dy, dx) in enumerate(shifts.tolist()):
        assert torch.equal(out[i], padded[i, dy:dy + 10, dx:dx + 12].to(torch.uint8)), i
    shifted = random_shift(images, pad=4, generator=torch.Generator().manual_seed(1))
    again = random_shift(images, pad=4, generator=torch.Generator().manual_seed(1))
    assert shifted.shape == images.shape and shifted.dtype == torch.uint8 and torch.equal(shifted, again)
    assert not torch.equal(shifted, images)


def test_pixel_sac_updates_encoder_through_the_critic_only():
    spec = EnvSpec(observation={"state": ArraySpec((3,)), "image.front": ArraySpec((64, 64, 3), "uint8"),
                                "image.wrist": ArraySpec((64, 64, 3), "uint8")},
                   action=ArraySpec((2,), "float32", -1.0, 1.0))
    algo = SACConfig(**{**SMALL, "batch_size": 8}, image_features=16, image_channels=8).build(spec, "cpu", 0)
    assert algo.actor.encoder.out_dim == 2 * 16 + 3
    conv = algo.actor.encoder.cnn.cameras["image_front"].convs[0].weight
    before, target_before = conv.clone(), algo.encoder_target.cnn.cameras["image_front"].convs[0].weight.clone()
    trunk_before = algo.actor.trunk[0].weight.clone()
    stats = algo.update(random_batch(spec, 8, 0))
    assert all(math.isfinite(v) for v in stats.values())
    assert not torch.equal(conv, before) and not torch.equal(algo.actor.trunk[0].weight, trunk_before)
    target_after = algo.encoder_target.cnn.cameras["image_front"].convs[0].weight
    torch.testing.assert_close(target_after, target_before + algo.cfg.tau * (conv - target_before))
    # The actor optimiser holds only the actor head: the encoder is the critic's (DrQ).
    actor_params = {id(p) for g in algo.actor_optim.param_groups for p in g["params"]}
    assert id(conv) not in actor_params
    weights = algo.actor_weights()
    assert any(k.startswith("encoder.cnn.") for k in weights) and not any("critic" in k for k in weights)
    action, _ = algo.make_policy().act(random_batch(spec, 3, 1).obs)
    assert action.shape == (3, 2)


def test_strided_cnn_shrinks_the_map_and_refuses_frames_too_small():
    # 64 → 31 (stride 2), then 29, 27, 25 at stride 1 (DrQ), or 15, 7, 3 with image_conv_stride=2.
    assert ConvEncoder((64, 64, 3), features=8, channels=4).projection[0].in_features == 4 * 25 * 25
    strided = ConvEncoder((64, 64, 3), features=8, channels=4, stride=2)
    assert strided.projection[0].in_features == 4 * 3 * 3
    assert strided(torch.randint(0, 256, (2, 64, 64, 3), dtype=torch.uint8)).shape == (2, 8)
    with pytest.raises(ValueError, match=r"too small .* at stride 2"):
        ConvEncoder((16, 16, 3), stride=2)  # 16 → 7 → 3 → 1 → nothing
    spec = EnvSpec(observation={"image.front": ArraySpec((64, 64, 3), "uint8")},
                   action=ArraySpec((2,), "float32", -1.0, 1.0))
    algo = SACConfig(**{**SMALL, "batch_size": 4}, image_channels=4, image_conv_stride=2).build(spec, "cpu", 0)
    convs = [m for m in algo.actor.encoder.cnn.cameras["image_front"].convs if isinstance(m, torch.nn.Conv2d)]
    assert [c.stride for c in convs] == [(2, 2)] * 4
    assert all(math.isfinite(v) for v in algo.update(random_batch(spec, 4, 0)).values())
    with pytest.raises(ValueError, match="image_conv_stride >= 1"):
        SACConfig(image_conv_stride=0).validate()  # named at the config, before any network is built


def test_bf16_autocast_update_is_finite_and_keeps_float32_outputs():
    algo = SACConfig(**SMALL, amp_bf16=True).build(STATE_SPEC, "cpu", seed=0)
    stats = run_updates(algo, range(3))[-1]
    assert all(math.isfinite(v) for v in stats.values())
    assert all(p.dtype == torch.float32 for p in algo.critic.parameters())
    q = algo.critic(torch.randn(4, 3), torch.zeros(4, 2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert algo.critic(torch.randn(4, 3), torch.zeros(4, 2)).dtype == torch.float32
    assert q.shape == (2, 4)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("ROBOT_RL_SLOW_TESTS"), reason="torch.compile takes ~40 s on CPU; "
                    "set ROBOT_RL_SLOW_TESTS=1")
def test_compiled_update_matches_eager():
    eager = SACConfig(**SMALL).build(STATE_SPEC, "cpu", seed=0)
    compiled = SACConfig(**SMALL, compile=True).build(STATE_SPEC, "cpu", seed=0)
    for s_eager, s_comp in zip(run_updates(eager, range(3)), run_updates(compiled, range(3))):
        for k in s_eager:
            assert s_comp[k] == pytest.approx(s_eager[k], rel=1e-4, abs=1e-5), k
    for k, v in all_state(eager).items():
        torch.testing.assert_close(all_state(compiled)[k], v, rtol=1e-4, atol=1e-5)
