"""Fakes of a lerobot follower arm and leader arm, implementing lerobot's real abstract classes.

:class:`FakeFollower` subclasses ``lerobot.robots.Robot`` and :class:`FakeLeader`
``lerobot.teleoperators.Teleoperator``, so lerobot's own abstract interface (every abstract method and
property) is what the wrappers are tested against. Importing this module needs lerobot.

Not echoes: the follower is position controlled and moves each motor towards its goal at
``max_speed`` (degrees or gripper units per second) over an injectable clock, clips goals to
``max_relative_target`` from the present position as lerobot's SO/Koch followers do (and returns the
clipped goal), reports motors like an SO-101 (five joints in degrees, gripper 0..100) and renders one
synthetic camera image per ``fake_cameras`` entry (lerobot's own ``cameras`` field takes real camera
configs). ``fail_connect`` makes ``connect`` raise like a missing serial port. The leader reports
positions from ``positions`` (set them to "move" the leader).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from lerobot.robots import Robot, RobotConfig
from lerobot.teleoperators import Teleoperator, TeleoperatorConfig

MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
HOME = {"shoulder_pan": 0.0, "shoulder_lift": -20.0, "elbow_flex": 30.0, "wrist_flex": 10.0, "wrist_roll": 0.0,
        "gripper": 50.0}


@RobotConfig.register_subclass("robot_rl_fake_follower")
@dataclass
class FakeFollowerConfig(RobotConfig):
    """Config of :class:`FakeFollower` (the fields lerobot's SO followers have, plus the fake's own)."""

    port: str = "/dev/fake"
    max_relative_target: float | None = None
    disable_torque_on_disconnect: bool = True
    fake_cameras: dict[str, tuple[int, int]] = field(default_factory=dict)
    max_speed: float = 180.0
    fail_connect: bool = False


class FakeFollower(Robot):
    """A simulated SO-101-like follower behind lerobot's ``Robot`` interface."""

    config_class = FakeFollowerConfig
    name = "robot_rl_fake_follower"

    def __init__(self, config: FakeFollowerConfig, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config)
        self.config = config
        self.clock = clock
        self.pos = dict(HOME)
        self.goal = dict(HOME)
        self.torque = False
        self._connected = False
        self._t = clock()
        self.sent: list[dict[str, float]] = []

    @property
    def observation_features(self) -> dict[str, Any]:
        """One float per motor and an (H, W, 3) image per camera."""
        return {**{f"{m}.pos": float for m in MOTORS},
                **{name: (h, w, 3) for name, (h, w) in self.config.fake_cameras.items()}}

    @property
    def action_features(self) -> dict[str, Any]:
        """One goal position per motor."""
        return {f"{m}.pos": float for m in MOTORS}

    @property
    def is_connected(self) -> bool:
        """Whether connect() succeeded."""
        return self._connected

    def connect(self, calibrate: bool = True) -> None:
        """Open the fake bus (or fail like a missing port) and enable torque."""
        if self._connected:
            raise RuntimeError(f"{self} already connected")
        if self.config.fail_connect:
            raise ConnectionError(f"Could not connect on port '{self.config.port}'")
        self._connected = True
        self.configure()
        self._t = self.clock()

    @property
    def is_calibrated(self) -> bool:
        """Always calibrated."""
        return True

    def calibrate(self) -> None:
        """Nothing to calibrate."""

    def configure(self) -> None:
        """Position mode with torque on, goal = present position (the arm does not move)."""
        self.torque = True
        self.goal = dict(self.pos)

    def _advance(self) -> None:
        now = self.clock()
        dt, self._t = max(0.0, now - self._t), now
        if not self.torque:
            return
        for m in MOTORS:
            step = self.config.max_speed * dt
            self.pos[m] += float(np.clip(self.goal[m] - self.pos[m], -step, step))

    def get_observation(self) -> dict[str, Any]:
        """Present positions and camera images."""
        if not self._connected:
            raise ConnectionError(f"{self} is not connected")
        self._advance()
        obs: dict[str, Any] = {f"{m}.pos": self.pos[m] for m in MOTORS}
        for name, (h, w) in self.config.fake_cameras.items():
            img = np.zeros((h, w, 3), dtype=np.uint8)
            img[..., 0] = int(128 + self.pos["shoulder_pan"]) % 256  # the image changes with the arm
            obs[name] = img
        return obs

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        """Set goals (clipped to ``max_relative_target`` from the present position); return what was set."""
        if not self._connected:
            raise ConnectionError(f"{self} is not connected")
        self._advance()
        goal = {k.removesuffix(".pos"): float(v) for k, v in action.items() if k.endswith(".pos")}
        if self.config.max_relative_target is not None:
            lim = self.config.max_relative_target
            goal = {m: float(np.clip(g, self.pos[m] - lim, self.pos[m] + lim)) for m, g in goal.items()}
        self.goal.update(goal)
        sent = {f"{m}.pos": g for m, g in goal.items()}
        self.sent.append(sent)
        return sent

    def disconnect(self) -> None:
        """Close the bus (torque off when configured, as lerobot's followers do)."""
        if not self._connected:
            raise ConnectionError(f"{self} is not connected")
        if self.config.disable_torque_on_disconnect:
            self.torque = False
        self._connected = False


@TeleoperatorConfig.register_subclass("robot_rl_fake_leader")
@dataclass
class FakeLeaderConfig(TeleoperatorConfig):
    """Config of :class:`FakeLeader`."""

    port: str = "/dev/fake-leader"
    fail_connect: bool = False


class FakeLeader(Teleoperator):
    """A leader arm whose joints are whatever ``positions`` says (tests move it by assigning)."""

    config_class = FakeLeaderConfig
    name = "robot_rl_fake_leader"

    def __init__(self, config: FakeLeaderConfig) -> None:
        super().__init__(config)
        self.config = config
        self.positions = dict(HOME)
        self._connected = False
        self.reads = 0
        self.feedback: list[dict[str, Any]] = []

    @property
    def action_features(self) -> dict[str, Any]:
        """One position per motor."""
        return {f"{m}.pos": float for m in MOTORS}

    @property
    def feedback_features(self) -> dict[str, Any]:
        """No force feedback."""
        return {}

    @property
    def is_connected(self) -> bool:
        """Whether connect() succeeded."""
        return self._connected

    def connect(self, calibrate: bool = True) -> None:
        """Open the fake bus (or fail like a missing port)."""
        if self.config.fail_connect:
            raise ConnectionError(f"Could not connect on port '{self.config.port}'")
        self._connected = True

    @property
    def is_calibrated(self) -> bool:
        """Always calibrated."""
        return True

    def calibrate(self) -> None:
        """Nothing to calibrate."""

    def configure(self) -> None:
        """Nothing to configure."""

    def get_action(self) -> dict[str, Any]:
        """The leader's present positions."""
        if not self._connected:
            raise ConnectionError(f"{self} is not connected")
        self.reads += 1
        return {f"{m}.pos": float(v) for m, v in self.positions.items()}

    def send_feedback(self, feedback: dict[str, Any]) -> None:
        """Record the feedback (the fake has no motors to drive)."""
        self.feedback.append(dict(feedback))

    def disconnect(self) -> None:
        """Close the bus."""
        self._connected = False
