"""Several robots, one operator: the fleet's configuration, its checks, and each robot's link to the operator.

`robot-rl deploy --fleet FILE` (or ``--fleet 3``: three copies of the configured robot) runs every robot in its
own process with its own control loop, safety layer and teleop device, acting for one learner (``mode=learn``)
or scored on one checkpoint (``mode=eval``). With ``help.enabled=true`` each robot asks for help through its
:class:`PipeLink`; the supervisor (:mod:`robot_rl.human_loop.fleet_supervisor`) keeps the one operator's queue.

A fleet file names the robots and what differs for each, as ``section.key=value`` overrides of the deploy
config (the command line's and ``--config``'s values are the base)::

    robots:
      - name: left
        set: [robot.type=lerobot, robot.port=/dev/ttyACM0]
      - name: right
        set: [robot.type=lerobot, robot.port=/dev/ttyACM1]
      - name: sim
        set: [robot.type=sim_so101]
        teleop: pick_helper

Each robot gets its own ``actor_id`` (its index) and ``seed`` (the base seed plus its index) unless its ``set``
names them. Everything is checked before any robot moves: names, overrides, two robots on one serial port,
controller or simulator address, one camera used twice, and (to learn) that every robot has the learner's spec.
"""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from robot_rl.config_io import apply_overrides, load_yaml, parse_override
from robot_rl.core.config import ConfigError
from robot_rl.hardware.robot import RobotConfig
from robot_rl.human_loop.operator import split_device_settings

log = logging.getLogger(__name__)

@dataclass
class FleetRobot:
    """One robot of the fleet."""

    name: str
    """Shown on the operator's screen and in file names (letters, digits, ``-`` and ``_``)."""
    set: list[str] = field(default_factory=list)
    """``section.key=value`` overrides of the deploy config for this robot."""
    teleop: str | None = None
    """This robot's teleop device (default: ``--teleop``)."""


def load_fleet(spec: str) -> list[FleetRobot]:
    """The robots of ``--fleet``: a count (copies of the configured robot) or a YAML file (module docstring)."""
    if spec.isdigit():
        n = int(spec)
        if n < 1:
            raise ConfigError("--fleet 0: a fleet needs at least one robot")
        return [FleetRobot(f"robot{i}") for i in range(n)]
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"--fleet {spec}: no such file; give a fleet YAML file or a number of robots (--fleet 3)")
    data = load_yaml(path)
    entries = data.get("robots") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: a fleet file has a non-empty `robots:` list (see `robot-rl deploy --help`)")
    robots = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) - {"name", "set", "teleop"}:
            raise ConfigError(f"{path}: robots[{i}] must be a mapping with name, set (a list of section.key=value) "
                              f"and optionally teleop; got {entry!r}")
        overrides = entry.get("set") or []
        if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
            raise ConfigError(f"{path}: robots[{i}].set must be a list of section.key=value strings")
        robots.append(FleetRobot(str(entry.get("name", f"robot{i}")), list(overrides), entry.get("teleop")))
    return robots


def member_configs(base: Any, robots: list[FleetRobot]) -> list[Any]:
    """Each robot's :class:`~robot_rl.human_loop.deploy.DeployConfig`: ``base`` with its id, seed and overrides."""
    out = []
    for i, robot in enumerate(robots):
        if not re.fullmatch(r"[A-Za-z0-9_-]+", robot.name):
            raise ConfigError(f"fleet robot name {robot.name!r}: use letters, digits, - and _ (it names files)")
        overrides = {"actor_id": i, "seed": base.seed + i}
        try:
            overrides.update(parse_override(o) for o in split_device_settings(robot.set)[0])
            out.append(apply_overrides(base, overrides))
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"fleet robot {robot.name!r}: {e}") from e
    return out


def exclusive_resources(robot_cfg: RobotConfig) -> list[str]:
    """What a robot with ``robot_cfg`` holds alone (:meth:`RobotConfig.exclusive_resources`)."""
    return robot_cfg.exclusive_resources()


def check_fleet(robots: list[FleetRobot], configs: list[Any], learn: bool,
                devices: list[dict[str, Any]] | None = None) -> None:
    """Refuse a fleet that cannot run, before anything moves (ConfigError says which robots and what to do).

    ``devices``: each robot's teleop device settings (a leader arm's ``port`` is held like a robot's).
    """
    from robot_rl.human_loop.observation import policy_spec

    names = [r.name for r in robots]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"fleet: robot name(s) {', '.join(twice)} used twice; give each robot its own name")
    owner: dict[str, str] = {}
    for i, (robot, cfg) in enumerate(zip(robots, configs)):
        device = devices[i] if devices is not None else {}
        held = exclusive_resources(cfg.robot) + ([f"port {device['port']}"] if device.get("port") else [])
        for resource in held:
            if resource in owner:
                raise ConfigError(f"fleet: robots {owner[resource]!r} and {robot.name!r} are both on {resource}; "
                                  "each robot needs its own (set robot.port / robot.ip / robot.address per robot "
                                  "in the fleet file)")
            owner[resource] = robot.name
    if learn:
        specs = [policy_spec(cfg) for cfg in configs]
        for robot, spec in zip(robots[1:], specs[1:]):
            if spec != specs[0]:
                raise ConfigError(f"fleet: {robot.name!r} observes or acts differently from {robots[0].name!r} "
                                  f"({_spec_text(spec)} vs {_spec_text(specs[0])}); one learner needs one spec: "
                                  "match their cameras, policy_keys and control modes")


def _spec_text(spec: Any) -> str:
    obs = ", ".join(f"{k}{tuple(v.shape)}" for k, v in spec.observation.items())
    return f"obs {obs}; action {tuple(spec.action.shape)}"


class PipeLink:
    """A robot's side of the operator queue (:class:`~robot_rl.human_loop.help_desk.OperatorLink`) over a pipe.

    It never blocks: sends are small, and grants are read when asked about. If the supervisor is gone, requests
    are never granted, so the robot holds and then takes its ``help.fallback`` (fail safe), and says so once.
    """

    def __init__(self, conn: Any, robot: str) -> None:
        self.conn = conn
        self.robot = robot
        self._granted: set[int] = set()
        self._gone = False

    def ask(self, request_id: int, reason: str, urgency: float) -> None:
        """Queue request ``request_id``."""
        self._send(("ask", request_id, reason, urgency))

    def done(self, request_id: int) -> None:
        """Request ``request_id`` closed."""
        self._granted.discard(request_id)
        self._send(("done", request_id))

    def granted(self, request_id: int) -> bool:
        """The supervisor sent the operator to ``request_id``."""
        try:
            while not self._gone and self.conn.poll(0):
                kind, rid = self.conn.recv()
                if kind == "grant":
                    self._granted.add(rid)
        except (EOFError, OSError):
            self._lost()
        return request_id in self._granted

    def takeover(self, acting: bool) -> None:
        """A person took over unasked, or handed back."""
        self._send(("claim",) if acting else ("handback",))

    def episode(self, record: Any) -> None:
        """A finished episode (an :class:`EpisodeRecord`), for the operator's screen and the fleet's totals."""
        self._send(("episode", asdict(record)))

    def send(self, message: tuple[Any, ...]) -> None:
        """Any other message (the final report, an error)."""
        self._send(message)

    def _send(self, message: tuple[Any, ...]) -> None:
        if self._gone:
            return
        try:
            self.conn.send(message)
        except (BrokenPipeError, EOFError, OSError):
            self._lost()

    def _lost(self) -> None:
        if not self._gone:
            self._gone = True
            log.warning("fleet: %s lost the supervisor; its help requests will time out (help.fallback)", self.robot)

