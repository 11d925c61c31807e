"""A short SAC run on `reach` (too short to learn: it shows the logging) to wandb, offline, and to a Rerun recording.

    pip install 'robot-rl[wandb,viz]'
    python examples/visualise_reach.py
    rerun runs/example-visualise/viz.rrd                             # the live view, replayed
    wandb sync runs/example-visualise/wandb/offline-run-*            # upload the wandb run (needs `wandb login`)

The same from the command line: `robot-rl train --viz rerun run.wandb=true run.wandb_mode=offline`.
With a viewer already open (`rerun` in another terminal), `--viz rerun` streams to it live instead of to the file.
"""

import os
import shutil
from pathlib import Path

from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.runner import train
from robot_rl.viz.read import read_rrd

run_dir = Path("runs/example-visualise")
shutil.rmtree(run_dir, ignore_errors=True)  # an example: start fresh each time
os.environ.setdefault("WANDB_SILENT", "true")
cfg = resolve_train_config(task="reach", algo="sac", overrides=[
    "run.name=example-visualise", "task.num_envs=8", "loop.total_env_steps=6000", "loop.eval_every_env_steps=2000",
    "run.wandb=true", "run.wandb_mode=offline",            # every TensorBoard scalar, the config, the curve
    "viz.sink=rerun", "viz.connect=off", "viz.every=2",  # sub-env 0 of actor 0, every other step, to a file
])
result = train(cfg)
print(f"trained {result.env_steps} env steps; eval success {result.last_eval.success_rate:.0%}")

series = read_rrd(run_dir / "viz.rrd")  # Rerun's own reader: entity -> rows on the env_step timeline
for entity, rows in sorted(series.items()):
    print(f"{entity:24s} {len(rows):5d} rows, env_step {rows.steps[0]}..{rows.steps[-1]}")
print("episodes:", *(v[0] for v in series["/episode"].values[:3]), sep="\n  ")
print("wandb offline run:", *sorted(str(p) for p in (run_dir / "wandb").glob("offline-run-*")))
