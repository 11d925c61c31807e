"""FastTD3 on the built-in reach task with 1,024 parallel sub-envs: few large-batch updates per vectorised step.

    python examples/fasttd3_reach.py            # to the success threshold (about a minute on 2 CPU cores)
    python examples/fasttd3_reach.py --quick    # a smoke run on a small budget

FastTD3's C51 critics need a value range that covers the task's discounted returns (`algo.v_min`,
`algo.v_max`): about -300 to 20 on reach. docs/algorithms.md has the recipe and the paper's GPU settings.
"""

import sys

from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.runner import train

quick = "--quick" in sys.argv
overrides = ["run.name=example-fasttd3-reach", "task.num_envs=1024", "algo.v_min=-300", "algo.v_max=20",
             "loop.eval_every_env_steps=40000", "run.progress=false"]
if quick:
    overrides += ["loop.total_env_steps=40000", "loop.eval_episodes=20"]
result = train(resolve_train_config(task="reach", algo="fasttd3", overrides=overrides))
ev = result.last_eval
print(f"stopped ({result.stop_reason}) after {result.env_steps} env steps and {result.updates} updates in "
      f"{result.wall_s:.0f}s; last eval success {ev.success_rate if ev else float('nan'):.0%}")
