"""`robot-rl …`: a thin command line over the typed configs.

Verbs: ``train`` (the main job), ``learner`` / ``actor`` (the same run split across processes over
ZeroMQ), ``eval`` (score a run, optionally record a video) and ``config``
(print every config key of a task/algorithm pair with its meaning). Each verb's options are a
dataclass below; their docstrings are the ``--help`` text. Config keys are set with dotted
``section.key=value`` overrides after the options.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from robot_rl.config_io import describe, to_dict
from robot_rl.core.config import ConfigError
from robot_rl.core.registry import UnknownNameError
from robot_rl.core.specs import SpecMismatchError
from robot_rl.data.cli import DataArgs, run_data
from robot_rl.human_loop.cli import DeployArgs, run_deploy
from robot_rl.human_loop.record_cli import RecordArgs, run_record
from robot_rl.loop.config import TrainConfig, resolve_train_config
from robot_rl.policies.flow.cli import FlowSFTArgs, run_flow_sft
from robot_rl.replay.durable import DiskFullError
from robot_rl.rewards.cli import RewardArgs, run_reward


@dataclass
class TrainArgs:
    """Train a policy.

    With no options: SAC on the built-in `reach` task, until ≥90% success over 100
    evaluation episodes. Writes runs/<name>/ (TensorBoard logs, checkpoints, config.yaml,
    learning_curve.png, summary.md). Set any config key as `section.key=value` after the options, e.g.
    `robot-rl train --algo ppo task.num_envs=2048 loop.total_env_steps=5e6`; list every key with
    `robot-rl config --task T --algo A`.
    """

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(metavar="SECTION.KEY=VALUE")]] = ()
    """Dotted config overrides `section.key=value` (sections: task, algo, loop, replay, transport, run,
    cotrain); `--section.key VALUE` flags work too, e.g. `--cotrain.real-dataset PATH --cotrain.weight 0.1`."""
    task: Annotated[str | None, tyro.conf.arg(metavar="NAME")] = None
    """Task id: a name (reach, push, pendulum, reach_pixels, mujoco/reach, ...) or `<backend>/<id>`
    (gymnasium/Pendulum-v1, maniskill/PickCube-v1, isaacgym/cartpole); `robot-rl tasks` lists them."""
    algo: Annotated[str | None, tyro.conf.arg(metavar="NAME")] = None
    """Learner: sac or ppo."""
    config: Path | None = None
    """A YAML file with any of the sections; overrides on the command line win over it."""
    resume: Path | None = None
    """Continue the run in this directory from its last checkpoint (overrides still apply)."""
    name: str | None = None
    """Run name (directory under run.root); default <task>-<algo>-<timestamp>."""


@dataclass
class EvalArgs:
    """Evaluate a run's latest checkpoint with deterministic actions; optionally save an mp4."""

    run_dir: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="RUN_DIR")]]
    """The run directory (runs/<name>)."""
    episodes: int = 100
    """Number of evaluation episodes."""
    video: Path | None = None
    """Write an mp4 of sub-env 0 to this path (needs `pip install 'robot-rl[video]'`)."""
    video_episodes: int = 3
    """Episodes of sub-env 0 to record in the video."""
    seed: int = 12345
    """Seed of the evaluation env."""
    device: str = "cpu"
    """Device to evaluate on."""


@dataclass
class LearnerArgs:
    """Run the learner alone; actors connect from other processes or machines (`robot-rl actor`).

    Takes the same config as `robot-rl train`; the transport section becomes `zmq`. Writes the same
    run directory (checkpoints, logs, evaluations) and stops by the same rules.
    """

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(metavar="SECTION.KEY=VALUE")]] = ()
    """Dotted config overrides."""
    task: Annotated[str | None, tyro.conf.arg(metavar="NAME")] = None
    """Task name (defines the spec actors must match)."""
    algo: Annotated[str | None, tyro.conf.arg(metavar="NAME")] = None
    """Learner: sac or ppo."""
    config: Path | None = None
    """The run's YAML config (the same file the actors use)."""
    bind: str | None = None
    """Address to bind, e.g. tcp://127.0.0.1:5555 (default: transport.address). Use tcp://0.0.0.0:PORT
    only on a trusted network."""
    resume: Path | None = None
    """Continue the run in this directory from its last checkpoint."""
    name: str | None = None
    """Run name (directory under run.root)."""


@dataclass
class ActorArgs:
    """Run one actor: step the task's env with the learner's newest weights and send transitions."""

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(metavar="SECTION.KEY=VALUE")]] = ()
    """Dotted config overrides."""
    task: Annotated[str | None, tyro.conf.arg(metavar="NAME")] = None
    """Task name (must match the learner's)."""
    algo: Annotated[str | None, tyro.conf.arg(metavar="NAME")] = None
    """Learner's algorithm (the actor runs its policy)."""
    config: Path | None = None
    """The run's YAML config (the same file the learner uses)."""
    connect: str | None = None
    """The learner's address, e.g. tcp://gpu-box:5555 (default: transport.address)."""
    actor_id: int = 0
    """This actor's id, unique among the learner's actors."""
    max_env_steps: int | None = None
    """Stop after this many env transitions (default: run until Ctrl-C)."""


@dataclass
class KeysArgs:
    """Make a CURVE keypair for the ZeroMQ transport.

    Writes `<dir>/<name>.key` (public, share it) and `<dir>/<name>.key_secret` (keep it; mode 0600).

    The learner uses its secret key (transport.server_secret_key) and a directory of the actors'
    public keys (transport.allowed_clients_dir); each actor uses the learner's public key
    (transport.server_public_key) and its own secret key (transport.client_secret_key).
    """

    action: tyro.conf.Positional[Literal["generate"]]
    """What to do (only `generate`)."""
    dir: Path = Path("keys")
    """Directory to write the key files into."""
    name: str = "learner"
    """Base name of the files (e.g. learner, robot1)."""


@dataclass
class ExportArgs:
    """Export a run's deterministic actor to ONNX or to C99 for microcontrollers, and verify it.

    ONNX: normalisation, CNN and squashing included, dynamic batch, checked with onnxruntime. C: MLP
    actors as a header/source pair per variant (float32/ and int8/ under --out), compiled with the host
    compiler and compared with torch on random and recorded observations; with arm-none-eabi-gcc
    installed, also sized for Cortex-M4F/M7 at -Os. A report is written to <out>/EXPORT.md.
    """

    run_dir: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="RUN_DIR")]]
    """The run directory (runs/<name>); its newest verifiable checkpoint is exported."""
    format: Literal["onnx", "c"] = "onnx"
    """onnx (any SAC/PPO actor) or c (MLP actors over a flat state)."""
    out: Path = Path("export")
    """Directory to write the exported files and the report into."""
    name: str = "policy"
    """Name of the ONNX file, or the C prefix: <name>.h and void <name>_forward(const float *obs, float *action)."""
    variants: tuple[Literal["float32", "int8"], ...] = ("float32", "int8")
    """C variants to write (int8: per-channel-scaled int8 weights, about 4x less flash)."""
    num_random: int = 1000
    """Random observations to verify on."""
    num_recorded: int = 1000
    """Observations recorded from the run's task with the deterministic policy, to verify on."""


@dataclass
class TasksArgs:
    """List every registered task: its backend, whether that is installed, and what installs it.

    A backend task takes any id of its simulator as `<backend>/<id>`, e.g.
    `robot-rl train --task maniskill/PickCube-v1` or `--task gymnasium/HalfCheetah-v5`. Nothing is
    imported to check: simulators are only located.
    """

    missing: bool = False
    """Only list tasks whose backend is not installed."""


@dataclass
class DevicesArgs:
    """List the teleop devices that are connected (keyboard, gamepad, SpaceMouse) and what each control does.

    Works with nothing connected (it says so). Gamepads need `pygame`, SpaceMice `hidapi`:
    `pip install 'robot-rl[teleop]'`.
    """

    scripted: bool = False
    """Also list the scripted device used by tests and demos."""


@dataclass
class ConfigArgs:
    """Print the resolved config of a task/algorithm pair: every key, its value and its meaning."""

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(metavar="SECTION.KEY=VALUE")]] = ()
    """Dotted overrides to apply before printing."""
    task: str | None = None
    """Task name."""
    algo: str | None = None
    """Learner name."""
    config: Path | None = None
    """A YAML file to resolve."""
    yaml: bool = False
    """Print as YAML (a file you can pass to --config) instead of a table."""


def run_train(args: TrainArgs) -> int:
    """The `train` verb (also callable from Python and tests)."""
    from robot_rl.loop.runner import load_run_config, train

    overrides = list(args.overrides)
    if args.name:
        overrides.append(f"run.name={args.name}")
    if args.resume is not None:
        from robot_rl.config_io import parse_override

        cfg = load_run_config(args.resume, dict(parse_override(o) for o in overrides))
        result = train(cfg, resume_dir=args.resume)
    else:
        cfg = resolve_train_config(args.task, args.algo, args.config, overrides)
        result = train(cfg)
    ev = result.last_eval
    status = "reached the success threshold" if result.reached_threshold else f"stopped ({result.stop_reason})"
    print(f"{status} after {result.env_steps:,} env steps, {result.updates:,} updates, {result.wall_s:.0f}s"
          + (f"; eval success {ev.success_rate:.0%}, return {ev.mean_return:.2f}" if ev else ""))
    print(f"run written to {result.run_dir}")
    return 0


def run_eval(args: EvalArgs) -> int:
    """The `eval` verb."""
    from robot_rl.loop.eval_run import evaluate_run

    result = evaluate_run(args.run_dir, episodes=args.episodes, seed=args.seed, device=args.device,
                          video=args.video, video_episodes=args.video_episodes)
    print(f"{args.episodes} episodes: success {result.success_rate:.1%}, return {result.mean_return:.3f}, "
          f"length {result.mean_length:.1f}")
    if args.video:
        print(f"video written to {args.video}")
    return 0


def _zmq_config(task: str | None, algo: str | None, config: Path | None, overrides: tuple[str, ...],
                address: str | None) -> TrainConfig:
    extra = ["transport.type=zmq"] + ([f"transport.address={address}"] if address else [])
    return resolve_train_config(task, algo, config, [*extra, *overrides])


def run_learner(args: LearnerArgs) -> int:
    """The `learner` verb."""
    from robot_rl.loop.runner import InProcessRunner, load_run_config

    overrides = [*args.overrides, *([f"run.name={args.name}"] if args.name else [])]
    if args.resume is not None:
        from robot_rl.config_io import parse_override

        extra = ["transport.type=zmq", *([f"transport.address={args.bind}"] if args.bind else []), *overrides]
        cfg = load_run_config(args.resume, dict(parse_override(o) for o in extra))
        runner = InProcessRunner(cfg, run_dir=args.resume, resume=True, remote_actors=True)
    else:
        cfg = _zmq_config(args.task, args.algo, args.config, tuple(overrides), args.bind)
        runner = InProcessRunner(cfg, remote_actors=True)
    print(f"learner listening on {runner.address} (run directory {runner.run_dir})", flush=True)
    result = runner.train()
    print(f"stopped ({result.stop_reason}) after {result.env_steps:,} env steps, {result.updates:,} updates")
    return 0


def run_actor_verb(args: ActorArgs) -> int:
    """The `actor` verb."""
    from robot_rl.loop.remote_actor import run_actor

    cfg = _zmq_config(args.task, args.algo, args.config, args.overrides, args.connect)
    report = run_actor(cfg, args.actor_id, args.max_env_steps)
    print(f"actor {args.actor_id}: {report.env_steps:,} env steps, {report.chunks_acked}/{report.chunks_sent} "
          f"chunks acknowledged, {report.unacked} unacknowledged, {report.dropped_chunks} dropped, "
          f"weights v{report.policy_version}, {report.stale_pauses} stale pauses, {report.overruns} overruns",
          flush=True)
    return 0


def run_keys(args: KeysArgs) -> int:
    """The `keys` verb."""
    from robot_rl.transport.zmq_transport import generate_keys

    public, secret = generate_keys(str(args.dir), args.name)
    print(f"public key: {public}\nsecret key: {secret}")
    return 0


def run_export(args: ExportArgs) -> int:
    """The `export` verb."""
    from robot_rl.checkpoint import CheckpointError
    from robot_rl.export import ExportVerificationError, export_run
    from robot_rl.export.toolchain import ToolchainError

    try:
        report = export_run(args.run_dir, args.format, args.out, name=args.name, variants=args.variants,
                            num_random=args.num_random, num_recorded=args.num_recorded)
    except (ExportVerificationError, ToolchainError, CheckpointError, ImportError) as e:
        print(f"robot-rl export: error: {e}", file=sys.stderr)
        return 1
    print((Path(report.out_dir) / "EXPORT.md").read_text(), end="")
    return 0


def run_tasks(args: TasksArgs) -> int:
    """The `tasks` verb."""
    from rich.console import Console
    from rich.table import Table

    from robot_rl.sims.extras import task_catalog

    table = Table("task", "backend", "installed", "ids", "install", "what", show_lines=False)
    for row in task_catalog():
        if args.missing and row.installed:
            continue
        table.add_row(", ".join(row.names), row.backend, "yes" if row.installed else "no", row.id_hint,
                      row.install if not row.installed else "", row.summary)
    Console().print(table)
    return 0


def run_devices(args: DevicesArgs) -> int:
    """The `devices` verb."""
    from robot_rl.human_loop.devices.listing import format_listing, list_devices

    print(format_listing(list_devices(include_scripted=args.scripted)))
    return 0


def run_config(args: ConfigArgs) -> int:
    """The `config` verb."""
    cfg = resolve_train_config(args.task, args.algo, args.config, list(args.overrides))
    if args.yaml:
        import yaml

        print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("key", "value", "meaning", show_lines=False)
    for key, value, doc in describe(cfg):
        table.add_row(key, repr(value) if isinstance(value, str) else str(value), doc)
    Console().print(table)
    return 0


Verb = (
    Annotated[TrainArgs, tyro.conf.subcommand("train")]
    | Annotated[EvalArgs, tyro.conf.subcommand("eval")]
    | Annotated[LearnerArgs, tyro.conf.subcommand("learner")]
    | Annotated[ActorArgs, tyro.conf.subcommand("actor")]
    | Annotated[KeysArgs, tyro.conf.subcommand("keys")]
    | Annotated[ConfigArgs, tyro.conf.subcommand("config")]
    | Annotated[TasksArgs, tyro.conf.subcommand("tasks")]
    | Annotated[ExportArgs, tyro.conf.subcommand("export")]
    | Annotated[DevicesArgs, tyro.conf.subcommand("devices")]
    | Annotated[DataArgs, tyro.conf.subcommand("data")]
    | Annotated[RewardArgs, tyro.conf.subcommand("reward")]
    | Annotated[FlowSFTArgs, tyro.conf.subcommand("flow-sft")]
    | Annotated[DeployArgs, tyro.conf.subcommand("deploy")]
    | Annotated[RecordArgs, tyro.conf.subcommand("record")]
)


#: Verbs that take config overrides, and the sections a `--section.key VALUE` flag may name.
_OVERRIDE_VERBS = ("train", "learner", "actor", "config")
_CONFIG_SECTIONS = ("task", "algo", "loop", "transport", "run", "replay", "cotrain")


def dotted_flags(argv: list[str]) -> list[str]:
    """Rewrite config flags as overrides: ``--cotrain.real-dataset PATH`` → ``cotrain.real_dataset=PATH``.

    ``--section.key=VALUE`` works too; dashes in the key become underscores.
    """
    if not argv or argv[0] not in _OVERRIDE_VERBS:
        return list(argv)
    out, overrides, i = [argv[0]], [], 1
    while i < len(argv):
        arg = argv[i]
        head = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        section, _, key = head.partition(".")
        if section in _CONFIG_SECTIONS and key:
            if "=" in arg:
                value = arg.split("=", 1)[1]
            elif i + 1 < len(argv):
                i += 1
                value = argv[i]
            else:
                out.append(arg)  # no value: let the parser report it
                break
            overrides.append(f"{section}.{key.replace('-', '_')}={value}")
        else:
            out.append(arg)
        i += 1
    return out + overrides  # positional overrides go last, after every option


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `robot-rl` console script."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    argv = dotted_flags(sys.argv[1:] if argv is None else list(argv))
    args = tyro.cli(Verb, args=argv, prog="robot-rl",  # type: ignore[call-overload]
                    description="Reinforcement learning for robots: train, evaluate, inspect configs.")
    try:
        if isinstance(args, TrainArgs):
            return run_train(args)
        if isinstance(args, EvalArgs):
            return run_eval(args)
        if isinstance(args, LearnerArgs):
            return run_learner(args)
        if isinstance(args, ActorArgs):
            return run_actor_verb(args)
        if isinstance(args, KeysArgs):
            return run_keys(args)
        if isinstance(args, ExportArgs):
            return run_export(args)
        if isinstance(args, TasksArgs):
            return run_tasks(args)
        if isinstance(args, DevicesArgs):
            return run_devices(args)
        if isinstance(args, DataArgs):
            return run_data(args)
        if isinstance(args, RewardArgs):
            return run_reward(args)
        if isinstance(args, FlowSFTArgs):
            return run_flow_sft(args)
        if isinstance(args, DeployArgs):
            return run_deploy(args)
        if isinstance(args, RecordArgs):
            return run_record(args)
        return run_config(args)
    except DiskFullError as e:
        print(f"robot-rl: disk full: {e}", file=sys.stderr)
        return 2
    except (ConfigError, UnknownNameError, SpecMismatchError, FileNotFoundError, ValueError) as e:
        print(f"robot-rl: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
