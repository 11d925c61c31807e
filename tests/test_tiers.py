"""The test tiers hold (tests/tiers.py): a unit test that starts a process, uses a socket, sleeps or runs long fails.

The rules are checked by running pytest with the tiers plugin on a small file of tests that break them, as a
developer's new test would; the run is a process, so that check is itself an integration test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tiers import UNIT_TIMEOUT_S

TESTS = Path(__file__).resolve().parent

# Each test breaks at most one rule; the integration twins do the same things and pass.
CASES = '''
import multiprocessing
import os
import socket
import subprocess
import sys
import time

import pytest


def test_plain():
    assert sum(range(10)) == 45


def test_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_starts_a_multiprocessing_process():
    process = multiprocessing.get_context("spawn").Process(target=print)
    process.start()
    process.join()


def test_forks():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def test_binds_a_socket():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))


def test_connects_a_socket():
    try:
        with socket.socket() as s:
            s.connect(("127.0.0.1", 9))
    except OSError:
        pass


def test_sleeps():
    time.sleep(0.3)


def test_short_sleeps_are_a_tick():
    for _ in range(3):
        time.sleep(0.01)


def test_waits():
    import threading

    threading.Event().wait(0.4)  # not a sleep: costs no CPU, the thread blocked


def test_runs_long():
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass


@pytest.mark.integration
def test_integration_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.integration
def test_integration_uses_a_socket_and_sleeps():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
    time.sleep(0.3)


@pytest.mark.slow
def test_slow_runs_long():
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass


@pytest.fixture(scope="module")
def server():
    yield
    subprocess.run([sys.executable, "-c", "pass"], check=True)  # stops what the integration test used


@pytest.mark.integration
def test_integration_uses_a_module_fixture(server):
    pass


def test_last_in_the_file_closes_the_module_fixture_for_its_integration_user():
    pass
'''

# The CPU and waiting limits are lowered for the run so that "runs long" and "waits" cost 0.3-0.4 s, not 5 s.
CONFTEST = '''
import tiers

pytest_plugins = ["tiers"]
tiers.CPU_LIMIT_S = 0.2
tiers.BLOCKED_LIMIT_S = 0.2


def pytest_configure(config):
    for marker in ("unit", "integration", "slow"):
        config.addinivalue_line("markers", marker)
'''


def _outcomes(out: str) -> dict[str, str]:
    return {m.group(2): m.group(1) for m in re.finditer(r"^(PASSED|FAILED|ERROR) \S+::(\w+)", out, re.M)}


@pytest.mark.integration
def test_a_unit_test_that_breaks_a_rule_fails_with_the_guidance(tmp_path: Path) -> None:
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", "test_cases.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert _outcomes(out) == {
        "test_plain": "PASSED", "test_short_sleeps_are_a_tick": "PASSED",
        "test_integration_starts_a_process": "PASSED", "test_integration_uses_a_socket_and_sleeps": "PASSED",
        "test_slow_runs_long": "PASSED", "test_integration_uses_a_module_fixture": "PASSED",
        "test_last_in_the_file_closes_the_module_fixture_for_its_integration_user": "PASSED",
        "test_starts_a_process": "FAILED", "test_starts_a_multiprocessing_process": "FAILED", "test_forks": "FAILED",
        "test_binds_a_socket": "FAILED", "test_connects_a_socket": "FAILED",
        "test_sleeps": "FAILED", "test_runs_long": "FAILED", "test_waits": "FAILED"}, out
    for what in ("started a process (subprocess: ", "started a process (multiprocessing: ",
                 "started a process (os.fork)", "used a socket (bind ('127.0.0.1', 0))",
                 "used a socket (connect ('127.0.0.1', 9))", "slept 0.3 s", "unit test took ", " s CPU and waited "):
        assert what in out, what
    assert re.search(r"started a process \(subprocess: \S+ -c pass\) at test_cases.py:\d+: a unit test runs", out)
    assert out.count("mark it @pytest.mark.integration") >= 8, out


@pytest.mark.integration
def test_minus_m_unit_selects_what_is_not_integration_or_slow(tmp_path: Path) -> None:
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--collect-only",
                          "-m", "not unit", "test_cases.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    selected = re.findall(r"::(\w+)$", run.stdout, re.M)
    assert selected == ["test_integration_starts_a_process", "test_integration_uses_a_socket_and_sleeps",
                        "test_slow_runs_long", "test_integration_uses_a_module_fixture"], run.stdout


def test_an_unmarked_test_is_unit(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("timeout").args == (UNIT_TIMEOUT_S,)
