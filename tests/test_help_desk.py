"""The robot asks for help in the deploy loop: critics at the actor, the hold while waiting, fallbacks, takeovers."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from test_deploy import PointArm, fast

from robot_rl.core.algorithm import CRITIC_WEIGHTS_PREFIX, CriticPublisher, ValueEstimator, split_critic_weights
from robot_rl.core.specs import ArraySpec, EnvSpec
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.human_loop.deploy import Deployer
from robot_rl.human_loop.devices.base import TeleopReading
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.help_gate import HelpGateConfig
from robot_rl.human_loop.help_timeline import plot_timeline
from robot_rl.human_loop.status import StatusLine
from robot_rl.loop.learner import Learner
from robot_rl.policies.sac import SACConfig


class PushPolicy(torch.nn.Module):
    """Pushes +x every step (gripper open): the arm moves unless something holds it."""

    def act(self, obs, deterministic=False):
        a = torch.zeros(obs["state"].shape[0], 7)
        a[:, 0], a[:, 6] = 1.0, 1.0
        return a, {}


def _asks_at_once(**kw) -> HelpGateConfig:
    # The safety score alone, no warm-up and a threshold below any standardised value: the first step asks.
    return HelpGateConfig(enabled=True, scores=["safety"], warmup_steps=0, initial_threshold=-1.0,
                          min_ask_steps=1, bell=False, **kw)


def _deployer(help_cfg: HelpGateConfig, script, tmp_path: Path, episodes: int = 1, steps: int = 30,
              goal_x: float = 0.45, watchdog_s: float = 0.5):
    cfg = fast(episodes=episodes, max_episode_steps=steps, help=help_cfg,
               safety=SafetyConfig(control_hz=100.0, max_linear_speed=5.0, watchdog_timeout_s=watchdog_s))
    arm = PointArm(goal_x)
    commanded: list[float] = []
    command = arm._command

    def recording(target, gripper):  # every pose the safety layer commands, in order
        commanded.append(float(target[0]))
        command(target, gripper)

    arm._command = recording  # type: ignore[method-assign]
    safety = SafetyLayer(arm, cfg.safety)
    safety.connect()
    dev = ScriptedDevice(script)
    dev.connect()
    d = Deployer(cfg, safety, dev, PushPolicy(), help_log=tmp_path / "help_scores.jsonl")
    return d, arm, commanded


def _nobody(i: int) -> TeleopReading:
    return TeleopReading(0.0, delta=np.zeros(6), engage=False)


def test_the_robot_holds_while_it_waits_then_takes_the_fallback(tmp_path: Path) -> None:
    d, _, commanded = _deployer(_asks_at_once(wait_timeout_s=0.3, fallback="reset"), _nobody, tmp_path)
    t0 = time.monotonic()
    report = d.run()
    episode = report.episodes[0]
    assert episode.end == "help_timeout" and not episode.success and episode.steps == 0
    assert episode.help_requests == 1 and episode.help_timeouts == 1
    assert time.monotonic() - t0 >= 0.3
    # ~30 ticks of waiting at 100 Hz, every one a command to stay where the arm was: the watchdog was fed.
    assert len(commanded) >= 20 and set(commanded) == {0.4}
    assert d.safety.latched is None or d.safety.latched == "not armed"
    events = [json.loads(x) for x in (tmp_path / "help_scores.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events if "event" in e] == ["ask", "timeout"]
    assert all(e["ask"] for e in events if "event" not in e)
    pytest.importorskip("matplotlib")
    png = plot_timeline(tmp_path / "help_scores.jsonl", tmp_path / "timeline.png")
    assert png.stat().st_size > 10_000
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"help\.enabled=true"):
        plot_timeline(tmp_path / "empty.jsonl", tmp_path / "none.png")


@pytest.mark.parametrize("fallback, end", [("continue", "success"), ("skip", "skipped")])
def test_after_an_unanswered_request_continue_acts_and_skip_ends_the_episode(tmp_path: Path, fallback: str,
                                                                             end: str) -> None:
    help_cfg = _asks_at_once(wait_timeout_s=0.1, fallback=fallback, min_gap_steps=1000)
    d, _, commanded = _deployer(help_cfg, _nobody, tmp_path)
    report = d.run()
    assert report.episodes[0].end == end and report.episodes[0].help_timeouts == 1
    if fallback == "continue":  # the policy acted again after the wait, and pushed the arm to the goal
        assert max(commanded) >= 0.45 and report.episodes[0].steps > 0


def test_an_answered_request_lets_the_human_act_and_the_hold_does_not_move_the_arm(tmp_path: Path) -> None:
    reads: list[int] = []

    def person(i: int) -> TeleopReading:  # engages on the 10th read: about 0.1 s after being asked
        reads.append(i)
        return TeleopReading(0.0, delta=np.array([0.5, 0, 0, 0, 0, 0]), engage=i >= 10)

    d, _, commanded = _deployer(_asks_at_once(wait_timeout_s=5.0), person, tmp_path)
    report = d.run()
    e = report.episodes[0]
    assert e.end == "success" and e.help_requests == 1 and e.help_timeouts == 0 and e.unasked_takeovers == 0
    assert e.intervened_steps == e.steps  # everything after the wait was the human's
    assert e.attention_steps >= e.steps + 9  # the waiting ticks and every step the human acted
    holds = [x for x in commanded if x == 0.4]
    assert len(holds) >= 9  # the waiting ticks: the commanded pose did not change
    assert commanded[:len(holds)] == holds and commanded[len(holds)] > 0.4
    assert d.help is not None and d.help.counts.answered == 1


def test_a_takeover_without_a_request_is_counted_apart(tmp_path: Path) -> None:
    never = HelpGateConfig(enabled=True, scores=["safety"], warmup_steps=10**6, bell=False)

    def person(i: int) -> TeleopReading:
        return TeleopReading(0.0, delta=np.array([0.5, 0, 0, 0, 0, 0]), engage=3 <= i < 6)

    d, _, _ = _deployer(never, person, tmp_path, goal_x=10.0, steps=12)
    e = d.run().episodes[0]
    assert e.help_requests == 0 and e.unasked_takeovers == 1 and e.intervened_steps == 3
    assert e.attention_steps == 3  # unasked, the takeover still took the operator's attention


@pytest.mark.integration
def test_a_stalled_loop_while_waiting_still_trips_the_watchdog(tmp_path: Path) -> None:
    def hangs(i: int) -> TeleopReading:  # the teleop read hangs for 0.4 s on the 5th tick of the wait
        if i == 5:
            time.sleep(0.4)
        return TeleopReading(0.0, delta=np.zeros(6), engage=False)

    d, arm, _ = _deployer(_asks_at_once(wait_timeout_s=5.0), hangs, tmp_path, watchdog_s=0.1)
    report = d.run()
    assert report.episodes[0].end == "safety" and report.safety_counts.get("watchdog") == 1
    assert arm.holds >= 1


def test_the_status_line_says_the_robot_asks_and_why() -> None:
    s = StatusLine(enabled=False)
    s.update(source="asking", asking="ASKS FOR HELP: risk +3.2 sd (threshold 2.9) (4s/20s)", episode=3, step=9)
    first = s.text().split("\n")[0]
    assert first.startswith("ASKS FOR HELP: risk +3.2 sd") and "ep 3 step 9" in first and len(first) <= 80
    s.update(source="human")  # once the human acts, the line says so
    assert s.text().startswith("HUMAN acting")


def _spec() -> EnvSpec:
    return EnvSpec(observation={"state": ArraySpec((5,), "float32")}, action=ArraySpec((3,), "float32", -2.0, 2.0))


@pytest.mark.parametrize("critics", [2, 5])
def test_the_critics_reach_the_actor_and_score_as_in_the_learner(critics: int) -> None:
    spec, cfg = _spec(), SACConfig(num_critics=critics, actor_hidden=(16,), critic_hidden=(16,), normalize_obs=True)
    algo = cfg.build(spec, "cpu", 0)
    assert isinstance(algo, CriticPublisher)
    with torch.no_grad():  # a learner whose critics moved away from their initialisation
        for p in algo.critic.parameters():
            p.add_(0.1 * torch.randn_like(p))

    class Sink:
        def publish_weights(self, w):
            self.weights = w

    learner = Learner(algo, spec, Sink(), "cpu", 1)  # type: ignore[arg-type]
    learner.publish_critic = True
    learner.publish()
    actor_part, critic_part = split_critic_weights(learner.endpoint.weights.weights)  # type: ignore[attr-defined]
    assert critic_part and not any(k.startswith(CRITIC_WEIGHTS_PREFIX) for k in actor_part)
    policy = cfg.build_policy(spec, "cpu", seed=1)
    policy.load_actor_weights(actor_part)
    estimator = cfg.build_value_estimator(spec, policy)
    assert isinstance(estimator, ValueEstimator)
    estimator.load_critic_weights(critic_part)
    obs = {"state": torch.randn(4, 5)}
    action = torch.rand(4, 3) * 4 - 2
    q = estimator.q_values(policy, obs, action)
    with torch.no_grad():
        expected = algo.critic(algo.actor.encode(obs), action / 2.0)
    assert q.shape == (critics, 4) and torch.allclose(q, expected, atol=1e-6)
    with pytest.raises(RuntimeError):  # weights of another architecture never load silently
        cfg2 = SACConfig(num_critics=critics, actor_hidden=(16,), critic_hidden=(8,))
        cfg2.build_value_estimator(spec, cfg2.build_policy(spec, "cpu")).load_critic_weights(critic_part)


@pytest.mark.parametrize("override, message", [
    ("help.budget=0", "help.budget = 0"),
    ("help.budget=1.5", "must be in (0, 1]"),
    ("help.scores=[risk,boredom]", "unknown score(s) 'boredom'"),
    ("help.fallback=panic", "help.fallback: 'panic' is not one of 'continue', 'reset', 'skip'"),
])
def test_bad_help_settings_stop_deploy_before_anything_moves(override: str, message: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from robot_rl.cli import main

    # The command as typed; the config is refused before a robot is made (sim_arm would start a process).
    assert main(["deploy", "--mode", "learn", "--teleop", "scripted", "--no-status", "help.enabled=true",
                 override]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_the_desk_says_when_the_learner_sends_no_critics_and_refuses_wrong_ones(caplog) -> None:
    from robot_rl.human_loop.help_desk import HelpDesk

    spec, cfg = _spec(), SACConfig(actor_hidden=(16,), critic_hidden=(16,))
    policy = cfg.build_policy(spec, "cpu")
    desk = HelpDesk(HelpGateConfig(enabled=True), spec, cfg, policy)
    with caplog.at_level("WARNING"):
        desk.load_critic({}, 3)
        desk.load_critic({}, 4)
    assert sum("start the learner with help.enabled=true" in r.getMessage() for r in caplog.records) == 1
    assert "novelty" not in desk.scores(policy, {"state": np.zeros(5, np.float32)}, np.zeros(3), 0)
    desk.load_critic(cfg.build(spec, "cpu", 0).critic_weights(), 5)
    scores = desk.scores(policy, {"state": np.zeros(5, np.float32)}, np.zeros(3), 0)
    assert desk.critic_version == 5 and {"novelty", "risk", "safety"} <= set(scores)
    other = SACConfig(actor_hidden=(16,), critic_hidden=(8,)).build(spec, "cpu", 0).critic_weights()
    desk.load_critic(other, 6)  # another architecture: refused, the old critics stay
    assert desk.critic_version == 5 and any("do not load" in r.getMessage() for r in caplog.records)


@pytest.mark.integration
def test_eval_mode_scores_with_the_critics_of_the_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("mujoco")
    from robot_rl.hardware.sim_arm import SimulatedArmConfig
    from robot_rl.human_loop.deploy import DeployConfig
    from robot_rl.human_loop.deploy_policy import load_run_critics, load_run_policy
    from robot_rl.human_loop.help_desk import HelpDesk
    from robot_rl.human_loop.hil_learner import HILLearner
    from robot_rl.human_loop.observation import policy_spec
    from robot_rl.transport.config import ZmqTransportConfig

    cfg = DeployConfig(robot=SimulatedArmConfig(cameras={}), help=HelpGateConfig(enabled=True, bell=False),
                       transport=ZmqTransportConfig(address="tcp://127.0.0.1:*"))
    learner = HILLearner(cfg, tmp_path / "run")
    learner.checkpoint()
    learner.close()
    spec = policy_spec(cfg)
    policy, version = load_run_policy(tmp_path / "run", spec)
    critics = load_run_critics(tmp_path / "run", spec)
    assert critics is not None and critics[0] and critics[1] == version
    desk = HelpDesk(cfg.help, spec, cfg.algo, policy)
    desk.load_critic(*critics)
    assert desk.critic_version == version
    obs = {k: np.zeros(s.shape, dtype=np.float32) for k, s in spec.observation.items()}
    scores = desk.scores(policy, obs, np.zeros(spec.action.shape, dtype=np.float32), 0)
    assert set(scores) == {"safety", "novelty", "risk"} and all(np.isfinite(v) for v in scores.values())
