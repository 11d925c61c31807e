"""The e-stop key read from the terminal by the guard process (`deploy --estop-guard --estop-tty`).

Each test makes a pseudo-terminal (``os.openpty``): the guard reads its slave side, the test types into the
master side as an operator would.
"""

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from waiting import wait_until

from robot_rl.cli.deploy import DeployArgs, resolve_estop_tty
from robot_rl.core.config import ConfigError
from robot_rl.hardware.estop import ESTOP_KEYS, EStopGuard, EStopGuardConfig, WriteTimeStop
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.xarm import XArmRobot, XArmRobotConfig
from robot_rl.human_loop.deploy import DeployConfig, Deployer
from robot_rl.human_loop.devices.keyboard import EVENT_KEYS, KeyboardDevice, QueueKeys, TerminalKeys
from robot_rl.human_loop.status import StatusLine
from robot_rl.testing.fake_xarm import FakeXArmAPI


@pytest.fixture
def terminal():
    """``(master fd, slave path)`` of a fresh pseudo-terminal."""
    master, slave = os.openpty()
    yield master, os.ttyname(slave)
    os.close(master)
    os.close(slave)


def _guard(terminal, stop_file: Path, forward_keys: bool = True) -> EStopGuard:
    return EStopGuard(WriteTimeStop(str(stop_file)), EStopGuardConfig(heartbeat_timeout_s=0, tty=terminal[1]),
                      forward_keys=forward_keys)


def _read_until(kb: KeyboardDevice, done, timeout_s: float = 5.0) -> tuple[tuple, float | None, tuple[str, ...]]:
    """Readings of ``kb`` until ``done(events, gripper)``: (delta, gripper, all events)."""
    events: tuple[str, ...] = ()
    last = None

    def read() -> bool:
        nonlocal events, last
        last = kb.read()
        events += last.events
        return done(events, last.gripper)

    wait_until(read, timeout_s, "the typed keys at the keyboard", poll_s=0.005,
               seen=lambda: (events, last))
    assert last is not None
    return tuple(last.delta), last.gripper, events


def test_the_keyboard_and_the_guard_share_one_estop_key():
    assert EStopGuardConfig().estop_keys == ESTOP_KEYS == " "
    assert [k for k, e in EVENT_KEYS.items() if e == "estop"] == list(ESTOP_KEYS)


@pytest.mark.integration
def test_guard_trips_on_the_key_and_forwards_every_other_key(terminal, tmp_path):
    master, _ = terminal
    stop_file = tmp_path / "stopped"
    guard = _guard(terminal, stop_file)
    with guard:
        os.write(master, b"t g")  # the e-stop key between two others, in one read
        wait_until(lambda: guard.tripped, 5.0, "the guard to trip on the e-stop key")
        # The guard flags the trip first (the layer latches at once), then runs the stop command.
        wait_until(stop_file.exists, 5.0, "the stop command to run in the guard")
        assert guard.reason == "e-stop key"
        forwarded = b""
        while forwarded != b"tg":
            forwarded += guard.keys.get(timeout=5)
        os.write(master, b"n")  # still forwarding after the trip (the operator can end the episode)
        assert guard.keys.get(timeout=5) == b"n"
        assert guard.keys.empty()  # the e-stop key itself is never forwarded


@pytest.mark.integration
def test_keyboard_fed_by_the_guard_reads_as_the_keyboard_on_the_terminal(terminal, tmp_path):
    master, _ = terminal
    keys = b"wtgo"  # +x motion, intervention toggle, success, gripper open
    own_master, own_slave = os.openpty()
    direct = KeyboardDevice(TerminalKeys(own_slave), hold_window_s=5.0)
    guard = _guard(terminal, tmp_path / "stopped")
    with guard:
        via_guard = KeyboardDevice(QueueKeys(guard.keys, alive=lambda: guard.alive), hold_window_s=5.0)
        try:
            direct.connect()
            via_guard.connect()
            os.write(own_master, keys)
            os.write(master, keys)

            def done(events, gripper):
                return gripper is not None and "success" in events

            got_direct = _read_until(direct, done)
            got_guard = _read_until(via_guard, done)
        finally:
            direct.disconnect()
            via_guard.disconnect()
            os.close(own_master)
            os.close(own_slave)
    assert got_direct == got_guard == ((1.0, 0, 0, 0, 0, 0), 1.0, ("toggle", "success"))
    assert not guard.tripped


@pytest.mark.integration
def test_the_key_stops_the_robot_while_this_process_is_hung(terminal, tmp_path):
    """The point of the feature: nothing in this process runs (the GIL is held), yet the key acts."""
    master, _ = terminal
    stop_file = tmp_path / "stopped"
    guard = _guard(terminal, stop_file, forward_keys=False)
    with guard:
        # The operator, in another process, presses the key 0.2 s into the hang (and notes when): that sleep
        # is part of the scenario, a key typed while this process is hung.
        typed_file = tmp_path / "typed"
        typist = subprocess.Popen([sys.executable, "-c", "import os, sys, time; time.sleep(0.2); "
                                   "open(sys.argv[2], 'w').write(repr(time.monotonic())); "
                                   "os.write(int(sys.argv[1]), b' ')", str(master), str(typed_file)],
                                  pass_fds=(master,))
        hung_from = time.monotonic()
        n = 20
        while time.monotonic() - hung_from < 3.0 and not stop_file.exists():  # hung until stopped
            # Catastrophic regex backtracking runs in C holding the GIL: no thread here can run meanwhile.
            re.match(r"(a+)+$", "a" * n + "b")
            n += 1
        hung_to = time.monotonic()
        typist.wait(timeout=5)
        wait_until(stop_file.exists, 5.0, "the guard to stop the robot")
        stopped, typed = float(stop_file.read_text()), float(typed_file.read_text())
        print(f"key typed {(typed - hung_from) * 1e3:.0f} ms into a {(hung_to - hung_from) * 1e3:.0f} ms hang, "
              f"robot stopped {(stopped - typed) * 1e3:.1f} ms later")
        assert hung_from < typed < stopped < hung_to
        assert stopped - typed < 0.5  # poll period (5 ms) + the stop command, with room for a loaded machine
        assert guard.tripped and guard.reason == "e-stop key"


class _Zero(torch.nn.Module):
    def act(self, obs, deterministic=False):
        a = torch.zeros(obs["state"].shape[0], 7)
        a[:, 6] = 1.0
        return a, {}


class _QuietStatus(StatusLine):
    """Records the status text without drawing it."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@pytest.mark.integration
def test_a_guard_trip_latches_the_safety_layer_and_the_status_line_says_why(terminal, tmp_path):
    master, _ = terminal
    robot = XArmRobot(XArmRobotConfig(), sdk=FakeXArmAPI)
    cfg = DeployConfig(safety=SafetyConfig(control_hz=100.0, watchdog_timeout_s=0.5), episodes=3,
                       max_episode_steps=400, reward_source="keys", status=True)
    guard = _guard(terminal, tmp_path / "stopped")
    status = _QuietStatus(enabled=True)
    with guard, SafetyLayer(robot, cfg.safety, guard=guard) as safety:
        device = KeyboardDevice(QueueKeys(guard.keys, alive=lambda: guard.alive))
        with device:
            d = Deployer(cfg, safety, device, _Zero(), status=status)

            def operator():
                os.write(master, b"g")  # episode 0: success key
                wait_until(lambda: len(d.episodes) >= 1, 10.0, "episode 0 to end")
                os.write(master, ESTOP_KEYS[0].encode())  # during episode 1 (4 s at most): e-stop

            typing = threading.Thread(target=operator, daemon=True)
            typing.start()
            report = d.run()
            typing.join(timeout=5)
        # Episode 2 starts still latched (a new episode never re-arms an e-stop) and ends at once.
        assert [e.end for e in report.episodes] == ["success", "safety", "safety"]
        assert report.episodes[2].steps == 0
        assert safety.latched == "estop" and safety.estop_reason == "e-stop key (guard)"
        assert status.text().startswith("E-STOP: e-stop key (guard) | ")
        with pytest.raises(RuntimeError, match="guard tripped"):
            safety.rearm()


def test_estop_tty_errors_say_what_to_do(tmp_path, terminal):
    plain = tmp_path / "not-a-tty"
    plain.write_text("")
    with pytest.raises(ConfigError, match=r"not a terminal.*--estop-tty off"):
        resolve_estop_tty(DeployArgs(estop_guard=True, estop_tty=str(plain)))
    with pytest.raises(ConfigError, match=r"cannot be opened.*`tty`"):
        resolve_estop_tty(DeployArgs(estop_guard=True, estop_tty=str(tmp_path / "missing")))
    with pytest.raises(ConfigError, match="add --estop-guard"):
        resolve_estop_tty(DeployArgs(estop_tty=terminal[1]))
    assert resolve_estop_tty(DeployArgs(estop_guard=True, estop_tty=terminal[1])) == terminal[1]
    assert resolve_estop_tty(DeployArgs(estop_guard=True, estop_tty="off")) is None
    assert resolve_estop_tty(DeployArgs(estop_guard=True), stdin_is_tty=False) is None  # auto, no operator
    assert resolve_estop_tty(DeployArgs()) is None
    with pytest.raises(ValueError, match="not a terminal"):  # checked before a process is spawned
        EStopGuard(WriteTimeStop(str(tmp_path / "s")), EStopGuardConfig(tty=str(plain))).start()


@pytest.mark.sim
@pytest.mark.integration
def test_deploy_cli_gives_the_terminal_to_the_guard_and_the_keyboard_reads_the_guard(terminal, tmp_path,
                                                                                      monkeypatch, capsys):
    pytest.importorskip("mujoco")  # the simulated arm
    pytest.importorskip("msgpack")
    from robot_rl.cli import main
    from robot_rl.hardware.sim_arm import SimulatedArmConfig
    from robot_rl.human_loop.hil_learner import HILLearner
    from robot_rl.policies.sac import SACConfig
    from robot_rl.transport.config import ZmqTransportConfig

    cfg = DeployConfig(robot=SimulatedArmConfig(cameras={}),
                       algo=SACConfig(actor_hidden=(32, 32), critic_hidden=(32, 32)),
                       transport=ZmqTransportConfig(address="tcp://127.0.0.1:*"))
    learner = HILLearner(cfg, tmp_path / "run")
    learner.checkpoint()
    learner.close()

    master, slave = terminal
    started: list[EStopGuard] = []
    from robot_rl.cli import deploy_actor

    real_start = deploy_actor.start_estop_guard

    def spy(*a, **kw):
        started.append(real_start(*a, **kw))
        return started[-1]

    monkeypatch.setattr(deploy_actor, "start_estop_guard", spy)
    episodes: list[int] = []
    real_episode = Deployer.run_episode

    def episode_spy(self, index):
        episodes.append(index)
        return real_episode(self, index)

    monkeypatch.setattr(Deployer, "run_episode", episode_spy)

    def operator():  # (a failed wait here leaves a key untyped: the episode ends asserted below show it)
        wait_until(lambda: started, 60.0, "the deploy verb to start the guard")
        os.write(master, b"g")  # episode 0 ends on the keyboard's success key, through the guard
        wait_until(lambda: 1 in episodes, 60.0, "episode 1 to start")  # it lasts 6 s unless stopped
        os.write(master, b" ")  # episode 1: the guard's e-stop key

    typing = threading.Thread(target=operator, daemon=True)
    typing.start()
    log = tmp_path / "episodes.jsonl"
    code = main(["deploy", "--mode", "eval", "--run-dir", str(tmp_path / "run"), "--teleop", "keyboard",
                 "--episodes", "2", "--max-episode-steps", "150", "--no-status", "--episode-log", str(log),
                 "--estop-guard", "--estop-tty", slave, "--estop-heartbeat-s", "0.5", "robot.cameras={}",
                 "safety.control_hz=25", "safety.watchdog_timeout_s=1.0"])  # no watchdog trip on a loaded machine
    typing.join(timeout=5)
    assert code == 0
    (guard,) = started
    # (On a loaded machine the simulator may answer the guard's hold late: the reason then says so too.)
    assert guard.config.heartbeat_timeout_s == 0.5
    assert guard.config.tty == slave and guard.keys is not None and guard.reason.startswith("e-stop key")
    import json

    ends = [json.loads(line)["end"] for line in log.read_text().splitlines()]
    assert ends == ["success", "safety"]
    out = capsys.readouterr().out
    assert f"reads the space bar from {slave}" in out and "E-STOP: e-stop key" in out and "(guard)" in out
