"""`robot-rl robot …`: set-up tools for an arm. ``find-limits``: joint ranges and the workspace box, by moving it."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import tyro

from robot_rl.cli.base import Command, sigterm_as_ctrl_c
from robot_rl.cli.vocabulary import overrides_help, robot_help, sub_verb_union, teleop_help
from robot_rl.core.config import ConfigError

FIND_LIMITS_SECTIONS = ("robot", "device", "safety")
"""The sections `find-limits` reads (record's, less its recorder and live view)."""
CHECK_SECTIONS = ("robot", "safety")


@dataclass
class FindLimitsArgs(Command):
    """Move the arm through its whole range, by hand or with a teleop device; write its limits as a config file.

    By hand (no --teleop) the motors are switched off (LeRobot followers; support the arm: it may fall) and
    back on, holding where it was left, at the end. With --teleop (leader_arm, keyboard, spacemouse …) it moves
    through the safety layer as in `robot-rl record`, so the current box bounds what it reaches. The file has
    the ``robot`` (joint_low/high) and ``safety`` (workspace_low/high) sections that `robot-rl record --config`
    and `robot-rl deploy --config` read. E.g. `robot-rl robot find-limits --robot lerobot --out limits.yaml
    robot.port=/dev/ttyACM0 robot.id=my_follower`.
    """

    renamed_flags: ClassVar[dict[str, str]] = {"--device": "--teleop"}

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(
        metavar="SECTION.KEY=VALUE", help=overrides_help(FIND_LIMITS_SECTIONS, "`--robot.port /dev/ttyACM0`"))]] = ()
    robot: Annotated[str, tyro.conf.arg(metavar="NAME", help=robot_help())] = "lerobot"
    teleop: Annotated[str | None, tyro.conf.arg(
        metavar="NAME", help=teleop_help("Teleop device that moves the arm"),
        help_behavior_hint="(default: none, by hand with the motors off)")] = None
    out: Path = Path("limits.yaml")
    """The config file to write (an existing one is refused unless --force)."""
    seconds: float = 60.0
    """How long to record (Ctrl-C ends earlier and still writes the file)."""
    hz: float = 30.0
    """Sampling (and, with a device, control) rate."""
    margin_deg: float = 2.0
    """Each joint range is shrunk by this at both ends."""
    margin_m: float = 0.01
    """The workspace box is shrunk by this on every face."""
    config: Path | None = None
    """A YAML file with robot/device/safety sections; overrides on the command line win."""
    force: bool = False
    """Overwrite --out."""

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """Robot, device (the teleop device's) and safety."""
        return FIND_LIMITS_SECTIONS

    def run(self) -> int:
        """Record, then write --out; 0 on success, 2 on a config error."""
        from robot_rl.hardware.robot import NamedJoints

        if self.out.exists() and not self.force:
            raise ConfigError(f"{self.out} exists: pass --force to overwrite it or choose another --out")
        robot_cfg, device_cfg, safety_cfg = self.resolved_configs()
        robot = robot_cfg.make()
        stop = threading.Event()
        with sigterm_as_ctrl_c():
            try:
                rec = self._record(robot, device_cfg, safety_cfg, stop)
            except KeyboardInterrupt:
                print("\nstopped: writing what was recorded", file=sys.stderr, flush=True)
                rec = self._last
        print(file=sys.stderr, flush=True)  # end the progress line
        names = robot_cfg.joint_names if isinstance(robot_cfg, NamedJoints) else None
        found = rec.result(self.margin_deg, self.margin_m, names=names)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(found.to_yaml(self.robot))
        for w in found.warnings:
            print(f"warning: {w}", flush=True)
        print(f"{found.samples} samples over {found.seconds:.0f} s; joint ranges and "
              f"{'the workspace box' if found.workspace_low else 'no box (no end-effector pose)'} written to "
              f"{self.out}: use it with `--config {self.out}`", flush=True)
        return 0

    def resolved_configs(self) -> tuple[Any, Any, Any]:
        """``(robot config, device config or None, safety config)``."""
        from robot_rl.cli.record import RecordArgs, build_configs

        as_record = RecordArgs(overrides=self.overrides, robot=self.robot, teleop=self.teleop or "scripted",
                               hz=self.hz, config=self.config)
        robot_cfg, device_cfg, safety_cfg, _ = build_configs(as_record)
        return robot_cfg, device_cfg if self.teleop else None, safety_cfg

    def resolved_config(self) -> Any:
        """The robot config it would connect with."""
        return self.resolved_configs()[0]

    def _record(self, robot: Any, device_cfg: Any, safety_cfg: Any, stop: threading.Event) -> Any:
        from robot_rl.hardware.limits import LimitsRecorder
        from robot_rl.hardware.safety import SafetyLayer
        from robot_rl.human_loop.find_limits import by_device, by_hand

        self._last = LimitsRecorder()

        def progress(rec: Any, left: float) -> None:
            self._last = rec
            if rec.samples % max(1, int(self.hz)) == 0 and rec.joint_low is not None:
                span = (rec.joint_high - rec.joint_low) * 57.29578
                print(f"\r{left:5.0f} s left | joint ranges (deg) {' '.join(f'{s:4.0f}' for s in span)}",
                      end="", file=sys.stderr, flush=True)

        if device_cfg is None:
            print(f"motors off for {self.seconds:.0f} s: move every joint to both ends (support the arm)",
                  file=sys.stderr, flush=True)
            with robot:
                return by_hand(robot, self.seconds, self.hz, stop, progress)
        device = device_cfg.make_for(robot)
        with SafetyLayer(robot, safety_cfg) as layer, device:
            return by_device(layer, device, self.seconds, stop, progress)


@dataclass
class CheckArgs(Command):
    """Connect, read the arm once and say where it is against its limits and box (nothing moves).

    For after `find-limits` or a calibration: the joints in degrees with their configured range, the
    end-effector position against the safety box, the cameras' shapes. Exit code 1 when something is outside.
    """

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(
        metavar="SECTION.KEY=VALUE", help=overrides_help(CHECK_SECTIONS, "`--robot.port /dev/ttyACM0`"))]] = ()
    robot: Annotated[str, tyro.conf.arg(metavar="NAME", help=robot_help())] = "lerobot"
    config: Path | None = None
    """A YAML file with robot/safety sections (e.g. what find-limits wrote)."""

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """Robot and safety."""
        return CHECK_SECTIONS

    def resolved_config(self) -> Any:
        """The robot config it would connect with."""
        from robot_rl.cli.record import RecordArgs, build_configs

        return build_configs(RecordArgs(overrides=self.overrides, robot=self.robot, teleop="scripted",
                                        config=self.config))

    def run(self) -> int:
        """Print the report; 0 when everything is inside its limits, 1 otherwise."""
        import numpy as np

        from robot_rl.hardware.robot import arm_model_of, joint_labels, measures_pose

        robot_cfg, _, safety_cfg, _ = self.resolved_config()
        robot = robot_cfg.make()
        with robot:
            state = robot.measure()
            images = {k: v.shape for k, v in robot.observe().items() if k.startswith("image.")}
        names = joint_labels(robot_cfg)
        outside = 0
        for name, q, lo, hi in zip(names, state.joints, robot_cfg.joint_low, robot_cfg.joint_high, strict=False):
            bad = not lo <= q <= hi
            outside += bad
            print(f"{name:>14} {np.degrees(q):8.1f} deg in [{np.degrees(lo):7.1f}, {np.degrees(hi):7.1f}]"
                  f"{'  OUTSIDE' if bad else ''}")
        if measures_pose(robot):
            low, high = safety_cfg.workspace_box(arm_model_of(robot))
            pos = np.asarray(state.ee_pose[:3])
            bad = not (np.all(pos >= low) and np.all(pos <= high))
            outside += bad
            print(f"{'end effector':>14} {np.round(pos, 3).tolist()} m in box {np.round(low, 3).tolist()} .. "
                  f"{np.round(high, 3).tolist()}{'  OUTSIDE' if bad else ''}")
        print(f"{'gripper':>14} {state.gripper:.2f} (0 closed .. 1 open); cameras {images or 'none'}")
        return 1 if outside else 0


ROBOT_VERBS: dict[str, type[Command]] = {"find-limits": FindLimitsArgs, "check": CheckArgs}
if TYPE_CHECKING:
    RobotVerb = Command
else:  # tyro's subcommands, one per sub-verb
    RobotVerb = sub_verb_union(ROBOT_VERBS)


@dataclass
class RobotArgs(Command):
    """Set-up tools for an arm: `robot-rl robot find-limits`, `robot-rl robot check`. See docs/hardware.md."""

    sub_verbs: ClassVar[dict[str, type[Command]]] = ROBOT_VERBS

    action: tyro.conf.OmitSubcommandPrefixes[RobotVerb]
    """What to do."""

    def run(self) -> int:
        """Run the sub-verb."""
        result: int = self.action.run()
        return result

    def resolved_config(self) -> Any:
        """The sub-verb's robot config."""
        return self.action.resolved_config()
