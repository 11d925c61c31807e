"""`robot-rl launch --backend slurm --dry-run`: an ``sbatch`` script for one learner and N actors.

The learner runs on the job's first node, the actors on the rest (on the first node too when the job has one
node); the learner's address reaches the actors through the environment (``ROBOT_RL_LEARNER``). SLURM stops a
job with SIGTERM and SIGKILL after ``KillWait`` (30 s by default): the learner checkpoints and the actors drain
within that, and ``--signal`` asks for an earlier warning before the time limit.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from robot_rl.core.config import ConfigError
from robot_rl.launch.plan import LaunchPlan


@dataclass
class SlurmOptions:
    """The job's resources (sbatch options)."""

    nodes: int = 2
    """Nodes: the learner on the first, the actors spread over the rest."""
    partition: str | None = None
    """Partition (``--partition``); none: the cluster's default."""
    time: str = "04:00:00"
    """Wall-time limit (``--time``)."""
    gpus_per_node: int = 0
    """GPUs per node (``--gpus-per-node``); 0 for CPU-only."""
    cpus_per_task: int = 4
    """CPUs per process (``--cpus-per-task``)."""
    port: int = 5555
    """The learner's TCP port on its node."""
    job_name: str = "robot-rl"
    """Job name (``--job-name``)."""


def sbatch_script(plan: LaunchPlan, opts: SlurmOptions) -> str:
    """The job script: ``srun`` one learner step on node 0, then one step per actor spread over the others.

    The commands use ``plan.python`` (by default this interpreter): a venv on a filesystem every node shares.
    """
    if opts.nodes < 1:
        raise ConfigError(f"a SLURM job needs at least one node, got nodes={opts.nodes}")
    actor_nodes = max(opts.nodes - 1, 1)
    header = [
        "#!/usr/bin/env bash",
        f"#SBATCH --job-name={opts.job_name}",
        f"#SBATCH --nodes={opts.nodes}",
        f"#SBATCH --ntasks={plan.actors + 1}",
        f"#SBATCH --cpus-per-task={opts.cpus_per_task}",
        f"#SBATCH --time={opts.time}",
        "#SBATCH --signal=TERM@120",
        *( [f"#SBATCH --partition={opts.partition}"] if opts.partition else []),
        *( [f"#SBATCH --gpus-per-node={opts.gpus_per_node}"] if opts.gpus_per_node else []),
        f"#SBATCH --output={opts.job_name}-%j.out",
        "# Written by `robot-rl launch --backend slurm --dry-run`. Submit with: sbatch THIS_FILE",
        "set -euo pipefail",
    ]
    learner = plan.learner_argv(f"tcp://0.0.0.0:{opts.port}")
    body = [
        'nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
        "learner_node=${nodes[0]}",
        f'export ROBOT_RL_LEARNER="tcp://${{learner_node}}:{opts.port}"',
        'actor_nodes=("${nodes[@]:1}"); [ ${#actor_nodes[@]} -gt 0 ] || actor_nodes=("$learner_node")',
        "",
        "# The learner on the first node; ZeroMQ connects the actors whenever it is up.",
        f'srun --nodes=1 --ntasks=1 --nodelist="$learner_node" {shlex.join(learner)} &',
        "learner_pid=$!",
        "",
        "actor_pids=()",
    ]
    for i in range(plan.actors):
        actor = plan.actor_argv(i, "ROBOT_RL_LEARNER_PLACEHOLDER")
        cmd = shlex.join(actor).replace("ROBOT_RL_LEARNER_PLACEHOLDER", '"$ROBOT_RL_LEARNER"')
        body.append(f'srun --nodes=1 --ntasks=1 --nodelist="${{actor_nodes[{i % actor_nodes}]}}" {cmd} &')
        body.append("actor_pids+=($!)")
    body += [
        "",
        "# The run ends when the learner does; the actors then get SIGTERM (they drain and say goodbye).",
        "status=0; wait $learner_pid || status=$?",
        'kill -TERM "${actor_pids[@]}" 2>/dev/null || true',
        'wait "${actor_pids[@]}" || true',
        "exit $status",
    ]
    return "\n".join([*header, "", *body]) + "\n"
