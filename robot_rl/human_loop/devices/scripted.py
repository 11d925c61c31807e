"""A scripted teleop device for tests and demos: a function of the step decides what the "human" does.

:meth:`ScriptedDevice.freeze` makes it stop updating (a hung driver: the last reading keeps its old
timestamp), :meth:`ScriptedDevice.unplug` disconnects it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from robot_rl.hardware.teleop import (
    TELEOP_DEVICES,
    AnswersRewardAudits,
    HearsHelpRequests,
    TeleopConfig,
    TeleopDevice,
    TeleopReading,
)

Script = Callable[[int], TeleopReading]
"""Step index (reads so far) → reading; the device stamps it with the time of the read."""


class ScriptedDevice(TeleopDevice):
    """Replays ``script``; every :meth:`read` advances it by one step."""

    name = "scripted"

    def __init__(self, script: Script | None = None, drives_episodes: bool = False) -> None:
        self.script = script or (lambda i: TeleopReading(timestamp=0.0))
        self.takes_over = script is not None  # without a script it never acts: it fits every control mode
        self.drives_episodes = drives_episodes  # a demonstrator: `record` starts its episodes (no start key)
        self.steps = 0
        self._connected = False
        self._frozen: TeleopReading | None = None
        self._lock = threading.Lock()

    def connect(self) -> None:
        """Start replaying."""
        self._connected = True

    def disconnect(self) -> None:
        """Stop."""
        self._connected = False

    def hear_help_request(self, asking: bool) -> None:
        """Tell the script (when it listens: :class:`~robot_rl.hardware.teleop.HearsHelpRequests`)."""
        if isinstance(self.script, HearsHelpRequests):
            self.script.hear_help_request(asking)

    def answer_reward_audit(self) -> bool | None:
        """The script's answer where it sees the task (``AnswersRewardAudits``); None where it cannot tell."""
        if isinstance(self.script, AnswersRewardAudits):
            return self.script.answer_reward_audit()
        return None

    def unplug(self) -> None:
        """Simulate the cable being pulled."""
        self._connected = False

    def freeze(self) -> None:
        """Simulate a hung driver: the newest reading stops changing (its timestamp ages)."""
        with self._lock:
            self._frozen = self._frozen or self._last

    def unfreeze(self) -> None:
        """Resume fresh readings."""
        with self._lock:
            self._frozen = None

    _last: TeleopReading | None = None

    @property
    def is_connected(self) -> bool:
        """Whether the device is 'plugged in'."""
        return self._connected

    def read(self) -> TeleopReading | None:
        """The next scripted reading, or the frozen one."""
        with self._lock:
            if self._frozen is not None:
                return TeleopReading(self._frozen.timestamp, self._frozen.delta, self._frozen.gripper,
                                     self._frozen.engage, ())
            r = self.script(self.steps)
            self.steps += 1
            r.timestamp = time.monotonic()
            self._last = r
            return r

    def buttons(self) -> dict[str, str]:
        """Nothing to press: a script acts."""
        return {"(script)": "a function of the step decides deltas, engage and events"}


@TELEOP_DEVICES.register("scripted")
@dataclass
class ScriptedDeviceConfig(TeleopConfig):
    """A device that never intervenes (tests pass a script to :class:`ScriptedDevice` directly)."""

    scripted: ClassVar[bool] = True

    def make(self) -> ScriptedDevice:
        """An idle scripted device; `record` starts its episodes, which run to ``max_episode_steps`` holding."""
        return ScriptedDevice(drives_episodes=True)

    @classmethod
    def discover(cls) -> tuple[list[str], str]:
        """Always available."""
        return ["scripted (for tests and demos)"], ""


@dataclass
class _SimArmScriptConfig(TeleopConfig):
    """A script driving a simulated robot's pick task in place of a person (it watches the cube)."""

    scripted: ClassVar[bool] = True
    name: ClassVar[str] = ""
    what: ClassVar[str] = ""

    @classmethod
    def describe_controls(cls) -> dict[str, str]:
        """What the script does in place of the controls."""
        return ScriptedDevice().buttons()

    def make(self) -> ScriptedDevice:
        """Not without the robot: use :meth:`make_for`."""
        raise ValueError(f"{self.name} drives a simulated robot: build it with make_for(robot)")

    def make_for(self, robot: Any) -> ScriptedDevice:
        """The script on ``robot``, a simulated robot showing its pick task (a ``sim_pick.PickScene``)."""
        from robot_rl.core.config import ConfigError
        from robot_rl.hardware.sim_pick import PickScene

        if not isinstance(robot, PickScene):
            raise ConfigError(f"{self.name} scripts a simulated pick task: use robot.type=sim_arm or sim_so101 "
                              "(--robot sim_arm, --robot sim_so101 with robot.control_mode=ee_delta)")
        device = self._device(robot)
        device.stand_in = f"{self.name} ({self.what})"  # nobody to tell which control takes over
        return device

    def _device(self, arm: Any) -> ScriptedDevice:
        raise NotImplementedError

    @classmethod
    def discover(cls) -> tuple[list[str], str]:
        """Always available (with a simulated robot)."""
        return [f"{cls.name} ({cls.what} for robot.type=sim_arm or sim_so101)"], ""


@TELEOP_DEVICES.register("pick_demonstrator")
@dataclass
class PickDemonstratorConfig(_SimArmScriptConfig):
    """The simulated arm's scripted expert in control of every step: demonstrations without a person.

    `robot-rl record --robot sim_arm --teleop pick_demonstrator` records pick demos; it presses success when
    the cube is lifted. Needs ``robot.type=sim_arm`` or ``sim_so101`` (in ``ee_delta``).
    """

    name: ClassVar[str] = "pick_demonstrator"
    what: ClassVar[str] = "scripted expert"

    def _device(self, arm: Any) -> ScriptedDevice:
        from robot_rl.hardware.sim_pick import PickIntervener

        return ScriptedDevice(PickIntervener(arm, patience=0, takeover_steps=10**9), drives_episodes=True)


@TELEOP_DEVICES.register("pick_fumbler")
@dataclass
class PickFumblerConfig(_SimArmScriptConfig):
    """The scripted expert's motions grasping ``miss_m`` beside the cube: failed attempts, labelled *failure*.

    A success classifier needs negatives that look like success (a closed gripper lifted, with no cube):
    `robot-rl record --robot sim_arm --teleop pick_fumbler --append` adds them to the demos' store.
    """

    name: ClassVar[str] = "pick_fumbler"
    what: ClassVar[str] = "scripted failed grasps"
    miss_m: float = 0.05
    """How far beside the cube (m; along x on sim_arm, sideways on sim_so101) it grasps."""

    def _device(self, arm: Any) -> ScriptedDevice:
        from robot_rl.hardware.sim_pick import PickIntervener

        return ScriptedDevice(PickIntervener(arm, patience=0, takeover_steps=10**9, press_success=False,
                                             miss_m=self.miss_m), drives_episodes=True)


@TELEOP_DEVICES.register("pick_wanderer")
@dataclass
class PickWandererConfig(_SimArmScriptConfig):
    """The arm moved around the cell without picking: failures everywhere a policy may go, for a classifier.

    What a person does with the leader arm for HIL-SERL's negatives (random points around the cube, the gripper
    opened and closed, the cube left alone): `robot-rl record --robot sim_so101 --teleop pick_wanderer --append`.
    """

    name: ClassVar[str] = "pick_wanderer"
    what: ClassVar[str] = "scripted moves around the cell, no pick"
    seed: int = 0
    """Seed of the random points (a second store for a fresh check: another seed)."""

    def _device(self, arm: Any) -> ScriptedDevice:
        from robot_rl.hardware.sim_pick import PickWanderer

        return ScriptedDevice(PickWanderer(arm, seed=self.seed), drives_episodes=True)


@TELEOP_DEVICES.register("pick_intervener")
@dataclass
class PickIntervenerConfig(_SimArmScriptConfig):
    """A scripted person for the simulated pick (sim_arm, sim_so101): takes over when the policy makes no progress.

    For `robot-rl deploy --mode learn --teleop pick_intervener`: the HIL-SERL loop without a person.
    """

    name: ClassVar[str] = "pick_intervener"
    what: ClassVar[str] = "scripted person"

    patience: int = 8
    """Steps without progress (closer to the cube, or the cube higher) before taking over."""
    takeover_steps: int = 30
    """Steps of expert control per takeover."""

    def _device(self, arm: Any) -> ScriptedDevice:
        from robot_rl.hardware.sim_pick import PickIntervener

        return ScriptedDevice(PickIntervener(arm, patience=self.patience, takeover_steps=self.takeover_steps))


@TELEOP_DEVICES.register("pick_helper")
@dataclass
class PickHelperConfig(_SimArmScriptConfig):
    """A scripted person who helps only when the robot asks (``help.enabled``): the gated operator.

    Like ``pick_intervener`` it takes over with the scripted expert, for ``takeover_steps``, but only when it
    hears a request for help; it never steps in unasked. For benchmarks of robot-gated supervision.
    """

    name: ClassVar[str] = "pick_helper"
    what: ClassVar[str] = "scripted person who helps when asked"

    takeover_steps: int = 30
    """Steps of expert control per answered request."""

    def _device(self, arm: Any) -> ScriptedDevice:
        from robot_rl.hardware.sim_pick import PickIntervener

        return ScriptedDevice(PickIntervener(arm, takeover_steps=self.takeover_steps, only_when_asked=True))
