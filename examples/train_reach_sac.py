"""Train SAC on the built-in reach task from Python, then evaluate the result.

    python examples/train_reach_sac.py            # full run to the success threshold
    python examples/train_reach_sac.py --quick    # a 20k-step smoke run
"""

import sys

from robot_rl.loop.config import resolve_train_config
from robot_rl.loop.eval_run import evaluate_run
from robot_rl.loop.runner import train

quick = "--quick" in sys.argv
overrides = ["run.name=example-reach-sac"]
if quick:
    overrides += ["loop.total_env_steps=20000", "loop.eval_every_env_steps=10000", "run.name=example-reach-quick"]
cfg = resolve_train_config(task="reach", algo="sac", overrides=overrides)
result = train(cfg)
print(f"stopped ({result.stop_reason}) after {result.env_steps} env steps in {result.wall_s:.0f}s")
again = evaluate_run(result.run_dir, episodes=100)
print(f"re-evaluated from the checkpoint: success {again.success_rate:.0%}, return {again.mean_return:.2f}")
