"""`robot-rl deploy --fleet`: checks before anything moves, and three simulated arms with one operator."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from robot_rl.cli import main
from robot_rl.core.config import ConfigError
from robot_rl.hardware.lerobot_robot import LeRobotRobotConfig
from robot_rl.human_loop.deploy import DeployConfig
from robot_rl.human_loop.fleet import FleetRobot, check_fleet, exclusive_resources, load_fleet, member_configs

EXE = str(Path(sys.executable).with_name("robot-rl"))


def _fleet_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def test_a_count_makes_copies_with_their_own_actor_ids_and_seeds() -> None:
    robots = load_fleet("3")
    configs = member_configs(DeployConfig(seed=5), robots)
    assert [r.name for r in robots] == ["robot0", "robot1", "robot2"]
    assert [(c.actor_id, c.seed) for c in configs] == [(0, 5), (1, 6), (2, 7)]
    check_fleet(robots, configs, learn=True)  # three simulated arms, each starting its own simulator


def test_a_fleet_file_sets_each_robot(tmp_path: Path) -> None:
    pytest.importorskip("mink", reason="the lerobot robots' arm model needs mink: pip install 'robot-rl[kinematics]'")
    path = _fleet_file(tmp_path, "robots:\n  - name: left\n    set: [robot.type=lerobot, robot.port=/dev/ttyACM0]\n"
                                 "  - name: right\n    set: [robot.type=lerobot, robot.port=/dev/ttyACM1, seed=9]\n"
                                 "    teleop: gamepad\n")
    robots = load_fleet(str(path))
    configs = member_configs(DeployConfig(robot=LeRobotRobotConfig(control_mode="joint_delta")), robots)
    assert [c.robot.port for c in configs] == ["/dev/ttyACM0", "/dev/ttyACM1"]
    assert configs[1].seed == 9 and robots[1].teleop == "gamepad"
    check_fleet(robots, configs, learn=True)


@pytest.mark.parametrize("text, message", [
    ("robots:\n  - {name: a, set: [robot.port=/dev/ttyACM0]}\n  - {name: b, set: [robot.port=/dev/ttyACM0]}\n",
     r"'a' and 'b' are both on port /dev/ttyACM0"),
    ("robots:\n  - {name: a}\n  - {name: a}\n", "robot name.s. a used twice"),
    ("robots:\n  - {name: a, set: [robot.nonsense=1]}\n", "fleet robot 'a'"),
    ("robots:\n  - {name: 'a b'}\n", "letters, digits"),
    ("robots: []\n", "non-empty `robots:` list"),
    ("robots:\n  - {name: a, port: 3}\n", r"robots\[0\] must be a mapping"),
])
def test_bad_fleets_are_refused_with_what_to_do(tmp_path: Path, text: str, message: str) -> None:
    base = DeployConfig(robot=LeRobotRobotConfig(control_mode="joint_delta"))
    with pytest.raises(ConfigError, match=message):
        robots = load_fleet(str(_fleet_file(tmp_path, text)))
        check_fleet(robots, member_configs(base, robots), learn=False)


def test_cameras_and_simulator_addresses_are_held_by_one_robot() -> None:
    cam = {"cameras": {"front": {"type": "opencv", "index_or_path": 0}}}
    a = LeRobotRobotConfig(port="/dev/ttyACM0", options=cam, control_mode="joint_delta")
    assert exclusive_resources(a) == ["port /dev/ttyACM0", "camera 0"]
    b = LeRobotRobotConfig(port="/dev/ttyACM1", options=cam, control_mode="joint_delta")
    robots = [FleetRobot("a"), FleetRobot("b")]
    with pytest.raises(ConfigError, match="both on camera 0"):
        check_fleet(robots, [DeployConfig(robot=a), DeployConfig(robot=b)], learn=False)
    sims = member_configs(DeployConfig(), [FleetRobot("s1", ["robot.address=tcp://10.0.0.2:7000"]),
                                           FleetRobot("s2", ["robot.address=tcp://10.0.0.2:7000"])])
    with pytest.raises(ConfigError, match=r"both on address tcp://10\.0\.0\.2:7000"):
        check_fleet([FleetRobot("s1"), FleetRobot("s2")], sims, learn=False)


def test_one_learner_needs_one_spec() -> None:
    pytest.importorskip("mujoco")
    robots = load_fleet("2")
    base = DeployConfig()
    configs = member_configs(base, robots)
    configs[1] = member_configs(base, [FleetRobot("x", ["robot.cameras={}"])])[0]
    with pytest.raises(ConfigError, match="one learner needs one spec"):
        check_fleet(robots, configs, learn=True)


@pytest.mark.integration
def test_the_command_refuses_two_robots_on_one_port_before_anything_moves(tmp_path: Path) -> None:
    fleet = _fleet_file(tmp_path, "robots:\n  - {name: left, set: [robot.port=/dev/ttyACM0]}\n"
                                  "  - {name: right, set: [robot.port=/dev/ttyACM0]}\n")
    proc = subprocess.run([EXE, "deploy", "--fleet", str(fleet), "--mode", "learn", "--teleop", "gamepad",
                           "robot.type=lerobot", "robot.control_mode=joint_delta"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    assert "'left' and 'right' are both on port /dev/ttyACM0" in proc.stderr
    assert not (tmp_path / "fleet_operator.jsonl").exists()  # no robot process was started


def test_the_keyboard_cannot_serve_a_fleet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--fleet", "2", "--mode", "learn", "--teleop", "keyboard"]) == 2
    assert "keyboard teleop" in capsys.readouterr().err


def _sigint_default() -> None:
    # Ctrl-C works as in a terminal even when the suite runs as a background job (started with SIGINT ignored).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.sim
@pytest.mark.slow
def test_three_simulated_arms_learn_with_one_operator_and_stop_on_sigterm(tmp_path: Path) -> None:
    pytest.importorskip("mujoco")
    from transport_helpers import free_tcp_addr
    from waiting import wait_until

    env = dict(os.environ)  # no camera: MuJoCo renders nothing, so no GL backend is needed
    common = ["robot.cameras={}", "help.enabled=true", f"transport.address={free_tcp_addr()}"]
    # Output to files, never to pipes nobody reads while waiting: a full pipe would block the process.
    learner_log, fleet_out, fleet_err = (open(tmp_path / n, "w") for n in ("learner.log", "fleet.out", "fleet.err"))
    learner = subprocess.Popen([EXE, "deploy", "--role", "learner", "--run-dir", str(tmp_path / "learner"),
                                "--no-status", "--max-s", "300", *common], stdout=learner_log,
                               stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
                               preexec_fn=_sigint_default)
    fleet = subprocess.Popen([EXE, "deploy", "--fleet", "3", "--mode", "learn", "--teleop", "pick_helper",
                              "--episodes", "0", "--max-episode-steps", "15",
                              "--episode-log", str(tmp_path / "episodes.jsonl"), *common, "help.budget=0.3",
                              "help.warmup_steps=5", "help.wait_timeout_s=2", "help.min_gap_steps=3",
                              "safety.watchdog_timeout_s=1.0"],
                             stdout=fleet_out, stderr=fleet_err, text=True, env=env, cwd=tmp_path,
                             start_new_session=True, preexec_fn=_sigint_default)
    logs = [tmp_path / f"episodes-robot{i}.jsonl" for i in range(3)]
    try:
        wait_until(lambda: all(p.exists() and len(p.read_text().splitlines()) >= 2 for p in logs)
                   or fleet.poll() is not None, 240.0, "two episodes from every robot")
        fleet.send_signal(signal.SIGTERM)
        fleet.wait(timeout=90)
    finally:
        for p in (fleet, learner):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGINT)
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    raise
        for f in (learner_log, fleet_out, fleet_err):
            f.close()
    out, err = (tmp_path / "fleet.out").read_text(), (tmp_path / "fleet.err").read_text()
    assert fleet.returncode == 0, err[-3000:]
    for i in range(3):
        line = next(x for x in out.splitlines() if x.startswith(f"robot{i}: "))
        assert "stopped by a signal" in line and "LOST" not in line
    summary = json.loads((tmp_path / "fleet_summary.json").read_text())
    logged = {i: [json.loads(x) for x in logs[i].read_text().splitlines()] for i in range(3)}
    assert summary["episodes"] == sum(len(v) for v in logged.values())
    assert summary["requests_served"] >= 1 and summary["attention_min"] > 0
    events = [json.loads(x) for x in (tmp_path / "fleet_operator.jsonl").read_text().splitlines()]
    serves = [e for e in events if e["event"] == "serve"]
    assert len(serves) == summary["requests_served"]
    assert (tmp_path / "help_scores-robot0.jsonl").exists()
    assert "Traceback" not in err
