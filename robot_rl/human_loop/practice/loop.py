"""Practice's loop: two deploy loops on one robot, the task policy and the reset policy, taking turns.

Each policy is a :class:`~robot_rl.human_loop.deploy.Deployer` with its own learner (its own replay, critics and
checkpoints: a `robot-rl deploy --role learner` each, crash-safe as in HIL-SERL); both share the robot, its safety
layer and the person's teleop device. :class:`PracticeRunner` runs their attempts in the order the
:class:`~robot_rl.human_loop.practice.controller.PracticeController` gives, and hands every transition either policy
made to the other's learner too, with that policy's reward (:class:`Mirror`): both learn from one stream of
experience. Nothing places the scene between attempts but the robot (``robot.resets=physical`` on the simulated
arms); when the robot is stuck it asks the person to put the scene back (:class:`ResetPerson`) or, with the scene
where the demos start, to take over the task policy's next attempt (a device that hears requests), within the budget.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.hardware.robot import HumanResettable, SceneResetsConfig, TaskRobot
from robot_rl.hardware.sim_arm import TaskStatus
from robot_rl.hardware.teleop import HearsHelpRequests, TeleopDevice
from robot_rl.human_loop.deploy import Deployer
from robot_rl.human_loop.deploy_config import DeployConfig
from robot_rl.human_loop.deploy_report import EpisodeRecord
from robot_rl.human_loop.practice.controller import Attempt, PracticeController, PracticeCounts

log = logging.getLogger(__name__)

Obs = dict[str, np.ndarray]


@dataclass
class PhaseStatus:
    """A policy's success and reward at one step (what :attr:`Deployer.task_reader` returns)."""

    success: bool
    reward: float


class StartStatus:
    """The reset policy's success and reward on a simulated cell: the scene is back where the demos start.

    Read from the cell's own task status (``at_start``, ``start_reward``: robot_rl/hardware/sim_arm_server.py), as
    the task policy's come from its ``success`` and ``reward``: the counterpart of ``reward_source=robot``.
    """

    def __init__(self, robot: TaskRobot) -> None:
        self.robot = robot

    def __call__(self) -> PhaseStatus:
        """The status now (after an observation: the one that came with it)."""
        info = self.robot.task_status().info
        if "at_start" not in info:
            raise ConfigError("practice.reset_reward=robot needs a cell that reports whether the scene is back at its "
                              "start (sim_arm, sim_so101): elsewhere train an initial-state classifier and set "
                              "practice.reset_reward=classifier practice.reset_classifier=DIR")
        return PhaseStatus(bool(info["at_start"]), float(info["start_reward"]))


def phase_reward(d: Deployer) -> Callable[[Obs], tuple[float, bool]]:
    """What ``d``'s learner is paid at an observation, as ``d``'s own loop would compute it (reward, success)."""
    reader = d.task_reader
    if reader is None and isinstance(d.robot, TaskRobot) and d.cfg.reward_source == "robot":
        reader = d.robot.task_status
    if reader is not None:
        read = reader

        def from_task(obs: Obs) -> tuple[float, bool]:
            s = read()
            return float(s.reward), bool(s.success)

        return from_task
    judge = d.judge
    if judge is not None:
        def from_classifier(obs: Obs) -> tuple[float, bool]:
            ok = bool(judge(obs))
            return float(ok), ok

        return from_classifier
    return lambda obs: (0.0, False)  # reward_source=keys: only a key pays, and the key belongs to the acting loop


class Mirror:
    """``Deployer.on_row`` of one policy: the transition goes to the other policy's learner, with its reward.

    Terminated where the other policy succeeds; cut (truncated) where the acting policy's attempt ended; never flagged
    intervened (the person's actions showed the acting policy its task, not the other's).
    """

    def __init__(self, peer: Deployer, reward: Callable[[Obs], tuple[float, bool]]) -> None:
        self.peer = peer
        self.reward = reward
        self.rows = 0

    def __call__(self, row: dict[str, Any], obs: Obs) -> None:
        """Relabel ``row`` (which ends in ``obs``) for the peer and send it there."""
        reward, ok = self.reward(obs)
        ended = bool(row["terminated"] or row["truncated"])
        self.peer.record_row({**row, "reward": reward, "terminated": ok, "truncated": ended and not ok,
                              "intervened": False})
        self.rows += 1


@runtime_checkable
class ResetPerson(Protocol):
    """The person a stuck robot asks to put the scene back."""

    def put_back(self, reason: str) -> bool:
        """Ask (the robot holds meanwhile); True once the scene is back, False if nobody came in time."""
        ...


class SimulatedPerson:
    """A person at a simulated cell: puts the scene back at once (``human_reset``: teleported, counted there)."""

    def __init__(self, robot: HumanResettable, seed: int = 0) -> None:
        self.robot = robot
        self.seed = seed
        self.resets = 0

    def put_back(self, reason: str) -> bool:
        """Put the arm and the object back where the demos start."""
        self.robot.human_reset(self.seed * 100_003 + self.resets)
        self.resets += 1
        return True


class KeyPerson:
    """A person at a real cell: told why (a warning, the bell), puts the scene back by hand and presses a key.

    The *success* or *reset* key of the teleop device answers; the robot holds (``hold_tick``, one control period
    each) until then or the deadline.
    """

    def __init__(self, device: TeleopDevice, hold_tick: Callable[[], None], timeout_s: float,
                 clock: Callable[[], float] = time.monotonic, bell: bool = True) -> None:
        self.device = device
        self.hold_tick = hold_tick
        self.timeout_s = timeout_s
        self.clock = clock
        self.bell = bell

    def put_back(self, reason: str) -> bool:
        """Hold until a *success* or *reset* key (True) or ``timeout_s`` (False)."""
        import sys

        log.warning("practice: the robot is stuck (%s): put the scene back as the demos start, then press the "
                    "success or reset key (waiting %.0fs)", reason, self.timeout_s)
        if self.bell and sys.stderr.isatty():
            sys.stderr.write("\a")
            sys.stderr.flush()
        deadline = self.clock() + self.timeout_s
        while self.clock() < deadline:
            self.hold_tick()
            reading = self.device.read()
            if reading is not None and {"success", "reset"} & set(reading.events):
                return True
        return False


@dataclass
class PracticeReport:
    """A practice run: every attempt, and what the robot and the person did."""

    attempts: list[dict[str, Any]] = field(default_factory=list)
    """Per attempt: policy, success, steps, interventions, the practice time at its end (s) and the person's actions
    so far (``human_actions``): the curve of human actions against time."""
    counts: PracticeCounts = field(default_factory=PracticeCounts)
    mirrored_rows: dict[str, int] = field(default_factory=dict)
    """Transitions each policy's learner received from the other policy's attempts."""
    wall_s: float = 0.0

    def summary(self) -> str:
        """One line for the terminal."""
        c = self.counts
        hours = max(self.wall_s, 1e-9) / 3600.0
        return (f"practice: {c.task_attempts} task attempts ({c.task_successes} succeeded), {c.reset_attempts} reset "
                f"attempts ({c.reset_successes} succeeded, {c.reset_not_needed} not needed) in {self.wall_s:.0f}s; "
                f"the person: {c.human_resets} resets, {c.takeovers} takeovers ({c.human_actions / hours:.1f} "
                f"actions/hour), {c.reset_requests} reset and {c.takeover_requests} takeover requests, "
                f"{c.unanswered} unanswered, {c.over_budget} over budget")


class PracticeRunner:
    """Alternates the two loops' attempts, relabels experience across them, asks the person when stuck."""

    def __init__(self, cfg: DeployConfig, task: Deployer, reset: Deployer, person: ResetPerson | None,
                 clock: Callable[[], float] = time.monotonic, stop: threading.Event | None = None,
                 on_attempt: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.cfg = cfg
        self.loops = {"task": task, "reset": reset}
        self.person = person
        self.clock = clock
        self.stop = stop or threading.Event()
        self.on_attempt = on_attempt
        self.mirrors = {"task": Mirror(reset, phase_reward(reset)), "reset": Mirror(task, phase_reward(task))}
        task.on_row, reset.on_row = self.mirrors["task"], self.mirrors["reset"]
        self.controller = PracticeController(cfg.practice, clock())
        self.report = PracticeReport()
        self._index = 0
        self._takeover_asked = False

    def _ear(self) -> HearsHelpRequests | None:
        device = self.loops["task"].device
        return device if isinstance(device, HearsHelpRequests) else None

    def _in_reach(self) -> bool | None:
        robot = self.loops["task"].robot
        if not isinstance(robot, TaskRobot):
            return None
        status = robot.task_status()
        info = status.info if isinstance(status, TaskStatus) else None
        return bool(info["in_reach"]) if info is not None and "in_reach" in info else None

    def attempt(self) -> EpisodeRecord:
        """One attempt of the next policy, booked; then a reset request if the robot is stuck."""
        name = self.controller.next_policy()
        d = self.loops[name]
        # Chunks a full outbox kept are sent while the robot is held, never dropped; with max_unlearned_chunks
        # both learners (each fed every step) also catch up on their updates first, as one deploy loop's does.
        for loop in self.loops.values():
            loop.wait_for_learner(self.stop)
        ear = self._ear() if self._takeover_asked and name == "task" else None
        if ear is not None:  # a scripted person hears the request (a real one was told by the warning and the bell)
            ear.hear_help_request(True)
        try:
            record = d.run_episode(self._index)
        finally:
            if ear is not None:
                ear.hear_help_request(False)
                self._takeover_asked = False
        self._index += 1
        in_reach = self._in_reach()
        now = self.clock()
        self.controller.record(Attempt(name, record.success, record.steps, record.interventions, in_reach), now)
        self._ask_if_stuck()
        c = self.controller.counts
        row = {"policy": name, "success": record.success, "steps": record.steps,
               "interventions": record.interventions, "in_reach": in_reach, "end": record.end,
               "time_s": now - self.controller.start, "human_actions": c.human_actions,
               "human_resets": c.human_resets, "takeovers": c.takeovers, "version": record.policy_version}
        self.report.attempts.append(row)
        if self.on_attempt is not None:
            self.on_attempt(row)
        return record

    def _ask_if_stuck(self) -> None:
        ctl, cfg = self.controller, self.cfg.practice
        kind, why = ctl.ask(self.clock())
        # An object out of reach cannot be practised with: hold until the budget allows a request.
        held_from = self.clock()
        while not kind and ctl.out_of_reach and cfg.ask_when_out_of_reach and not self.stop.is_set():
            if ctl.budget_allows(self.clock()):
                kind, why = ctl.ask(self.clock())
                break
            self.loops["task"].hold_tick()
        ctl.counts.held_for_budget_s += self.clock() - held_from
        if kind == "takeover":
            log.warning("practice: the scene is where the demos start and the task still fails (%s): take over the "
                        "next attempt with the teleop device", why)
            self._takeover_asked = True
        elif kind == "reset":
            log.warning("practice: asking the person to put the scene back (%s)", why)
            answered = self.person.put_back(why) if self.person is not None else False
            ctl.answered(answered, self.clock())

    def run(self, attempts: int = 0, max_s: float | None = None) -> PracticeReport:
        """Practise for ``attempts`` attempts (0: until ``stop`` or ``max_s``); the robot held at the end."""
        t0 = self.clock()
        try:
            for d in self.loops.values():
                if d.cfg.mode == "learn" and d.version <= 0:
                    d.wait_first_weights()
            while not self.stop.is_set() and (attempts == 0 or self._index < attempts):
                if max_s is not None and self.clock() - t0 >= max_s:
                    break
                self.attempt()
        except KeyboardInterrupt:
            log.warning("practice interrupted: the running attempt is dropped, the robot held")
        finally:
            safety = self.loops["task"].safety
            safety.robot.hold()
            if safety.watchdog is not None:  # held on purpose while the learners acknowledge (as Deployer.run)
                safety.watchdog.disarm()
            if safety.guard is not None:
                safety.guard.pause()
            for d in self.loops.values():
                for aid in (d.help, d.audit):
                    if aid is not None:
                        aid.close()
            for d in self.loops.values():
                d.drain()
        self.report.counts = self.controller.counts
        self.report.mirrored_rows = {name: m.rows for name, m in self.mirrors.items()}
        self.report.wall_s = self.clock() - t0
        return self.report


def reset_config(cfg: DeployConfig) -> DeployConfig:
    """The reset policy's loop config: its own learner, attempt length and (with a classifier) reward."""
    p = cfg.practice
    changes: dict[str, Any] = {"mode": "learn" if cfg.mode in ("learn", "practice") else cfg.mode,
                               "max_episode_steps": p.reset_max_steps,
                               "transport": dataclasses.replace(cfg.transport, address=p.reset_address),
                               "audit": dataclasses.replace(cfg.audit, enabled=False)}
    if p.reset_reward == "classifier":
        changes.update(reward_source="classifier", classifier=p.reset_classifier)
    return dataclasses.replace(cfg, **changes)


def task_config(cfg: DeployConfig) -> DeployConfig:
    """The task policy's loop config (the deploy config as given, acting for a learner in practice)."""
    return dataclasses.replace(cfg, mode="learn" if cfg.mode in ("learn", "practice") else cfg.mode)


def check_practice_robot(cfg: DeployConfig, robot: Any) -> None:
    """Refuse a robot practice cannot read its reset reward from; warn where the simulator still teleports."""
    if cfg.practice.reset_reward == "robot" and not isinstance(robot, TaskRobot):
        raise ConfigError("practice.reset_reward=robot reads the scene's start from a simulated cell (sim_arm, "
                          "sim_so101); on this robot use practice.reset_reward=classifier "
                          "practice.reset_classifier=DIR")
    if isinstance(cfg.robot, SceneResetsConfig) and cfg.robot.resets != "physical":
        log.warning("robot.resets=%s: the simulator places the scene at every attempt; practice without magic "
                    "resets needs robot.resets=physical", cfg.robot.resets)
