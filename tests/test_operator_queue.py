"""One operator, several robots: the queue's order, and robots holding for it through real pipes."""

from __future__ import annotations

import io
import multiprocessing as mp
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from test_deploy import PointArm, fast
from test_help_desk import PushPolicy, _asks_at_once

from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.human_loop.deploy import Deployer
from robot_rl.human_loop.devices.base import TeleopReading
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.fleet import PipeLink
from robot_rl.human_loop.fleet_supervisor import FleetSupervisor
from robot_rl.human_loop.help_gate import HelpGateConfig
from robot_rl.human_loop.operator_queue import OperatorQueue, reason_kind


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_requests_are_served_risk_first_then_by_urgency_then_by_age() -> None:
    clock = Clock()
    q = OperatorQueue(clock)
    q.ask("busy", 1, "novelty +9.0 sd (threshold 2.0)", 9.0)
    assert q.next() is not None and q.serving is not None and q.serving.robot == "busy"
    for robot, reason, urgency in [("a", "novelty +5.0 sd", 5.0), ("b", "risk +2.1 sd", 2.1),
                                   ("c", "classifier +9.0 sd", 9.0), ("d", "risk +3.0 sd", 3.0),
                                   ("e", "safety +2.5 sd", 2.5), ("f", "risk +3.0 sd", 3.0),
                                   ("g", "novelty score is nan (a non-finite score asks: fail safe)", float("inf"))]:
        clock.t += 1.0
        q.ask(robot, 1, reason, urgency)
    assert q.next() is None  # the operator is still with "busy"
    assert q.order() == ["g", "e", "d", "f", "b", "a", "c"]  # d and f tie on kind and urgency: d asked first
    served = []
    q.done("busy", 1)
    while (request := q.next()) is not None:
        served.append(request.robot)
        clock.t += 2.0
        q.done(request.robot, request.request_id)
    assert served == ["g", "e", "d", "f", "b", "a", "c"]
    assert q.attention_s() == pytest.approx(7 * 2.0 + 7.0)  # "busy" was served from t=0 to t=7
    assert [reason_kind(r) for r in ("risk +1 sd", "safety +1 sd", "whatever")] == ["risk", "safety", "novelty"]


def test_a_withdrawn_request_is_never_served_and_a_stale_done_changes_nothing() -> None:
    q = OperatorQueue(Clock())
    q.ask("a", 1, "risk +3 sd", 3.0)
    q.ask("b", 1, "risk +2 sd", 2.0)
    assert q.next().robot == "a"  # type: ignore[union-attr]
    q.done("b", 1)  # b timed out while waiting: withdrawn
    q.done("a", 7)  # not a's open request: the operator stays
    assert q.serving is not None and q.serving.robot == "a" and q.withdrawn == 1
    q.done("a", 1)
    assert q.serving is None and q.next() is None


def test_an_unasked_takeover_takes_a_free_operator_and_serves_a_waiting_request() -> None:
    q = OperatorQueue(Clock())
    assert q.claim("a")  # nobody asked: the person took a over
    q.ask("b", 3, "risk +3 sd", 3.0)
    assert not q.claim("b") and q.next() is None  # the operator is with a
    q.handed_back("a")
    assert q.claim("b")  # b's waiting request is served by the person who came
    assert q.serving is not None and q.serving.request_id == 3 and not q.pending
    q.done("b", 3)
    q.ask("c", 1, "risk +1 sd", 1.0)
    q.drop("c")  # c's process ended
    assert q.next() is None and q.withdrawn == 1
    assert [s.request_id for s in q.history] == [None, 3]


def test_the_supervisor_grants_through_pipes_in_priority_order() -> None:
    ctx = mp.get_context("spawn")
    pipes = {name: ctx.Pipe() for name in ("busy", "a", "b", "c")}
    out = io.StringIO()
    sup = FleetSupervisor({n: here for n, (here, _) in pipes.items()}, out=out)
    links = {n: PipeLink(there, n) for n, (_, there) in pipes.items()}
    links["busy"].ask(1, "novelty +3 sd", 3.0)
    sup.poll(0.5)
    assert links["busy"].granted(1)
    links["a"].ask(1, "novelty +8 sd", 8.0)
    links["b"].ask(4, "safety +2 sd", 2.0)
    links["c"].ask(2, "risk +2 sd", 2.0)
    deadline = time.monotonic() + 5.0
    while len(sup.queue.pending) < 3 and time.monotonic() < deadline:
        sup.poll(0.1)
    assert not any(links[n].granted(i) for n, i in (("a", 1), ("b", 4), ("c", 2)))  # all wait: they hold
    order = []
    current = ("busy", 1)
    for _ in range(3):
        links[current[0]].done(current[1])
        deadline = time.monotonic() + 5.0
        while not (sup.queue.serving and sup.queue.serving.robot != current[0]) and time.monotonic() < deadline:
            sup.poll(0.1)
        assert sup.queue.serving is not None
        current = (sup.queue.serving.robot, sup.queue.serving.request_id or 0)
        assert links[current[0]].granted(current[1])
        order.append(current[0])
    assert order == ["b", "c", "a"]  # safety, then risk, then novelty, whatever the urgency
    assert "OPERATOR -> b: safety +2 sd" in out.getvalue()
    pipes["a"][1].close()  # a's process died while being served: the operator is freed
    deadline = time.monotonic() + 5.0
    while "a" in sup.conns and time.monotonic() < deadline:
        sup.poll(0.1)
    assert sup.queue.serving is None and "a" not in sup.conns


class Helper:
    """A scripted person for one robot: comes ``walk`` reads after being called, then pushes for ``steps``."""

    def __init__(self, walk: int = 30, steps: int = 5) -> None:
        self.walk, self.steps = walk, steps
        self.called_at: int | None = None
        self.i = 0

    def hear_help_request(self, asking: bool) -> None:
        if asking and self.called_at is None:
            self.called_at = self.i

    def __call__(self, i: int) -> TeleopReading:
        self.i = i
        start = None if self.called_at is None else self.called_at + self.walk
        acting = start is not None and start <= i < start + self.steps
        return TeleopReading(0.0, delta=np.array([1.0, 0, 0, 0, 0, 0]), engage=acting)


def _robot(help_cfg: HelpGateConfig, conn, name: str, tmp_path: Path):
    cfg = fast(episodes=1, max_episode_steps=200, help=help_cfg,
               safety=SafetyConfig(control_hz=100.0, max_linear_speed=5.0, watchdog_timeout_s=0.5))
    arm = PointArm(0.45)
    commanded: list[tuple[float, float]] = []
    command = arm._command

    def recording(target, gripper):
        commanded.append((time.monotonic(), float(target[0])))
        command(target, gripper)

    arm._command = recording  # type: ignore[method-assign]
    safety = SafetyLayer(arm, cfg.safety)
    safety.connect()
    dev = ScriptedDevice(Helper())
    dev.connect()
    link = PipeLink(conn, name)
    deployer = Deployer(cfg, safety, dev, PushPolicy(), operator_link=link, robot_name=name, on_episode=link.episode,
                        help_log=tmp_path / f"help-{name}.jsonl")
    return deployer, commanded


def test_three_robots_one_operator_the_waiting_robot_holds_a_timeout_takes_its_fallback(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    pipes = {name: ctx.Pipe() for name in ("a", "b", "c", "free")}
    sup = FleetSupervisor({n: here for n, (here, _) in pipes.items()}, out=io.StringIO())
    patient = _asks_at_once(wait_timeout_s=10.0, min_gap_steps=10**6)
    robots = {"a": _robot(patient, pipes["a"][1], "a", tmp_path), "b": _robot(patient, pipes["b"][1], "b", tmp_path),
              "c": _robot(_asks_at_once(wait_timeout_s=0.3, fallback="skip", min_gap_steps=10**6), pipes["c"][1],
                          "c", tmp_path),
              "free": _robot(HelpGateConfig(enabled=True, scores=["safety"], warmup_steps=10**6, bell=False),
                             pipes["free"][1], "free", tmp_path)}
    reports: dict[str, object] = {}
    finished: dict[str, float] = {}

    def run(name: str) -> None:
        reports[name] = robots[name][0].run()
        finished[name] = time.monotonic()
        pipes[name][1].close()

    threads = {n: threading.Thread(target=run, args=(n,)) for n in robots}
    for n in ("a", "b"):
        threads[n].start()
    deadline = time.monotonic() + 10.0
    while len(sup.queue.history) + len(sup.queue.pending) < 2 and time.monotonic() < deadline:
        sup.poll(0.02)  # a and b have asked: c will queue behind them
    for n in ("c", "free"):
        threads[n].start()
    sup.run(until=lambda: time.monotonic() > deadline + 30.0, poll_s=0.02)
    for t in threads.values():
        t.join(timeout=10.0)
    ends = {n: r.episodes[0].end for n, r in reports.items()}  # type: ignore[attr-defined]
    assert ends == {"a": "success", "b": "success", "c": "skipped", "free": "success"}
    served = sup.queue.history
    assert [s.robot for s in served] in (["a", "b"], ["b", "a"])  # c timed out waiting, never served
    assert served[0].end is not None and served[0].end <= served[1].start  # one robot at a time
    assert sup.queue.withdrawn == 1 and reports["c"].episodes[0].help_timeouts == 1  # type: ignore[attr-defined]
    # The second robot held while the operator was with the first: every command then kept its pose.
    second = robots[served[1].robot][1]
    assert {x for t, x in second if t < served[1].start} == {0.4}
    assert {x for _, x in robots["c"][1]} == {0.4}  # c never moved: it held, then skipped the episode
    assert finished["free"] < served[1].start  # the robot that did not ask kept acting: nothing blocked it
    summary = sup.summary()
    assert summary["successes"] == 3 and summary["requests_served"] == 2 and summary["requests_withdrawn"] == 1


def test_the_scripted_helper_stops_when_the_request_ends_under_it() -> None:
    from robot_rl.hardware.sim_pick import PickIntervener, PickView

    class Scene:
        def pick_view(self) -> PickView:
            return PickView(np.array([0.3, 0.0, 0.2]), np.array([0.4, 0.0, 0.02]), 1.0, 0.02, 0.04, 0.02)

    helper = PickIntervener(Scene(), takeover_steps=10, only_when_asked=True)  # type: ignore[arg-type]
    assert not helper(0).engage  # nobody asked
    helper.hear_help_request(True)
    assert helper(1).engage and helper(2).engage
    helper.hear_help_request(False)  # the episode ended (or the fallback) while the person acted
    assert not helper(3).engage  # a new episode does not start with a takeover nobody asked for
