"""Q-chunking (`flow_qc`): chunk TD targets, best-of-N acting, checkpoints, and SFT → RL through `robot-rl train`."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from robot_rl.core.specs import EnvSpec, SpecMismatchError
from robot_rl.core.transition import TransitionBatch
from robot_rl.data.episode import Episode
from robot_rl.data.recorder import StoreSink, record_episodes
from robot_rl.data.store import EpisodeStore
from robot_rl.policies.flow.model import FlowVLAConfig
from robot_rl.policies.flow.qchunk import FlowQCAlgorithm, FlowQCConfig, FlowQCPolicy
from robot_rl.policies.flow.qchunk_data import chunk_transitions
from robot_rl.policies.flow.sft import FlowSFTConfig, train_sft
from robot_rl.sims.lang_reach import LangReachConfig, LangReachDemonstrator

TINY = dict(hidden=32, expert_layers=2, image_features=8, cnn_channels=4, cnn_layers=2, state_features=8,
            lang_features=8)
H = 4


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sft_run(tmp_path_factory.getbasetemp())


@functools.cache
def build_sft_run(base: Path) -> Path:
    """Demos and a tiny SFT run, once per session (tests/test_flow_fql.py reuses them)."""
    root = base / "qchunk-sft"
    root.mkdir()
    task = LangReachConfig(num_envs=8, image_size=16)
    env = task.make("cpu", 0)
    store = EpisodeStore.create(root / "demos", env.spec, fps=20.0)
    record_episodes(env, LangReachDemonstrator(env), StoreSink(store), 12)
    cfg = FlowSFTConfig(policy=FlowVLAConfig(horizon=H, num_steps=3, **TINY), steps=10, eval_every=10,
                        eval_episodes=4, eval_num_envs=4, progress=False)
    train_sft(cfg, root / "demos", task, root / "sft")
    return root


def chunk_spec() -> EnvSpec:
    return LangReachConfig(num_envs=2, image_size=16, chunk_horizon=H).make("cpu", 0).spec


def qc_config(root: Path | None = None, **kw: object) -> FlowQCConfig:
    base: dict[str, object] = dict(policy=FlowVLAConfig(horizon=H, num_steps=3, **TINY), critic_hidden=(32, 32),
                                   num_samples=6, batch_size=16, gamma=0.9)
    if root is not None:
        base.update(init_from=str(root / "sft"), demos=str(root / "demos"))
    base.update(kw)
    return FlowQCConfig(**base)  # type: ignore[arg-type]


def constant_target_critics(algo: FlowQCAlgorithm, values: list[float]) -> None:
    """Member j of the target ensemble answers ``values[j]`` for every (state, chunk)."""
    q = algo.critic_target.q
    with torch.no_grad():
        q.weights[-1].zero_()
        q.biases[-1].copy_(torch.tensor(values).view(-1, 1, 1))


def episode(spec: EnvSpec, rewards: list[float], terminated: bool, final: bool) -> Episode:
    """A per-step episode whose ``state[0]`` is the step index (the final observation's is ``T``)."""
    t_len = len(rewards)
    shapes = {k: v.shape for k, v in spec.observation.items()}
    obs = {"image.top": np.zeros((t_len, *shapes["image.top"]), np.uint8),
           "language": np.ones((t_len, *shapes["language"]), np.int64),
           "state": np.zeros((t_len, *shapes["state"]), np.float32)}
    obs["state"][:, 0] = np.arange(t_len)
    final_obs = {k: v[-1].copy() for k, v in obs.items()} if final else None
    if final_obs is not None:
        final_obs["state"][0] = t_len
    ends = np.zeros(t_len, bool)
    ends[-1] = True
    return Episode(obs, np.tile(np.linspace(-0.5, 0.5, 2, dtype=np.float32), (t_len, 1)),
                   np.asarray(rewards, np.float32), ends & terminated, ends & ~terminated,
                   np.zeros(t_len, bool), ends & terminated, final_obs)


def test_chunk_targets_stop_at_an_episode_end_inside_the_chunk() -> None:
    spec = chunk_spec()
    # Target members answer 3 and 5: the min (clipped double Q) is 3 for every sampled chunk, so V(s') = 3.
    algo = qc_config(reward_scale=2.0, target="min").build(spec, "cpu", 0)
    constant_target_critics(algo, [3.0, 5.0])
    g4 = 0.9 ** H
    eps = [episode(spec, [1, 2, 3, 4, 5, 6, 7], terminated=True, final=False),
           episode(spec, [1, 1, 1, 1, 1], terminated=False, final=True),
           episode(spec, [1, 1, 1, 1, 1], terminated=False, final=False)]  # cut off, nothing to bootstrap from
    data = chunk_transitions(eps, spec, H, H)
    # Episode 1 (terminated after 7 steps), a row per start step: rewards summed over the executed steps.
    expected_r = [1 + 2 + 3 + 4, 2 + 3 + 4 + 5, 3 + 4 + 5 + 6, 4 + 5 + 6 + 7, 5 + 6 + 7, 6 + 7, 7]
    expected_y = [2 * r + (g4 * 3 if t + H < 7 else 0.0) for t, r in enumerate(expected_r)]
    # Episode 2 (truncated, final observation recorded): the last chunks bootstrap from it with γ^E.
    expected_r += [4, 4, 3, 2, 1]
    expected_y += [2 * r + g4 * 3 for r in (4, 4, 3, 2, 1)]
    # Episode 3 keeps only the chunks that end before its last step (t + 4 < 5: t = 0).
    expected_r += [4]
    expected_y += [2 * 4 + g4 * 3]
    assert len(data) == len(expected_r)
    torch.testing.assert_close(data.reward, torch.tensor(expected_r, dtype=torch.float32))
    rows = data.batch(torch.arange(len(data)), "cpu")
    y, gain = algo.td_target(rows.reward, rows.terminated, rows.next_obs)
    torch.testing.assert_close(y, torch.tensor(expected_y, dtype=torch.float32))
    assert torch.all(gain == 0.0)  # every sampled chunk has the same value under constant critics
    # Successors: the observation E steps on, or the episode's final one; never one past the episode end.
    nxt = rows.next_obs["state"][:, 0].tolist()
    assert nxt[:7] == [4.0, 5.0, 6.0, 6.0, 6.0, 6.0, 6.0] and nxt[7:12] == [4.0, 5.0, 5.0, 5.0, 5.0]
    assert rows.terminated.tolist() == [False, False, False, True, True, True, True] + [False] * 6
    assert rows.truncated[7:12].tolist() == [False, True, True, True, True]
    assert data.mask[5].tolist() == [1.0, 1.0, 0.0, 0.0]  # padding past the end is masked out of flow matching

    # The same target on rows of the real chunk env: a success inside a chunk terminates and does not bootstrap.
    env = LangReachConfig(num_envs=2, image_size=16, chunk_horizon=H).make("cpu", 0)
    env.reset()
    env.q[0] = torch.tensor([0.0, torch.pi / 2])
    env.goal[0] = torch.tensor([0.6, 0.5])  # two expert steps away
    r = env.step(LangReachDemonstrator(env).act({})[0])
    assert bool(r.terminated[0]) and int(r.info["episode_length"][0]) < H
    y_env, _ = algo.td_target(r.reward, r.terminated, r.info["final_obs"])
    expected = 2 * r.reward + g4 * 3 * (~r.terminated).float()
    torch.testing.assert_close(y_env, expected)
    assert float(y_env[0]) == pytest.approx(2 * float(r.reward[0]))


@pytest.mark.integration
def test_demo_rows_and_the_learner_use_the_task_s_chunk_discount(sft_run: Path, caplog: pytest.LogCaptureFixture
                                                                    ) -> None:
    spec = chunk_spec()
    eps = [episode(spec, [1, 2, 3, 4, 5, 6, 7], terminated=True, final=False)]
    data = chunk_transitions(eps, spec, H, 3, discount=0.5)
    # Σ_{h < m} 0.5^h r[t + h] over the m = min(3, 7 − t) executed steps.
    expected = [1 + 1 + 0.75, 2 + 1.5 + 1, 3 + 2 + 1.25, 4 + 2.5 + 1.5, 5 + 3 + 1.75, 6 + 3.5, 7]
    torch.testing.assert_close(data.reward, torch.tensor(expected))
    # The learner reads the discount from the chunk env's spec and builds its demo rows with it.
    discounted = LangReachConfig(num_envs=2, image_size=16, chunk_horizon=H, chunk_discount=0.9).make("cpu", 0).spec
    with caplog.at_level("WARNING"):
        algo = qc_config(sft_run, gamma=0.9).build(discounted, "cpu", 0)
    assert algo.chunk_discount == 0.9 and "chunk_discount" not in caplog.text
    from robot_rl.data.demos import read_episodes

    demos = read_episodes(str(sft_run / "demos"))[0]
    assert algo.demos is not None
    torch.testing.assert_close(algo.demos.reward, chunk_transitions(demos, discounted, H, H, 0.9).reward)
    plain = qc_config(sft_run, gamma=0.9).build(spec, "cpu", 0)
    assert plain.demos is not None and not torch.allclose(plain.demos.reward, algo.demos.reward)
    assert "task.chunk_discount=0.9" in caplog.text  # the plain-sum env: the learner says what to set
    from robot_rl.loop.config import resolve_train_config

    for task in ("lang_reach", "lang_push"):  # the flow_qc presets discount as the critic does
        cfg = resolve_train_config(task, "flow_qc")
        assert cfg.task.chunk_discount == cfg.algo.gamma == 0.99  # type: ignore[attr-defined]


class PreferredChunk(nn.Module):
    """Two critic members that both prefer chunks close to ``target`` (``Q = −‖chunk − target‖² + j``)."""

    def __init__(self, target: torch.Tensor) -> None:
        super().__init__()
        self.target = target.flatten()

    def forward(self, features: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        q = -(chunk - self.target).square().sum(-1)
        return torch.stack([q, q + 1.0])


@pytest.mark.integration
def test_best_of_n_executes_the_chunk_the_critic_prefers(sft_run: Path) -> None:
    spec = chunk_spec()
    cfg = qc_config(sft_run, num_samples=8)
    algo = cfg.build(spec, "cpu", 0)
    policy = algo.make_policy()
    obs = LangReachConfig(num_envs=3, image_size=16, chunk_horizon=H).make("cpu", 5).reset()
    with torch.no_grad():
        cands, _ = policy.candidates(obs, deterministic=True)
    assert cands.shape == (3, 8, H, 2)
    policy.critic = PreferredChunk(cands[0, 5])
    want = (cands - cands[0, 5]).square().flatten(2).sum(-1).argmin(dim=1)
    assert int(want[0]) == 5
    chunk, extras = policy.act(obs, deterministic=True)
    torch.testing.assert_close(chunk, cands[torch.arange(3), want])
    assert extras == {}
    # Sampled acting: the same choice among the chunks drawn from the policy's own generator.
    policy.reseed(7)
    with torch.no_grad():
        sampled, _ = policy.candidates(obs)
    policy.reseed(7)
    chunk, _ = policy.act(obs)
    best = (sampled - cands[0, 5]).square().flatten(2).sum(-1).argmin(dim=1)
    torch.testing.assert_close(chunk, sampled[torch.arange(3), best])
    assert not torch.allclose(sampled, cands)
    # One candidate, deterministic: x0 = 0, exactly the flow policy's own deterministic chunk.
    one = qc_config(sft_run, num_samples=1).build_policy(spec, "cpu")
    one.load_actor_weights(algo.actor_weights())
    torch.testing.assert_close(one.act(obs, deterministic=True)[0], algo.actor.flow.act(obs, deterministic=True)[0])


def replay_rows(algo: FlowQCAlgorithm, steps: int) -> TransitionBatch:
    env = LangReachConfig(num_envs=4, image_size=16, chunk_horizon=H).make("cpu", 1)
    storage = algo.make_storage(4)
    policy = algo.make_policy()
    obs = env.reset()
    for _ in range(steps):
        action, extras = policy.act(obs)
        r = env.step(action)
        storage.add(TransitionBatch(obs, action, r.reward, r.terminated, r.truncated, r.info["final_obs"],
                                    torch.zeros(4, dtype=torch.bool), torch.zeros(4, dtype=torch.int64),
                                    torch.arange(4), extras))
        obs = r.obs
    torch.manual_seed(0)
    return storage.sample(algo.batch_size)


@pytest.mark.integration
def test_updates_train_critic_and_flow_and_the_state_round_trips(sft_run: Path, tmp_path: Path) -> None:
    spec = chunk_spec()
    cfg = qc_config(sft_run, demo_ratio=0.5)
    algo = cfg.build(spec, "cpu", 0)
    assert algo.actor.shared_encoder and algo.demos is not None and len(algo.demos) > 100
    encoder = {k: v.clone() for k, v in algo.actor.critic_encoder.state_dict().items()}
    critic = {k: v.clone() for k, v in algo.actor.critic.state_dict().items()}
    expert = {k: v.clone() for k, v in algo.actor.flow.expert.state_dict().items()}
    batch = replay_rows(algo, 6)
    for _ in range(3):
        stats = algo.update(batch)
    assert set(stats) == {"critic_loss", "q_mean", "target_mean", "best_of_n_gain", "bc_loss"}
    assert all(np.isfinite(v) for v in stats.values()) and stats["critic_loss"] > 0 and stats["bc_loss"] > 0
    assert stats["best_of_n_gain"] >= 0.0  # a max over candidates is never below their mean
    assert all(torch.equal(v, algo.actor.critic_encoder.state_dict()[k]) for k, v in encoder.items())
    assert any(not torch.equal(v, algo.actor.critic.state_dict()[k]) for k, v in critic.items())
    assert any(not torch.equal(v, algo.actor.flow.expert.state_dict()[k]) for k, v in expert.items())

    torch.save(algo.state_dict(), tmp_path / "state.pt")
    fresh = cfg.build(spec, "cpu", 123)
    fresh.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    # Same state, same batch: identical statistics and weights after one more update (demo rows and noise
    # come from the restored generator).
    a, b = algo.update(batch), fresh.update(batch)
    assert a == b
    for k, v in algo.actor.state_dict().items():
        torch.testing.assert_close(fresh.actor.state_dict()[k], v)
    with pytest.raises(KeyError, match="flow_qc state keys"):
        fresh.load_state_dict({k: v for k, v in algo.state_dict().items() if k != "critic_target"})
    # An actor process builds the policy alone and loads the published weights: it acts as the learner's copy.
    remote = cfg.build_policy(spec, "cpu", seed=3)
    remote.load_actor_weights(algo.actor_weights())
    obs = LangReachConfig(num_envs=2, image_size=16, chunk_horizon=H).make("cpu", 2).reset()
    torch.testing.assert_close(remote.act(obs, deterministic=True)[0], algo.make_policy().act(obs, True)[0])

    # freeze_encoder=false: flow matching trains the flow's encoder; the critic keeps reading the SFT encoder.
    own = qc_config(sft_run, demo_ratio=0.5, freeze_encoder=False).build(spec, "cpu", 0)
    assert not own.actor.shared_encoder
    own.update(batch)
    moved = own.actor.flow.encoder.state_dict()
    assert any(not torch.equal(v, moved[k]) for k, v in encoder.items())
    assert all(torch.equal(v, own.actor.critic_encoder.state_dict()[k]) for k, v in encoder.items())


def test_flow_qc_rejects_per_step_tasks_and_bad_settings() -> None:
    per_step = LangReachConfig(num_envs=2, image_size=16).make("cpu", 0).spec
    with pytest.raises(SpecMismatchError, match="chunk_horizon"):
        qc_config().build(per_step, "cpu", 0)
    with pytest.raises(ValueError, match="execute_steps"):
        qc_config(execute_steps=H + 1).validate()
    with pytest.raises(ValueError, match="demo_ratio"):
        qc_config(demo_ratio=1.0).validate()
    # Executing 2 of 4 steps: the critic reads those 2 actions and bootstraps γ² later.
    algo = qc_config(execute_steps=2).build(chunk_spec(), "cpu", 0)
    constant_target_critics(algo, [1.0, 1.0])
    obs = LangReachConfig(num_envs=2, image_size=16, chunk_horizon=H).make("cpu", 0).reset()
    y, _ = algo.td_target(torch.zeros(2), torch.zeros(2, dtype=torch.bool), obs)
    torch.testing.assert_close(y, torch.full((2,), 0.9**2))
    assert algo.actor.critic.q.weights[0].shape[1] == algo.actor.critic_encoder.out_dim + 2 * 2


@pytest.mark.integration
def test_flow_qc_trains_from_sft_with_robot_rl_train(sft_run: Path, tmp_path: Path) -> None:
    from robot_rl.cli import main
    from robot_rl.policy_io import load_policy

    argv = ["train", "--task", "lang_reach", "--algo", "flow_qc", "--name", "qc", f"run.root={tmp_path}",
            "run.progress=false", "task.num_envs=4", "task.image_size=16", f"task.chunk_horizon={H}",
            f"algo.init_from={sft_run / 'sft'}", f"algo.demos={sft_run / 'demos'}", f"algo.policy.horizon={H}",
            "algo.policy.num_steps=3", *[f"algo.policy.{k}={v}" for k, v in TINY.items()],
            "algo.critic_hidden=[32,32]", "algo.num_samples=4", "algo.batch_size=16", "algo.learning_starts=8",
            "algo.utd_ratio=0.5", "loop.total_env_steps=64", "loop.eval_every_env_steps=32", "loop.eval_episodes=4"]
    assert main(argv) == 0
    run = tmp_path / "qc"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] >= 64 and summary["gradient_updates"] >= 10
    assert (run / "checkpoints" / "latest").is_file()
    loaded = load_policy(run)
    assert isinstance(loaded.policy, FlowQCPolicy)
    obs = LangReachConfig(num_envs=2, image_size=16, chunk_horizon=H).make("cpu", 4).reset()
    chunk, _ = loaded.policy.act(obs, deterministic=True)
    assert chunk.shape == (2, H, 2) and bool(torch.isfinite(chunk).all()) and float(chunk.abs().max()) <= 1.0
