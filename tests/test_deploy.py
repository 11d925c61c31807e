"""`robot-rl deploy`: the control loop, labels, interventions, weights and the status line (no simulator)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from robot_rl.cli.deploy import DeployArgs, resolve_deploy_config
from robot_rl.core.config import ConfigError
from robot_rl.core.transport import VersionedWeights
from robot_rl.hardware.robot import Robot, RobotConfig, RobotState
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.human_loop.deploy import DeployConfig, Deployer, TaskRobot
from robot_rl.human_loop.devices.base import TeleopReading
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.status import StatusLine
from robot_rl.human_loop.transition_rows import rows_to_batch


@dataclass
class _Status:
    success: bool
    reward: float


class PointArm(Robot):
    """An end effector that moves exactly as commanded; success when x passes ``goal_x``."""

    def __init__(self, goal_x: float = 0.45) -> None:
        self.config = RobotConfig(control_mode="ee_delta")
        self.goal_x = goal_x
        self.pose = np.zeros(6)
        self.connected = False
        self.holds = 0
        self.resets = 0

    @property
    def is_connected(self) -> bool:
        return self.connected

    def connect(self) -> None:
        self.connected = True

    def disconnect(self) -> None:
        self.connected = False

    def measure(self) -> RobotState:
        return RobotState(np.zeros(6), self.pose.copy(), 1.0, time.monotonic())

    def _command(self, target: np.ndarray, gripper: float) -> None:
        self.pose = np.asarray(target, dtype=np.float64)

    def hold(self) -> None:
        self.holds += 1

    def reset_task(self, seed: int | None = None) -> None:
        self.pose = np.array([0.4, 0.0, 0.2, 0.0, 0.0, 0.0])
        self.resets += 1

    def task_status(self) -> _Status:
        ok = bool(self.pose[0] >= self.goal_x)
        return _Status(ok, 1.0 if ok else 0.0)


class ZeroPolicy(torch.nn.Module):
    """Stays put (keeps the gripper open); ``bias`` shifts every action (for weight tests)."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(7))

    def act(self, obs, deterministic=False):
        n = obs["state"].shape[0]
        a = torch.zeros(n, 7) + self.bias
        a[:, 6] = 1.0
        return a, {}

    def load_actor_weights(self, weights):
        self.load_state_dict(weights)


class FakeEndpoint:
    def __init__(self) -> None:
        self.sent = []
        self.offers: list[VersionedWeights] = []

    def send(self, batch, timeout_s):
        self.sent.append(batch)
        return True

    def poll_weights(self, newer_than):
        return self.offers.pop(0) if self.offers and self.offers[0].version > newer_than else None

    def wait_weights(self, newer_than, timeout_s):
        return self.poll_weights(newer_than)

    def unacked(self):  # a learner in the same process: every chunk is acknowledged as it is sent
        return 0


def push_script(engage_from: int = 0, events: dict[int, tuple[str, ...]] | None = None):
    def script(i: int) -> TeleopReading:
        return TeleopReading(0.0, delta=np.array([1.0, 0, 0, 0, 0, 0]), engage=i >= engage_from,
                             events=(events or {}).get(i, ()))
    return script


def make(cfg: DeployConfig, script, goal_x: float = 0.45, endpoint=None, version: int = 0):
    arm = PointArm(goal_x)
    safety = SafetyLayer(arm, cfg.safety)
    safety.connect()
    dev = ScriptedDevice(script)
    dev.connect()
    return Deployer(cfg, safety, dev, ZeroPolicy(), endpoint=endpoint, policy_version=version), arm


def fast(**kw) -> DeployConfig:
    kw.setdefault("safety", SafetyConfig(control_hz=200.0, max_linear_speed=5.0, watchdog_timeout_s=0.5))
    return DeployConfig(status=False, **kw)


def test_human_takeover_reaches_the_goal_and_is_counted():
    # Human pushes +x from step 3 on: the change limit halves the first push (0.005 m), then 0.01 m per step,
    # so 6 human steps reach the goal 5 cm away.
    d, arm = make(fast(episodes=2, max_episode_steps=30), push_script(engage_from=3))
    d.collected = []
    report = d.run()
    assert isinstance(arm, TaskRobot) and arm.resets == 2
    assert [e.end for e in report.episodes] == ["success", "success"]
    first = report.episodes[0]
    assert first.steps == 9 and first.intervened_steps == 6 and first.interventions == 1
    assert first.intervention_lengths == [6] and first.intervention_rate == pytest.approx(6 / 9)
    rows = d.collected
    assert [r["intervened"] for r in rows[:9]] == [False] * 3 + [True] * 6
    assert rows[8]["terminated"] and rows[8]["reward"] == 1.0 and not rows[7]["terminated"]
    batch = rows_to_batch(rows)
    # Episode 2: the human acts from its first step (the script's index keeps counting).
    assert len(batch) == 15 and batch.intervened.sum() == 12 and batch.terminated.sum() == 2
    assert d.safety.counts["change_limit"] == 2  # each episode's first push, from the measured state


def test_success_key_labels_success_when_pressed_and_other_keys_end_the_episode():
    cfg = fast(episodes=3, max_episode_steps=20, reward_source="keys")
    # reads: episode 0 ticks 0..4 -> success at read 4; episode 1 starts at read 5 -> failure at read 7 ...
    d, _ = make(cfg, push_script(engage_from=10_000, events={4: ("success",), 7: ("failure",), 10: ("reset",)}))
    d.collected = []
    report = d.run()
    assert [(e.end, e.steps, e.success) for e in report.episodes] == [
        ("success", 4, True), ("failure", 2, False), ("reset", 2, False)]
    rows = d.collected
    assert rows[3]["terminated"] and rows[3]["reward"] == 1.0
    assert rows[5]["truncated"] and not rows[5]["terminated"] and rows[5]["reward"] == 0.0
    assert report.success_rate == pytest.approx(1 / 3)


def test_time_limit_truncates_and_safety_events_are_reported():
    cfg = fast(episodes=1, max_episode_steps=5, safety=SafetyConfig(control_hz=200.0, max_linear_speed=0.5,
                                                                    watchdog_timeout_s=0.5))
    d, arm = make(cfg, push_script(engage_from=0), goal_x=10.0)
    report = d.run()
    assert report.episodes[0].end == "time_limit" and report.episodes[0].steps == 5
    assert report.safety_counts.get("velocity", 0) == 5  # 0.01 m in 5 ms is 2 m/s > 0.5 m/s
    assert arm.pose[0] == pytest.approx(0.4 + 5 * 0.5 / 200.0)
    assert d.safety.watchdog is not None and not d.safety.watchdog.armed  # left held, watchdog disarmed


def test_learn_mode_sends_flagged_chunks_and_gates_new_weights():
    ep = FakeEndpoint()
    cfg = fast(mode="learn", episodes=1, max_episode_steps=30, send_every=4)
    d, _ = make(cfg, push_script(engage_from=2), endpoint=ep, version=1)
    bad = {"bias": torch.full((7,), float("nan"))}
    good = {"bias": torch.zeros(7)}
    wrong = {"other": torch.zeros(3)}
    ep.offers = [VersionedWeights(2, bad), VersionedWeights(3, wrong), VersionedWeights(4, good)]
    report = d.run()
    assert report.weights_rejected == 2 and report.weights_accepted == 1 and report.policy_version == 4
    rows = sum(len(b) for b in ep.sent)
    assert rows == report.episodes[0].steps and report.chunks_sent == len(ep.sent) >= 2
    flags = torch.cat([b.intervened for b in ep.sent])
    assert flags[:2].tolist() == [False, False] and bool(flags[2:].all())
    versions = torch.cat([b.policy_version for b in ep.sent])
    assert versions[0] == 1 and versions[-1] == 4  # the acting version is recorded per step


def test_status_line_says_who_acts_and_how_it_goes_in_80_columns():
    s = StatusLine(enabled=False)
    s.update(version=7, source="human", mode_hint="toggle", period_ms=50.2, p99_ms=53.0, target_ms=50.0,
             successes=3, episodes=4, episode=5, step=12, safety_counts={"clamped": 2, "velocity": 0})
    s.safety(("clamped",))
    first, second = s.text().split("\n")
    assert first.startswith("HUMAN acting (toggle to take over)") and "ep 5 step 12" in first and "v7" in first
    assert "50.2 ms/step (p99 53)" in first
    for part in ("success 3/4 (75%)", "clamped 2", "last: clamped"):
        assert part in second, part
    assert "velocity" not in second
    # The policy alone vs with the human's help; many safety events push out the loop rate, never the success.
    s.update(alone=(4, 6), helped=(3, 4), safety_counts={"clamped": 1234, "change_limit": 56789, "velocity": 12,
                                                          "workspace": 3, "nonfinite": 1}, estop="e-stop key (guard)")
    first, second = s.text().split("\n")
    assert first.startswith("E-STOP: e-stop key (guard) | HUMAN acting")
    assert second.startswith("alone 4/6 (67%), helped 3/4 | safety ") and "change_limit 56789" in second
    assert max(len(first), len(second)) <= 80, (first, second)


def test_deploy_config_from_cli_options_and_errors(tmp_path):
    cfg = resolve_deploy_config(DeployArgs(overrides=("robot.latency_s=0.02", "safety.control_hz=10",
                                                      "intervention.mode=toggle"), mode="learn", episodes=3))
    assert cfg.robot.latency_s == 0.02 and cfg.safety.control_hz == 10 and cfg.intervention.mode == "toggle"
    assert cfg.mode == "learn" and cfg.episodes == 3
    with pytest.raises(ConfigError):
        resolve_deploy_config(DeployArgs(overrides=("robot.no_such_key=1",)))
    from robot_rl.cli import main

    assert main(["deploy", "--mode", "eval", "--teleop", "scripted"]) == 2  # eval needs --run-dir
    assert main(["deploy", "--mode", "eval", "--run-dir", str(tmp_path), "--teleop", "scripted",
                 "robot.cameras={}"]) == 2  # not a run directory


def test_the_actor_takes_one_torch_thread_and_the_learner_leaves_a_core(monkeypatch):
    import os

    from robot_rl.human_loop.deploy import set_deploy_threads

    before = torch.get_num_threads()
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    try:
        assert set_deploy_threads(DeployConfig(), "actor") == 1 == torch.get_num_threads()
        assert set_deploy_threads(DeployConfig(), "learner") == 3 == torch.get_num_threads()
        assert set_deploy_threads(DeployConfig(torch_threads=2), "actor") == 2 == torch.get_num_threads()
        monkeypatch.setattr(os, "cpu_count", lambda: 1)
        assert set_deploy_threads(DeployConfig(), "learner") == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="torch_threads"):
        DeployConfig(torch_threads=-1)


def test_live_status_sends_warnings_to_the_log_file_and_keeps_errors_on_the_terminal(tmp_path, capsys):
    import logging
    import sys

    root = logging.getLogger()
    terminal = logging.StreamHandler(sys.stderr)
    root.addHandler(terminal)
    log_file = tmp_path / "deploy.log"
    try:
        with StatusLine(enabled=True, log_file=log_file, terminal=True):
            logging.getLogger("robot_rl.hardware.safety").warning("safety: change_limit (1 so far)")
            logging.getLogger("robot_rl.hardware.safety").error("safety: holding the robot (watchdog)")
        assert terminal.level == logging.NOTSET  # restored
    finally:
        root.removeHandler(terminal)
    err = capsys.readouterr().err
    text = log_file.read_text()
    assert "change_limit" in text and "holding the robot" in text
    assert "change_limit" not in err and "holding the robot" in err and f"warnings of this run: {log_file}" in err
    assert not (tmp_path / "quiet.log").exists()
    with StatusLine(enabled=True, log_file=tmp_path / "quiet.log", terminal=True):
        pass
    assert not (tmp_path / "quiet.log").exists()  # nothing logged: no file


def test_a_stop_as_an_episode_is_logged_leaves_it_in_the_log_the_fleet_and_the_report(tmp_path, monkeypatch):
    # The fleet's SIGTERM landed between the episode log's line and the message to the fleet's supervisor: the
    # summary said 6 episodes, the logs 7 (tests/test_fleet.py, a busy machine). Here it lands there every time.
    import json
    import signal

    from robot_rl.cli.base import sigterm_as_ctrl_c
    from robot_rl.cli.deploy import EpisodeLog, _episode_sinks

    class Link:  # the fleet supervisor's side of PipeLink.episode
        def __init__(self) -> None:
            self.episodes: list = []

        def episode(self, record) -> None:
            self.episodes.append(record)

    append = EpisodeLog.append

    def append_then_stop(self, episode) -> None:
        append(self, episode)
        if len(self.path.read_text().splitlines()) == 2:  # the second episode is on disk: the fleet stops now
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(EpisodeLog, "append", append_then_stop)
    d, _ = make(fast(episodes=0, max_episode_steps=3), push_script(engage_from=10_000), goal_x=10.0)
    link = Link()
    d.on_episode = _episode_sinks(tmp_path / "episodes.jsonl", link)
    with sigterm_as_ctrl_c():
        report = d.run()
    logged = [json.loads(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert d.interrupted
    assert len(logged) == len(link.episodes) == len(report.episodes) == 2
