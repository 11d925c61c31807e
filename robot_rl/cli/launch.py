"""`robot-rl launch`: a learner and N actors started and supervised by an engine (local processes, Ray, SLURM)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from robot_rl.cli.base import Command
from robot_rl.cli.distributed import zmq_config
from robot_rl.cli.train import train_sections
from robot_rl.cli.vocabulary import ALGO_DEFAULT, TASK_DEFAULT, algo_help, overrides_help


@dataclass
class LaunchArgs(Command):
    """Start one learner and N actors (`robot-rl learner` / `robot-rl actor`) and keep them running.

    ZeroMQ carries the data as with hand-started processes; the backend only places and supervises them.
    `local`: subprocesses on this machine, a dead actor restarted (its log in RUN/launch/actor-N.log).
    `ray`: the same processes as Ray actors on an existing cluster (`ray start --head`; the `ray` extra).
    `slurm`: writes an sbatch script (learner on the first node, actors on the rest); with --dry-run it is only
    printed or written to --script. Ctrl-C or SIGTERM stops everything: the learner checkpoints, actors drain.
    """

    overrides: tyro.conf.Positional[Annotated[tuple[str, ...], tyro.conf.arg(
        metavar="SECTION.KEY=VALUE",
        help=overrides_help(train_sections(), "`--loop.total-env-steps 1e6`") + " Passed to the learner and "
        "every actor.")]] = ()
    backend: Literal["local", "ray", "slurm"] = "local"
    """Who starts the processes."""
    actors: int = 2
    """Actor processes (each with its task.num_envs sub-envs)."""
    task: Annotated[str | None, tyro.conf.arg(metavar="NAME", help_behavior_hint=TASK_DEFAULT)] = None
    """Task name; `robot-rl tasks` lists them."""
    algo: Annotated[str | None, tyro.conf.arg(metavar="NAME", help=algo_help(), help_behavior_hint=ALGO_DEFAULT)] = None
    config: Path | None = None
    """The run's YAML config (learner and actors read the same file)."""
    bind: str | None = None
    """local/ray: the learner's address (default: tcp://127.0.0.1:* locally, a free port; for ray, the head
    node's IP and a free port)."""
    name: str | None = None
    """Run name (directory under run.root)."""
    resume: Path | None = None
    """local/ray: continue the run in this directory from its last checkpoint."""
    max_restarts: int = 5
    """local/ray: times a dead actor is started again before it is given up on."""
    grace_s: float = 30.0
    """Seconds the processes get after SIGTERM before SIGKILL (keep above loop.stop_grace_s)."""
    ray_address: str = "auto"
    """ray: the cluster to join (`auto`: the one `ray start` made on this machine; or ray://HOST:10001)."""
    ray_connect_timeout_s: float = 30.0
    """ray: how long to wait for the cluster to answer before giving up with an error."""
    dry_run: bool = False
    """slurm: print the sbatch script instead of submitting it."""
    script: Path | None = None
    """slurm: also write the script to this file."""
    nodes: int = 2
    """slurm: nodes (learner on the first, actors spread over the rest)."""
    partition: str | None = None
    """slurm: partition."""
    time: str = "04:00:00"
    """slurm: wall-time limit."""
    gpus_per_node: int = 0
    """slurm: GPUs per node."""
    port: int = 5555
    """slurm: the learner's port on its node."""

    @classmethod
    def config_sections(cls) -> tuple[str, ...]:
        """The run config's sections."""
        return train_sections()

    def run(self) -> int:
        """Launch and supervise; the learner's exit code."""
        from robot_rl.launch.plan import LaunchPlan

        self.resolved_config()  # a bad task, algorithm or key fails here, before any process starts
        plan = LaunchPlan(self.actors, self.run_args())
        if self.backend == "slurm":
            return self._slurm(plan)
        if self.backend == "ray":
            from robot_rl.launch.ray_backend import RayLauncher

            result = RayLauncher(plan, self.ray_address, self.bind, self.max_restarts, self.grace_s,
                                 resume=self.resume, connect_timeout_s=self.ray_connect_timeout_s).run()
        else:
            from robot_rl.launch.local import LocalLauncher

            result = LocalLauncher(plan, self.bind or "tcp://127.0.0.1:*", self.max_restarts,
                                   grace_s=self.grace_s, resume=self.resume).run()
        restarted = {i: n for i, n in result.restarts.items() if n}
        print(f"launch: learner exited with code {result.learner_returncode}; actors restarted: "
              f"{restarted or 'none'}; run directory {result.run_dir}", flush=True)
        return result.learner_returncode

    def run_args(self) -> list[str]:
        """The options the learner and every actor take."""
        out: list[str] = []
        for flag, value in (("--task", self.task), ("--algo", self.algo), ("--config", self.config)):
            if value is not None:
                out += [flag, str(value)]
        return out + list(self.overrides) + ([f"run.name={self.name}"] if self.name else [])

    def _slurm(self, plan: Any) -> int:
        from robot_rl.launch.slurm import SlurmOptions, sbatch_script

        script = sbatch_script(plan, SlurmOptions(self.nodes, self.partition, self.time, self.gpus_per_node,
                                                  port=self.port))
        if self.script is not None:
            self.script.write_text(script)
            print(f"sbatch script written to {self.script}")
        if self.dry_run:
            if self.script is None:
                print(script, end="")
            return 0
        import shutil
        import subprocess
        import tempfile

        if shutil.which("sbatch") is None:
            print("launch: `sbatch` is not on PATH (not a SLURM login node?); use --dry-run --script FILE and submit "
                  "it where SLURM is", flush=True)
            return 2
        path = self.script
        if path is None:
            path = Path(tempfile.mkstemp(prefix="robot-rl-", suffix=".sbatch")[1])
            path.write_text(script)
        return subprocess.call(["sbatch", str(path)])

    def resolved_config(self) -> Any:
        """The config the learner will run (a ZeroMQ transport)."""
        if self.resume is not None:
            return None
        return zmq_config(self.task, self.algo, self.config, self.overrides, None)
