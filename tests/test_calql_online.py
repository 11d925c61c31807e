"""Cal-QL online: the replay's Monte-Carlo returns of finished episodes (robot_rl/replay/returns.py), the clamp that
leaves rows of running episodes alone, and `offline.conservative_online` keeping CQL/Cal-QL after the offline phase."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.core.transition import TransitionBatch
from robot_rl.policies.offline_rl import cql_penalty, mc_calibration, mc_returns
from robot_rl.policies.sac import SACConfig
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.replay.segments import SegmentLog

SPEC = EnvSpec({"state": ArraySpec((2,))}, ArraySpec((1,), low=-1.0, high=1.0))
GAMMA = 0.9


class Streams:
    """Envs stepping episodes whose observations chain (next_obs of a step is the next step's obs)."""

    def __init__(self, n: int) -> None:
        self.n, self.t = n, 0
        self.obs = torch.randn(n, 2)

    def step(self, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor) -> TransitionBatch:
        self.t += 1
        nxt = torch.randn(self.n, 2)
        batch = TransitionBatch(obs={"state": self.obs}, action=torch.zeros(self.n, 1), reward=reward,
                                terminated=terminated, truncated=truncated, next_obs={"state": nxt},
                                intervened=torch.zeros(self.n, dtype=torch.bool),
                                policy_version=torch.zeros(self.n, dtype=torch.long), env_index=torch.arange(self.n))
        done = terminated | truncated
        self.obs = torch.where(done[:, None], torch.randn(self.n, 2), nxt)  # a reset starts a new episode
        return batch


def _returns_by_row(buf: ReplayBuffer) -> torch.Tensor:
    idx = torch.arange(len(buf))
    return buf.gather((idx + buf._t_lo) % buf.capacity).extras["mc_return"]


def test_returns_appear_when_an_episode_ends_and_equal_the_offline_formula():
    buf = ReplayBuffer(SPEC, 100, gamma=GAMMA, track_returns=True)
    envs = Streams(2)
    # env 0: a 3-step episode that terminates, then a running one; env 1: a 4-step episode that is truncated.
    rewards = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [9.0, 10.0]])
    terminated = torch.tensor([[False, False], [False, False], [True, False], [False, False], [False, False]])
    truncated = torch.tensor([[False, False], [False, False], [False, False], [False, True], [False, False]])
    for t in range(5):
        buf.add(envs.step(rewards[t], terminated[t], truncated[t]))
    got = _returns_by_row(buf).view(5, 2)  # rows are added step by step, env 0 then env 1
    first = mc_returns(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([False, False, True]), GAMMA)
    second = mc_returns(torch.tensor([2.0, 4.0, 6.0, 8.0]), torch.tensor([False, False, False, True]), GAMMA)
    torch.testing.assert_close(got[:3, 0], first.float())
    torch.testing.assert_close(got[:4, 1], second.float())  # truncated: no bootstrap, as offline
    assert torch.isnan(got[3:, 0]).all() and torch.isnan(got[4, 1])  # episodes still running


def test_returns_of_rows_still_in_a_full_ring_are_exact_and_overwritten_rows_forget_theirs():
    buf = ReplayBuffer(SPEC, 8, gamma=GAMMA, track_returns=True, obs_capacity=32)
    envs = Streams(1)
    rewards = torch.arange(1.0, 13.0)
    for t in range(12):  # one 12-step episode: the ring keeps its last 8 rows
        buf.add(envs.step(rewards[t:t + 1], torch.tensor([t == 11]), torch.tensor([False])))
    got = _returns_by_row(buf)
    full = mc_returns(rewards, torch.tensor([False] * 11 + [True]), GAMMA).float()
    torch.testing.assert_close(got, full[-8:])
    for _ in range(3):  # a new episode overwrites the 3 oldest positions: they are unknown until it ends
        buf.add(envs.step(torch.ones(1), torch.tensor([False]), torch.tensor([False])))
    assert torch.isnan(_returns_by_row(buf)[-3:]).all()
    torch.testing.assert_close(_returns_by_row(buf)[:5], full[-5:])


def test_a_reloaded_buffer_recomputes_the_returns_of_the_episodes_it_holds(tmp_path: Path):
    log = SegmentLog(tmp_path / "replay")
    buf = ReplayBuffer(SPEC, 64, gamma=GAMMA, track_returns=True)
    buf.attach_log(log, segment_transitions=4)
    envs = Streams(1)
    for t in range(6):
        buf.add(envs.step(torch.tensor([float(t)]), torch.tensor([t == 4]), torch.tensor([False])))
    buf.close()
    before = _returns_by_row(buf)
    again = ReplayBuffer(SPEC, 64, gamma=GAMMA, track_returns=True)
    again.attach_log(SegmentLog(tmp_path / "replay"), segment_transitions=4)
    after = _returns_by_row(again)
    assert len(again) == 6
    torch.testing.assert_close(after[:5], before[:5])
    assert torch.isnan(after[5])


def test_rows_without_a_return_are_not_clamped():
    calibration = mc_calibration({"mc_return": torch.tensor([5.0, float("nan")])}, 2)
    assert calibration[0] == 5.0 and calibration[1] == -math.inf
    g = torch.Generator().manual_seed(0)
    q_data, q_pol, lp, q_uni = (torch.randn(2, 2, generator=g), torch.randn(2, 2, 3, generator=g),
                                torch.randn(2, 3, generator=g), torch.randn(2, 2, 3, generator=g))
    unclamped = cql_penalty(q_data, q_pol, lp, q_uni, 1)
    none = cql_penalty(q_data, q_pol, lp, q_uni, 1, torch.full((2,), -math.inf))
    torch.testing.assert_close(none, unclamped)
    high = cql_penalty(q_data, q_pol, lp, q_uni, 1, torch.tensor([100.0, -math.inf]))
    assert bool((high > unclamped).all())


def test_sac_with_calql_learns_online_from_its_own_replay():
    algo = SACConfig(actor_hidden=(16,), critic_hidden=(16,), batch_size=16, gamma=GAMMA, cql_alpha=1.0,
                     calql=True).build(SPEC, "cpu", 0)
    storage = algo.make_storage(2)
    envs = Streams(2)
    for t in range(30):
        storage.add(envs.step(torch.randn(2), torch.tensor([t % 10 == 9, False]), torch.tensor([False, t % 7 == 6])))
    batch = storage.sample(16)
    assert "mc_return" in batch.extras
    stats = algo.update(batch)
    assert all(math.isfinite(v) for v in stats.values())


@pytest.mark.integration  # two whole `robot-rl train --offline` runs (over 5 s of CPU at load 13-15 as a unit test)
def test_conservative_online_keeps_cql_and_calql_after_the_offline_phase(tmp_path: Path):
    from robot_rl.cli import main
    from robot_rl.core.extension import RunHandle
    from robot_rl.loop.offline_extension import OfflinePhase
    from robot_rl.testing.fake_env import record_random_store

    # What is checked is the config the online phase runs with: the smallest run that has both phases.
    record_random_store(tmp_path / "data", episodes=4)
    common = [f"run.root={tmp_path}",
              "loop.total_env_steps=40", "loop.eval_every_env_steps=1000", "loop.eval_episodes=1",
              "run.progress=false", "algo.learning_starts=16", "algo.batch_size=8", "algo.actor_hidden=[16]",
              "algo.critic_hidden=[16]", "algo.demo_ratio=0.5", "algo.cql_alpha=1.0", "algo.calql=true",
              "offline.updates=2", "offline.log_every=1"]
    seen: dict[str, tuple[float, bool]] = {}
    original = OfflinePhase.attach

    def spy(self: OfflinePhase, run: RunHandle) -> None:
        original(self, run)
        cfg = run.algo.cfg
        seen[run.run_dir.name] = (cfg.cql_alpha, cfg.calql)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(OfflinePhase, "attach", spy)
        head = ["train", "--task", "fake", "--offline", str(tmp_path / "data"), "--name"]
        assert main([*head, "kept", *common, "offline.conservative_online=true"]) == 0
        assert main([*head, "plain", *common]) == 0
    assert seen == {"kept": (1.0, True), "plain": (0.0, False)}


def test_the_documented_command_resolves(capsys: pytest.CaptureFixture[str]) -> None:
    import re
    import shlex

    from robot_rl.cli import main

    text = (Path(__file__).resolve().parents[1] / "docs" / "offline-to-online.md").read_text()
    blocks = [b.replace("\\\n", " ") for b in re.findall(r"```bash\n(.*?)```", text, re.S)]
    cmds = [c.strip() for b in blocks for c in b.splitlines() if "offline.conservative_online=true" in c]
    assert len(cmds) == 1
    assert main(["config", *shlex.split(cmds[0])[1:]]) == 0
    out = capsys.readouterr().out
    assert re.search(r"offline.conservative_online\s.*True", out) and re.search(r"algo.calql\s.*True", out), out
