"""Ctrl-C and SIGTERM stop the verbs that drive a robot cleanly: a summary, every finished episode kept, exit 0.

Real processes and real signals, as a user stops them: Ctrl-C in a terminal signals the command's whole process
group (the simulated arm's server is in its own session, so only its owner hears it); `kill PID`, systemd or a
container's shutdown send SIGTERM to the process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_runs import untrained_sim_arm_run
from waiting import wait_until

pytest.importorskip("mujoco")  # the simulated arm
pytest.importorskip("msgpack")

pytestmark = [pytest.mark.sim, pytest.mark.slow]

EXE = str(Path(sys.executable).with_name("robot-rl"))
SIGNALS = {"ctrl-c": lambda p: os.killpg(p.pid, signal.SIGINT), "sigterm": lambda p: p.send_signal(signal.SIGTERM)}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return untrained_sim_arm_run(tmp_path_factory.mktemp("stop") / "run")


def _start(cmd: list[str]) -> subprocess.Popen[str]:
    # Its own process group, as a shell gives a command it starts: killpg(pid) is the terminal's Ctrl-C. SIGINT at
    # its default, as in a terminal, even when the suite runs as a background job (started with SIGINT ignored).
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _stop(proc: subprocess.Popen[str], how: str) -> tuple[str, str]:
    SIGNALS[how](proc)
    try:
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("how", sorted(SIGNALS))
def test_deploy_stops_with_a_summary_and_a_complete_episode_log(run_dir: Path, tmp_path: Path, how: str) -> None:
    log = tmp_path / "episodes.jsonl"
    proc = _start([EXE, "deploy", "--mode", "eval", "--run-dir", str(run_dir), "--teleop", "pick_intervener",
                   "--episodes", "0", "--max-episode-steps", "6", "--episode-log", str(log), "--no-status",
                   "robot.cameras={}", "safety.control_hz=40", "safety.watchdog_timeout_s=1.0"])
    try:
        wait_until(lambda: len(_lines(log)) >= 2 or proc.poll() is not None, 120.0, "two logged episodes")
    finally:
        out, err = _stop(proc, how)
    assert proc.returncode == 0, err[-3000:]
    summary = next(line for line in out.splitlines() if "episodes (stopped by a signal" in line)
    logged = [json.loads(line) for line in _lines(log)]
    assert summary.startswith(f"{len(logged)} episodes") and len(logged) >= 2
    assert all(e["steps"] > 0 and e["end"] for e in logged)
    assert "Traceback" not in err and "exited with code" not in err


@pytest.mark.parametrize("how", sorted(SIGNALS))
def test_record_stops_keeping_every_saved_episode(tmp_path: Path, how: str) -> None:
    from robot_rl.data.store import EpisodeStore

    out_dir = tmp_path / "demos"
    proc = _start([EXE, "record", "--robot", "sim_arm", "--teleop", "pick_demonstrator", "--out", str(out_dir),
                   "--format", "episodes", "--episodes", "1000", "--no-status", "robot.cameras={}",
                   "safety.watchdog_timeout_s=1.0"])

    def saved() -> int:
        try:
            return len(EpisodeStore(out_dir))
        except Exception:  # not created yet
            return 0

    try:
        wait_until(lambda: saved() >= 1 or proc.poll() is not None, 120.0, "a saved episode")
    finally:
        out, err = _stop(proc, how)
    assert proc.returncode == 0, err[-3000:]
    assert "stopped: interrupted" in out
    n = int(out.split(" episode(s) saved")[0].split()[-1])
    episodes = list(EpisodeStore(out_dir))
    assert n == len(episodes) >= 1 and all(len(ep) > 0 for ep in episodes)
    assert "Traceback" not in err
