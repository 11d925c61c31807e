"""The ``learn`` part of ``hil_bench.py``: HIL-SERL on a simulated pick task, the policy alone measured.

The robot is the SimulatedArm (``robot="sim_arm"``, the cube's position in the state) or the simulated SO-101
(``robot="sim_so101"``: the LeRobot driver, a CNN policy over the front and wrist cameras).

Two runs from the same scripted demonstrations: with the scripted intervener (:class:`PickIntervener`, the
"human") and without it. Every ``eval_every_steps`` training steps the loop pauses and the acting policy
(the newest weights it accepted) runs alone, deterministic, nobody intervening, on the same seeded
evaluation episodes: the success-rate curve against env steps and training wall-clock that says whether
the policy itself improves. The learner thread gets no new data during an evaluation, so it runs no
updates it did not owe already (updates are owed at ``utd_ratio`` per received step).

``time_scale`` > 1 runs the simulator faster than real time (``SimulatedArmConfig.time_scale``): the loop
runs at ``10 × time_scale`` Hz of wall-clock, still 10 Hz of simulated time, and the safety layer's speed
limit is scaled with it (it converts m/s with the wall-clock rate). It is a benchmark option: a real arm
runs at 1.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.algorithm import Policy
from robot_rl.hardware.safety import SafetyConfig, SafetyLayer
from robot_rl.hardware.sim_arm import PickIntervener, SimulatedArmConfig
from robot_rl.hardware.sim_pick import PickScene
from robot_rl.human_loop.deploy import DeployConfig, Deployer, load_run_policy
from robot_rl.human_loop.devices.scripted import ScriptedDevice
from robot_rl.human_loop.help_gate import HelpGateConfig
from robot_rl.human_loop.hil_learner import HILLearner
from robot_rl.human_loop.scripted_runs import record_device_demos, run_policy_alone
from robot_rl.policies.sac import SACConfig
from robot_rl.transport.config import ZmqTransportConfig

#: Simulated control rate of the pick task (Hz); the wall-clock rate is this times ``time_scale``.
SIM_HZ = 10.0
#: Seed of the evaluation episodes (the training episodes use the config's seed).
EVAL_SEED = 4242


@dataclass
class LearnBenchConfig:
    """What the learning benchmark runs."""

    minutes: float = 5.0
    """Training wall-clock of the run with the intervener (evaluation pauses not counted)."""
    without_minutes: float | None = None
    """Training wall-clock of the run without it (None: ``minutes``; 0: skip that run)."""
    time_scale: float = 1.0
    """Simulated seconds per wall-clock second (1: real time, as on hardware)."""
    utd_ratio: float = 4.0
    """Learner updates per received env step."""
    patience: int = 8
    """The intervener takes over after this many steps without progress."""
    takeover_steps: int = 10
    """... for this many steps, then hands back (a correction, as HIL-SERL's human; episodes are 40 steps)."""
    eval_every_steps: int = 1000
    """Training env steps between two evaluations of the policy alone."""
    eval_episodes: int = 10
    """Seeded episodes per evaluation of the policy alone."""
    demos: int = 10
    """Scripted demonstrations in the demo buffer at the start."""
    init_temperature: float = 0.01
    """SAC's initial entropy temperature α (the entropy bonus α·H is ~4 per step at α 1, against task rewards
    of −1..0 per step: the task signal is drowned until α has decayed)."""
    normalize_obs: bool = True
    """SAC's running mean/std normalisation of ``state`` (cube and gripper positions vary by centimetres)."""
    robot: str = "sim_arm"
    """``sim_arm`` (the cube's position in the state, no camera), ``sim_so101`` (the LeRobot driver on the
    simulated SO-101: joints, tool pose and gripper in the state, the cube seen only through the cameras) or
    ``sim_so101_state`` (the simulated SO-101 with the cube's position in the state and no camera: what a CPU
    can learn in minutes)."""
    camera_size: int = 64
    """sim_so101: the front and wrist cameras' height and width (the policy's CNN reads both)."""
    conv_stride: int = 1
    """sim_so101: ``algo.image_conv_stride`` (2: every conv layer strided, what a CPU learner can afford)."""
    image_channels: int = 32
    """sim_so101: ``algo.image_channels``, the CNN's channels per layer."""
    episode_steps: int = 40
    """Steps before an episode is cut (at 10 Hz of robot time)."""
    reward: str = "dense"
    """The task's reward: ``dense`` (shaping as a cost, 5 on success) or ``sparse`` (1 on success and the episode
    ends: what a perfect success classifier gives)."""
    seed: int = 11
    """Seed of the policy, the learner and the training episodes."""
    max_steps: int = 0
    """Training env steps after which a run stops (0: only ``minutes`` bounds it): a budget of robot experience."""
    watchdog_timeout_s: float = 0.5
    """The safety layer's watchdog (wall-clock): a control loop stalled this long latches it and ends the episode
    (``end`` ``safety``), in an evaluation too; a machine at load 30 on 2 cores trips 0.5 s often."""
    max_unlearned_chunks: int = 0
    """The deploy setting (docs/deploy.md): above 0 the robot waits between episodes for the learner's updates, so
    each received step gets ``utd_ratio`` updates however busy the machine (the waits are recorded, ``wait_s``)."""


def learn_config(b: LearnBenchConfig, address: str = "tcp://127.0.0.1:*") -> DeployConfig:
    """The pick-task HIL config both runs share."""
    # request_timeout_s: on a shared, loaded machine the simulator process can be starved for over a second;
    # that is not the dead simulator the 1 s default is there to detect (the watchdog still holds the arm).
    robot: Any
    if b.robot == "sim_so101":
        from robot_rl.hardware.sim_so101 import SimSo101Config

        size = (b.camera_size, b.camera_size)
        robot = SimSo101Config(cameras={"front": size, "wrist": size}, reward=b.reward, seed=7,
                               time_scale=b.time_scale, request_timeout_s=5.0)
    elif b.robot == "sim_so101_state":
        from robot_rl.hardware.sim_so101 import SimSo101Config

        robot = SimSo101Config(cameras={}, object_in_state=True, reward=b.reward, seed=7, time_scale=b.time_scale,
                               request_timeout_s=5.0)
    elif b.robot == "sim_arm":
        robot = SimulatedArmConfig(cameras={}, reward=b.reward, max_step_m=0.02, seed=7, time_scale=b.time_scale,
                                   request_timeout_s=5.0)
    else:
        raise ValueError(f"robot {b.robot!r}: the learn benchmark runs sim_arm, sim_so101 or sim_so101_state")
    safety = SafetyConfig(control_hz=SIM_HZ * b.time_scale, watchdog_timeout_s=b.watchdog_timeout_s,
                          max_linear_speed=0.25 * b.time_scale)
    algo = SACConfig(demo_ratio=0.5, learning_starts=200, batch_size=128, utd_ratio=b.utd_ratio, gamma=0.95,
                     n_step=3, critic_layer_norm=True, buffer_size=200_000, normalize_obs=b.normalize_obs,
                     init_temperature=b.init_temperature, image_conv_stride=b.conv_stride,
                     image_channels=b.image_channels)
    return DeployConfig(robot=robot, safety=safety, algo=algo, transport=ZmqTransportConfig(address=address),
                        mode="learn", episodes=0, max_episode_steps=b.episode_steps, status=False, seed=b.seed,
                        max_unlearned_chunks=b.max_unlearned_chunks)


def make_arm(cfg: DeployConfig) -> Any:
    """The config's robot, which the scripted intervener needs to be a simulated pick scene."""
    arm = cfg.robot.make()
    if not isinstance(arm, PickScene):
        raise TypeError(f"the learn benchmark needs robot.type=sim_arm or sim_so101, got {type(arm).__name__}")
    return arm


def record_demos(cfg: DeployConfig, episodes: int) -> Any:
    """Scripted demonstrations (the intervener always in control), as one TransitionBatch."""
    arm = make_arm(cfg)
    with SafetyLayer(arm, cfg.safety) as safety:
        dev = ScriptedDevice(PickIntervener(arm, patience=0, takeover_steps=10**6))
        dev.connect()
        demos, rep = record_device_demos(safety, cfg, dev, episodes, seed=999)
    print(f"demos: {len(demos)} transitions from {episodes} episodes, "
          f"{sum(e.success for e in rep.episodes)} successful", flush=True)
    return demos


def policy_alone(safety: SafetyLayer, cfg: DeployConfig, policy: Policy, version: int, episodes: int,
                 deterministic: bool = True) -> dict[str, Any]:
    """``policy`` alone on the ``EVAL_SEED`` episodes (nobody intervening): success rate and mean return."""
    rep = run_policy_alone(safety, cfg, policy, version, episodes, EVAL_SEED, deterministic)
    return {"success": rep.success_rate, "mean_return": float(np.mean([e.ret for e in rep.episodes])),
            "mean_steps": float(np.mean([e.steps for e in rep.episodes])), "version": version,
            "deterministic": deterministic, "ends": {e: [x.end for x in rep.episodes].count(e)
                                                      for e in {x.end for x in rep.episodes}}}


SUPERVISION = ("watching", "gated", "none")
"""How the scripted person supervises: takes over whenever the policy stalls (HIL-SERL's operator, always
watching), only when the robot asks for help (``help.enabled``; ``budget`` of the steps), or never."""


def run_learning(cfg: DeployConfig, b: LearnBenchConfig, demos: Any, intervene: bool | str, minutes: float,
                 run_dir: Path, budget: float = 0.1) -> dict[str, Any]:
    """One HIL run of ``minutes`` training wall-clock with periodic evaluations of the policy alone.

    ``intervene``: one of :data:`SUPERVISION` (True is ``watching``, False ``none``).
    """
    supervision = intervene if isinstance(intervene, str) else ("watching" if intervene else "none")
    if supervision not in SUPERVISION:
        raise ValueError(f"supervision {supervision!r}; valid: {', '.join(SUPERVISION)}")
    eval_cfg = cfg
    if supervision == "gated":
        cfg = dataclasses.replace(cfg, help=HelpGateConfig(enabled=True, budget=budget, bell=False,
                                                           min_ask_steps=b.takeover_steps))
    torch.manual_seed(cfg.seed)
    learner = HILLearner(cfg, run_dir, demos=demos, publish_every=20)
    arm = make_arm(cfg)
    log: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []
    name = {"watching": "with intervener", "none": "without"}.get(supervision, f"gated {budget:g}")
    with learner.serving(), SafetyLayer(arm, cfg.safety) as safety:
        ep = learner_endpoint(learner, arm, cfg)
        human = PickIntervener(arm, patience=b.patience, takeover_steps=b.takeover_steps, press_success=False,
                               intervene=supervision != "none", only_when_asked=supervision == "gated")
        dev = ScriptedDevice(human)
        dev.connect()
        d = Deployer(cfg, safety, dev, cfg.algo.build(arm.features, "cpu", 0).make_policy(), endpoint=ep)
        d.wait_first_weights()
        t_start, paused = time.monotonic(), 0.0

        def train_wall() -> float:
            return time.monotonic() - t_start - paused

        def evaluate() -> None:
            nonlocal paused
            t0 = time.monotonic()
            if b.max_unlearned_chunks:  # the learner idle and the newest weights in: the policy scored, not the load
                d.drain()
                d.sync_weights()
            r = policy_alone(safety, eval_cfg, d.policy, d.version, b.eval_episodes)  # nobody asked, nobody helps
            paused += time.monotonic() - t0
            s = learner.stats
            evals.append({"env_steps": d.steps, "train_wall_s": train_wall(), "wait_s": d.kept.paused_s,
                          "updates": s.updates,
                          "transitions": s.transitions, "eval_s": time.monotonic() - t0, **r})
            print(f"  [{name}] {d.steps} env steps, {train_wall() / 60:.1f} min, {s.updates} updates, "
                  f"v{d.version}: policy alone {100 * r['success']:.0f}% (return {r['mean_return']:.1f})",
                  flush=True)

        evaluate()
        i, next_eval = 0, b.eval_every_steps
        while train_wall() < minutes * 60 and not (b.max_steps and d.steps >= b.max_steps):
            if d.steps >= next_eval:
                evaluate()
                next_eval += b.eval_every_steps
            if b.max_unlearned_chunks:  # as Deployer.run between episodes: the robot waits for the learner's updates
                d.wait_for_learner()
            e = d.run_episode(i)
            log.append({"episode": i, "wall_s": train_wall(), "env_steps": d.steps, "success": e.success,
                        "intervention_rate": e.intervention_rate, "steps": e.steps, "return": e.ret,
                        "version": e.policy_version, "intervened_steps": e.intervened_steps,
                        "interventions": e.interventions, "help_requests": e.help_requests,
                        "attention_steps": e.attention_steps, "unasked_takeovers": e.unasked_takeovers,
                        "wait_s": d.kept.paused_s})
            i += 1
        evaluate()
        rate = asdict(d.rate.stats())
        sim = arm.sim_stats()
        d.safety.watchdog.disarm()  # type: ignore[union-attr]
        ep.close()
    stats = learner.stats
    wall = train_wall()
    print(f"learn ({name}): {len(log)} episodes, {d.steps} env steps in {wall / 60:.1f} min of training "
          f"({d.steps / wall:.1f} steps/s), {stats.updates} updates ({stats.updates / wall:.1f}/s), v{stats.version}, "
          f"{stats.intervened_received} intervened steps; loop {d.rate.stats().summary()}; sim lag skips "
          f"{sim['lag_skips']:.0f}", flush=True)
    return {"episodes": log, "evals": evals, "learner": stats.__dict__, "train_wall_s": wall,
            "wait_s": d.kept.paused_s, "env_steps": d.steps, "rate": rate, "sim": sim}


def learner_endpoint(learner: HILLearner, arm: Any, cfg: DeployConfig) -> Any:
    """The actor's ZeroMQ endpoint to ``learner``."""
    from robot_rl.transport.zmq_transport import ZmqActorEndpoint, ZmqSettings

    return ZmqActorEndpoint(learner.address, 0, arm.features, ZmqSettings.from_config(cfg.transport))


def final_policy_alone(cfg: DeployConfig, run_dir: Path, episodes: int) -> dict[str, Any]:
    """The run's last checkpoint alone, deterministic and stochastic, on a fresh simulated arm."""
    arm = cfg.robot.make()
    policy, version = load_run_policy(run_dir, arm.features)
    with SafetyLayer(arm, cfg.safety) as safety:
        return {mode: policy_alone(safety, cfg, policy, version, episodes, deterministic=mode == "deterministic")
                for mode in ("deterministic", "stochastic")}


def rolling(x: list[float], k: int = 20) -> np.ndarray:
    """Trailing mean over the last ``k`` values."""
    a = np.asarray(x, dtype=float)
    return np.array([a[max(0, i - k + 1):i + 1].mean() for i in range(len(a))])


def plot(runs: dict[str, dict[str, Any]], b: LearnBenchConfig, path: Path) -> None:
    """Policy-alone success vs env steps and training wall-clock; training success and intervention rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for (name, run), color in zip(runs.items(), ("tab:blue", "tab:orange")):
        ev = run["evals"]
        steps = [e["env_steps"] / 1e3 for e in ev]
        axes[0].plot(steps, [e["success"] for e in ev], "o-", color=color, label=f"policy alone, {name}")
        axes[1].plot([e["train_wall_s"] / 60 for e in ev], [e["success"] for e in ev], "o-", color=color,
                     label=f"policy alone, {name}")
        eps = run["episodes"]
        x = [e["env_steps"] / 1e3 for e in eps]
        axes[2].plot(x, rolling([e["success"] for e in eps]), color=color, label=f"training success, {name}")
        if any(e["intervention_rate"] for e in eps):
            axes[2].plot(x, rolling([e["intervention_rate"] for e in eps]), "--", color=color,
                         label=f"intervention rate, {name}")
    axes[0].set_xlabel("training env steps (thousands)")
    axes[1].set_xlabel(f"training wall-clock (min, simulator at {b.time_scale:g}x real time)")
    axes[2].set_xlabel("training env steps (thousands)")
    axes[0].set_ylabel(f"success, policy alone (deterministic, {b.eval_episodes} episodes)")
    axes[1].set_ylabel("success, policy alone")
    axes[2].set_ylabel("rate (rolling 20 episodes)")
    for ax in axes:
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{b.robot} pick, HIL-SERL from {b.demos} demos (SAC + RLPD, UTD {b.utd_ratio:g}): "
                 "the policy alone during training")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def results_name(b: LearnBenchConfig) -> str:
    """``hil_learning`` (sim_arm, as before) or ``hil_learning_sim_so101_s<seed>``."""
    return "hil_learning" if b.robot == "sim_arm" else f"hil_learning_{b.robot}_s{b.seed}"


def bench_learn(b: LearnBenchConfig, out: Path) -> dict[str, Any]:
    """Both runs from the same demos, their final policies alone, the plot and the JSON."""
    cfg = learn_config(b)
    demos = record_demos(cfg, b.demos)
    runs: dict[str, dict[str, Any]] = {}
    finals: dict[str, Any] = {}
    plan = [("with intervener", True, b.minutes),
            ("without", False, b.minutes if b.without_minutes is None else b.without_minutes)]
    def save() -> None:
        plot(runs, b, out / f"{results_name(b)}.png")
        (out / f"{results_name(b)}.json").write_text(json.dumps(
            {"config": asdict(b), "runs": runs, "final_policy_alone": finals}, indent=1, default=str))

    with tempfile.TemporaryDirectory() as tmp:
        for name, intervene, minutes in plan:
            if minutes <= 0:
                continue
            run_dir = Path(tmp) / name.replace(" ", "_")
            runs[name] = run_learning(cfg, b, demos, intervene, minutes, run_dir)
            # Saved before the final evaluation and after it, so that a benchmark cut short (or failing in that
            # evaluation, as one run here did) keeps the hour it measured.
            save()
            finals[name] = final_policy_alone(cfg, run_dir, b.eval_episodes)
            print(f"final policy alone ({name}): {finals[name]}", flush=True)
            save()
    return {"runs": runs, "finals": finals}
