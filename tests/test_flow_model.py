"""Flow-VLA policy: sampler and loss on toy distributions, Flow-Noise likelihoods, chunk execution, I/O, bad input."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from robot_rl.core.specs import ArraySpec, EnvSpec, SpecMismatchError
from robot_rl.policies.flow.chunking import ChunkExecutor, ChunkExecutorConfig
from robot_rl.policies.flow.model import FlowVLAConfig, FlowVLAPolicy
from robot_rl.policies.flow.sft import chunk_dataset, load_flow_policy, save_flow_policy
from robot_rl.sims.lang_reach import LangReachConfig
from robot_rl.tokenizer import HashTokenizer, InstructionTooLongError

TINY = dict(hidden=32, expert_layers=2, image_features=8, cnn_channels=4, cnn_layers=2, state_features=8,
            lang_features=8)


def _state_spec(action_dim: int = 1) -> EnvSpec:
    return EnvSpec({"state": ArraySpec((1,), "float32")}, ArraySpec((action_dim,), "float32"))


def _lang_spec(horizon: int = 1) -> EnvSpec:
    return LangReachConfig(num_envs=2, image_size=16, chunk_horizon=horizon).make("cpu", 0).spec


def _gaussian_velocity(m: float, s: float):
    """The exact rectified-flow velocity from N(0, 1) to N(m, s²): E[x1 − x0 | x_t]."""
    def v(x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        t = t[:, None, None]
        var = (1 - t) ** 2 + t**2 * s**2
        centred = x - t * m
        return m + t * s**2 / var * centred - (1 - t) / var * centred
    return v


@pytest.mark.parametrize(("integrator", "steps"), [("euler", 50), ("midpoint", 8)])
def test_sampler_with_the_exact_velocity_reaches_the_target_gaussian(integrator: str, steps: int) -> None:
    policy = FlowVLAPolicy(_state_spec(), FlowVLAConfig(horizon=1, num_steps=steps, integrator=integrator, **TINY))
    policy.velocity = _gaussian_velocity(1.5, 0.5)  # type: ignore[method-assign]
    gen = torch.Generator().manual_seed(0)
    x = policy.sample({"state": torch.zeros(20000, 1)}, generator=gen).flatten()
    assert abs(float(x.mean()) - 1.5) < 0.03
    assert abs(float(x.std()) - 0.5) < 0.03


def test_flow_matching_learns_a_two_mode_mixture() -> None:
    torch.manual_seed(0)
    cfg = FlowVLAConfig(horizon=1, num_steps=20, hidden=64, expert_layers=2, state_features=8)
    policy = FlowVLAPolicy(_state_spec(), cfg)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(1)
    for _ in range(600):
        sign = torch.randint(0, 2, (256, 1, 1), generator=gen) * 2.0 - 1.0
        target = 2.0 * sign + 0.25 * torch.randn(256, 1, 1, generator=gen)
        loss = policy.flow_matching_loss({"state": torch.zeros(256, 1)}, target, generator=gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        x = policy.sample({"state": torch.zeros(4000, 1)}, generator=gen).flatten()
    # Known answers of 0.5·N(−2, 0.25²) + 0.5·N(2, 0.25²): mean 0, E[x²] = 4.0625, half the mass above 0.
    assert abs(float(x.mean())) < 0.25
    assert abs(float(x.square().mean()) - 4.0625) < 0.6
    assert abs(float((x > 0).float().mean()) - 0.5) < 0.1
    assert float((x.abs() < 1.0).float().mean()) < 0.12  # two modes, not one blob in the middle


@pytest.mark.parametrize("integrator", ["euler", "midpoint"])
def test_flow_noise_log_likelihood_matches_a_direct_gaussian_computation(integrator: str) -> None:
    torch.manual_seed(0)
    spec = _lang_spec(horizon=3)
    policy = FlowVLAPolicy(spec, FlowVLAConfig(horizon=3, num_steps=4, integrator=integrator, init_noise_std=0.2,
                                               context_length=8, **TINY))
    with torch.no_grad():
        policy.log_sigma.add_(0.1 * torch.randn_like(policy.log_sigma))
    obs = LangReachConfig(num_envs=5, image_size=16, chunk_horizon=3).make("cpu", 1).reset()
    with torch.no_grad():
        chain, log_prob = policy.sample_chain(obs)
        cond = policy.encoder(obs)
        direct = torch.distributions.Normal(0.0, 1.0).log_prob(chain[:, 0]).flatten(1).sum(-1)
        for k in range(4):
            mean = policy._mean_step(chain[:, k], k, cond)
            step = torch.distributions.Normal(mean, policy.log_sigma[k].exp())
            direct += step.log_prob(chain[:, k + 1]).flatten(1).sum(-1)
        again = policy.chain_log_prob(chain, obs)
    assert chain.shape == (5, 5, 3, 2)
    torch.testing.assert_close(log_prob, direct, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(again, direct, rtol=1e-4, atol=1e-3)


def test_receding_horizon_execution() -> None:
    calls: list[int] = []

    def predict() -> torch.Tensor:
        calls.append(len(calls))
        base = 10.0 * len(calls)
        return (base + torch.arange(4.0)).view(1, 4, 1).repeat(2, 1, 1)  # chunk c: 10c, 10c+1, ...

    ex = ChunkExecutor(ChunkExecutorConfig(execute_steps=2), num_envs=2, horizon=4, action_dim=1)
    got = [ex.act(predict)[:, 0].tolist() for _ in range(3)]
    assert got == [[10.0, 10.0], [11.0, 11.0], [20.0, 20.0]]
    ex.reset(torch.tensor([True, False]))  # env 0 starts a new episode: it replans, env 1 continues
    assert ex.act(predict)[:, 0].tolist() == [30.0, 21.0]
    assert len(calls) == 3


def test_temporal_ensembling_weights_older_predictions_by_exp_minus_m_i() -> None:
    m = 0.5
    ex = ChunkExecutor(ChunkExecutorConfig(mode="ensemble", ensemble_decay=m), num_envs=1, horizon=3, action_dim=1)
    chunks = [torch.tensor([[[1.0], [2.0], [3.0]]]), torch.tensor([[[5.0], [6.0], [7.0]]]),
              torch.tensor([[[9.0], [10.0], [11.0]]])]
    out = [float(ex.act(lambda c=c: c)) for c in chunks]
    w = [math.exp(-m * i) for i in range(3)]
    assert out[0] == pytest.approx(1.0)
    assert out[1] == pytest.approx((w[0] * 2.0 + w[1] * 5.0) / (w[0] + w[1]))
    assert out[2] == pytest.approx((w[0] * 3.0 + w[1] * 6.0 + w[2] * 9.0) / sum(w))
    ex.reset()
    assert float(ex.act(lambda: chunks[2])) == pytest.approx(9.0)


def test_save_load_round_trip(tmp_path: Path) -> None:
    spec = _lang_spec()
    policy = FlowVLAPolicy(spec, FlowVLAConfig(horizon=4, num_steps=3, expert="transformer", **TINY))
    save_flow_policy(tmp_path, policy, spec, step=7)
    loaded, loaded_spec = load_flow_policy(tmp_path)
    assert loaded_spec == spec and loaded.cfg == policy.cfg
    obs = LangReachConfig(num_envs=3, image_size=16).make("cpu", 2).reset()
    a, _ = policy.act(obs, deterministic=True)
    b, _ = loaded.act(obs, deterministic=True)
    assert a.shape == (3, 4, 2)
    torch.testing.assert_close(a, b)


def test_tokenizer_instructions_are_distinct_and_too_long_is_an_error() -> None:
    tok = HashTokenizer(vocab_size=256, context_length=4)
    ids = tok.encode_batch([f"reach the {c} target" for c in ("red", "green", "blue")])
    assert len({tuple(r.tolist()) for r in ids}) == 3 and ids.dtype == torch.int64
    with pytest.raises(InstructionTooLongError, match="more than the language context of 4"):
        tok.encode("please reach the red target now")
    assert HashTokenizer(64, 32, mode="char").encode("ab").tolist()[:3] != [0, 0, 0]


def test_bad_input_gives_clear_errors() -> None:
    spec = _lang_spec()
    policy = FlowVLAPolicy(spec, FlowVLAConfig(horizon=2, num_steps=2, context_length=8, **TINY))
    obs = LangReachConfig(num_envs=2, image_size=16).make("cpu", 0).reset()
    with pytest.raises(SpecMismatchError, match=r"missing \['image\.top'\]"):
        policy.act({k: v for k, v in obs.items() if k != "image.top"})
    with pytest.raises(SpecMismatchError, match="more than the policy's context of 8"):
        policy.act({**obs, "language": torch.ones(2, 12, dtype=torch.int64)})
    with pytest.raises(SpecMismatchError, match="more than the policy's context_length=4"):
        FlowVLAPolicy(spec, FlowVLAConfig(context_length=4, **TINY))
    with pytest.raises(SpecMismatchError, match="horizon 3, the policy's is 2"):
        FlowVLAPolicy(_lang_spec(horizon=3), FlowVLAConfig(horizon=2, **TINY))
    with pytest.raises(ValueError, match="integrator"):
        FlowVLAPolicy(spec, FlowVLAConfig(integrator="rk4", **TINY))  # type: ignore[arg-type]


def test_chunk_dataset_pads_masks_and_rejects_a_horizon_mismatch() -> None:
    import numpy as np

    from robot_rl.data.episode import Episode

    spec = _state_spec(action_dim=1)
    t = 3

    def episode(action: np.ndarray) -> Episode:
        z = np.zeros(t, bool)
        return Episode({"state": np.zeros((t, 1), np.float32)}, action, np.zeros(t, np.float32), z, z, z, z)

    data = chunk_dataset([episode(np.arange(3, dtype=np.float32)[:, None])], spec, horizon=2)
    assert data.actions[:, :, 0].tolist() == [[0, 1], [1, 2], [2, 2]]
    assert data.mask.tolist() == [[1, 1], [1, 1], [1, 0]]
    with pytest.raises(SpecMismatchError, match="action chunks have horizon 5, the policy's is 2"):
        chunk_dataset([episode(np.zeros((t, 5, 1), np.float32))], spec, horizon=2)


def test_keypoint_gain_sharpens_a_small_object_towards_its_true_position() -> None:
    from robot_rl.policies.flow.model import SpatialSoftmaxCamera

    # A 3x3 red blob on grey in a 48x48 image; one conv layer that responds to "redness" only.
    image = torch.full((1, 48, 48, 3), 128, dtype=torch.uint8)
    image[0, 35:38, 39:42] = torch.tensor([225, 30, 30], dtype=torch.uint8)
    keypoints = {}
    for gain in (1.0, 30.0):
        cam = SpatialSoftmaxCamera((48, 48, 3), features=4, channels=1, num_layers=1, gain=gain)
        with torch.no_grad():
            cam.convs[0].weight.zero_()
            cam.convs[0].weight[0, :, 1, 1] = torch.tensor([1.0, -1.0, -1.0])
            cam.convs[0].bias.zero_()
            kx, ky = cam.keypoints(image)
        keypoints[gain] = (kx.item(), ky.item())
        assert cam.log_gain.requires_grad  # learned with the rest of the encoder
    # The blob's centre (pixel 40, 36 of 48) in the map's [-1, 1] coordinates.
    true_x, true_y = 2 * 20 / 23 - 1, 2 * 18 / 23 - 1
    low, high = keypoints[1.0], keypoints[30.0]
    # At gain 1 the ~570 background cells of the 24x24 map pull the keypoint most of the way to the centre.
    assert abs(low[0]) < 0.5 * true_x and abs(low[1]) < 0.5 * true_y
    assert abs(high[0] - true_x) < 0.1 and abs(high[1] - true_y) < 0.1
    with pytest.raises(ValueError, match="keypoint_gain"):
        SpatialSoftmaxCamera((48, 48, 3), features=4, channels=1, num_layers=1, gain=0.0)


def test_checkpoint_from_before_the_keypoint_gain_loads_with_gain_one(tmp_path: Path) -> None:
    import dataclasses

    from robot_rl.checkpoint import save_checkpoint

    spec = _lang_spec()
    policy = FlowVLAPolicy(spec, FlowVLAConfig(horizon=4, num_steps=3, keypoint_gain=1.0, **TINY))
    # What an older robot_rl wrote: no keypoint_gain in the config, no log_gain weights.
    config = {k: v for k, v in dataclasses.asdict(policy.cfg).items() if k != "keypoint_gain"}
    weights = {k: v for k, v in policy.state_dict().items() if not k.endswith("log_gain")}
    save_checkpoint(tmp_path, 3, {"policy": weights}, {"kind": "flow_vla", "flow_config": config,
                                                        "spec": spec.to_dict()})
    loaded, _ = load_flow_policy(tmp_path)
    assert loaded.cfg.keypoint_gain == 1.0
    obs = LangReachConfig(num_envs=3, image_size=16).make("cpu", 2).reset()
    torch.testing.assert_close(loaded.act(obs, deterministic=True)[0], policy.act(obs, deterministic=True)[0])
