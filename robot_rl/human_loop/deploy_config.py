"""`robot-rl deploy`'s configuration: the robot, the teleop device, the learner and the aids (help, audit)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from robot_rl.config_io import open_section_attr, open_sections
from robot_rl.core.config import AlgoConfig
from robot_rl.core.extension import extension_sections
from robot_rl.hardware.intervention import InterventionConfig
from robot_rl.hardware.robot import RobotConfig
from robot_rl.hardware.safety import SafetyConfig
from robot_rl.hardware.sim_arm import SimulatedArmConfig
from robot_rl.human_loop.help_gate import HelpGateConfig
from robot_rl.human_loop.practice.config import PracticeConfig
from robot_rl.loop.config import ReplayConfig
from robot_rl.rewards.audit import AuditConfig
from robot_rl.transport.config import ZmqTransportConfig
from robot_rl.viz import VizConfig

DEPLOY_CONTROL_MODES = ("ee_delta", "joint_delta")
"""Control modes deploy runs: both move the arm from its measured state, so a takeover never jumps."""


def _default_algo() -> AlgoConfig:
    from robot_rl.policies.sac import SACConfig

    # HIL-SERL / RLPD: half of every batch from the demo + intervention buffer, a small warm-up. A robot's
    # state mixes radians and centimetre-scale positions: normalised, and with a small initial entropy
    # temperature (α·H would otherwise outweigh per-step rewards of order 1), the SimulatedArm pick went
    # from no success of the policy alone to 90-100 % within 3k steps (benchmarks/RESULTS_hil.md). Four updates
    # per robot step and 3-step returns are that recipe too: robot time is what is scarce.
    return SACConfig(demo_ratio=0.5, learning_starts=200, batch_size=128, critic_layer_norm=True,
                     gamma=0.95, buffer_size=200_000, demo_buffer_size=50_000, normalize_obs=True,
                     init_temperature=0.01, utd_ratio=4.0, n_step=3)


def _default_safety() -> SafetyConfig:
    # 10 Hz: HIL-SERL's control rate on real arms, and the rate the defaults were measured at. The deploy actor's
    # main thread is the loop: real-time scheduling where the OS allows it (SafetyConfig.realtime_priority).
    return SafetyConfig(control_hz=10.0, realtime_priority=None)


@dataclass
class DeployConfig:
    """Everything a deploy run (actor side) and its HIL learner share."""

    robot: RobotConfig = field(default_factory=SimulatedArmConfig)
    """The robot (``robot.type``: sim_arm, xarm, ...)."""
    safety: SafetyConfig = field(default_factory=_default_safety)
    """Limits of the safety layer; ``safety.control_hz`` is the loop rate."""
    intervention: InterventionConfig = field(default_factory=InterventionConfig)
    """How the human takes over (``hold`` or ``toggle``)."""
    help: HelpGateConfig = field(default_factory=HelpGateConfig)
    """The robot asks for help (``help.enabled=true``, ``help.budget=0.1``): docs/ask-for-help.md."""
    audit: AuditConfig = field(default_factory=AuditConfig)
    """Ask the operator about the success classifier's suspicious fires (``audit.enabled=true``): docs/rewards.md."""
    algo: AlgoConfig = field(default_factory=_default_algo)
    """The learner's algorithm (the actor builds its policy from it)."""
    transport: ZmqTransportConfig = field(default_factory=ZmqTransportConfig)
    """Where the learner listens (``mode=learn``)."""
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    """The HIL learner's replay on disk (``replay.persist``, segment size): crash-safe by default."""
    demos_correction_weight: int = 1
    """Learner ``--demos``: times each row labelled *correction* (rewind-and-correct, `robot-rl record`) is
    loaded; > 1 weights recovery behaviour up."""
    demos_rewind_weight: int = 1
    """Learner ``--demos``: times each row labelled *rewind* is loaded (0 leaves the rewinds out)."""
    mode: str = "eval"
    """``eval`` (score ``episodes`` episodes), ``learn`` (act for a learner, send transitions) or ``practice`` (a task
    and a reset policy take turns, each acting for its own learner: docs/practice.md)."""
    practice: PracticeConfig = field(default_factory=PracticeConfig)
    """``mode=practice``: the reset policy's learner and reward, when the robot is stuck, the person's budget."""
    episodes: int = 10
    """Episodes to run (0: until Ctrl-C)."""
    max_episode_steps: int = 40
    """Steps before an episode is cut (truncated)."""
    actor_id: int = 0
    """This actor's id at the learner."""
    send_every: int = 8
    """Ship transitions in chunks of this many steps (and at every episode end)."""
    max_unlearned_chunks: int = 0
    """Learn mode, given to the learner and the actor alike: the learner takes in (and so acknowledges) a chunk only
    once it has run the updates the rows before it owe (``algo.utd_ratio`` each), and the actor holds the robot
    between episodes while more than this many of its chunks wait for an acknowledgement. The updates per robot
    step are then the ratio however busy the machine (a slow learner pauses the robot instead of learning from
    less), with the policy at most this many chunks (and the episode under way) behind the data. 0: the robot never
    waits for the learner's updates (it learns from what it has time for). Above 0 the actor's chunks leave one per
    message (``transport.coalesce`` off): a message of several chunks is taken in, and acknowledged, at once, before
    the updates of all but its first have run."""
    weight_max_deviation: float = 2.0
    """New weights are refused if any action on the recorded observations moves more than this from the
    acting policy's (2.0 = only finite, in-bounds actions are required: learning from scratch changes a lot)."""
    deterministic: bool | None = None
    """Act with the policy's mean (default: in eval mode) or sample (default: in learn mode)."""
    reward_source: str = "robot"
    """``robot``: success and reward from a robot that knows its task (:class:`TaskRobot`), and the
    success key; ``keys``: only the human's success key labels success (reward 1 on it, else 0);
    ``classifier``: a calibrated success classifier on the cameras (``classifier``), or the key."""
    classifier: str | None = None
    """``reward_source=classifier``: a checkpoint directory from `robot-rl reward train-classifier`, or the
    ``tcp://`` address of `robot-rl reward serve` (never waited on longer than ``classifier_max_wait_s``)."""
    classifier_max_wait_s: float = 0.02
    """A served classifier's deadline per step; a late answer counts as no success (and is counted)."""
    policy_keys: tuple[str, ...] = ()
    """The observation keys the policy sees and the learner trains on (empty: all the robot observes), e.g.
    ``[state]`` when only the success classifier reads the cameras. Learner, actor and eval must agree."""
    rearm_on_reset: bool = True
    """Re-arm a tripped watchdog when a new episode starts (an e-stop always needs a manual reset)."""
    max_wait_s: float = 60.0
    """Deadline for the learner's first weights, and on a silent learner while the robot waits (between episodes)."""
    drain_s: float = 30.0
    """Learn mode, at the end of the run: wait up to this long for the learner to acknowledge every chunk sent
    (a learner restarting after a crash gets them then); what is still unacknowledged is reported as lost."""
    seed: int = 0
    """Seed of the policy's sampling and of task resets."""
    torch_threads: int = 0
    """Torch's CPU threads; 0: the actor 1 (one observation per step: a second thread buys nothing and takes a core
    from the simulator, the cameras and the learner), the learner every core but one (it shares the machine with a
    robot's control loop in the usual set-up; with torch's default of every core, the actor's loop stalled past
    the watchdog 283 times in 7 minutes on a 2-core machine)."""
    status: bool = True
    """Show the live status line in the terminal."""
    viz: VizConfig = field(default_factory=VizConfig)
    """Live view in Rerun: cameras, actions by who acted, reward, success, interventions (``--viz rerun``)."""
    extensions: dict[str, Any] = open_sections(partial(extension_sections, "", "deploy"))  # noqa: RUF009 (a field())
    """The sections of the extensions that run in deploy's loop too (robot_rl.core.extension, registered with
    ``loops=("train", "deploy")``), each at the top level under its name, as in `robot-rl train`'s config."""

    def __getattr__(self, name: str) -> Any:
        # ``cfg.counter``: an extension's section reads like a fixed one (only called for names not found otherwise).
        return open_section_attr(self, name)

    def sections(self) -> dict[str, Any]:
        """Every extension's section by name (what :class:`~robot_rl.loop.extensions.RunExtensions` builds from)."""
        return dict(self.extensions)

    def __post_init__(self) -> None:
        if self.reward_source not in ("robot", "keys", "classifier"):
            raise ValueError(f"reward_source {self.reward_source!r}; valid: robot, keys, classifier")
        if self.reward_source == "classifier" and not self.classifier:
            raise ValueError("reward_source=classifier needs classifier=<checkpoint directory or tcp:// address>")
        if self.mode not in ("eval", "learn", "practice"):
            raise ValueError(f"mode {self.mode!r}; valid: eval, learn, practice")
        if self.max_episode_steps < 1 or self.send_every < 1 or self.episodes < 0 or self.max_unlearned_chunks < 0:
            raise ValueError("max_episode_steps and send_every must be >= 1, episodes and max_unlearned_chunks >= 0")
        if self.max_unlearned_chunks > 0 and self.transport.coalesce:
            self.transport = dataclasses.replace(self.transport, coalesce=False)
        if self.torch_threads < 0:
            raise ValueError(f"torch_threads must be >= 0 (0: automatic), got {self.torch_threads}")
        if len(set(self.policy_keys)) != len(self.policy_keys):
            raise ValueError(f"policy_keys {list(self.policy_keys)} names a key twice")
        if self.robot.control_mode not in DEPLOY_CONTROL_MODES:
            raise ValueError(f"deploy runs robot.control_mode {' or '.join(DEPLOY_CONTROL_MODES)}, not "
                             f"{self.robot.control_mode!r}: a policy and a person both move the arm from where it "
                             "is measured (absolute joint targets would jump at every takeover)")


def set_deploy_threads(cfg: DeployConfig, role: str) -> int:
    """Set torch's CPU threads for ``role`` (``actor`` or ``learner``) from ``cfg.torch_threads``; returns them."""
    import os

    n = cfg.torch_threads or (1 if role == "actor" else max(1, (os.cpu_count() or 1) - 1))
    torch.set_num_threads(n)
    return n
