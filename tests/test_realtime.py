"""``safety.realtime_priority``: SCHED_FIFO for the control loop and the simulator, never for what starts later.

Runs the real path: the safety layer connecting a simulated arm (its own process, a ZeroMQ link), the OS's own
scheduler calls and, for the refusal, a child process without the privilege (root without CAP_SYS_NICE, no
rtprio limit).
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from needs import need_mujoco_rendering

from robot_rl.hardware.realtime import RealtimeError, RealtimeScheduling, thread_policy
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_FIFO is Linux scheduling")


def _may_use_fifo() -> bool:
    probe = RealtimeScheduling(1)
    done: list[bool] = []

    def attempt() -> None:  # in a throwaway thread: the test's own thread is never touched by the probe
        try:
            probe.enter()
            done.append(True)
        except RealtimeError:
            done.append(False)

    t = threading.Thread(target=attempt)
    t.start()
    t.join()
    return done[0]


def _policy_in_new_thread() -> tuple[int, int]:
    seen: list[tuple[int, int]] = []
    t = threading.Thread(target=lambda: seen.append(thread_policy()))
    t.start()
    t.join()
    return seen[0]


@pytest.mark.parametrize("priority", [-1, 100])
def test_priority_outside_the_range_is_refused_at_config_time(priority: int) -> None:
    with pytest.raises(ValueError, match="realtime_priority must be 0"):
        SafetyConfig(realtime_priority=priority)


@pytest.mark.integration
def test_loop_and_simulator_run_fifo_and_later_threads_do_not() -> None:
    pytest.importorskip("mujoco")
    pytest.importorskip("msgpack")
    if not _may_use_fifo():
        pytest.skip("this user may not use SCHED_FIFO (needs root, CAP_SYS_NICE or an rtprio limit)")
    from robot_rl.hardware.sim_arm import SimulatedArm, SimulatedArmConfig

    before = thread_policy()
    arm = SimulatedArm(SimulatedArmConfig(cameras={}))
    with SafetyLayer(arm, SafetyConfig(realtime_priority=20, watchdog_timeout_s=0.0)):
        assert thread_policy() == (os.SCHED_FIFO, 20)
        assert arm.process is not None
        server = (os.sched_getscheduler(arm.process.pid), os.sched_getparam(arm.process.pid).sched_priority)
        assert server == (os.SCHED_FIFO, 20), "the simulator's process must inherit the loop's policy"
        assert _policy_in_new_thread() == (os.SCHED_OTHER, 0), "a thread started by the loop (a learner) must not"
        child = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                               capture_output=True, text=True, check=True)
        assert int(child.stdout) == os.SCHED_OTHER
    assert thread_policy() == before, "leaving the layer restores the thread's policy"


def _unprivileged(argv: list[str]) -> list[str]:
    """``argv`` run with no way to SCHED_FIFO (util-linux's ``setpriv``; ``_no_rtprio_limit`` as its preexec_fn).

    Linux lets a task on the normal policy take SCHED_FIFO only with CAP_SYS_NICE or a non-zero RLIMIT_RTPRIO
    (``user_check_sched_setscheduler``, kernel/sched/syscalls.c). An exec hands CAP_SYS_NICE on from the bounding set
    (root), the inheritable set (root: a child of ``setpriv --inh-caps +sys_nice`` got SCHED_FIFO through a bounding
    set drop alone) and the ambient set, and from a file capability (the refusal's own fix, ``setcap cap_sys_nice+ep``
    on the interpreter, gave a non-root child SCHED_FIFO): all are closed here, the last by no_new_privs.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("taking CAP_SYS_NICE away from a child needs setpriv: apt-get install util-linux")
    drop = ["--no-new-privs", "--inh-caps", "-sys_nice", "--ambient-caps", "-sys_nice"]
    return [setpriv, *drop, *(["--bounding-set", "-sys_nice"] if os.geteuid() == 0 else []), *argv]


def _no_rtprio_limit() -> None:
    # The child starts on the normal policy whatever the test process runs on (a thread that is already real-time
    # may keep its priority without the privilege), with no rtprio allowance (a user's limits.conf may grant one).
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))


_HELD = """
import os, resource
caps = {line.split(":")[0]: line.split()[1] for line in open("/proc/self/status") if line.startswith("Cap")}
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    print("GRANTED", end=" ")
except PermissionError:
    print("REFUSED", end=" ")
print(caps, "RLIMIT_RTPRIO", resource.getrlimit(resource.RLIMIT_RTPRIO), "kernel", os.uname().release)
"""


def _held(prefix: tuple[str, ...] = ()) -> str:
    """What a child run through ``_unprivileged`` gets from the OS: GRANTED or REFUSED, its capabilities and limit."""
    out = subprocess.run([*prefix, *_unprivileged([sys.executable, "-c", _HELD])], capture_output=True, text=True,
                         timeout=60, preexec_fn=_no_rtprio_limit)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _granted_anyway(what: str) -> str:
    return (f"SCHED_FIFO was granted to a child without CAP_SYS_NICE and with RLIMIT_RTPRIO 0, which Linux refuses "
            f"({what}); a child run the same way: {_held()}")


@pytest.mark.integration
def test_a_child_run_unprivileged_is_refused_fifo_even_when_the_privilege_is_handed_on() -> None:
    assert _held().startswith("REFUSED"), _held()
    permitted = int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("CapPrm")), 16)
    setpriv = shutil.which("setpriv")
    if setpriv is not None and permitted >> 23 & 1:  # CAP_SYS_NICE is capability 23
        # This process passing CAP_SYS_NICE on through the inheritable set, as a root shell or service manager may.
        handed_on = _held((setpriv, "--inh-caps", "+sys_nice"))
        assert handed_on.startswith("REFUSED"), handed_on


_REFUSED = """
import os, resource, sys
from robot_rl.hardware.robot import RobotError
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.xarm import XArmRobot, XArmRobotConfig
from robot_rl.testing.fake_xarm import FakeXArmAPI
robot = XArmRobot(XArmRobotConfig(), sdk=lambda ip: FakeXArmAPI(ip, is_radian=True))
layer = SafetyLayer(robot, SafetyConfig(realtime_priority=30))
for attempt in range(2):  # a second try is refused the same way (nothing half-set by the first)
    try:
        layer.connect()
        caps = [line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")]
        print("ALLOWED", os.sched_getscheduler(0), caps, resource.getrlimit(resource.RLIMIT_RTPRIO))
        sys.exit(0)
    except RobotError as e:
        message = e
print("REFUSED", robot.is_connected, message)
"""


@pytest.mark.integration
def test_refusal_names_the_fix_and_connects_nothing() -> None:
    out = subprocess.run(_unprivileged([sys.executable, "-c", _REFUSED]), capture_output=True, text=True,
                         timeout=60, preexec_fn=_no_rtprio_limit)
    assert out.returncode == 0, out.stderr
    assert not out.stdout.startswith("ALLOWED"), _granted_anyway(out.stdout.strip())
    assert out.stdout.startswith("REFUSED False"), out.stdout
    for fix in ("setcap cap_sys_nice", "rtprio", "realtime_priority=0"):
        assert fix in out.stdout


_AUTO = """
import logging, os, sys
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.xarm import XArmRobot, XArmRobotConfig
from robot_rl.testing.fake_xarm import FakeXArmAPI
robot = XArmRobot(XArmRobotConfig(), sdk=lambda ip: FakeXArmAPI(ip, is_radian=True))
layer = SafetyLayer(robot, SafetyConfig(watchdog_timeout_s=0.0, realtime_priority=None))  # deploy's and record's
for attempt in range(2):  # an arm reconnected (a new episode on some robots) warns once, not every time
    layer.connect()
    print("CONNECTED", robot.is_connected, os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK,
          os.sched_getparam(0).sched_priority, flush=True)
    layer.disconnect()
"""


@pytest.mark.integration
def test_default_takes_fifo_where_allowed_and_else_connects_with_one_warning() -> None:
    """The default (None) is priority 50 where the OS allows it; elsewhere the loop still runs, with one warning."""
    allowed = subprocess.run([sys.executable, "-c", _AUTO], capture_output=True, text=True, timeout=60)
    assert allowed.returncode == 0, allowed.stderr
    if _may_use_fifo():
        assert allowed.stdout.splitlines() == [f"CONNECTED True {os.SCHED_FIFO} 50"] * 2, allowed.stdout
        assert "WARNING" not in allowed.stderr, allowed.stderr
    refused = subprocess.run(_unprivileged([sys.executable, "-c", _AUTO]), capture_output=True, text=True,
                             timeout=60, preexec_fn=_no_rtprio_limit)
    assert refused.returncode == 0, refused.stderr
    assert not refused.stdout.startswith(f"CONNECTED True {os.SCHED_FIFO}"), _granted_anyway(refused.stdout.strip())
    assert refused.stdout.splitlines() == [f"CONNECTED True {os.SCHED_OTHER} 0"] * 2, refused.stdout
    warnings = [line for line in refused.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "normal scheduler" in warnings[0] and "setcap cap_sys_nice" in warnings[0], \
        refused.stderr


def test_deploy_and_record_ask_for_it_and_the_library_does_not() -> None:
    """The CLI verbs whose main thread is the loop take real-time scheduling where allowed; a SafetyLayer made in
    other code does not (its thread may train next, which on SCHED_FIFO takes a core from everything else)."""
    from robot_rl.cli.record import RecordArgs, build_configs
    from robot_rl.human_loop.deploy import DeployConfig

    assert SafetyConfig().realtime_priority == 0
    assert DeployConfig().safety.realtime_priority is None
    args = RecordArgs(robot="sim_arm", teleop="scripted", out=Path("unused"))
    assert build_configs(args)[2].realtime_priority is None
    args = RecordArgs(robot="sim_arm", teleop="scripted", out=Path("unused"), overrides=("safety.realtime_priority=0",))
    assert build_configs(args)[2].realtime_priority == 0


def test_default_watchdog_allows_one_late_tick_at_the_control_rate() -> None:
    """Three control periods, at least 0.2 s: a 10 Hz loop that misses one tick (a 200 ms gap) is not latched."""
    assert SafetyConfig(control_hz=10.0).watchdog_timeout() == pytest.approx(0.3)
    assert SafetyConfig(control_hz=30.0).watchdog_timeout() == pytest.approx(0.2)
    assert SafetyConfig(control_hz=10.0, watchdog_timeout_s=0.45).watchdog_timeout() == 0.45
    assert SafetyConfig(control_hz=10.0, watchdog_timeout_s=0.0).watchdog_timeout() == 0.0


def _record(out: Path, *, privileged: bool) -> subprocess.CompletedProcess[str]:
    """`robot-rl record` on the simulated SO-101 with the loop on SCHED_FIFO, typed as the docs show it."""
    argv = [sys.executable, "-m", "robot_rl.cli", "record", "--robot", "sim_so101", "--teleop", "pick_demonstrator",
            "--out", str(out), "--format", "episodes", "--episodes", "1", "--hz", "30", "--no-status",
            "safety.realtime_priority=40"]
    return subprocess.run(argv if privileged else _unprivileged(argv), capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, preexec_fn=None if privileged else _no_rtprio_limit)


@pytest.mark.integration
def test_record_cli_runs_its_loop_on_fifo_and_refuses_clearly_without_the_privilege(tmp_path: Path) -> None:
    need_mujoco_rendering()  # sim_so101's cameras
    pytest.importorskip("mink")
    if not _may_use_fifo():
        pytest.skip("this user may not use SCHED_FIFO (needs root, CAP_SYS_NICE or an rtprio limit)")
    ok = _record(tmp_path / "demos", privileged=True)
    assert ok.returncode == 0, ok.stderr[-2000:]
    from robot_rl.data.store import EpisodeStore

    assert len(EpisodeStore(tmp_path / "demos")) == 1, ok.stderr[-2000:]
    refused = _record(tmp_path / "refused", privileged=False)
    assert refused.returncode != 0, _granted_anyway("`robot-rl record` ran its loop on it")
    assert "the OS refused SCHED_FIFO" in refused.stderr and "realtime_priority=0" in refused.stderr, refused.stderr
    assert "not reachable" not in refused.stderr


def test_the_hardware_pages_realtime_commands_resolve_as_typed(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mujoco")
    pytest.importorskip("mink")
    import re
    import shlex

    from robot_rl.cli import main

    page = (Path(__file__).resolve().parents[1] / "docs" / "hardware.md").read_text()
    section = page.split("### Real-time scheduling", 1)[1].split("\n### ", 1)[0]
    cmds = [c for block in re.findall(r"```bash\n(.*?)```", section, re.S)
            for c in block.replace("\\\n", " ").splitlines() if c.startswith("robot-rl ")]
    assert [c.split()[1] for c in cmds] == ["record", "deploy"]
    for cmd in cmds:
        assert main(["config", *shlex.split(cmd)[1:]]) == 0, cmd
        assert re.search(r"safety\.realtime_priority\s+│\s+50\s", capsys.readouterr().out), cmd
