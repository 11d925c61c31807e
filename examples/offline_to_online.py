"""From recorded data to a policy on the built-in reach task: record, pre-train offline, then learn online.

1. a short "teacher" run, then 100 of its episodes recorded with sampled actions (varied, imperfect data);
2. the same data three ways, each offline first and then online in the same run:
   Cal-QL with the data kept (RLPD-style), WSRL (the data dropped after a warm-up of the pre-trained
   policy), and JSRL (the pre-trained policy guides the first steps of each episode, handing over earlier);
3. the env steps each needed to reach the task's success threshold online.

    python examples/offline_to_online.py            # a 20k-step teacher, then three runs of up to 40k online steps
    python examples/offline_to_online.py --quick    # a smoke run (about 2 minutes), thresholds not reached

docs/offline-to-online.md explains the schemes and when to use which.
"""

import shutil
import sys
from pathlib import Path

from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.record_run import record_run
from robot_rl.loop.runner import train

quick = "--quick" in sys.argv
root = Path("runs/example-offline")
if root.exists():  # this example's own runs from an earlier try: a run directory is never overwritten
    shutil.rmtree(root)
teacher_steps, online_steps, offline_updates, episodes = (4000, 4000, 200, 40) if quick else (20000, 40000, 2000, 100)

teacher = train(resolve_train_config(task="reach", overrides=[
    f"run.root={root}", "run.name=teacher", f"loop.total_env_steps={teacher_steps}", "run.progress=false"]))
data = root / "data"
if not data.exists():
    rec = record_run(teacher.run_dir, data, episodes=episodes, deterministic=False)
    print(f"recorded {rec.episodes} episodes ({rec.frames} frames, {rec.successes} successes) into {data}")

common = [f"run.root={root}", f"offline.data={data}", f"offline.updates={offline_updates}", "algo.cql_alpha=1.0",
          "algo.calql=true", f"loop.total_env_steps={online_steps}", "loop.eval_every_env_steps=2000",
          "run.progress=false"]
schemes = {
    "calql": ["algo.demo_ratio=0.5"],
    "wsrl": ["offline.keep_data=false", "algo.demo_ratio=0.0", "algo.learning_starts=2000"],
    "jsrl": ["algo.demo_ratio=0.5", "jsrl.guide=offline", "jsrl.horizon=50", "jsrl.stages=5"],
}
for name, extra in schemes.items():
    result = train(resolve_train_config(task="reach", overrides=[*common, f"run.name={name}", *extra]))
    ev = result.last_eval
    print(f"{name}: {'reached' if result.reached_threshold else 'did not reach'} the threshold, "
          f"{result.env_steps} online env steps, last eval success {ev.success_rate if ev else float('nan'):.0%}")
