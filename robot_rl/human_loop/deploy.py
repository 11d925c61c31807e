"""`robot-rl deploy`: a policy on a robot, a human with a teleop device, and optionally a learner.

One control loop at a fixed rate (:class:`~robot_rl.core.rate.RateLoop`). Each tick:

1. observe (through the :class:`~robot_rl.hardware.safety.SafetyLayer`) and, on robots that know their
   task (:class:`TaskRobot`, e.g. the ``SimulatedArm``), read success and reward;
2. the policy proposes an action; the :class:`~robot_rl.hardware.intervention.InterventionController`
   lets the human take over (hold-to-intervene by default, or toggle) without the arm jumping;
3. the previous step's transition is completed with this observation and labelled: *success* when the
   task (or a success classifier, whose suspicious fires go to the operator with ``audit.enabled``) says so
   **or the human pressed success**, *failure* / *reset* keys end the episode (truncated), and so does
   ``max_episode_steps``;
4. the action goes through the safety layer (its events are counted and shown) to the robot.

``mode="eval"`` scores ``episodes`` episodes. ``mode="learn"`` makes the loop an actor: transitions (with
``intervened`` per step and the policy version) go to a learner over ZeroMQ in small chunks, never blocking the loop
nor dropped (:mod:`~robot_rl.human_loop.deploy_outbox`); newer weights are picked up between ticks after a check on
recorded observations (``WeightGate``).
The learner samples intervened rows 50/50 (:mod:`~robot_rl.human_loop.hil_learner`).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.algorithm import Policy, split_critic_weights
from robot_rl.core.interrupts import interrupts_held
from robot_rl.core.rate import RateLoop
from robot_rl.core.transport import LearnerWaitNotice, wait_first_weights
from robot_rl.hardware.intervention import InterventionController, check_leader_kinematics
from robot_rl.hardware.robot import TaskRobot
from robot_rl.hardware.safety import SafetyLayer
from robot_rl.hardware.teleop import HearsHelpRequests, TeleopDevice
from robot_rl.hardware.weight_check import WeightCheckConfig, WeightGate
from robot_rl.human_loop.deploy_aids import DeployAids, load_deploy_aids
from robot_rl.human_loop.deploy_config import (  # noqa: F401 - re-exported: the deploy API
    DEPLOY_CONTROL_MODES,
    DeployConfig,
    set_deploy_threads,
)
from robot_rl.human_loop.deploy_extensions import DeployHooks, DeployRun
from robot_rl.human_loop.deploy_outbox import KeptChunks
from robot_rl.human_loop.deploy_policy import load_run_policy, policy_act_fn  # noqa: F401 - load_run_policy: API
from robot_rl.human_loop.deploy_report import DeployReport, EpisodeRecord, intervention_runs
from robot_rl.human_loop.help_desk import OperatorLink
from robot_rl.human_loop.observation import policy_spec, robot_spec, select_obs, success_judge  # noqa: F401
from robot_rl.human_loop.reward_audit import AuditDesk
from robot_rl.human_loop.status import StatusLine
from robot_rl.human_loop.transition_rows import rows_to_batch
from robot_rl.viz import StepViz

log = logging.getLogger(__name__)

class Deployer:
    """The deploy control loop (see the module docstring); ``aids``: :mod:`~robot_rl.human_loop.deploy_aids`."""

    def __init__(self, cfg: DeployConfig, safety: SafetyLayer, device: TeleopDevice, policy: Policy,
                 endpoint: Any = None, policy_version: int = 0, stop: threading.Event | None = None,
                 status: StatusLine | None = None, viz: StepViz | None = None,
                 on_episode: Callable[[EpisodeRecord], None] | None = None, help_log: Path | None = None,
                 operator_link: OperatorLink | None = None, robot_name: str = "",
                 aids: DeployAids | None = None, run_dir: Path | None = None,
                 task_reader: Callable[[], Any] | None = None,
                 on_row: Callable[[dict[str, Any], dict[str, np.ndarray]], None] | None = None) -> None:
        self.cfg = cfg
        self.safety = safety
        self.robot = safety.robot
        self.device = device
        self.policy = policy
        self.endpoint = endpoint
        """The learner (learn mode); may be set after construction: the CLI connects it once all else is built."""
        self.version = policy_version
        self.stop = stop or threading.Event()
        rc = self.robot.config
        self.controller = InterventionController(device, cfg.intervention, self.robot.control_mode,
                                                 joint_step_rad=rc.max_step_joint_rad, fk=self.robot.forward_kinematics,
                                                 ee_steps=(rc.max_step_m, rc.max_step_rad))
        check_leader_kinematics(device, self.robot)
        self.rate = RateLoop(cfg.safety.control_hz)
        self.deterministic = cfg.deterministic if cfg.deterministic is not None else cfg.mode == "eval"
        self.recorded: deque[dict[str, np.ndarray]] = deque(maxlen=64)
        self.gate = WeightGate({}, WeightCheckConfig(max_deviation=cfg.weight_max_deviation))
        self.gate.current, self.gate.version = policy_act_fn(policy), policy_version
        self.status = status or StatusLine(enabled=False)
        self.viz = viz
        self.on_episode = on_episode
        """Called with each finished episode (the episode log appends it at once: a kill loses none)."""
        self.task_reader = task_reader
        """Reads the step's success and reward (an object with ``success`` and ``reward``) in place of the robot's
        ``task_status`` (practice's reset policy reads the scene's return to its start from it)."""
        self.on_row = on_row
        """Called with each completed transition and everything observed at its end (practice hands it to the other
        policy's learner, with that policy's reward)."""
        self.episodes: list[EpisodeRecord] = []
        self.steps = 0
        self.chunks_sent = 0
        self.dropped_chunks = 0  # kept chunks never handed to the transport (the run ended with the learner gone)
        self.unacked_chunks = 0
        self.kept = KeptChunks()  # chunks the transport's outbox had no room for: sent later, never dropped
        self._rows: list[dict[str, Any]] = []
        self.last_source = "policy"
        self.interrupted = False
        """Stopped by Ctrl-C or SIGTERM (the report covers the finished episodes)."""
        self.collected: list[dict[str, Any]] | None = None
        """Set to a list to keep every transition here too (e.g. to record demonstrations in eval mode)."""
        aids = aids or load_deploy_aids(cfg, policy, self.robot, help_log, operator_link, robot_name)
        self.judge, self.help = aids.judge, aids.help_desk
        """Asks the operator for help (``help.enabled``): the gate, the hold while waiting, the fallback."""
        self.audit = (AuditDesk(aids.audit, self.judge, device, self._hold_tick, self.status.question, self._seen,
                                cfg.actor_id, learning=cfg.mode == "learn")
                      if aids.audit is not None and self.judge is not None else None)
        self._step_events = 0  # safety events of the last step sent (the help gate's ``safety`` score)
        self._ear = device if self.help is not None and isinstance(device, HearsHelpRequests) else None
        #: The deploy config's extensions (:mod:`~robot_rl.human_loop.deploy_extensions`): hooks in each tick.
        self.hooks = DeployHooks(cfg, DeployRun(cfg, run_dir, lambda: policy_spec(cfg), lambda: self.steps), self)

    # ---- weights --------------------------------------------------------------------------------

    def _recorded_batch(self) -> dict[str, np.ndarray]:
        return {k: np.stack([o[k] for o in self.recorded]) for k in self.recorded[0]} if self.recorded else {}

    def offer_weights(self, weights: Any, version: int) -> bool:
        """Check new weights on recorded observations; act with them if they pass."""
        candidate = copy.deepcopy(self.policy)
        weights, critic = split_critic_weights(weights)
        try:
            candidate.load_actor_weights(weights)
        except (RuntimeError, KeyError, ValueError) as e:  # wrong shapes or keys: never reaches the robot
            self.gate.counts["rejected"] += 1
            log.warning("weights v%d do not load into the acting policy (%s); keeping v%d", version, e, self.version)
            return False
        self.gate.observations = self._recorded_batch()
        if not self.gate.offer(policy_act_fn(candidate), version).ok:
            return False
        self.policy, self.version = candidate, version
        if self.help is not None:
            self.help.load_critic(critic, version)
        return True

    def sync_weights(self) -> None:
        """Pick up the learner's newest weights, if any (never blocks)."""
        if self.endpoint is None:
            return
        new = self.endpoint.poll_weights(self.version)
        if new is not None and new.version > (self.gate.version or -1):
            if not self.offer_weights(new.weights, new.version):
                self.gate.version = new.version  # refused: do not re-check the same version every tick

    def wait_first_weights(self) -> None:
        """Learn mode: block (up to ``max_wait_s``) for the learner's weights before the robot moves."""
        notice = LearnerWaitNotice(self.cfg.transport.address, self.cfg.max_wait_s, log.warning)
        new = wait_first_weights(self.endpoint, self.cfg.max_wait_s, on_wait=self.status.waiting(notice))
        if new is None:
            raise TimeoutError(f"no weights from the learner at {self.cfg.transport.address} within "
                               f"{self.cfg.max_wait_s:.0f}s; is `robot-rl deploy --role learner` running?")
        self.recorded.append(self._seen(self.safety.observe()))
        self.gate.current = None
        if not self.offer_weights(new.weights, new.version):
            raise RuntimeError(f"the learner's first weights v{new.version} failed the check on a recorded "
                               "observation (non-finite or out-of-bounds actions)")

    # ---- transitions ----------------------------------------------------------------------------

    def _seen(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What the policy sees of ``obs`` (``policy_keys``); the success classifier and the live view see all."""
        return select_obs(obs, self.cfg.policy_keys)

    def _act(self, obs: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
        with torch.no_grad():
            if self.hooks.hooks:  # the extensions' before_act / after_act around the policy
                return self.hooks.act(self.policy, obs, self.deterministic)
            t_obs = {k: torch.as_tensor(v).unsqueeze(0) for k, v in obs.items()}
            a, extras = self.policy.act(t_obs, deterministic=self.deterministic)
        return a[0].numpy(), {k: v[:1] for k, v in extras.items()}

    def record_row(self, row: dict[str, Any]) -> None:
        """Send ``row`` (a completed transition) to this loop's learner with its own, as if this loop had made it."""
        self._record(row)

    def hold_tick(self) -> None:
        """One control period with the robot held (the watchdog fed): the loop waits for a person."""
        self._hold_tick()

    def _record(self, row: dict[str, Any]) -> None:
        self.hooks.after_step(row, self.steps - 1)
        if self.cfg.mode != "learn" and self.collected is None:
            return
        self._rows.append(row)
        if len(self._rows) >= self.cfg.send_every or row["terminated"] or row["truncated"]:
            self.flush()

    def flush(self) -> None:
        """Send the collected rows as one chunk (a full outbox keeps it for later; the loop never waits)."""
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        if self.collected is not None:
            self.collected.extend(rows)
        if self.endpoint is None:
            return
        self.chunks_sent += self.kept.hand_over(self.endpoint, rows_to_batch(rows))

    # ---- the loop -------------------------------------------------------------------------------

    def _start_episode(self, index: int) -> dict[str, np.ndarray]:
        if isinstance(self.robot, TaskRobot):
            self.robot.reset_task(self.cfg.seed * 100_003 + index)
        # A new episode is a restart: the change limit starts again from the measured state. A latch (watchdog
        # during a long reset) is cleared only with rearm_on_reset; an e-stop never here.
        if self.safety.estop_reason is None and (self.safety.latched is None or self.cfg.rearm_on_reset):
            self.safety.rearm()
        obs = self.safety.observe()
        self.recorded.append(self._seen(obs))
        return obs

    def run_episode(self, index: int) -> EpisodeRecord:
        """One episode, from reset to success, a key, the time limit or a safety latch."""
        t0 = time.monotonic()
        obs = self._start_episode(index)
        pending: dict[str, Any] | None = None
        ret, end, success, t = 0.0, "time_limit", False, 0
        flags: list[bool] = []  # who acted, per step sent to the robot
        shown: tuple[Any, ...] = ()  # the pending step for the live view: step, action sent, source, proposal, obs
        read = self._task_reader()
        # A learned reward on a robot that knows its task (a simulated arm): its verdict is kept beside the reward's
        truth = self.robot if isinstance(self.robot, TaskRobot) and read is None else None
        task_success: bool | None = None
        while not self.stop.is_set():
            self.rate.wait()
            if t > 0:
                obs = self.safety.observe()
            status = read() if read is not None else None
            self.sync_weights()
            seen = self._seen(obs)
            policy_action, extras = self._act(seen)
            judged = self._judged(obs, index, t)  # before the gate: it reads the probability
            step = self.controller.step(policy_action, measured_joints=obs["state"][:self.robot.config.num_joints])
            verdict = self._ask(obs, policy_action, step.intervened, index, t) if self.help is not None else "act"
            self.last_source = "asking" if verdict == "hold" else step.source
            if "estop" in step.events:
                self.safety.estop.trigger("teleop e-stop key")
            success = bool(status is not None and status.success) or "success" in step.events or judged
            end = self._episode_end(success, verdict, step.events)
            done = success or end != "time_limit" or t == self.cfg.max_episode_steps
            if done and truth is not None:
                task_success = bool(truth.task_status().success)
            if pending is not None:
                reward = self.hooks.reward(float(status.reward) if status is not None else float(success))
                ret += reward
                self._complete({**pending, "next_obs": seen, "reward": reward, "terminated": success,
                                "truncated": done and not success}, obs)
                if self.viz is not None:  # the step this transition completes, by who acted
                    n, sent, source, proposal, observed = shown
                    self.viz.step(n, sent, source=source, reward=reward, success=success, obs=observed,
                                  proposal=proposal)
            if done:
                break
            if verdict == "hold":  # waiting for the operator: stay put, feed the watchdog, record nothing
                _, info = self.safety.step(self.controller.hold_action(policy_action))
                self.status.safety(info["safety_events"])
                pending = None
                self._show(index, t)
                continue
            applied, info = self.safety.step(step.action)
            self._step_events = len(info["safety_events"])
            self.status.safety(info["safety_events"])
            pending = {"obs": seen, "action": applied, "intervened": step.intervened or self.hooks.intervened,
                       "version": self.version,
                       "extras": extras}
            shown = (self.steps, applied, step.source, policy_action if step.intervened else None, obs)
            flags.append(step.intervened)
            t += 1
            self.steps += 1
            self._show(index, t)
        self.flush()
        self.safety.robot.hold()
        self.controller.reset_episode()
        lengths, aids = intervention_runs(flags), [a.end_episode() for a in (self.help, self.audit) if a is not None]
        record = EpisodeRecord(success, t, ret, sum(flags), len(lengths), lengths, end, time.monotonic() - t0,
                               self.version, **{k: v for fields in aids for k, v in fields.items()},
                               task_success=task_success, extensions=self.hooks.metrics())
        if self._ear is not None:  # the request ended with the episode
            self._ear.hear_help_request(False)
        if self.viz is not None:
            self.viz.episode_end(self.steps - 1, index=index, outcome=end, ret=ret, length=t)
        with interrupts_held():  # a stop lands after every sink has the episode: log, fleet and report agree
            self.episodes.append(record)
            if self.on_episode is not None:
                self.on_episode(record)
        log.info("episode %d: %s after %d steps, return %.2f, intervention rate %.0f%% (%d interventions, "
                 "lengths %s), policy v%d", index, end, t, ret, 100 * record.intervention_rate,
                 record.interventions, record.intervention_lengths, self.version)
        return record

    def _task_reader(self) -> Callable[[], Any] | None:
        """What reads the step's success and reward: ``task_reader``, else the task robot's (reward_source=robot)."""
        if self.task_reader is None and isinstance(self.robot, TaskRobot) and self.cfg.reward_source == "robot":
            return self.robot.task_status
        return self.task_reader

    def _complete(self, row: dict[str, Any], obs: dict[str, np.ndarray]) -> None:
        """A transition is complete (it ends in ``obs``): to the learner, and to ``on_row``."""
        self._record(row)
        if self.on_row is not None:
            self.on_row(row, obs)

    def _episode_end(self, success: bool, verdict: str, events: tuple[str, ...]) -> str:
        """How the episode ends at this tick (``time_limit``: it goes on, unless the limit is reached)."""
        if success:
            return "success"
        if verdict in ("reset", "skip"):  # nobody answered the robot's request: help.fallback
            return "help_timeout" if verdict == "reset" else "skipped"
        for event in ("failure", "reset"):
            if event in events:
                return event
        return "safety" if self.safety.latched is not None else "time_limit"

    def _judged(self, obs: dict[str, np.ndarray], episode: int, t: int) -> bool:
        """The classifier's success at ``obs``, put to the operator when suspicious (``audit.enabled``)."""
        by_person = t > 0 and self.last_source == "human"  # who acted on the step that led to obs
        return self.judge is not None and self.judge(obs) and (
            self.audit is None or self.audit.confirm(obs, episode, t, by_person))

    def _hold_tick(self) -> None:
        """One control period with the robot held (while a person answers an audit question)."""
        self.rate.wait()
        self.safety.step(self.controller.hold_action(np.zeros(self.robot.config.action_dim, np.float32)))

    def _ask(self, obs: dict[str, np.ndarray], action: np.ndarray, human: bool, episode: int, t: int) -> str:
        """The help desk's verdict for this tick: act, hold (waiting for the operator) or the fallback."""
        assert self.help is not None
        p = self.judge.probability if self.judge is not None else None
        scores = self.help.scores(self.policy, self._seen(obs), action, self._step_events, p, obs=obs)
        verdict = self.help.step(scores, human, episode, t)
        if self._ear is not None:  # a scripted person hears the request (a real one hears the bell)
            self._ear.hear_help_request(self.help.operator_called)
        return verdict

    def _show(self, episode: int, step: int) -> None:
        if not self.status.enabled:
            return
        stats = self.rate.stats()
        done = self.episodes
        alone = [e for e in done if e.intervened_steps == 0]
        helped = [e for e in done if e.intervened_steps > 0]
        self.status.update(version=self.version, source=self.last_source, hint=self.controller.hint,
                           asking=self.help.status if self.help is not None else "", waiting="",
                           period_ms=stats.p50_s * 1e3, p99_ms=stats.p99_s * 1e3, target_ms=stats.target_period_s * 1e3,
                           successes=sum(e.success for e in done), episodes=len(done), episode=episode, step=step,
                           alone=(sum(e.success for e in alone), len(alone)),
                           helped=(sum(e.success for e in helped), len(helped)),
                           safety_counts=dict(self.safety.counts), estop=self.safety.estop_reason)

    def run(self) -> DeployReport:
        """Run the configured number of episodes (or until ``stop``); always leaves the robot held."""
        if self.cfg.mode == "learn" and self.endpoint is None:
            raise ValueError("mode=learn needs a learner endpoint")
        i = 0
        try:
            with self.status:  # drawn while it waits for the learner too: it says where, and for how long
                if self.cfg.mode == "learn" and self.version <= 0:
                    self.wait_first_weights()
                self.hooks.start()
                while not self.stop.is_set() and (self.cfg.episodes == 0 or i < self.cfg.episodes):
                    self.wait_for_learner()
                    self._show(i, self.run_episode(i).steps)  # the finished episode counted: the last frame is right
                    i += 1
        except KeyboardInterrupt:
            log.warning("deploy interrupted: the running episode is dropped, the robot held")
            self.interrupted = True
        finally:
            self.safety.robot.hold()
            if self.safety.watchdog is not None:  # held on purpose: nothing will command it until re-armed
                self.safety.watchdog.disarm()
            if self.safety.guard is not None:
                self.safety.guard.pause()
            for aid in (self.help, self.audit):  # the help desk's log; the audit's summary and corrected classifier
                if aid is not None:
                    aid.close()
            self.hooks.close()
        self.drain()
        return self.report()

    def wait_for_learner(self, stop: threading.Event | None = None) -> None:
        """Between episodes, the robot held: hand kept chunks over, and wait for the learner's updates.

        With ``max_unlearned_chunks`` it waits until the learner has learned from all but that many chunks;
        ``stop`` ends the wait early (default: the loop's own).
        """
        self.chunks_sent += self.kept.wait_sent(self.endpoint, stop or self.stop, self.cfg.max_wait_s,
                                                self.cfg.max_unlearned_chunks, self._pause)

    def _pause(self) -> None:
        """The robot waits, held, for the learner between episodes: its watchdog off and its rate loop paused.

        Nothing commands it (the next episode re-arms the watchdog), and the wait is not a control period.
        """
        if self.safety.watchdog is not None:
            self.safety.watchdog.disarm()
        self.rate.pause()

    def drain(self) -> int:
        """Learn mode: wait up to ``drain_s`` for the learner to acknowledge every chunk sent.

        Returns how many are still unacknowledged (lost). A second Ctrl-C stops the wait.
        """
        if self.endpoint is None:
            return 0
        deadline = time.monotonic() + self.cfg.drain_s
        told = False
        try:
            while (left := self.endpoint.unacked() + len(self.kept)) and time.monotonic() < deadline:
                self.chunks_sent += self.kept.offer(self.endpoint)
                if not told:
                    log.warning("deploy: waiting up to %.0fs for the learner to acknowledge %d chunks",
                                self.cfg.drain_s, left)
                    told = True
                time.sleep(0.05)
        except KeyboardInterrupt:
            log.warning("deploy: stopped waiting for the learner's acknowledgements")
        self.unacked_chunks, self.dropped_chunks = self.endpoint.unacked(), len(self.kept)
        if self.unacked_chunks or self.dropped_chunks:
            log.warning("deploy: %d chunks unacked, %d never sent: lost", self.unacked_chunks, self.dropped_chunks)
        return self.unacked_chunks

    def report(self) -> DeployReport:
        """The run so far."""
        return DeployReport(list(self.episodes), self.steps, self.version, dict(self.safety.counts),
                            self.rate.stats(), self.gate.counts["accepted"], self.gate.counts["rejected"],
                            self.chunks_sent, self.dropped_chunks, self.unacked_chunks)
