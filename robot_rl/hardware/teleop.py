"""The teleop device contract (the devices themselves are in :mod:`robot_rl.human_loop.devices`).

A device produces timestamped :class:`TeleopReading` s. It is *relative*: ``delta`` is a pose change per
control step in the units of the ``ee_delta`` action (each entry in ``[-1, 1]``), so a takeover applies
deltas to wherever the arm is and the arm never jumps. A reading older than the controller's
``stale_after_s``, or a disconnected device, counts as "not intervening" (see
:class:`~robot_rl.hardware.intervention.InterventionController`).

Events a device can emit: ``toggle`` (toggle-mode takeover), ``success``, ``failure``, ``reset``,
``estop``, ``rewind``, ``correct``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from robot_rl.core.registry import Registry

EVENTS: tuple[str, ...] = ("toggle", "success", "failure", "reset", "estop", "rewind", "correct")


@dataclass
class TeleopReading:
    """One sample of a device.

    ``timestamp`` (:func:`time.monotonic`) is when the device was last heard from; ``delta`` ``[6]`` is
    ``[dx, dy, dz, droll, dpitch, dyaw]`` in ``[-1, 1]``; ``gripper`` is a target in ``[-1, 1]`` or None
    (unchanged); ``engage`` is the state of the intervene control; ``events`` are one-shot presses since
    the previous reading.
    """

    timestamp: float
    delta: np.ndarray = field(default_factory=lambda: np.zeros(6))
    gripper: float | None = None
    engage: bool = False
    events: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.delta = np.clip(np.asarray(self.delta, dtype=np.float64).reshape(6), -1.0, 1.0)
        unknown = set(self.events) - set(EVENTS)
        if unknown:
            raise ValueError(f"unknown teleop events {sorted(unknown)}; valid: {', '.join(EVENTS)}")


@runtime_checkable
class JointReading(Protocol):
    """A reading of an absolute device (a leader arm) that carries the leader's joint angles."""

    joints: np.ndarray
    """Radians ``[n]``, in the follower's joint order."""


@runtime_checkable
class HearsHelpRequests(Protocol):
    """A device that is told when the robot asks for help (a scripted person; a real one hears the bell)."""

    def hear_help_request(self, asking: bool) -> None:
        """Whether a request for help is open now (called every control step while ``help.enabled``)."""
        ...


@runtime_checkable
class AnswersRewardAudits(Protocol):
    """A device whose person answers "is this a success?" at once (a scripted person who sees the task)."""

    def answer_reward_audit(self) -> bool | None:
        """Whether the task is done at the robot's last observation (None: cannot tell)."""
        ...


class TeleopDevice(abc.ABC):
    """A human input device. Readings come from a background thread; :meth:`read` never blocks."""

    name: str = "device"
    relative: bool = True
    """Relative devices (keyboard, gamepad, SpaceMouse) send deltas; absolute ones (leader arms) poses."""
    takes_over: bool = True
    """False for a device that never acts (no person, no script): it fits every control mode."""
    drives_episodes: bool = False
    """A script, not a person: `record` starts each episode itself (no start key), on a reset task."""
    stand_in: str = ""
    """A script acting in place of a person (``pick_intervener (scripted person)``): the UI names it instead of
    telling a person which control takes over. Empty: a person drives the device."""

    @abc.abstractmethod
    def connect(self) -> None:
        """Open the device and start reading."""

    @abc.abstractmethod
    def disconnect(self) -> None:
        """Stop reading and close the device."""

    @property
    @abc.abstractmethod
    def is_connected(self) -> bool:
        """Whether the device is open and its reader is alive."""

    @abc.abstractmethod
    def read(self) -> TeleopReading | None:
        """The newest reading with the events collected since the last call (None before the first)."""

    @abc.abstractmethod
    def buttons(self) -> dict[str, str]:
        """Control → what it does, for `robot-rl devices` and the status line."""

    def __enter__(self) -> TeleopDevice:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()


@dataclass
class TeleopConfig:
    """Base of device configs (registered in ``TELEOP_DEVICES``)."""

    registry: ClassVar[Registry[type[TeleopConfig]]]
    scripted: ClassVar[bool] = False
    """A script in place of a person (tests, demos, the simulated arm's workflow)."""

    def make(self) -> TeleopDevice:
        """Build the (unconnected) device; optional libraries are imported in ``connect``."""
        raise NotImplementedError

    def make_for(self, robot: Any) -> TeleopDevice:
        """Build the device for ``robot`` (scripted demonstrators watch the robot they drive); default :meth:`make`."""
        return self.make()

    @classmethod
    def discover(cls) -> tuple[list[str], str]:
        """``(connected devices of this kind, note)``; the note says why none, e.g. a missing extra."""
        return [], ""

    @classmethod
    def describe_controls(cls) -> dict[str, str]:
        """Control → what it does (`robot-rl devices`)."""
        return cls().make().buttons()


TELEOP_DEVICES: Registry[type[TeleopConfig]] = Registry("teleop device", "robot_rl.teleop_devices")
TeleopConfig.registry = TELEOP_DEVICES
