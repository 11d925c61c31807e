"""`robot-rl record`: record teleoperated demos from a robot into a LeRobotDataset v3 or an episode store.

:func:`run_record` takes the parsed :class:`RecordArgs` (tests may also pass a built robot and device)
and does, in this order, everything that can fail *before* the arm is touched: resolve the configs,
check the output directories and the free disk space, connect the teleop device; then it connects the
robot through the safety layer, opens the sink and records (:class:`~robot_rl.human_loop.record.DemoRecorder`).

``--format lerobot`` writes each episode twice: into an episode store ``<out>.episodes`` (committed, with
fsync, as each episode ends) and into the LeRobotDataset at ``<out>`` (LeRobot writes its parquet footers
and metadata only when the dataset is finalised at the end). If the session dies before that, nothing is
lost: ``robot-rl data export <out>.episodes NEW_DIR`` rebuilds the dataset.
"""

from __future__ import annotations

import logging
import shutil
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import tyro

from robot_rl.config_io import from_dict, load_yaml, parse_override
from robot_rl.core.config import ConfigError
from robot_rl.replay.durable import DiskFullError, is_disk_full

if TYPE_CHECKING:  # torch comes with these; `robot-rl --help` should not wait for it
    from robot_rl.data.episode import Episode
    from robot_rl.data.recorder import EpisodeSink, StoreSink

log = logging.getLogger(__name__)

SECTIONS = ("robot", "device", "safety", "record")


@dataclass
class RecordArgs:
    """Record teleoperated demonstrations from a robot (xarm, lerobot, sim_arm …) into a LeRobotDataset v3.

    Every action goes through the safety layer at a fixed rate. Keys (keyboard; gamepad buttons in
    `robot-rl devices`): n start / stop+save, g success (labelled at that step), b failure, t discard,
    [ rewind segment, ] correction segment, space E-STOP. Set robot, device, safety and record keys as
    `section.key=value`, e.g. `robot-rl record --robot xarm --out demos robot.ip=192.168.1.185` or
    `robot-rl record --robot lerobot --device leader_arm --out demos robot.port=/dev/ttyACM0
    device.port=/dev/ttyACM1`.
    """

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(metavar="SECTION.KEY=VALUE")]] = ()
    """Dotted overrides (sections: robot, device, safety, record)."""
    robot: Annotated[str, tyro.conf.arg(metavar="NAME")] = "sim_arm"
    """Robot: xarm, lerobot (SO-100/SO-101, Koch … through lerobot) or sim_arm (the MuJoCo stand-in)."""
    device: Annotated[str, tyro.conf.arg(metavar="NAME")] = "keyboard"
    """Teleop device: keyboard, gamepad, spacemouse (ee_delta robots) or leader_arm (joint mode)."""
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
    min_free_mb: float = 500.0
    """Refuse to start with less free space than this on the output's disk."""
    quiet: bool = False
    """No live status line."""


def _ensure_robots() -> None:
    import robot_rl.hardware.lerobot_robot
    import robot_rl.hardware.xarm

    try:
        import robot_rl.hardware.sim_arm  # noqa: F401
    except ImportError as e:  # its simulator extra is missing; the name then says so when chosen
        log.debug("sim_arm unavailable: %s", e)


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
    for text in args.overrides:
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
    robot_cfg = from_dict(ROBOTS.get(args.robot), tree["robot"], "robot")
    device_cfg = from_dict(TELEOP_DEVICES.get(args.device), tree["device"], "device")
    safety_cfg = from_dict(SafetyConfig, {"control_hz": args.hz, **tree["safety"]}, "safety")
    rec = {f.name: getattr(args, f.name) for f in fields(RecordConfig) if hasattr(args, f.name)}
    record_cfg = from_dict(RecordConfig, {**rec, **tree["record"]}, "record")
    return robot_cfg, device_cfg, safety_cfg, record_cfg


def check_output(out: Path, fmt: str, min_free_mb: float) -> None:
    """Refuse an output that exists (and is not empty) or a disk with less than ``min_free_mb`` free."""
    targets = [out] + ([staging_path(out)] if fmt == "lerobot" else [])
    for p in targets:
        if p.exists() and (not p.is_dir() or any(p.iterdir())):
            raise FileExistsError(f"{p} already exists; record into a new directory (recordings are never "
                                  "overwritten or appended to)")
    probe = out.resolve()
    while not probe.exists():
        probe = probe.parent
    free_mb = shutil.disk_usage(probe).free / 2**20
    if free_mb < min_free_mb:
        raise DiskFullError(f"only {free_mb:.0f} MB free on the disk of {out} (need {min_free_mb:.0f} MB, "
                            "--min-free-mb); free some space first")


def staging_path(out: Path) -> Path:
    """Where ``--format lerobot`` keeps its committed-per-episode copy."""
    return out.with_name(out.name + ".episodes")


class TeeSink:
    """Commit each episode to an episode store, then hand it to a second sink (the LeRobot writer)."""

    def __init__(self, first: StoreSink, second: EpisodeSink | None) -> None:
        self.first = first
        self.second = second

    def write(self, ep: Episode) -> None:
        """Write to both; a full disk raises DiskFullError (committed episodes stay)."""
        self.first.write(ep)
        if self.second is not None:
            try:
                self.second.write(ep)
            except OSError as e:
                if is_disk_full(e):
                    raise DiskFullError(f"disk full while writing the LeRobot dataset: {e}; every saved "
                                        f"episode is committed in {self.first.store.path}") from e
                raise

    def close(self) -> None:
        """Finalise the second sink."""
        self.first.close()
        if self.second is not None:
            self.second.close()


def open_sink(out: Path, fmt: str, spec: Any, hz: float, task: str, source: dict[str, Any], video: bool = False,
              repo_id: str = "local/robot_rl_demos", robot_type: str | None = None) -> TeeSink:
    """The sink for ``fmt``: an episode store at ``out``, or the store ``<out>.episodes`` plus LeRobot at ``out``."""
    from robot_rl.data.recorder import StoreSink
    from robot_rl.data.store import EpisodeStore

    if fmt == "episodes":
        return TeeSink(StoreSink(EpisodeStore.create(out, spec, fps=hz, task=task, source=source)), None)
    from robot_rl.data.lerobot_io import LeRobotWriter

    # The LeRobot writer first: if lerobot is missing we fail before creating anything.
    writer = LeRobotWriter(out, spec, hz, repo_id=repo_id, task=task, use_videos=video, robot_type=robot_type,
                           rac_segments=True)
    store = EpisodeStore.create(staging_path(out), spec, fps=hz, task=task, source=source)
    return TeeSink(StoreSink(store), writer)


def run_record(args: RecordArgs, robot: Any = None, device: Any = None) -> int:
    """The `record` verb. ``robot`` / ``device``: already built objects (tests, examples) instead of the configs'."""
    from robot_rl.hardware.robot import RobotError
    from robot_rl.hardware.safety import SafetyLayer
    from robot_rl.human_loop.record import DemoRecorder, RichStatus

    def fail(msg: str) -> int:
        print(f"robot-rl record: error: {msg}", file=sys.stderr)
        return 2

    robot_cfg, device_cfg, safety_cfg, record_cfg = build_configs(args)
    try:
        check_output(args.out, args.format, args.min_free_mb)
    except (FileExistsError, DiskFullError) as e:
        return fail(str(e))
    robot = robot if robot is not None else robot_cfg.make()
    device = device if device is not None else device_cfg.make()
    try:
        device.connect()
    except (ImportError, RuntimeError, OSError) as e:
        return fail(f"teleop device {args.device!r} not available: {e} (`robot-rl devices` lists what is "
                    "connected)")
    sink: TeeSink | None = None
    status = None if args.quiet or not sys.stderr.isatty() else RichStatus()
    try:
        layer = SafetyLayer(robot, safety_cfg)
        try:
            layer.connect()
        except (RobotError, OSError, TimeoutError) as e:
            layer.close()
            return fail(f"robot {args.robot!r} not reachable: {e}")
        try:
            source = {"robot": args.robot, "device": args.device, "hz": args.hz}
            sink = open_sink(args.out, args.format, robot.features, args.hz, args.task, source, args.video,
                             args.repo_id, getattr(robot.config, "robot_type", args.robot))
            recorder = DemoRecorder(layer, device, sink, record_cfg, status=status)
            print(f"recording into {args.out} ({args.format}); {KEY_LINE}", file=sys.stderr, flush=True)
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
                layer.close()
    except DiskFullError as e:
        return fail(f"disk full: {e}")
    finally:
        device.disconnect()
    print(f"{summary.saved} episode(s) saved ({summary.frames} frames, {summary.successes} success), "
          f"{summary.discarded} discarded; stopped: {summary.stop_reason}")
    print(f"safety events: {summary.safety_counts or 'none'}; device lost for {summary.device_lost_steps} steps")
    if summary.rate is not None:
        print(f"loop: {summary.rate.summary()}")
    where = f"{args.out}" + (f" (and {staging_path(args.out)})" if args.format == "lerobot" else "")
    print(f"written to {where}")
    return 0 if summary.saved else 1


KEY_LINE = "keys: n start/stop, g success, b failure, t discard, [ rewind, ] correct, space E-STOP"
