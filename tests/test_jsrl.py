"""JSRL's curriculum: the guide's horizon follows its schedule, only on sustained success."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from robot_rl.core.algorithm import Policy
from robot_rl.core.transition import Obs
from robot_rl.loop.jsrl import GuidedActing, JSRLConfig, JSRLSchedule
from robot_rl.loop.jsrl_extension import GuidedStep


def test_the_guide_horizon_shrinks_in_stages_when_the_window_succeeds() -> None:
    s = JSRLSchedule(JSRLConfig(horizon=40, stages=4, threshold=0.8, window=5))
    assert s.guide_steps == 40 and s.guide_acts(39) and not s.guide_acts(40)
    outcomes = [True, False, True, True, False]  # 3/5 < 0.8: stays
    assert not any(s.end_episode(o) for o in outcomes) and s.guide_steps == 40
    # The window slides: one more success leaves F T T F T (3/5), a second T T F T T (4/5): the move.
    assert [s.end_episode(True), s.end_episode(True)] == [False, True] and s.guide_steps == 30
    for _ in range(3):  # the window restarts after a move: each 5 successes move it 10 steps earlier, down to 0
        assert [s.end_episode(True) for _ in range(5)] == [False] * 4 + [True]
    assert s.guide_steps == 0 and not s.guide_acts(0)
    assert not s.end_episode(True)  # plain online RL from here
    assert s.history == [(7, 30), (12, 20), (17, 10), (22, 0)]


def test_rows_the_guide_acts_are_the_first_h_of_each_episode() -> None:
    s = JSRLSchedule(JSRLConfig(horizon=6, stages=3, threshold=1.0, window=1))
    assert [s.guide_acts(t) for t in range(8)] == [True] * 6 + [False] * 2
    s.end_episode(True)
    assert [s.guide_acts(t) for t in range(8)] == [True] * 4 + [False] * 4


@pytest.mark.parametrize("kw", [{"stages": 0}, {"threshold": 0.0}, {"window": 0}, {"horizon": -1}])
def test_bad_schedules_are_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="jsrl"):
        JSRLConfig(**kw)  # type: ignore[arg-type]


class _ConstantPolicy(Policy):
    """Always ``value`` (the guide: +1; the learner: -1), so a step's action says who acted."""

    def __init__(self, value: float, action_dim: int = 2) -> None:
        super().__init__()
        self.value, self.action_dim = value, action_dim

    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        n = next(iter(obs.values())).shape[0]
        return torch.full((n, self.action_dim), self.value), {}


def test_the_guide_acts_for_the_first_h_steps_of_each_sub_env_episode() -> None:
    cfg = JSRLConfig(guide="teacher", horizon=3, stages=3, threshold=1.0, window=1)
    g = GuidedActing(cfg, _ConstantPolicy(1.0), num_envs=2, device="cpu")
    obs = {"state": torch.zeros(2, 4)}
    learner = torch.full((2, 2), -1.0)
    seen = []
    # Sub-env 0's episode ends (a failure) after its 2nd step, sub-env 1's never.
    for t in range(5):
        action, guided = g.act(obs, learner)
        assert torch.equal(action[:, 0] > 0, guided)  # the guide's action exactly where it is flagged
        seen.append(guided.tolist())
        g.after_step(torch.tensor([t == 1, False]), torch.tensor([False, False]))
    assert seen == [[True, True], [True, True], [True, True], [True, False], [True, False]]
    assert g.pop_metrics() == {"horizon": 3.0, "guided_fraction": 0.8}
    g.after_step(torch.tensor([True, True]), torch.tensor([True, True]))  # two successes: two stages earlier
    assert g.schedule.guide_steps == 1 and g.pop_metrics()["guided_fraction"] == 0.0


def test_the_curriculum_state_survives_a_resume() -> None:
    a = JSRLSchedule(JSRLConfig(horizon=10, stages=5, threshold=1.0, window=1))
    a.end_episode(True)
    b = JSRLSchedule(a.config)
    b.load_state(a.state())
    assert b.guide_steps == a.guide_steps == 8 and b.episodes == 1


def test_jsrl_from_the_command_line_guided_by_the_offline_policy(tmp_path: Path) -> None:
    from robot_rl.cli import main
    from robot_rl.testing.fake_env import record_random_store  # importing robot_rl.testing registers "fake"

    record_random_store(tmp_path / "data", episodes=20)
    common = [f"run.root={tmp_path}", "run.progress=false", "loop.eval_every_env_steps=200", "loop.eval_episodes=4",
              "loop.log_every_s=0", "algo.learning_starts=64", "algo.batch_size=32", "algo.actor_hidden=[32,32]",
              "algo.critic_hidden=[32,32]"]
    args = ["train", "--task", "fake", "--offline", str(tmp_path / "data"), "--name", "j", *common,
            "loop.total_env_steps=400", "offline.updates=50", "jsrl.guide=offline", "jsrl.horizon=10",
            "jsrl.stages=2", "jsrl.window=4", "jsrl.threshold=1.0"]
    assert main(args) == 0
    run = tmp_path / "j"
    assert (run / "jsrl_guide.pt").exists()
    assert "jsrl: offline guides the first 10 steps of each episode" in (run / "train.log").read_text()
    from robot_rl.checkpoint import load_latest

    _, meta, _ = load_latest(run)
    assert meta["jsrl"] and meta["jsrl"][0]["episodes"] > 0  # the curriculum saw the episodes, and is saved
    # Without an offline phase there is no offline policy to guide: a clear error, nothing trained.
    assert main(["train", "--task", "fake", "--name", "k", *common, "jsrl.guide=offline"]) == 2
    assert main(["train", "--task", "fake", "--name", "p", "--algo", "ppo", f"run.root={tmp_path}",
                 "run.progress=false", "jsrl.guide=offline"]) == 2


def test_the_tasks_scripted_controller_guides_from_the_command_line(tmp_path: Path) -> None:
    pytest.importorskip("mujoco", reason="mujoco/pick_cube needs the mujoco package (pip install 'robot-rl[mujoco]')")
    from robot_rl.checkpoint import load_latest
    from robot_rl.cli import main

    common = [f"run.root={tmp_path}", "run.progress=false", "loop.eval_every_env_steps=10000", "loop.eval_episodes=2",
              "loop.log_every_s=0", "algo.batch_size=32", "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]"]
    # The scripted pick solves the task: 8 guided episodes in a row reach the threshold and the hand-over moves.
    args = ["train", "--task", "mujoco/pick_cube", "--name", "s", *common, "task.num_envs=4",
            "loop.total_env_steps=600", "algo.learning_starts=10000", "jsrl.guide=scripted", "jsrl.horizon=50",
            "jsrl.stages=2", "jsrl.window=8", "jsrl.threshold=0.75"]
    assert main(args) == 0
    assert "jsrl: scripted guides the first 50 steps of each episode" in (tmp_path / "s" / "train.log").read_text()
    _, meta, _ = load_latest(tmp_path / "s")
    assert meta["jsrl"][0]["stage"] >= 1, meta["jsrl"]
    # A task without a scripted controller: a clear error before anything trains.
    import robot_rl.testing  # noqa: F401 - registers the "fake" task

    assert main(["train", "--task", "fake", "--name", "f", *common, "jsrl.guide=scripted"]) == 2


def test_the_actor_flags_the_rows_its_guide_acted() -> None:
    import robot_rl.testing  # noqa: F401 - registers the "fake" task
    from robot_rl.core.config import ALGOS, ensure_registered
    from robot_rl.loop.actor import Actor
    from robot_rl.loop.learner import Learner
    from robot_rl.testing import FakeVecEnv
    from robot_rl.transport.inproc import InprocTransport

    ensure_registered()
    env = FakeVecEnv(num_envs=3, episode_length=4)
    algo = ALGOS.get("sac")(actor_hidden=(16,), critic_hidden=(16,)).build(env.spec, "cpu", seed=0)
    t = InprocTransport(64)
    learner = Learner(algo, env.spec, t.learner_endpoint(), "cpu", env.num_envs)
    learner.publish()
    actor = Actor(env, algo.make_policy(), t.actor_endpoint(0), seed=0, send_timeout_s=1.0)
    actor.sync_weights()
    actor.hooks.append(GuidedStep(GuidedActing(JSRLConfig(guide="teacher", horizon=2, stages=2, threshold=1.0,
                                                          window=50), _ConstantPolicy(1.0), env.num_envs, "cpu")))
    flags = [actor.step().extras["guided"].tolist() for _ in range(8)]
    assert flags == [[True] * 3, [True] * 3, [False] * 3, [False] * 3] * 2  # 4-step episodes, the guide first 2
    received = 0
    while learner.pump(0):
        received += 1
    assert received == 8 and len(learner.storage) == 24  # the flag travels; the replay takes the rows as usual
