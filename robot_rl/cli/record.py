"""`robot-rl record`: record teleoperated demos from a robot into a LeRobotDataset v3 or an episode store.

:func:`run_record` takes the parsed :class:`RecordArgs` (tests may also pass a built robot and device)
and does, in this order, everything that can fail *before* the arm is touched: resolve the configs,
check the output directories and the free disk space, connect the teleop device; then it connects the
robot through the safety layer, opens the sink and records (:class:`~robot_rl.human_loop.record.DemoRecorder`).
Where the episodes go, and why ``--format lerobot`` writes them twice: :mod:`robot_rl.human_loop.record_sinks`.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import tyro

from robot_rl.cli.base import Command, sigterm_as_ctrl_c, viz_overrides
from robot_rl.cli.vocabulary import VIZ_SINKS, overrides_help, robot_help, teleop_help
from robot_rl.config_io import from_dict, load_yaml, parse_override
from robot_rl.core.config import ConfigError
from robot_rl.durable import DiskFullError
from robot_rl.human_loop.record_sinks import TeeSink, check_output, open_sink, staging_path

log = logging.getLogger(__name__)

SECTIONS = ("robot", "device", "safety", "record", "viz")
"""What `record` resolves: the robot's, the teleop device's, the safety layer's, the recorder's and the live view's
configs (:meth:`RecordArgs.resolved_config`), also the sections of its ``--config`` file."""


@dataclass
class RecordArgs(Command):
    """Record teleoperated demonstrations from a robot (xarm, lerobot, sim_arm …) into a LeRobotDataset v3.

    Every action goes through the safety layer at a fixed rate. Keys (keyboard; gamepad buttons in
    `robot-rl devices`): n start / stop+save, g success (labelled at that step), b failure, t discard,
    [ rewind segment, ] correction segment, space E-STOP. Set robot, device, safety, record and viz keys as
    `section.key=value`, e.g. `robot-rl record --robot xarm --out demos robot.ip=192.168.1.185` or
    `robot-rl record --robot lerobot --teleop leader_arm --out demos robot.port=/dev/ttyACM0
    device.port=/dev/ttyACM1`.
    """

    renamed_flags: ClassVar[dict[str, str]] = {"--device": "--teleop", "--quiet": "--no-status"}

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(
        metavar="SECTION.KEY=VALUE", help=overrides_help(SECTIONS, "`--robot.port /dev/ttyACM0`"))]] = ()
    robot: Annotated[str | None, tyro.conf.arg(
        metavar="NAME", help=robot_help(), help_behavior_hint="(default: the config's robot.type, or sim_arm)")] = None
    teleop: Annotated[str, tyro.conf.arg(
        metavar="NAME", help=teleop_help("Teleop device (relative ones need an ee_delta robot, a leader arm joint "
                                         "mode)"))] = "keyboard"
    out: Path = Path("demos")
    """Output directory (must not exist or be empty; recordings are never overwritten)."""
    format: Literal["lerobot", "episodes"] = "lerobot"
    """lerobot (LeRobotDataset v3, plus the <out>.episodes store as a safety copy) or episodes (our store)."""
    episodes: int = 10
    """Stop after this many saved episodes."""
    hz: float = 20.0
    """Control and recording rate (the dataset's fps)."""
    task: str = ""
    """Task text stored with every frame, e.g. "pick up the red cube"."""
    max_episode_steps: int = 600
    """Episodes still running after this many steps are saved as truncated."""
    config: Path | None = None
    """A YAML file with robot/device/safety/record sections; overrides on the command line win."""
    video: bool = False
    """LeRobot format: store cameras as AV1 video instead of PNG images."""
    repo_id: str = "local/robot_rl_demos"
    """LeRobot format: the dataset's repo id (nothing is uploaded)."""
    append: bool = False
    """Add the episodes to an existing episode store at --out (--format episodes; the robot's features must
    match). Without it an existing --out is refused."""
    min_free_mb: float = 500.0
    """Refuse to start with less free space than this on the output's disk."""
    status: bool = True
    """Draw the live status line (on a terminal; --no-status: none)."""
    viz: Annotated[Literal["none", "rerun"] | None, tyro.conf.arg(metavar=VIZ_SINKS)] = None
    """Live view of the recorded steps (cameras, the operator's actions vs holds, success, episode ends): `rerun`
    streams to a Rerun viewer on 127.0.0.1:9876 if one is running, else saves <out>.rrd next to the recording
    for `rerun <out>.rrd`. Sets viz.sink; needs `pip install 'robot-rl[viz]'`."""
    viz_file: Path | None = None
    """With --viz rerun: save the recording here (also while streaming to a viewer)."""

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """Robot, device, safety, record and viz."""
        return SECTIONS

    def run(self) -> int:
        """Record (see :func:`run_record`); 0 when at least one episode was saved, 1 when none, 2 on bad input."""
        return run_record(self)

    def resolved_config(self) -> Any:
        """The robot, device, safety, record and viz sections (what `--config` takes), as built configs."""
        return {**dict(zip(SECTIONS[:4], build_configs(self), strict=True)), "viz": build_viz_config(self)}


def _ensure_robots() -> None:
    import robot_rl.hardware.lerobot_robot
    import robot_rl.hardware.xarm

    try:
        import robot_rl.hardware.sim_arm
        import robot_rl.hardware.sim_so101  # noqa: F401
    except ImportError as e:  # its simulator extra is missing; the name then says so when chosen
        log.debug("sim_arm/sim_so101 unavailable: %s", e)


def resolve_sections(args: RecordArgs) -> dict[str, dict[str, Any]]:
    """The YAML file's sections with the command line's dotted overrides applied."""
    tree: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    if args.config is not None:
        data = load_yaml(args.config)
        unknown = sorted(set(data) - set(SECTIONS))
        if unknown:
            raise ConfigError(f"{args.config}: unknown section(s) {unknown}; valid: {', '.join(SECTIONS)}")
        for s in SECTIONS:
            tree[s].update(data.get(s) or {})
    for text in (*args.overrides, *viz_overrides(args)):
        key, value = parse_override(text)
        section, _, name = key.partition(".")
        if section not in SECTIONS or not name:
            raise ConfigError(f"override {text!r}: use section.key=value with a section of {', '.join(SECTIONS)}")
        tree[section][name] = value
    return tree


def build_configs(args: RecordArgs) -> tuple[Any, Any, Any, Any]:
    """``(robot config, device config, safety config, record config)`` from the args."""
    from robot_rl.hardware.robot import ROBOTS
    from robot_rl.hardware.safety import SafetyConfig
    from robot_rl.human_loop.devices import TELEOP_DEVICES
    from robot_rl.human_loop.record import RecordConfig

    _ensure_robots()
    tree = resolve_sections(args)
    named = tree["robot"].pop("type", None)  # a file for deploy too (robot-rl robot find-limits writes one)
    if named is not None and args.robot is not None and named != args.robot:
        raise ConfigError(f"the config's robot section is for robot type {named!r}, but --robot is {args.robot!r}")
    robot_cfg = from_dict(ROBOTS.get(args.robot or named or "sim_arm"), tree["robot"], "robot")
    device_cfg = from_dict(TELEOP_DEVICES.get(args.teleop), tree["device"], "device")
    # The recorder's main thread is the loop: real-time scheduling where the OS allows it, unless the config says.
    safety_cfg = from_dict(SafetyConfig, {"control_hz": args.hz, "realtime_priority": None, **tree["safety"]},
                           "safety")
    rec = {f.name: getattr(args, f.name) for f in fields(RecordConfig) if hasattr(args, f.name)}
    record_cfg = from_dict(RecordConfig, {**rec, **tree["record"]}, "record")
    return robot_cfg, device_cfg, safety_cfg, record_cfg


def build_viz_config(args: RecordArgs) -> Any:
    """The ``viz`` section (the YAML file's, the overrides, then ``--viz`` / ``--viz-file``)."""
    from robot_rl.viz import VizConfig

    return from_dict(VizConfig, resolve_sections(args)["viz"], "viz")


def open_record_viz(args: RecordArgs) -> Any:
    """The live view the args ask for (None without), saving to ``<out>.rrd`` when no viewer is reached."""
    from robot_rl.viz import open_viz

    out = Path(args.out)
    viz = open_viz(build_viz_config(args), out.with_name(f"{out.name}.rrd"), f"record-{out.name}",
                   f"robot-rl record {out}")
    if viz is not None:
        print(f"live view: {viz.where}", file=sys.stderr, flush=True)
    return viz


def run_record(args: RecordArgs, robot: Any = None, device: Any = None) -> int:
    """The `record` verb. ``robot`` / ``device``: already built objects (tests, examples) instead of the configs'."""
    from robot_rl.hardware.realtime import RealtimeError
    from robot_rl.hardware.robot import RobotError, lerobot_robot_type
    from robot_rl.hardware.safety import SafetyLayer, counts_text
    from robot_rl.human_loop.record import DemoRecorder, RichStatus

    def fail(msg: str) -> int:
        print(f"robot-rl record: error: {msg}", file=sys.stderr)
        return 2

    from robot_rl.hardware.robot import ROBOTS

    robot_cfg, device_cfg, safety_cfg, record_cfg = build_configs(args)
    robot_name = ROBOTS.name_of(robot_cfg)
    try:
        check_output(args.out, args.format, args.min_free_mb, args.append)
    except (FileExistsError, DiskFullError) as e:
        return fail(str(e))
    if args.append and args.out.exists():
        from dataclasses import replace

        from robot_rl.data.store import EpisodeStore

        # New scenes, not the first session's again: the task resets continue from the stored episodes' count.
        record_cfg = replace(record_cfg, seed=record_cfg.seed + 7919 * len(EpisodeStore(args.out)))
    robot = robot if robot is not None else robot_cfg.make()
    device = device if device is not None else device_cfg.make_for(robot)
    try:
        device.connect()
    except (ImportError, RuntimeError, OSError) as e:
        return fail(f"teleop device {args.teleop!r} not available: {e} (`robot-rl devices` lists what is "
                    "connected)")
    sink: TeeSink | None = None
    status = None if not args.status or not sys.stderr.isatty() else RichStatus()
    try:
        layer = SafetyLayer(robot, safety_cfg)
        try:
            layer.connect()
        except (RobotError, OSError, TimeoutError) as e:
            layer.close()
            return fail(str(e) if isinstance(e, RealtimeError) else f"robot {robot_name!r} not reachable: {e}")
        viz = None
        try:
            source = {"robot": robot_name, "device": args.teleop, "hz": args.hz}
            sink = open_sink(args.out, args.format, robot.features, args.hz, args.task, source, args.video,
                             args.repo_id, lerobot_robot_type(robot.config, robot_name), args.append)
            viz = open_record_viz(args)
            recorder = DemoRecorder(layer, device, sink, record_cfg, status=status, viz=viz)
            keys = "the scripted device starts each episode itself" if device.drives_episodes else KEY_LINE
            print(f"recording into {args.out} ({args.format}); {keys}", file=sys.stderr, flush=True)
            with sigterm_as_ctrl_c():
                if status is not None:
                    with status:
                        summary = recorder.run()
                else:
                    summary = recorder.run()
        finally:
            try:
                if sink is not None:
                    sink.close()
            finally:
                try:
                    if viz is not None:
                        viz.close()
                finally:
                    layer.close()
    except DiskFullError as e:
        return fail(f"disk full: {e}")
    finally:
        device.disconnect()
    print(f"{summary.saved} episode(s) saved ({summary.frames} frames, {summary.successes} success), "
          f"{summary.discarded} discarded; stopped: {summary.stop_reason}")
    print(f"safety events: {counts_text(summary.safety_counts)}; device lost for {summary.device_lost_steps} steps")
    if summary.rate is not None:
        print(f"loop: {summary.rate.summary()}")
    where = f"{args.out}" + (f" (and {staging_path(args.out)})" if args.format == "lerobot" else "")
    print(f"written to {where}")
    # A stop asked for (Ctrl-C, SIGTERM) is a normal end, whatever was saved; otherwise 1 says nothing was.
    return 0 if summary.saved or summary.stop_reason.startswith("interrupted") else 1


KEY_LINE = "keys: n start/stop, g success, b failure, t discard, [ rewind, ] correct, space E-STOP"
