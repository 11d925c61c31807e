"""`robot-rl learner`, `robot-rl actor`, `robot-rl keys`: one run split across processes or machines over ZeroMQ."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from robot_rl.cli.base import Command, sigterm_as_ctrl_c
from robot_rl.cli.train import train_sections
from robot_rl.cli.vocabulary import ALGO_DEFAULT, TASK_DEFAULT, algo_help, overrides_help
from robot_rl.loop.config import TrainConfig, resolve_train_config


@dataclass
class LearnerArgs(Command):
    """Run the learner alone; actors connect from other processes or machines (`robot-rl actor`).

    Takes the same config as `robot-rl train`; the transport section becomes `zmq`. Writes the same
    run directory (checkpoints, logs, evaluations) and stops by the same rules. Ctrl-C or SIGTERM writes a
    checkpoint and exits 0; `--resume` continues from it.
    """

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(
        metavar="SECTION.KEY=VALUE", help=overrides_help(train_sections(), "`--loop.total-env-steps 1e6`"))]] = ()
    task: Annotated[str | None, tyro.conf.arg(metavar="NAME", help_behavior_hint=TASK_DEFAULT)] = None
    """Task name (defines the spec actors must match); `robot-rl tasks` lists them."""
    algo: Annotated[str | None, tyro.conf.arg(metavar="NAME", help=algo_help(), help_behavior_hint=ALGO_DEFAULT)] = None
    config: Path | None = None
    """The run's YAML config (the same file the actors use)."""
    bind: str | None = None
    """Address to bind, e.g. tcp://127.0.0.1:5555 (default: transport.address). Use tcp://0.0.0.0:PORT
    only on a trusted network."""
    resume: Path | None = None
    """Continue the run in this directory from its last checkpoint."""
    name: str | None = None
    """Run name (directory under run.root)."""

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """The run config's sections."""
        return train_sections()

    def run(self) -> int:
        """Listen for actors and train until a stop rule fires."""
        from robot_rl.loop.runner import InProcessRunner

        runner = InProcessRunner(self.resolved_config(), run_dir=self.resume, resume=self.resume is not None,
                                 remote_actors=True)
        print(f"learner listening on {runner.address} (run directory {runner.run_dir})", flush=True)
        with sigterm_as_ctrl_c():  # an engine's SIGTERM checkpoints and exits 0, like Ctrl-C
            result = runner.train()
        print(f"stopped ({result.stop_reason}) after {result.env_steps:,} env steps, {result.updates:,} updates")
        return 0

    def resolved_config(self) -> Any:
        """The run's TrainConfig with a ZeroMQ transport bound at --bind (the resumed run's own with --resume)."""
        overrides = [*self.overrides, *([f"run.name={self.name}"] if self.name else [])]
        if self.resume is not None:
            from robot_rl.config_io import parse_override
            from robot_rl.loop.runner import load_run_config

            extra = ["transport.type=zmq", *([f"transport.address={self.bind}"] if self.bind else []), *overrides]
            return load_run_config(self.resume, dict(parse_override(o) for o in extra))
        return zmq_config(self.task, self.algo, self.config, tuple(overrides), self.bind)


@dataclass
class ActorArgs(Command):
    """Run one actor: step the task's env with the learner's newest weights and send transitions.

    Ctrl-C or SIGTERM finishes the step, waits up to loop.stop_grace_s for the learner to acknowledge every
    chunk, says goodbye and exits 0; a second signal exits at once.
    """

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(
        metavar="SECTION.KEY=VALUE", help=overrides_help(train_sections(), "`--task.num-envs 16`"))]] = ()
    task: Annotated[str | None, tyro.conf.arg(metavar="NAME", help_behavior_hint=TASK_DEFAULT)] = None
    """Task name (must match the learner's)."""
    algo: Annotated[str | None, tyro.conf.arg(
        metavar="NAME", help=algo_help("The learner's algorithm (the actor runs its policy)"),
        help_behavior_hint=ALGO_DEFAULT)] = None
    config: Path | None = None
    """The run's YAML config (the same file the learner uses)."""
    connect: str | None = None
    """The learner's address, e.g. tcp://gpu-box:5555 (default: transport.address)."""
    actor_id: int = 0
    """This actor's id, unique among the learner's actors."""
    max_env_steps: int | None = None
    """Stop after this many env transitions (default: run until Ctrl-C or SIGTERM)."""

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """The run config's sections."""
        return train_sections()

    def run(self) -> int:
        """Act for the learner until it stops, Ctrl-C or --max-env-steps; print what was sent."""
        from robot_rl.loop.remote_actor import run_actor

        report = run_actor(self.resolved_config(), self.actor_id, self.max_env_steps)
        print(f"actor {self.actor_id}: {report.env_steps:,} env steps, {report.chunks_acked}/{report.chunks_sent} "
              f"chunks acknowledged, {report.unacked} unacknowledged, {report.dropped_chunks} dropped, "
              f"weights v{report.policy_version}, {report.stale_pauses} stale pauses, {report.overruns} overruns, "
              f"{report.backlog_s:.0f}s paused for the learner; "
              f"{report.stop_reason.replace('_', ' ')}", flush=True)
        return 0

    def resolved_config(self) -> Any:
        """The run's TrainConfig with a ZeroMQ transport connecting to --connect."""
        return zmq_config(self.task, self.algo, self.config, self.overrides, self.connect)


@dataclass
class KeysArgs(Command):
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

    def run(self) -> int:
        """Write the keypair and print both paths."""
        from robot_rl.transport.zmq_transport import generate_keys

        public, secret = generate_keys(str(self.dir), self.name)
        print(f"public key: {public}\nsecret key: {secret}")
        return 0


def zmq_config(task: str | None, algo: str | None, config: Path | None, overrides: tuple[str, ...],
               address: str | None) -> TrainConfig:
    """The run's TrainConfig with a ZeroMQ transport (at ``address`` when given)."""
    extra = ["transport.type=zmq"] + ([f"transport.address={address}"] if address else [])
    return resolve_train_config(task, algo, config, [*extra, *overrides])
