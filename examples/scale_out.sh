#!/usr/bin/env bash
# Scale out (docs/scale-out.md): the same run as data-parallel ranks, as a supervised actor fleet, and as a SLURM
# job script. Each step is small enough for a laptop; drop the overrides for a real run.
set -euo pipefail

# 1. Data-parallel PPO: 2 ranks (gloo on CPU, NCCL and one GPU each on a GPU machine), started through torchrun.
robot-rl train --task reach --algo ppo --name ddp-example run.distributed=ddp run.nproc_per_node=2 \
    task.num_envs=256 loop.total_env_steps=200000

# 2. One learner and 2 actor processes on this machine; a crashed actor is restarted (logs: runs/<name>/launch/).
robot-rl launch --backend local --actors 2 --task reach --name fleet-example

# 3. The same layout as a SLURM job (3 nodes: the learner on the first, the actors on the others): written, not
#    submitted. `sbatch job.sbatch` on the cluster runs it.
robot-rl launch --backend slurm --dry-run --script job.sbatch --actors 4 --nodes 3 --task reach
echo "wrote job.sbatch"
