"""QC-FQL (`flow_qc` with `algo.actor=fql`): the one-step policy's loss, its TD target, acting, checkpoints, the CLI."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from test_flow_qchunk import TINY, H, PreferredChunk, chunk_spec, qc_config, replay_rows, sft_run  # noqa: F401
from torch import nn

from robot_rl.policies.flow.fql import OneStepChunkPolicy, fql_loss
from robot_rl.policies.flow.qchunk import FlowQCPolicy
from robot_rl.sims.lang_reach import LangReachConfig

A = 2


def onestep(hidden: tuple[int, ...] = (64, 64)) -> OneStepChunkPolicy:
    torch.manual_seed(0)
    return OneStepChunkPolicy(3, H, A, hidden, torch.full((A,), -1.0), torch.full((A,), 1.0))


def train(policy: OneStepChunkPolicy, critic: nn.Module, flow: nn.Module, alpha: float, steps: int = 400) -> None:
    optim = torch.optim.Adam(policy.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        features, z = torch.randn(64, 3, generator=g), torch.randn(64, H, A, generator=g)
        loss, _ = fql_loss(policy, critic, features, z, flow(z), H, alpha)
        optim.zero_grad()
        loss.backward()
        optim.step()


def test_the_q_term_climbs_the_critic_and_the_distillation_term_follows_the_flow() -> None:
    target = torch.tensor([[0.5, -0.25]] * H)
    flow = nn.Tanh()  # a stand-in behaviour model: the chunk it makes of noise z is tanh(z)
    g = torch.Generator().manual_seed(2)
    features, z = torch.randn(256, 3, generator=g), torch.randn(256, H, A, generator=g)

    greedy, close, scaled = onestep(), onestep(), onestep()
    train(greedy, PreferredChunk(target), flow, alpha=0.0)
    train(close, PreferredChunk(target), flow, alpha=1e4)
    # λ = 1 / mean|Q|: scaling the critic by 1000 leaves the loss's gradient direction, and the optimum, alone.
    train(scaled, lambda f, c: 1000.0 * PreferredChunk(target)(f, c), flow, alpha=0.0)
    with torch.no_grad():
        # Alone, the Q term finds the critic's preferred chunk, at any scale of the critic.
        assert float((greedy.bounded(greedy(features, z)) - target).abs().max()) < 0.05
        assert float((scaled.bounded(scaled(features, z)) - target).abs().max()) < 0.05
        # With a large α the policy reproduces what the flow makes of each noise (it must read z to do so).
        assert float((close(features, z) - flow(z)).abs().mean()) < 0.1


@pytest.mark.integration
def test_the_td_target_bootstraps_from_the_one_step_policy_s_chunk(sft_run: Path) -> None:  # noqa: F811
    spec = chunk_spec()
    algo = qc_config(sft_run, actor="fql", execute_steps=2, target="min", fql_warmup_steps=0).build(spec, "cpu", 0)
    assert algo.actor.onestep is not None
    out = algo.actor.onestep.net[-1]
    with torch.no_grad():  # the one-step policy answers one chunk whatever the state and noise: 0.3, -0.6, …
        out.weight.zero_()
        out.bias.copy_(torch.tensor([0.3, -0.6] * H))
    algo.critic_target = PreferredChunk(torch.zeros(2 * A))  # members −‖chunk‖² and −‖chunk‖² + 1 of the executed part
    obs = LangReachConfig(num_envs=2, image_size=16, chunk_horizon=H).make("cpu", 0).reset()
    reward, terminated = torch.tensor([1.0, 2.0]), torch.tensor([False, True])
    y, gain = algo.td_target(reward, terminated, obs)
    value = -2 * (0.3**2 + 0.6**2)  # the min of the two members over the 2 executed steps
    torch.testing.assert_close(y, torch.tensor([1.0 + 0.9**2 * value, 2.0]))
    assert torch.all(gain == 0.0)


@pytest.mark.integration
def test_fql_updates_act_and_round_trip(sft_run: Path, tmp_path: Path) -> None:  # noqa: F811
    spec = chunk_spec()
    cfg = qc_config(sft_run, actor="fql", fql_hidden=(32, 32), demo_ratio=0.5, fql_warmup_steps=50)
    algo = cfg.build(spec, "cpu", 0)
    assert algo.actor.onestep is not None
    before = {k: v.clone() for k, v in algo.actor.onestep.state_dict().items()}
    batch = replay_rows(algo, 6)
    for _ in range(3):
        stats = algo.update(batch)
    assert {"fql_distill", "fql_q"} <= set(stats) and all(np.isfinite(v) for v in stats.values())
    assert any(not torch.equal(v, algo.actor.onestep.state_dict()[k]) for k, v in before.items())

    # The one-step loss trains the one-step policy only: the critic gets no gradient from it.
    for p in algo.actor.critic.parameters():
        p.grad = None
    features = algo.actor.critic_encoder(batch.obs)
    z = torch.randn(len(batch), H, A)
    loss, _, _ = algo.fql_actor_loss(features, z, algo.actor.chunks_from_noise(features, z))
    loss.backward()
    assert all(p.grad is None for p in algo.actor.critic.parameters())

    # Acting: the one-step policy's chunk, from z = 0 when deterministic; bounded; sampled chunks differ.
    obs = LangReachConfig(num_envs=3, image_size=16, chunk_horizon=H).make("cpu", 2).reset()
    policy = algo.make_policy()
    det = policy.act(obs, deterministic=True)[0]
    with torch.no_grad():
        onestep_out = policy.onestep(policy.critic_encoder(obs), torch.zeros(3, H, A))
    torch.testing.assert_close(det, policy.onestep.bounded(onestep_out))
    sampled = policy.act(obs)[0]
    assert float(sampled.abs().max()) <= 1.0 and not torch.equal(sampled, det)

    torch.save(algo.state_dict(), tmp_path / "state.pt")
    fresh = cfg.build(spec, "cpu", 7)
    fresh.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    assert algo.update(batch) == fresh.update(batch)
    # A best-of-N run's state does not resume as FQL: the error names the setting.
    best_of_n = qc_config(sft_run).build(spec, "cpu", 0)
    with pytest.raises(KeyError, match=r"algo\.actor is 'fql'"):
        fresh.load_state_dict(best_of_n.state_dict())
    with pytest.raises(ValueError, match="actor must be"):
        qc_config(actor="best").validate()


@pytest.mark.integration
def test_robot_rl_train_runs_qc_fql_and_its_checkpoint_acts(sft_run: Path, tmp_path: Path) -> None:  # noqa: F811
    from robot_rl.cli import main
    from robot_rl.policy_io import load_policy

    argv = ["train", "--task", "lang_reach", "--algo", "flow_qc", "--name", "fql", f"run.root={tmp_path}",
            "run.progress=false", "task.num_envs=4", "task.image_size=16", f"task.chunk_horizon={H}",
            f"algo.init_from={sft_run / 'sft'}", f"algo.demos={sft_run / 'demos'}", f"algo.policy.horizon={H}",
            "algo.policy.num_steps=3", *[f"algo.policy.{k}={v}" for k, v in TINY.items()], "algo.actor=fql",
            "algo.fql_hidden=[32,32]", "algo.fql_warmup_steps=20", "algo.critic_hidden=[32,32]", "algo.batch_size=16",
            "algo.learning_starts=8", "algo.utd_ratio=0.5", "loop.total_env_steps=64", "loop.eval_every_env_steps=64",
            "loop.eval_episodes=4"]
    assert main(argv) == 0
    run = tmp_path / "fql"
    assert json.loads((run / "summary.json").read_text())["gradient_updates"] >= 10
    loaded = load_policy(run)
    assert isinstance(loaded.policy, FlowQCPolicy) and loaded.policy.onestep is not None
    obs = LangReachConfig(num_envs=2, image_size=16, chunk_horizon=H).make("cpu", 4).reset()
    chunk, _ = loaded.policy.act(obs, deterministic=True)
    assert chunk.shape == (2, H, A) and bool(torch.isfinite(chunk).all()) and float(chunk.abs().max()) <= 1.0


@pytest.mark.integration
def test_the_warm_up_distils_the_flow_before_the_one_step_policy_first_acts(sft_run: Path) -> None:  # noqa: F811
    spec = chunk_spec()
    cold = qc_config(sft_run, actor="fql", fql_hidden=(32, 32), fql_warmup_steps=0).build(spec, "cpu", 0)
    warm = qc_config(sft_run, actor="fql", fql_hidden=(32, 32), fql_warmup_steps=300).build(spec, "cpu", 0)
    untouched = {k: v.clone() for k, v in warm.actor.onestep.state_dict().items()}  # type: ignore[union-attr]
    warm.make_policy()  # the first acting policy is made after the warm-up
    assert any(not torch.equal(v, warm.actor.onestep.state_dict()[k]) for k, v in untouched.items())  # type: ignore[union-attr]
    assert cold.demos is not None and not warm.fql_optim.state  # type: ignore[union-attr]  # moments restart
    obs = cold.demos.batch(torch.arange(0, len(cold.demos), 3), "cpu").obs
    features, _ = cold.actor.conditions(obs)
    z = torch.randn(len(features), H, A, generator=torch.Generator().manual_seed(9))

    def error(algo: object) -> float:
        actor = algo.actor  # type: ignore[attr-defined]
        with torch.no_grad():
            return float((actor.onestep(features, z) - actor.chunks_from_noise(features, z)).square().mean())

    assert error(warm) < 0.5 * error(cold), (error(warm), error(cold))
    # The warm-up does not move the update's random stream: both draw the same demo rows and noise next.
    assert torch.equal(cold.generator.get_state(), warm.generator.get_state())


@pytest.mark.integration
def test_a_resumed_run_keeps_its_one_step_policy_and_skips_the_warm_up(sft_run: Path,  # noqa: F811
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    spec = chunk_spec()
    trained = qc_config(sft_run, actor="fql", fql_hidden=(32, 32), fql_warmup_steps=0).build(spec, "cpu", 0)
    trained.update(replay_rows(trained, 6))
    state = trained.state_dict()
    resumed = qc_config(sft_run, actor="fql", fql_hidden=(32, 32), fql_warmup_steps=300).build(spec, "cpu", 1)
    with caplog.at_level(logging.INFO, logger="robot_rl"):
        resumed.load_state_dict(state)
        weights = {k: v for k, v in resumed.make_policy().state_dict().items() if k.startswith("onestep.")}
        resumed.update(replay_rows(resumed, 6))
    assert weights and all(torch.equal(v, state["actor"][k]) for k, v in weights.items())
    assert "distilled" not in caplog.text  # 300 steps of work a resumed state would throw away
    with caplog.at_level(logging.INFO, logger="robot_rl"):  # a fresh run does warm up, once
        fresh = qc_config(sft_run, actor="fql", fql_hidden=(32, 32), fql_warmup_steps=30).build(spec, "cpu", 1)
        fresh.make_policy()
        fresh.update(replay_rows(fresh, 6))
    assert caplog.text.count("distilled") == 1
