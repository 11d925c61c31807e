"""Real-time (SCHED_FIFO) scheduling for a control loop, so that other work on the machine cannot delay it.

On a machine whose cores are busy (a learner, a compile, a second run), the kernel's fair scheduler gives the
control loop its turn late: at 30 Hz on a loaded 2-core machine 2.6 % of ticks missed their slot
(benchmarks/RESULTS_so101.md §1). A SCHED_FIFO thread runs as soon as it is runnable, ahead of every normal one.

:class:`RealtimeScheduling` is used in two steps around the robot's connection:

1. :meth:`~RealtimeScheduling.enter` puts the calling thread on SCHED_FIFO; what it starts next inherits it (the
   robot link's I/O threads and, on a simulated robot, the simulator's process);
2. :meth:`~RealtimeScheduling.seal` adds ``SCHED_RESET_ON_FORK``: threads and processes started after that (a
   learner in the same process, torch's worker pool, a teleop reader) begin on the normal policy again, so that a
   busy learner can never take the cores from everything else.

:meth:`~RealtimeScheduling.restore` puts the thread back as it was. The kernel still keeps 5 % of each second for
normal threads (``/proc/sys/kernel/sched_rt_runtime_us``), so a loop stuck in a busy wait cannot lock up the
machine. Linux only; it needs root, ``CAP_SYS_NICE`` or an ``rtprio`` limit for the user.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from robot_rl.core.config import ConfigError
from robot_rl.hardware.robot import RobotError

log = logging.getLogger(__name__)

MAX_PRIORITY = 99
AUTO_PRIORITY = 50
"""The priority ``realtime_priority=None`` asks for: ros2_control's controller manager uses the same."""
_auto_refusal_logged = False


class RealtimeError(RobotError):
    """Real-time scheduling was asked for and the OS refused it."""


def check_priority(priority: int) -> None:
    """Refuse a priority outside 0 (off) .. 99."""
    if not 0 <= priority <= MAX_PRIORITY:
        raise ConfigError(f"realtime_priority must be 0 (off) or 1..{MAX_PRIORITY} (SCHED_FIFO), got {priority}")


def thread_policy(native_id: int = 0) -> tuple[int, int]:
    """``(policy, priority)`` of a thread (0: the calling one), without the reset-on-fork flag."""
    policy = os.sched_getscheduler(native_id) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
    return policy, os.sched_getparam(native_id).sched_priority


class RealtimeScheduling:
    """SCHED_FIFO at ``priority`` (1..99) for the thread that calls :meth:`enter` (see the module docstring)."""

    def __init__(self, priority: int) -> None:
        check_priority(priority)
        if priority == 0:
            raise ValueError("priority 0 is the normal policy: do not make a RealtimeScheduling for it")
        self.priority = priority
        self._tid: int | None = None
        self._before: tuple[int, int] | None = None

    def enter(self) -> None:
        """Put the calling thread on SCHED_FIFO; raise :class:`RealtimeError` saying how to allow it."""
        if not sys.platform.startswith("linux") or not hasattr(os, "sched_setscheduler"):
            raise RealtimeError(f"realtime_priority={self.priority}: real-time scheduling is Linux-only here; "
                                "set realtime_priority=0")
        self._before = thread_policy()
        self._tid = threading.get_native_id()
        self._set(os.SCHED_FIFO)

    def seal(self) -> None:
        """From now on, what the thread starts begins on the normal policy (``SCHED_RESET_ON_FORK``)."""
        self._set(os.SCHED_FIFO | os.SCHED_RESET_ON_FORK)

    def restore(self) -> None:
        """Back to the policy the thread had before :meth:`enter` (from any thread; twice is harmless)."""
        if self._tid is None or self._before is None:
            return
        policy, priority = self._before
        try:
            os.sched_setscheduler(self._tid, policy, os.sched_param(priority))
        except ProcessLookupError:
            pass  # the thread has ended, and its policy with it
        except PermissionError:
            # A thread that started on a higher real-time priority than ours, without the right to raise it again:
            # stay on ours rather than fail a disconnect.
            log.warning("could not restore the thread's scheduling (%s, priority %d); it stays on SCHED_FIFO %d",
                        policy, priority, self.priority)
        self._tid = None

    def _set(self, policy: int) -> None:
        assert self._tid is not None, "enter() first"
        try:
            os.sched_setscheduler(self._tid, policy, os.sched_param(self.priority))
        except PermissionError as e:
            self._tid = None
            raise RealtimeError(
                f"realtime_priority={self.priority}: the OS refused SCHED_FIFO ({e.strerror}). Run as root, give "
                "the interpreter the capability (`sudo setcap cap_sys_nice+ep $(readlink -f $(which python))`), "
                "or allow your user real-time priorities (`@user - rtprio 99` in /etc/security/limits.conf, then "
                "log in again; in a container, `docker run --cap-add SYS_NICE`); or set realtime_priority=0") from e


def enter_realtime(priority: int | None) -> RealtimeScheduling | None:
    """The calling thread on SCHED_FIFO as ``priority`` asks, or None where it stays on the normal policy.

    ``None``: :data:`AUTO_PRIORITY` where the OS allows it, else the normal policy with one warning per process
    saying how to allow it. ``0``: the normal policy. ``1..99``: that priority, or :class:`RealtimeError`.
    """
    global _auto_refusal_logged
    if priority == 0:
        return None
    realtime = RealtimeScheduling(AUTO_PRIORITY if priority is None else priority)
    try:
        realtime.enter()
    except RealtimeError as e:
        if priority is not None:
            raise
        if not _auto_refusal_logged:  # once: a loop reconnects every episode on some robots
            _auto_refusal_logged = True
            log.warning("the control loop runs on the normal scheduler: on a busy machine its ticks may come "
                        "late. %s", str(e).replace(f"realtime_priority={AUTO_PRIORITY}: ", "real-time scheduling: "))
        return None
    return realtime
